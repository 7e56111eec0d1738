"""Every Prometheus metric mcad exports, declared in one place.

Why one module: the metric names, labels and buckets are a public interface (alerts
and dashboards are built on them), so they are declared together where a reviewer
sees all of them at once. The rest of mcad never touches a metric object; it calls
the reporting functions below, named for what happened (``count_dispatch``,
``observe_queue_wait``), so the controller reads as a story and the metric layout can
change here alone.

Conventions (Prometheus, Kueue): the ``mcad_`` prefix, base units (seconds, bytes,
cores), ``_total`` on counters. Resource gauges carry a ``resource`` label with the
Kubernetes resource name; their values are in natural units (``cpu`` in cores,
``memory`` in bytes, ``nvidia.com/gpu`` in devices), i.e. ``ResourceList`` nano-units
divided by 1e9. Series of things that are gone (a forgotten cluster, a deleted quota
node, a resource a cluster no longer has) are removed, not left at their last value.

No empty panels: a labelled series exists only once ``.labels()`` was called for it, so
a counter that has not counted yet serves nothing, the dashboard says "No data" and a
``rate()`` alert misses the first increase (Prometheus's instrumentation guide: "avoid
missing metrics"). So every labelled series whose label values are known is created at
0 up front: the reasons, directions and pending reasons at import (the values come from
the core's constants, so a new reason cannot be forgotten here), the per-cluster, per-task
and per-queue series when that cluster, task or queue comes into being
(``register_cluster``, ``register_task``, ``register_work_queue``). Series labelled by
AppWrapper, quota node or topology domain are left to appear with what they describe.

Metrics live on a dedicated ``REGISTRY`` rather than prometheus_client's global one,
so importing mcad in another process exports nothing unexpected and tests read
exactly what mcad reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mcad.core.cycle.elastic import GROW, SHRINK
from mcad.core.cycle.snapshot import PREEMPTED, PendingReason
from mcad.core.life.requeue import (
    INSUFFICIENT_PODS_READY,
    KIND_NOT_SERVED,
    SPEC_CHANGED,
    SPOKE_LOST,
    SUSPENDED,
    WRAPPED_OBJECT_FAILED,
)
from mcad.core.workload.resources import ResourceList

REGISTRY = CollectorRegistry(auto_describe=True)

APPWRAPPER_STATES = ("Pending", "Running", "RunningHoldCompletion", "Completed", "Failed")
"""The states ``mcad_appwrappers`` always reports, 0 when no AppWrapper is in them."""

REQUEUE_REASONS = (INSUFFICIENT_PODS_READY, WRAPPED_OBJECT_FAILED, PREEMPTED, SPOKE_LOST,
                   SPEC_CHANGED, KIND_NOT_SERVED, SUSPENDED)
"""Every reason an AppWrapper is requeued for (``mcad_requeues_total{reason}``)."""

EVICTION_REASONS = (PREEMPTED, SPOKE_LOST)
"""Every reason a running AppWrapper is evicted for (``mcad_evictions_total{reason}``)."""

RESIZE_DIRECTIONS = (GROW, SHRINK)

_PENDING_REASONS = tuple(reason.value for reason in PendingReason)

API_ERROR_REASONS = ("Unreachable", "Unauthorized", "Forbidden", "NotFound", "Conflict",
                     "AlreadyExists", "Invalid", "TooManyRequests", "InternalError")
"""The reasons of ``mcad_api_errors_total`` started at 0 for each cluster: the Kubernetes
Status reasons of the failures the gateway tells apart, and ``Unreachable`` (no answer).
Rarer reasons (``Timeout``, ``ServiceUnavailable``...) appear when first counted."""

NANO = 1e9

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The media type of what ``render()`` returns (the Prometheus text format)."""

_appwrappers = Gauge(
    "mcad_appwrappers", "AppWrappers known to the dispatcher, by state.",
    ["state"], registry=REGISTRY)
_pending = Gauge(
    "mcad_pending_appwrappers",
    "Pending AppWrappers by the reason the last dispatch cycle left them pending.",
    ["reason"], registry=REGISTRY)
_cycle_duration = Histogram(
    "mcad_dispatch_cycle_duration_seconds", "Time one dispatch cycle took to decide.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY)
_oldest_pending = Gauge(
    "mcad_oldest_pending_seconds",
    "How long the AppWrapper that has waited longest has been in the queue (0: none).",
    registry=REGISTRY)
_resizes = Counter(
    "mcad_elastic_resizes_total", "Elastic AppWrappers grown or shrunk, by direction.",
    ["direction"], registry=REGISTRY)
_admitted_pods = Gauge(
    "mcad_appwrapper_admitted_pods",
    "Pods an elastic AppWrapper runs with now, and its full size (size=admitted|full).",
    ["namespace", "name", "size"], registry=REGISTRY)
_cycle_appwrappers = Gauge(
    "mcad_dispatch_cycle_appwrappers", "AppWrappers considered by the last dispatch cycle.",
    registry=REGISTRY)
_queue_wait = Histogram(
    "mcad_queue_wait_seconds", "Time from an AppWrapper's creation to its dispatch.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
             1200.0, 1800.0, 3600.0),
    registry=REGISTRY)
_estimate_error = Histogram(
    "mcad_start_estimate_error_seconds",
    "For each AppWrapper dispatched, how far its real start was from the first start "
    "estimated for it (absolute, seconds).",
    buckets=(5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0,
             86400.0),
    registry=REGISTRY)
_estimate_plan = Gauge(
    "mcad_start_estimate_plan_seconds", "Time the last plan of estimated starts took.",
    registry=REGISTRY)
_dispatches = Counter(
    "mcad_dispatches_total", "AppWrappers dispatched, by the cluster they went to.",
    ["cluster"], registry=REGISTRY)
_requeues = Counter(
    "mcad_requeues_total", "AppWrappers taken back and queued again, by reason.",
    ["reason"], registry=REGISTRY)
_evictions = Counter(
    "mcad_evictions_total", "Running AppWrappers evicted, by reason.",
    ["reason"], registry=REGISTRY)
_resets = Counter(
    "mcad_resets_total", "Running gangs reset whole (deleted, paused, created again), by "
    "reason.", ["reason"], registry=REGISTRY)
_failures = Counter(
    "mcad_failures_total", "Running AppWrappers given up on (Failed) by gang health, by "
    "reason.", ["reason"], registry=REGISTRY)
_cluster_ready = Gauge(
    "mcad_cluster_ready", "1 when the cluster answers and its capacity is known, else 0.",
    ["cluster"], registry=REGISTRY)
_cluster_capacity = Gauge(
    "mcad_cluster_capacity", "Sum of the capacity of the cluster's nodes, in natural units.",
    ["cluster", "resource"], registry=REGISTRY)
_cluster_allocatable = Gauge(
    "mcad_cluster_allocatable",
    "Allocatable resources of the cluster's ready, schedulable nodes, in natural units.",
    ["cluster", "resource"], registry=REGISTRY)
_cluster_free = Gauge(
    "mcad_cluster_free",
    "Allocatable minus what running and dispatched pods request, in natural units.",
    ["cluster", "resource"], registry=REGISTRY)
_quota_limit = Gauge(
    "mcad_quota_limit", "Quota of a quota tree node, in natural units.",
    ["tree", "node", "resource"], registry=REGISTRY)
_quota_used = Gauge(
    "mcad_quota_used", "Quota of a quota tree node in use (borrowing included), in natural "
    "units.", ["tree", "node", "resource"], registry=REGISTRY)
_api_errors = Counter(
    "mcad_api_errors_total", "Failed Kubernetes API requests, by cluster and reason.",
    ["cluster", "reason"], registry=REGISTRY)

_leader = Gauge(
    "mcad_leader", "1 while this replica holds the leader Lease and dispatches, else 0.",
    registry=REGISTRY)
_task_restarts = Counter(
    "mcad_task_restarts_total", "Long-lived controller tasks restarted after they failed, by "
    "task.", ["task"], registry=REGISTRY)
_reconcile_errors = Counter(
    "mcad_reconcile_errors_total", "Reconciles that failed and were retried after a backoff, "
    "by work queue.", ["queue"], registry=REGISTRY)
_lease_renewal = Histogram(
    "mcad_lease_renewal_seconds", "How late each renewal of the leader's Lease was confirmed: "
    "from when it was due to the API server's answer (past 10 s the Lease is lost).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0), registry=REGISTRY)
_leadership_lost = Counter(
    "mcad_leadership_lost_total", "Terms that ended because the Lease could not be renewed "
    "in time (a replica that leads and is not stopped should never count one).",
    registry=REGISTRY)
_events_dropped = Counter(
    "mcad_events_dropped_total", "Kubernetes Events not recorded because the sender's queue "
    "was full, or its share for Normal Events was (the hub is slow to take them).",
    registry=REGISTRY)
_history_bytes = Gauge(
    "mcad_runtime_history_bytes", "Bytes of the run-time history as last written to "
    "ConfigMap mcad-runtimes (trimmed to a budget of 921,600; a ConfigMap holds 1 MiB).",
    registry=REGISTRY)
_history_refused = Counter(
    "mcad_runtime_history_refused_total", "Writes of the run-time history the hub refused "
    "as too large or invalid (413, 422); the same history is not sent again.",
    registry=REGISTRY)
_queue_depth = Gauge(
    "mcad_workqueue_depth", "Keys waiting in a controller work queue.", ["queue"],
    registry=REGISTRY)
_reconcile_limit = Gauge(
    "mcad_reconcile_limit", "How many AppWrappers may be reconciled at once: at most the "
    "workers setting, lowered while the hub's writes wait in its API server "
    "(controller/inflight.py).", registry=REGISTRY)
_status_turns = Gauge(
    "mcad_status_writes_waiting", "AppWrappers whose pod-count or PodsReady write waits for "
    "its turn in the hub's budget for such writes (controller/pacing.py).",
    registry=REGISTRY)

for _reason in REQUEUE_REASONS:
    _requeues.labels(reason=_reason)
for _reason in EVICTION_REASONS:
    _evictions.labels(reason=_reason)
for _direction in RESIZE_DIRECTIONS:
    _resizes.labels(direction=_direction)
for _reason in _PENDING_REASONS:
    _pending.labels(reason=_reason)

# The resource names last reported per cluster / quota node, so a resource that
# disappears loses its series and forgetting removes exactly what was reported.
_cluster_resources: dict[str, frozenset[str]] = {}
_quota_resources: dict[tuple[str, str], frozenset[str]] = {}
_CLUSTER_GAUGES = (_cluster_capacity, _cluster_allocatable, _cluster_free)
_QUOTA_GAUGES = (_quota_limit, _quota_used)


def report_appwrapper_states(counts: Mapping[str, int]) -> None:
    """How many AppWrappers are in each state now; replaces the previous report.

    The five states of ``APPWRAPPER_STATES`` are always reported (0 when not given),
    so a dashboard's "Failed" line is 0 rather than missing.
    """
    _appwrappers.clear()
    for state in APPWRAPPER_STATES:
        _appwrappers.labels(state=state).set(counts.get(state, 0))
    for state, count in counts.items():
        if state not in APPWRAPPER_STATES:
            _appwrappers.labels(state=state).set(count)


def report_pending_reasons(counts: Mapping[str, int]) -> None:
    """How many AppWrappers are pending for each reason; replaces the previous report.

    Every ``PendingReason`` is always reported (0 when not given), as states are: an empty
    queue shows as zeros, not as "No data".
    """
    _pending.clear()
    for reason, count in {**dict.fromkeys(_PENDING_REASONS, 0), **counts}.items():
        _pending.labels(reason=reason).set(count)


def register_cluster(cluster: str) -> None:
    """``cluster`` was registered: its dispatch and API-error counters start at 0, so a
    dashboard shows it at once and ``rate()`` sees its first dispatch or failure."""
    _dispatches.labels(cluster=cluster)
    register_api_client(cluster)


def register_api_client(name: str) -> None:
    """A connection named ``name`` (the hub, a cluster) will count its API errors."""
    for reason in API_ERROR_REASONS:
        _api_errors.labels(cluster=name, reason=reason)


def register_task(task: str) -> None:
    """Long-lived task ``task`` was started: its restart counter starts at 0."""
    _task_restarts.labels(task=task)


def register_work_queue(queue: str) -> None:
    """Work queue ``queue`` was made: its reconcile-error counter and depth start at 0."""
    _reconcile_errors.labels(queue=queue)
    _queue_depth.labels(queue=queue).set(0)


def observe_dispatch_cycle(seconds: float, *, appwrappers: int) -> None:
    """One dispatch cycle took ``seconds`` to decide about ``appwrappers`` AppWrappers."""
    _cycle_duration.observe(seconds)
    _cycle_appwrappers.set(appwrappers)


def observe_start_estimate_error(seconds: float) -> None:
    """An AppWrapper started ``seconds`` away from its first estimated start."""
    _estimate_error.observe(seconds)


def observe_estimate_plan(seconds: float) -> None:
    """The last plan of estimated starts took ``seconds``."""
    _estimate_plan.set(seconds)


def observe_queue_wait(seconds: float) -> None:
    """An AppWrapper was dispatched ``seconds`` after it was created."""
    _queue_wait.observe(seconds)


def count_dispatch(cluster: str) -> None:
    """An AppWrapper was dispatched to ``cluster``."""
    _dispatches.labels(cluster=cluster).inc()


def count_requeue(reason: str) -> None:
    """An AppWrapper was taken back and queued again."""
    _requeues.labels(reason=reason).inc()


def count_eviction(reason: str) -> None:
    """A running AppWrapper was evicted (preempted, lost its cluster...)."""
    _evictions.labels(reason=reason).inc()


def count_reset(reason: str) -> None:
    """A running gang was reset whole (``mcad.controller.resets``)."""
    _resets.labels(reason=reason).inc()


def count_failure(reason: str) -> None:
    """A running AppWrapper was given up on by gang health."""
    _failures.labels(reason=reason).inc()


def report_cluster(cluster: str, *, ready: bool, capacity: ResourceList,
                   allocatable: ResourceList, free: ResourceList) -> None:
    """What ``cluster`` has now.

    Every resource named in any of the lists is reported in all three gauges (a
    ``ResourceList`` drops zeros, and "0 GPUs free" must show as 0, not as no series);
    a resource named in none of them loses its series.
    """
    _cluster_ready.labels(cluster=cluster).set(1 if ready else 0)
    _cluster_resources[cluster] = _set_resources(
        zip(_CLUSTER_GAUGES, (capacity, allocatable, free), strict=True), (cluster,),
        previous=_cluster_resources.get(cluster, frozenset()))


def forget_cluster(cluster: str) -> None:
    """Remove the gauges of a cluster that is no longer registered.

    Its counters (dispatches, API errors) stay: they are totals over the process's life.
    """
    if cluster not in _cluster_resources:
        return
    _remove_resources(_CLUSTER_GAUGES, (cluster,), _cluster_resources.pop(cluster))
    _cluster_ready.remove(cluster)


def report_quota(tree: str, node: str, *, limit: ResourceList, used: ResourceList) -> None:
    """The quota and usage of one node of a quota tree.

    As for clusters, a resource named in either list is reported in both (0 used shows
    as 0); one named in neither loses its series.
    """
    _quota_resources[tree, node] = _set_resources(
        zip(_QUOTA_GAUGES, (limit, used), strict=True), (tree, node),
        previous=_quota_resources.get((tree, node), frozenset()))


def forget_quota_node(tree: str, node: str) -> None:
    """Remove the gauges of a quota tree node that no longer exists."""
    _remove_resources(_QUOTA_GAUGES, (tree, node),
                      _quota_resources.pop((tree, node), frozenset()))


def count_api_error(cluster: str, reason: str) -> None:
    """A request to ``cluster``'s API server failed (reason: the error's kind)."""
    _api_errors.labels(cluster=cluster, reason=reason).inc()


def report_leader(leading: bool) -> None:
    """Whether this replica leads (dispatches and writes) or stands by."""
    _leader.set(1 if leading else 0)


def count_task_restart(task: str) -> None:
    """Long-lived task ``task`` failed and is being started again."""
    _task_restarts.labels(task=task).inc()


def count_reconcile_error(queue: str) -> None:
    """A reconcile taken from work queue ``queue`` failed and will be retried."""
    _reconcile_errors.labels(queue=queue).inc()


def observe_lease_renewal(seconds: float) -> None:
    """A renewal of the leader's Lease was confirmed ``seconds`` after it was due."""
    _lease_renewal.observe(seconds)


def count_leadership_lost() -> None:
    """This replica's term ended: its Lease was not renewed within the renew deadline."""
    _leadership_lost.inc()


def count_event_dropped() -> None:
    """An Event was dropped: the event sender's queue, or its Normal share, was full."""
    _events_dropped.inc()


def report_runtime_history(size: int) -> None:
    """The run-time history was written: ``size`` bytes of it."""
    _history_bytes.set(size)


def count_runtime_history_refused() -> None:
    """The hub refused a write of the run-time history (too large, or invalid)."""
    _history_refused.inc()


def report_queue_depth(queue: str, depth: int) -> None:
    """How many keys wait in work queue ``queue``."""
    _queue_depth.labels(queue=queue).set(depth)


def report_reconcile_limit(limit: int) -> None:
    """How many AppWrappers may be reconciled at once (``InflightLimit``)."""
    _reconcile_limit.set(limit)


def report_status_writes_waiting(count: int) -> None:
    """How many reporting status writes wait for their turn (``StatusPace``)."""
    _status_turns.set(count)


def render() -> bytes:
    """The Prometheus text exposition of every mcad metric."""
    return generate_latest(REGISTRY)


def _set_resources(pairs: Iterable[tuple[Gauge, ResourceList]], labels: tuple[str, ...], *,
                   previous: frozenset[str]) -> frozenset[str]:
    gauges = list(pairs)
    current = frozenset().union(*(amounts.keys() for _, amounts in gauges))
    for gauge, amounts in gauges:
        for resource in current:
            gauge.labels(*labels, resource).set(amounts[resource] / NANO)
    _remove_resources([gauge for gauge, _ in gauges], labels, previous - current)
    return current


def _remove_resources(gauges: Iterable[Gauge], labels: tuple[str, ...],
                      resources: Iterable[str]) -> None:
    names = tuple(resources)
    for gauge in gauges:
        for resource in names:
            gauge.remove(*labels, resource)


def report_oldest_pending(seconds: float) -> None:
    _oldest_pending.set(max(0.0, seconds))


def totals() -> tuple[float, float]:
    """(dispatches, requeues) counted since the process started, over every label."""
    def total(counter: Counter) -> float:
        return sum(sample.value for metric in counter.collect() for sample in metric.samples
                   if sample.name.endswith("_total"))
    return total(_dispatches), total(_requeues)


def count_resize(direction: str) -> None:
    _resizes.labels(direction=direction).inc()


_elastic_known: set[tuple[str, str]] = set()


def report_elastic(sizes: dict[tuple[str, str], tuple[int, int]]) -> None:
    """(namespace, name) -> (admitted pods, full pods) of every admitted elastic
    AppWrapper; the series of those no longer admitted are removed."""
    for namespace, name in _elastic_known - sizes.keys():
        for size in ("admitted", "full"):
            _admitted_pods.remove(namespace, name, size)
    for (namespace, name), (admitted, full) in sizes.items():
        _admitted_pods.labels(namespace=namespace, name=name, size="admitted").set(admitted)
        _admitted_pods.labels(namespace=namespace, name=name, size="full").set(full)
    _elastic_known.clear()
    _elastic_known.update(sizes)


# -- topology ------------------------------------------------------------------------------

_domain_free = Gauge(
    "mcad_topology_domain_free_gpus",
    "Free GPUs of one topology domain of a cluster (a block, a rack: its label values "
    "from the top joined by '/').", ["cluster", "level", "domain"], registry=REGISTRY)
_fragmented = Gauge(
    "mcad_cluster_fragmented_gpus",
    "Free GPUs on nodes that are partly used: room that no whole-node pod can use.",
    ["cluster"], registry=REGISTRY)
_domains_known: dict[str, set[tuple[str, str]]] = {}


def report_topology(cluster: str, *, fragmented: int,
                    domains: Iterable[tuple[str, str, int]]) -> None:
    """``cluster``'s free GPUs on partly used nodes and per domain ((level, domain, free)
    in nano-units); the series of domains no longer there are removed."""
    _fragmented.labels(cluster=cluster).set(fragmented / NANO)
    seen = set()
    for level, domain, free in domains:
        _domain_free.labels(cluster=cluster, level=level, domain=domain).set(free / NANO)
        seen.add((level, domain))
    for level, domain in _domains_known.get(cluster, set()) - seen:
        _domain_free.remove(cluster, level, domain)
    _domains_known[cluster] = seen


def forget_topology(cluster: str) -> None:
    """Remove the topology gauges of a cluster that is no longer registered."""
    if cluster in _domains_known:
        report_topology(cluster, fragmented=0, domains=())
        _fragmented.remove(cluster)
        del _domains_known[cluster]
