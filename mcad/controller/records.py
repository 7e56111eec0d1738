"""What the controller remembers of each AppWrapper between events, with one writer
per part.

Why parts: controller-runtime keeps what was observed (the informer's copy) apart from
what is wanted and from what was done; a record written by the informer, the
dispatcher and the reconciler alike is where races live. So a record has three parts,
each written by one owner, each read by everyone:

- ``Observed``: the hub object as last seen, and what is derived from it (its demand,
  read once per generation). Owner: observation. It changes only through
  ``Observed.take``, which the hub informer calls (``controller/hub.py``) and the hub
  writer calls with the answer to mcad's own writes (an answer is an observation too),
  and which never takes an older version.
- ``Orders``: what the dispatcher decided (dispatch, evict, resize, why it waits).
  Owner: the dispatcher (``controller/dispatcher.py``). Every order names the *run* it
  was made for: a run is one dispatch, identified by ``status.runId``, unique per
  dispatch; an order is void on any other run, so it never outlives its run.
- ``Progress``: what the reconciler did (persisted or failed a dispatch, created the
  objects of a run, carried out an eviction or a resize, wrote a pending reason) and
  the timers it keeps. Owner: the reconciler and its steps (``admission``,
  ``creation``, ``lifecycle``, ``objects``, ``reconciler``).

Actors talk only by writing their own part: a dispatch the reconciler could not persist
is recorded in its progress, and the dispatcher, reading that, drops its order itself.
``tests/controller/test_ownership.py`` reads the controller's source and fails when a
module writes a part it does not own.

The AppWrapper's status on the hub remains the source of truth for what was decided
(dispatched where, in which run, requeued how often), so a restart loses nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NewType, TypeVar

from pydantic_core import to_json

from mcad.api.conversion import V1BETA2_KEPT, V1beta2Facts, kept_facts
from mcad.config import RunConfig
from mcad.controller.classes import PriorityClasses
from mcad.controller.clock import parse_time, rfc3339
from mcad.core.cycle.decide import QUEUED, Admitted, AppWrapperEntry
from mcad.core.cycle.elastic import ELASTIC_ANNOTATION, elastic_problem, sized
from mcad.core.cycle.snapshot import BackfillPromise, Hold, PendingReason
from mcad.core.life.health import PREFIX as FAULT_PREFIX
from mcad.core.life.health import FaultPolicy
from mcad.core.life.requeue import UNCOUNTED_REASONS, RequeuePolicy
from mcad.core.life.wrapping import dispatch_digest, wrapped_kinds
from mcad.core.placement.capacity import AppWrapperKey, ClusterName
from mcad.core.placement.clusters import ClusterSelector
from mcad.core.quota.queues import PRIORITY_CLASS_LABEL, Unknown, quota_labels
from mcad.core.workload.demand import Demand, DemandError, appwrapper_demand
from mcad.core.workload.topology import TopologyPin
from mcad.gateway.connection import loads

TERMINAL = ("Completed", "Failed")
RunId = NewType("RunId", str)
"""One dispatch of an AppWrapper (``status.runId``)."""
T = TypeVar("T")


def new_run() -> RunId:
    """A run identity for a new dispatch: unique, never reused (unlike a timestamp)."""
    return RunId(uuid.uuid4().hex[:16])


def key_of(obj: Mapping[str, Any]) -> AppWrapperKey:
    meta = obj.get("metadata") or {}
    return AppWrapperKey(f"{meta.get('namespace', '')}/{meta.get('name', '')}")


def resource_version(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion", 0))
    except (TypeError, ValueError):
        return 0


# -- the orders (owner: the dispatcher) ----------------------------------------------------

@dataclass(frozen=True, slots=True)
class DispatchOrder:
    """Dispatch to ``cluster`` as run ``run`` (elastic: starting with ``pods`` pods;
    kept in ``pin``'s topology domains; by reservation backfill, on ``promise``)."""

    run: RunId
    cluster: ClusterName
    pods: int | None = None
    pin: TopologyPin | None = None
    promise: BackfillPromise | None = None


def promise_status(promise: BackfillPromise) -> dict[str, str]:
    """``status.backfillPromise`` for ``promise``: its end in whole seconds, as every
    timestamp mcad writes, rounded up (a run is never held to less than its promise)."""
    end = promise.end
    if end.microsecond:
        end = end.replace(microsecond=0) + timedelta(seconds=1)
    return {"head": str(promise.head), "endBy": rfc3339(end)}


def promise_of(value: object) -> BackfillPromise | None:
    """The promise ``status.backfillPromise`` records (None: none, or unreadable)."""
    if not isinstance(value, dict):
        return None
    head, end = value.get("head"), parse_time(value.get("endBy"))
    if not isinstance(head, str) or not head or end is None:
        return None
    return BackfillPromise(AppWrapperKey(head), end)


@dataclass(frozen=True, slots=True)
class EvictionOrder:
    """Take run ``run`` back, to make room for ``by``."""

    run: RunId
    reason: str
    message: str
    by: AppWrapperKey


@dataclass(frozen=True, slots=True)
class ResizeOrder:
    """Run ``run`` of an elastic AppWrapper goes to ``pods`` pods."""

    run: RunId
    pods: int
    reason: str
    """``Grow`` or ``Shrink``."""
    message: str


@dataclass(frozen=True, slots=True)
class PendingWanted:
    """Why it waits, as the last cycle said."""

    reason: str
    message: str


@dataclass
class Orders:
    """What the dispatcher decided about one AppWrapper. Written by the dispatcher only."""

    dispatch: DispatchOrder | None = None
    eviction: EvictionOrder | None = None
    resize: ResizeOrder | None = None
    pending: PendingWanted | None = None


# -- the progress (owner: the reconciler) --------------------------------------------------

@dataclass
class Progress:
    """What the reconciler did about one AppWrapper. Written by the reconciler's steps."""

    persisted: RunId | None = None
    """The last dispatch order persisted on the hub (or found committed there)."""
    failed: RunId | None = None
    """The last dispatch order that could not be persisted: the order is dead."""
    persist_failures: int = 0
    hold_until: datetime | None = None
    """After a failed persist the AppWrapper stays out of cycles until then."""
    wake_at: datetime | None = None
    """The moment (end of a hold or of a requeue pause; a backfill promise coming due)
    the reconciler asked a timer for, to tell the dispatcher that the AppWrapper may be
    decided again."""
    created: RunId | None = None
    """The run whose wrapped objects are all on its cluster (created or found)."""
    evicted: RunId | None = None
    """The run an eviction order was carried out for (Requeuing written)."""
    last_pending: PendingWanted | None = None
    """The pending reason last written to the hub."""
    last_pending_at: datetime | None = None
    counts_written_at: datetime | None = None
    """When the pod counts were last written (coalesced: ``lifecycle``)."""


# -- the observed object (owner: observation) ----------------------------------------------

class Observed:
    """The hub object as last seen (or as answered to mcad's own write), and what is read
    from it once per generation. Changed only by ``take``."""

    __slots__ = ("_cache", "_demand", "_demand_error", "_facts", "_generation", "_kept", "_obj",
                 "_spec", "_taken")

    def __init__(self) -> None:
        self._obj: dict[str, Any] = {}
        """The object less its spec, which is kept encoded (``_spec``)."""
        self._spec: bytes | None = None
        self._taken = 0
        self._generation = -1
        self._demand: Demand | None = None
        self._demand_error: str | None = None
        self._cache: dict[str, Any] = {}
        self._kept: object = None
        self._facts: V1beta2Facts | None = None

    def take(self, obj: dict[str, Any]) -> bool:
        """Take a newer version of the object; False (and nothing changes) when ``obj``
        is older than the one held."""
        if resource_version(obj) and resource_version(obj) < resource_version(self._obj):
            return False
        _slim(obj)
        spec = obj.get("spec")
        # The spec is kept as compact JSON: as decoded, one Job's templates are about 15
        # dicts and lists (2.8 KB), kept for every AppWrapper for as long as it lives,
        # and read only per generation (demand, manifests, digest) or in a few fields.
        self._obj = {k: v for k, v in obj.items() if k != "spec"}
        self._spec = None if spec is None else to_json(spec)  # (pydantic_core's: 4x json's pace)
        self._taken += 1
        meta = obj.get("metadata") or {}
        generation = int(meta.get("generation", 0) or 0)
        # What only v1beta2 says (podSets, suspend, managedBy) is kept in an annotation,
        # which a write may change without a new generation.
        kept = (meta.get("annotations") or {}).get(V1BETA2_KEPT)
        if generation != self._generation or kept != self._kept:
            self._generation, self._kept = generation, kept
            self._facts = kept_facts(meta.get("annotations"))
            self._cache.clear()
            try:
                self._demand, self._demand_error = appwrapper_demand(
                    spec if isinstance(spec, dict) else {},
                    pod_sets=self._facts.demand_pod_sets() if self._facts else None), None
            except DemandError as err:
                self._demand, self._demand_error = None, str(err)
        return True

    def per_generation(self, name: str, make: Callable[[], T]) -> T:
        """``make()``, worked out once per generation of the object (the wrapped objects'
        manifests need not be rebuilt at every pod event)."""
        if name not in self._cache:
            self._cache[name] = make()
        value: T = self._cache[name]
        return value

    @property
    def kept(self) -> frozenset[str]:
        """The names ``per_generation`` holds a value for now."""
        return frozenset(self._cache)

    def forget(self, name: str) -> None:
        """Drop what ``per_generation`` kept under ``name`` (worked out again if asked)."""
        self._cache.pop(name, None)

    @property
    def obj(self) -> dict[str, Any]:
        """The whole object (its spec decoded anew: for the rare reader that needs it)."""
        return self._obj if self._spec is None else {**self._obj, "spec": self.spec}

    @property
    def head(self) -> dict[str, Any]:
        """The object less its spec (kind, metadata, status): cheap to read."""
        return self._obj

    @property
    def taken(self) -> int:
        """How many versions were taken: a new number for every ``take``, so a reader
        that worked something out from the object can tell it changed without holding
        the object (a held old version is a whole AppWrapper kept twice)."""
        return self._taken

    @property
    def demand(self) -> Demand | None:
        return self._demand

    @property
    def demand_error(self) -> str | None:
        return self._demand_error

    @property
    def facts(self) -> V1beta2Facts | None:
        """What its v1beta2 annotation says (None: a v1beta1 AppWrapper, as written)."""
        return self._facts

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self._obj.get("metadata") or {})

    @property
    def spec(self) -> dict[str, Any]:
        """The spec, decoded anew at each call (a reader may change its copy)."""
        spec = loads(self._spec) if self._spec is not None else None
        return spec if isinstance(spec, dict) else {}

    def spec_field(self, name: str) -> Any:
        """One top-level field of the spec, decoded once per generation (the fields read
        at every reconcile: schedulingSpec, priority)."""
        return self.per_generation("spec." + name, lambda: self.spec.get(name))

    @property
    def status(self) -> dict[str, Any]:
        return dict(self._obj.get("status") or {})

    @property
    def version(self) -> str:
        return str((self._obj.get("metadata") or {}).get("resourceVersion", ""))

    @property
    def dispatched(self) -> bool:
        """The hub records a dispatch that has not finished."""
        status = self._obj.get("status") or {}
        return bool(status.get("clusterName")) and status.get("state") not in TERMINAL

    @property
    def run(self) -> RunId | None:
        """The run the hub records: ``status.runId``, or for a dispatch written before
        mcad recorded runs, its ``dispatchTimestamp``; None while not dispatched."""
        status = self._obj.get("status") or {}
        if not status.get("clusterName"):
            return None
        return RunId(str(status.get("runId") or f"at:{status.get('dispatchTimestamp', '')}"))


# -- the record ----------------------------------------------------------------------------

@dataclass
class AppWrapperRecord:
    """One AppWrapper as the controller knows it: the three parts, and what is read from
    them together (nothing here writes a part)."""

    observed: Observed = field(default_factory=Observed)
    orders: Orders = field(default_factory=Orders)
    progress: Progress = field(default_factory=Progress)
    classes: PriorityClasses | None = None
    """The hub's priority classes, which its ``kueue.x-k8s.io/priority-class`` label may
    name (None: not known here, the label is not read)."""
    _entry: tuple[tuple[object, ...], AppWrapperEntry] | None = None

    @classmethod
    def of(cls, obj: dict[str, Any]) -> AppWrapperRecord:
        """A record of ``obj`` (for tests and tools: the controller's records are made
        by the informer)."""
        rec = cls()
        rec.observed.take(obj)
        return rec

    # -- the object ---------------------------------------------------------------------
    @property
    def obj(self) -> dict[str, Any]:
        return self.observed.obj

    @property
    def meta(self) -> dict[str, Any]:
        return self.observed.meta

    @property
    def spec(self) -> dict[str, Any]:
        return self.observed.spec

    @property
    def status(self) -> dict[str, Any]:
        return self.observed.status

    @property
    def demand(self) -> Demand | None:
        return self.observed.demand

    @property
    def key(self) -> AppWrapperKey:
        return key_of(self.observed.head)

    @property
    def name(self) -> str:
        return str(self.meta.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.meta.get("namespace", ""))

    @property
    def uid(self) -> str:
        return str(self.meta.get("uid", ""))

    @property
    def state(self) -> str:
        return str(self.status.get("state", ""))

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    def condition(self, type_: str) -> dict[str, Any] | None:
        for cond in self.status.get("conditions") or []:
            if cond.get("type") == type_:
                return dict(cond)
        return None

    # -- the run ------------------------------------------------------------------------
    def live_dispatch(self) -> DispatchOrder | None:
        """The dispatcher's dispatch order while it is neither persisted nor failed: the
        dispatch is *assumed* (every cycle counts it) until the hub records it."""
        order = self.orders.dispatch
        if order is None or order.run in (self.progress.persisted, self.progress.failed):
            return None
        if self.observed.dispatched or self.state in TERMINAL or self.deleting:
            return None
        return order

    @property
    def run(self) -> RunId | None:
        """The current run: the hub's, else an assumed dispatch's; None while queued."""
        if self.observed.dispatched:
            return self.observed.run
        order = self.live_dispatch()
        return order.run if order is not None else None

    @property
    def cluster(self) -> str:
        """Where the AppWrapper's objects are: the hub's ``clusterName`` (also once it
        completed or failed: its objects stay there until it is deleted), else an
        assumed dispatch's cluster; '' while queued."""
        recorded = str(self.status.get("clusterName", ""))
        if recorded:
            return recorded
        order = self.live_dispatch()
        return order.cluster if order is not None else ""

    @property
    def pin(self) -> TopologyPin | None:
        """The topology domains the current run keeps its pods in (``status.topology``,
        else an assumed dispatch's); None: none, or queued."""
        if self.observed.dispatched:
            return TopologyPin.from_status(self.status.get("topology"))
        order = self.live_dispatch()
        return order.pin if order is not None else None

    @property
    def backfill_promise(self) -> BackfillPromise | None:
        """The promise the current run was started on by reservation backfill
        (``status.backfillPromise``, else an assumed dispatch's); None: none, or queued."""
        if self.observed.dispatched:
            return promise_of(self.status.get("backfillPromise"))
        order = self.live_dispatch()
        return order.promise if order is not None else None

    @property
    def admitted(self) -> bool:
        """Holds quota and capacity: dispatched (or assumed so) and not finished, or
        Failed with its objects kept for debugging (``deletionOnFailureGracePeriod``:
        they still run, so they still hold what they use)."""
        return bool(self.cluster) and (self.state not in TERMINAL or self.kept_after_failure)

    @property
    def kept_after_failure(self) -> bool:
        """Failed, its objects still there: kept for the deletion-on-failure grace, or
        being deleted (``controller/resets.py``)."""
        if self.state != "Failed":
            return False
        cond = self.condition("DeletingResources") or {}
        return cond.get("status") == "False" and cond.get("reason") in ("DeletionPaused",
                                                                         "Deleting")

    @property
    def queued(self) -> bool:
        return not self.cluster and self.state not in TERMINAL and not self.deleting

    def live_eviction(self) -> EvictionOrder | None:
        """The eviction order, when it is for the current run and not yet carried out."""
        order = self.orders.eviction
        if order is None or order.run != self.run or order.run == self.progress.evicted:
            return None
        return order

    def live_resize(self) -> ResizeOrder | None:
        """The resize order, when it is for the current run and not yet on the hub."""
        order = self.orders.resize
        if order is None or order.run != self.run or not self.elastic:
            return None
        if self.observed.dispatched and self.status.get("admittedPods") == order.pods:
            return None
        return order

    def held(self, now: datetime) -> bool:
        """Kept out of cycles: a failed persist's backoff is still running."""
        until = self.progress.hold_until
        return until is not None and until > now and self.queued

    # -- the spec -----------------------------------------------------------------------
    def kinds(self) -> tuple[tuple[str, str], ...]:
        """(apiVersion, kind) of each wrapped item, once per generation."""
        return self.observed.per_generation("kinds", lambda: tuple(wrapped_kinds(self.spec)))

    def spec_digest(self) -> str:
        """``dispatch_digest`` of the spec, once per generation (compared with the one
        recorded at dispatch at every reconcile of a running AppWrapper)."""
        return self.observed.per_generation("digest", lambda: dispatch_digest(self.spec))

    def requeue_policy(self, config: RunConfig) -> RequeuePolicy:
        scheduling = self.observed.spec_field("schedulingSpec") or {}
        spec = scheduling.get("requeuing")
        return config.default_requeuing.policy() if spec is None \
            else RequeuePolicy.from_spec(spec)

    def fault_policy(self, config: RunConfig) -> FaultPolicy:
        """Its fault tolerance (``mcad.core.life.health``): the configured defaults, MCAD's for
        a v1beta1 AppWrapper that sets no annotation (``faultTolerance.mcadV1Defaults``),
        with its annotations applied. Raises ``ValueError`` with a sentence for one that does
        not parse (``mcad validate`` and the webhook refuse those)."""
        annotations = self.meta.get("annotations") or {}
        own = {k: str(v) for k, v in annotations.items() if k.startswith(FAULT_PREFIX)}
        settings = config.fault_tolerance
        # MCAD's own behaviour is kept only for an MCAD v1 AppWrapper as its user wrote
        # it: one written as v1beta2 gets v1beta2's defaults.
        base = settings.policy(mcad_v1=not own and self.observed.facts is None)
        return base.with_annotations(own, cap=settings.grace_period_maximum_seconds) \
            if own else base

    def resets(self) -> int:
        """Resets so far (``status.resettingCount``)."""
        try:
            return int(self.status.get("resettingCount", 0) or 0)
        except (TypeError, ValueError):
            return 0

    @property
    def elastic(self) -> bool:
        annotations = self.meta.get("annotations") or {}
        return str(annotations.get(ELASTIC_ANNOTATION, "")).lower() == "true"

    def admitted_pods(self) -> int | None:
        """Elastic and admitted: the pods it runs with, or is ordered to run with (a
        resize in flight is assumed like a dispatch); None: its full size."""
        if not self.elastic or not self.admitted:
            return None
        resize = self.live_resize()
        if resize is not None:
            return resize.pods
        order = self.live_dispatch()
        if order is not None:
            return order.pods
        pods = self.status.get("admittedPods")
        return pods if isinstance(pods, int) and not isinstance(pods, bool) else None

    def admitted_demand(self) -> Demand | None:
        """What it holds now: its demand at its admitted size when elastic."""
        demand = self.demand
        if demand is None or not self.elastic or elastic_problem(
                demand, self.kinds()) is not None:
            return demand
        pods = self.admitted_pods()
        return sized(demand, demand.pods if pods is None else min(pods, demand.pods))

    def run_limit(self) -> int | None:
        """``schedulingSpec.dispatchDuration.limit`` in seconds (None or 0: no limit)."""
        return self._duration("limit")

    def run_expected(self) -> int | None:
        """``schedulingSpec.dispatchDuration.expected`` in seconds (None or 0: unknown)."""
        return self._duration("expected")

    def _duration(self, name: str) -> int | None:
        duration = (self.observed.spec_field("schedulingSpec") or {}).get(
            "dispatchDuration") or {}
        value = duration.get(name) if isinstance(duration, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
            else None

    def dispatched_at(self) -> datetime | None:
        return parse_time(self.status.get("dispatchTimestamp"))

    def requeues(self) -> int:
        return int(self.status.get("numberOfRequeueings", 0) or 0)

    def pause_ends(self, config: RunConfig) -> datetime | None:
        """When a counted requeue's pause ends (None: not pausing)."""
        requeued = parse_time(self.status.get("requeueTimestamp"))
        why = (self.condition("Requeuing") or {}).get("reason")
        if requeued is None or why in UNCOUNTED_REASONS:
            return None
        return requeued + timedelta(seconds=self.requeue_policy(config).pause_time_in_seconds)

    @property
    def priority(self) -> int:
        """The value of the priority class its ``kueue.x-k8s.io/priority-class`` label
        names, else ``spec.priority`` (0 when absent or unreadable)."""
        labels = (self.observed.head.get("metadata") or {}).get("labels") or {}
        if self.classes is not None and PRIORITY_CLASS_LABEL in labels:
            found = self.classes.priority(labels)
            if isinstance(found, int):
                return found
        try:
            return int(self.observed.spec_field("priority") or 0)
        except (TypeError, ValueError):
            return 0

    def hold(self, config: RunConfig) -> tuple[Hold | None, Mapping[str, str]]:
        """Why it stays out of the queue (suspended; a queue or priority class its Kueue
        labels name that does not exist), and the labels its quota is read from."""
        labels = (self.observed.head.get("metadata") or {}).get("labels") or {}
        quota = quota_labels(labels, config.queue_names)
        hold = None
        if isinstance(quota, Unknown):
            hold, quota = Hold(PendingReason.QUEUE_NOT_FOUND, quota.message), labels
        found = self.classes.priority(labels) \
            if self.classes is not None and PRIORITY_CLASS_LABEL in labels else None
        if isinstance(found, Unknown):
            hold = Hold(PendingReason.PRIORITY_CLASS_NOT_FOUND, found.message)
        facts = self.observed.facts
        if facts is not None and facts.suspend:
            hold = Hold(PendingReason.SUSPENDED, "spec.suspend is true: it stays out of the "
                                                 "queue until it is set to false")
        return hold, quota

    def priority_slope(self) -> float:
        slope = self.observed.spec_field("priorityslope")
        return float(slope) if isinstance(slope, int | float) and not isinstance(slope, bool) \
            else 0.0

    def components(self) -> list[tuple[str, str, str]]:
        """(apiVersion, kind, name) of the objects the current dispatch created, as
        recorded in the status when it was persisted."""
        return [(str(c.get("apiVersion", "")), str(c.get("kind", "")), str(c.get("name", "")))
                for c in self.status.get("componentStatus") or [] if isinstance(c, dict)]

    # -- the core's view ------------------------------------------------------------------
    def core_entry(self, config: RunConfig) -> AppWrapperEntry:
        """The AppWrapper as the dispatch cycle sees it, with its assumed dispatch and
        resize; rebuilt only when the object or those orders change."""
        dispatch, resize = self.live_dispatch(), self.live_resize()
        taken = self.observed.taken
        cached = self._entry
        # The object by ``taken`` (a new number at every ``take``), not by holding it:
        # the stamp held each dispatched AppWrapper's queued version alive.
        if cached is not None and cached[0] == (taken, dispatch, resize):
            return cached[1]
        entry = self._core_entry(config)
        self._entry = ((taken, dispatch, resize), entry)
        return entry

    def _core_entry(self, config: RunConfig) -> AppWrapperEntry:
        scheduling = self.observed.spec_field("schedulingSpec") or {}
        cluster_scheduling = scheduling.get("clusterScheduling") or {}
        created = parse_time(self.meta.get("creationTimestamp")) or datetime.min
        requeued = parse_time(self.status.get("requeueTimestamp"))
        requeuing = self.condition("Requeuing") or {}
        try:
            selector = ClusterSelector.from_spec(cluster_scheduling.get("clusterSelector"))
        except ValueError:
            selector = ClusterSelector.from_spec(None)
        demand, demand_error = self.demand, self.observed.demand_error
        elastic_min = full_pods = None
        admitted = self.admitted
        if self.elastic and demand is not None:
            problem = elastic_problem(demand, self.kinds())
            if problem is not None:
                demand, demand_error = None, problem
            else:
                elastic_min = demand.min_available
                if admitted:
                    full_pods, demand = demand.pods, self.admitted_demand()
                else:
                    demand = sized(demand, demand.pods)
        hold, quota = self.hold(config)
        return AppWrapperEntry(
            key=self.key, uid=self.uid, priority=self.priority,
            created=created, demand=demand, demand_error=demand_error,
            quota_labels=dict(quota), hold=hold,
            clusters=tuple(c.get("name", "") for c in cluster_scheduling.get("clusters")
                           or [] if isinstance(c, dict)),
            cluster_selector=selector,
            phase=Admitted(ClusterName(self.cluster), self.pin) if admitted else QUEUED,
            avoid_cluster=self.status.get("previousCluster") or None,
            not_before=self.pause_ends(config), queued_since=requeued,
            kinds=self.kinds(), priority_slope=self.priority_slope(),
            dispatched=self.dispatched_at() if admitted else None,
            draining=bool(admitted and requeuing.get("status") == "True"),
            draining_for=AppWrapperKey(str(self.status["preemptedBy"]))
            if admitted and self.status.get("preemptedBy") else None,
            expected_end=parse_time(self.status.get("expectedEnd")) if admitted else None,
            elastic_min=elastic_min, full_pods=full_pods,
            backfill_promise=self.backfill_promise if admitted else None)


_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _slim(obj: dict[str, Any]) -> None:
    """Drop what mcad never reads and that can double an AppWrapper's size in memory
    (10,000 are kept): managedFields, and kubectl's copy of the whole spec."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict) and _LAST_APPLIED in annotations:
            meta["annotations"] = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
