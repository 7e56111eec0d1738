"""Why an AppWrapper waits, where it stands, and when it might start: from one cycle.

The controller keeps its last cycle's ``Snapshot`` and ``CycleResult``; ``queue_rows``
lists the queued AppWrappers in the order that cycle considered them, and ``explain``
takes one AppWrapper through the checks the cycle applies, in the cycle's order
(its hold: suspended, an unknown queue or priority class; requeue pause, demand, quota
per tree, which clusters it may use), then asks every cluster whether the whole gang
fits there now and why not (for a gang that asks for a topology, every domain of its
level too). Nothing here re-implements
the decision: the verdict is the cycle's own (``CycleResult``); the checks say why.

A dry run (``mcad explain -f``) is the same question about an AppWrapper not yet
submitted: it is added to the snapshot as if created now and the cycle is run again.

The estimated start is labelled as an estimate: running AppWrappers that declare
``dispatchDuration.expected`` (``AppWrapperEntry.expected_end``) are assumed to end then
and give back their pods; the first moment the gang fits on a cluster it may use is
the estimate. Work that declares nothing is assumed to run on, so no estimate is
better than a wrong one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from mcad.core.cycle.promises import promise
from mcad.core.cycle.snapshot import (
    Admitted,
    AppWrapperEntry,
    CycleResult,
    Snapshot,
)
from mcad.core.placement.capacity import AppWrapperKey, ClusterCapacity
from mcad.core.placement.clusters import ClusterBoard, place
from mcad.core.placement.domainfit import DomainVerdict, domain_verdicts
from mcad.core.placement.gangfit import gang_fits
from mcad.core.placement.namespaces import closed_on
from mcad.core.placement.nodefit import NoFit
from mcad.core.quota.forest import DEFAULT_NODE, QuotaAssignment, QuotaForest, QuotaProblem
from mcad.core.workload.demand import Demand
from mcad.core.workload.quantity import format_quantity
from mcad.core.workload.resources import GPU


@dataclass(frozen=True)
class QueueRow:
    position: int
    key: AppWrapperKey
    priority: int
    quota: tuple[tuple[str, str], ...]
    """(tree, node) it is charged to; empty without quota trees."""
    demand: str
    waiting_since: datetime
    reason: str
    message: str


@dataclass(frozen=True)
class Check:
    step: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class ClusterVerdict:
    cluster: str
    ok: bool
    detail: str
    domains: tuple[DomainVerdict, ...] = ()
    """For a gang that asks for a topology: each domain of its level."""


@dataclass(frozen=True)
class Explanation:
    key: AppWrapperKey
    outcome: str
    """``Dispatched`` (this cycle, to ``cluster``), ``Running`` or the pending reason."""
    message: str
    position: int | None
    checks: tuple[Check, ...]
    clusters: tuple[ClusterVerdict, ...]
    ahead: tuple[AppWrapperKey, ...]
    """Queued AppWrappers the cycle considered before this one."""
    estimated_start: datetime | None
    estimate_basis: str


def describe_demand(demand: Demand | None) -> str:
    """``2x8 GPU`` (pods x GPUs per pod, per pod shape), or the CPU when no GPU."""
    if demand is None:
        return "invalid"
    parts = []
    for pod_set in demand.pod_sets:
        gpus = pod_set.requests.get(GPU, 0) // 10**9
        if gpus:
            parts.append(f"{pod_set.count}x{gpus} GPU")
        else:
            cpu = pod_set.requests.get("cpu", 0) / 10**9
            parts.append(f"{pod_set.count}x{cpu:g} CPU" if cpu else f"{pod_set.count} pods")
    return " + ".join(parts) or "nothing"


def queue_rows(snapshot: Snapshot, result: CycleResult) -> list[QueueRow]:
    """The queued AppWrappers in the order the cycle considered them, with its reasons."""
    entries = {e.key: e for e in snapshot.appwrappers}
    rows = []
    for position, pending in enumerate(result.pending, start=1):
        entry = entries[pending.key]
        rows.append(QueueRow(position, entry.key, entry.priority, _quota_nodes(snapshot, entry),
                             describe_demand(entry.demand) + (
                                 f" (elastic, from {entry.elastic_min})"
                                 if entry.elastic_min is not None else ""),
                             entry.queued_since or entry.created,
                             str(pending.reason), pending.message))
    return rows


def _quota_nodes(snapshot: Snapshot, entry: AppWrapperEntry) -> tuple[tuple[str, str], ...]:
    return tuple((tree, entry.quota_labels.get(tree, DEFAULT_NODE))
                 for tree in snapshot.quota.trees())


def explain(snapshot: Snapshot, result: CycleResult, key: AppWrapperKey) -> Explanation | None:
    """Why ``key`` is where it is after the cycle that gave ``result``; None when the
    snapshot does not hold it (completed, failed, or not seen yet)."""
    entries = {e.key: e for e in snapshot.appwrappers}
    entry = entries.get(key)
    if entry is None:
        return None
    pending_keys = [p.key for p in result.pending]
    if isinstance(entry.phase, Admitted):
        size = (f", running {entry.demand.pods} of its {entry.full_pods} pods (elastic)"
                if entry.full_pods is not None and entry.demand is not None else "")
        return Explanation(key, "Running", f"dispatched to cluster {entry.phase.cluster}{size}",
                           None, (), (), (), None, "")
    dispatched = next((d for d in result.dispatches if d.key == key), None)
    pending = next((p for p in result.pending if p.key == key), None)
    if dispatched is not None:
        outcome, message = "Dispatched", f"dispatched to cluster {dispatched.cluster}"
    else:
        assert pending is not None
        outcome, message = str(pending.reason), pending.message
    position = pending_keys.index(key) + 1 if key in pending_keys else None
    ahead = tuple(pending_keys[:position - 1]) if position else ()
    checks = _checks(snapshot, entry, charged_quota(snapshot))
    verdicts = tuple(_cluster_verdict(entry, c) for c in snapshot.clusters)
    start, basis = estimate_start(snapshot, entry) if outcome != "Dispatched" else (None, "")
    return Explanation(key, outcome, message, position, tuple(checks), verdicts, ahead,
                       start, basis)


def charged_quota(snapshot: Snapshot) -> QuotaForest:
    """The snapshot's quota forest with every admitted AppWrapper charged (a copy): the
    use the cycle starts from."""
    quota = snapshot.quota.copy()
    for entry in snapshot.appwrappers:
        if isinstance(entry.phase, Admitted) and entry.demand is not None:
            assignment = quota.resolve(entry.quota_labels)
            if isinstance(assignment, QuotaAssignment):
                quota.charge(assignment, entry.demand.total)
    return quota


def _checks(snapshot: Snapshot, entry: AppWrapperEntry, quota: QuotaForest) -> list[Check]:
    now = snapshot.now
    out = []
    if entry.hold is not None:
        out.append(Check("held", False, entry.hold.message))
        return out
    if entry.not_before is not None and entry.not_before > now:
        out.append(Check("requeue pause", False, f"requeued; may go again from "
                                                 f"{entry.not_before.isoformat()}"))
    else:
        out.append(Check("requeue pause", True, "not pausing"))
    demand = entry.demand
    if demand is None:
        out.append(Check("demand", False, entry.demand_error or "its demand cannot be read"))
        return out
    out.append(Check("demand", True, f"{demand.pods} pod{'s' if demand.pods != 1 else ''} "
                                     f"({describe_demand(demand)}), "
                                     f"{demand.total.describe()} in all; "
                                     + (f"elastic: may start with {entry.elastic_min} to "
                                        f"{demand.pods} pods"
                                        if entry.elastic_min is not None and
                                        entry.full_pods is None else
                                        f"gang of {demand.min_available}")))
    assignment = quota.resolve(entry.quota_labels)
    if isinstance(assignment, QuotaProblem):
        out.append(Check("quota", False, assignment.message))
        return out
    for tree, node in assignment.leaves:
        usage, limit = quota.usage(tree, node), quota.limit(tree, node)
        named = {r: v for r, v in demand.total.items() if r in limit}
        numbers = "; ".join(
            f"{r}: {_q(usage.get(r, 0), r)} used of {_q(limit[r], r)}, needs {_q(v, r)}"
            for r, v in named.items()) or "names none of the resources it asks for"
        out.append(Check(f"quota {tree}/{node}", True, numbers))
    problem = quota.fits(assignment, demand.total)
    out.append(Check("quota", problem is None,
                     "fits now" if problem is None else problem.message))
    names = ", ".join(entry.clusters) or "any"
    out.append(Check("clusters", True, f"named: {names}; selector: "
                                       f"{entry.cluster_selector or 'none'}"))
    return out


def _q(value: int, resource: str) -> str:
    return format_quantity(value, resource=resource)


def _may_not_use(entry: AppWrapperEntry, cluster: ClusterCapacity) -> str | None:
    """Why ``entry`` may not go to ``cluster`` at all, whatever is free there."""
    if entry.clusters and cluster.name not in entry.clusters:
        return "not one of the clusters it names"
    if not entry.cluster_selector.matches(cluster.labels):
        return "its labels do not match the clusterSelector"
    if entry.kinds and not cluster.serves(entry.kinds):
        missing = ", ".join(f"{k} ({v})" for v, k in cluster.unserved(entry.kinds))
        return f"does not serve {missing}"
    closed = closed_on(cluster, entry.namespace)
    if closed is not None:
        return closed.message
    if not cluster.ready:
        return "not ready"
    if not cluster.schedulable:
        return "not schedulable (taken out of dispatching)"
    return None


def _cluster_verdict(entry: AppWrapperEntry, cluster: ClusterCapacity) -> ClusterVerdict:
    name = cluster.name
    why = _may_not_use(entry, cluster)
    if why is not None:
        return ClusterVerdict(name, False, why)
    if entry.demand is None:
        return ClusterVerdict(name, False, "its demand cannot be read")
    placed = place(entry.demand, cluster)
    domains = domain_verdicts(cluster, entry.demand)
    if isinstance(placed, NoFit):
        return ClusterVerdict(name, False, placed.message, domains)
    spots = ", ".join(f"{pods} on {node}" for node, pods in placed.pods)
    inside = f" in {placed.pin.describe()}" if placed.pin is not None else ""
    return ClusterVerdict(name, True, f"the whole gang fits now{inside}: {spots}", domains)


def estimate_start(snapshot: Snapshot, entry: AppWrapperEntry) -> tuple[datetime | None, str]:
    """When the gang would fit on a cluster it may use, if running work that declares
    ``dispatchDuration.expected`` ends on time (quota and queue order aside): the head
    of the line's reservation (``mcad.core.cycle.promises.promise``) asked for this one,
    so explain and reservation backfill find a start by one rule."""
    demand = entry.demand
    if demand is None:
        return None, "its demand cannot be read"
    # A board of the clusters it may use alone: a pool is built per cluster on it, and
    # explain answers on the event loop.
    board = ClusterBoard(c for c in snapshot.clusters if _may_not_use(entry, c) is None)
    candidates = range(len(board.clusters))
    if any(gang_fits(pool, demand) for pool in board.pools):
        return snapshot.now, "it fits now"
    usable = {cluster.name for cluster in board.clusters}
    running = [e for e in snapshot.appwrappers if isinstance(e.phase, Admitted)
               and e.phase.cluster in usable and e.expected_end is not None]
    declared = len(running)
    found = promise(board, entry, demand, candidates, running, now=snapshot.now)
    if found is not None:
        return found.reservation.start, (
            f"estimate: when running work ends as its dispatchDuration.expected says "
            f"({declared} AppWrapper{'s' if declared != 1 else ''} declare it)")
    return None, ("no estimate: the running work it waits for declares no "
                  "dispatchDuration.expected" if not declared else
                  "no estimate: it does not fit even when the work that declares an end "
                  "is gone")


def with_candidate(snapshot: Snapshot, entry: AppWrapperEntry) -> Snapshot:
    """``snapshot`` with ``entry`` queued as well (a dry run)."""
    others: Sequence[AppWrapperEntry] = [e for e in snapshot.appwrappers if e.key != entry.key]
    return replace(snapshot, appwrappers=(*others, entry))
