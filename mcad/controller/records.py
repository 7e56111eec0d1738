"""What the controller remembers of each AppWrapper between events.

The hub object (as last seen or written), its demand read once per generation, and
the core's view of it (``AppWrapperEntry``) rebuilt only when the object changes,
so a dispatch cycle over thousands of AppWrappers does not re-read their specs.
The AppWrapper's status on the hub is the source of truth for what was decided
(dispatched where, requeued how often), which makes a restart lose nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from mcad.config import RunConfig
from mcad.controller.clock import parse_time
from mcad.core.capacity import AppWrapperKey, ClusterName
from mcad.core.cycle import QUEUED, Admitted, AppWrapperEntry
from mcad.core.demand import Demand, DemandError, appwrapper_demand
from mcad.core.elastic import ELASTIC_ANNOTATION, elastic_problem, sized
from mcad.core.placement import ClusterSelector
from mcad.core.requeue import UNCOUNTED_REASONS, RequeuePolicy
from mcad.core.wrapping import Refusal, WrappedObject, wrapped_kinds

FINALIZER = "workload.codeflare.dev/finalizer"
TERMINAL = ("Completed", "Failed")


def key_of(obj: Mapping[str, Any]) -> AppWrapperKey:
    meta = obj.get("metadata") or {}
    return AppWrapperKey(f"{meta.get('namespace', '')}/{meta.get('name', '')}")


def resource_version(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion", 0))
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True)
class EvictionOrder:
    """The dispatcher's decision to take a running AppWrapper back, for one dispatch.

    ``dispatch`` is the ``dispatchTimestamp`` of the run it was decided for: an order
    for a run that has already ended (requeued, completed, deleted) is void, so it can
    never hit the AppWrapper's next run or a new AppWrapper of the same name.
    """

    reason: str
    message: str
    by: str
    dispatch: str


@dataclass
class AppWrapperRecord:
    """One AppWrapper as the controller knows it.

    The dispatcher only *records* its decisions here (``assumed_cluster``,
    ``wanted_pending``, ``eviction``) and queues the key; the reconciler, the one actor
    per AppWrapper, carries them out.
    """

    obj: dict[str, Any]
    demand: Demand | None = None
    demand_error: str | None = None
    demand_generation: int = -1
    entry: AppWrapperEntry | None = None
    assumed_cluster: str | None = None
    """Dispatched by this process, before the hub has confirmed it."""
    assumed_pods: int | None = None
    """Elastic, dispatched below full size by this process: the pods it starts with."""
    resize: tuple[int, str, str] | None = None
    """An elastic resize ordered by the dispatcher: (pods, reason, message)."""
    objects_ensured: bool = False
    """The wrapped objects were created (or found) on the cluster by this process."""
    planned: list[WrappedObject] | Refusal | None = None
    """What to create, from the current generation (``ObjectManager.plan``)."""
    last_pending: tuple[str, str] = ("", "")
    """The pending reason and message last written to the hub."""
    last_pending_at: datetime | None = None
    counts_written_at: datetime | None = None
    """When the pod counts were last written (they are coalesced: ``lifecycle``)."""
    wanted_pending: tuple[str, str] | None = None
    """The pending reason and message of the last cycle, to be written."""
    eviction: EvictionOrder | None = None
    hold_until: datetime | None = None
    """A failed dispatch persist keeps the AppWrapper out of cycles until then."""
    persist_failures: int = 0

    # -- reading ------------------------------------------------------------------------
    @property
    def key(self) -> AppWrapperKey:
        return key_of(self.obj)

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self.obj.get("metadata") or {})

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
    def spec(self) -> dict[str, Any]:
        return dict(self.obj.get("spec") or {})

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.obj.get("status") or {})

    @property
    def state(self) -> str:
        return str(self.status.get("state", ""))

    @property
    def cluster(self) -> str:
        """Where the AppWrapper is dispatched ('' while queued)."""
        return self.assumed_cluster or str(self.status.get("clusterName", ""))

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    @property
    def admitted(self) -> bool:
        """Holds quota and capacity: dispatched and not finished."""
        return bool(self.cluster) and self.state not in TERMINAL

    @property
    def queued(self) -> bool:
        return not self.cluster and self.state not in TERMINAL and not self.deleting

    def condition(self, type_: str) -> dict[str, Any] | None:
        for cond in self.status.get("conditions") or []:
            if cond.get("type") == type_:
                return dict(cond)
        return None

    def requeue_policy(self, config: RunConfig) -> RequeuePolicy:
        scheduling = self.spec.get("schedulingSpec") or {}
        spec = scheduling.get("requeuing")
        return config.default_requeuing.policy() if spec is None \
            else RequeuePolicy.from_spec(spec)

    @property
    def elastic(self) -> bool:
        annotations = self.meta.get("annotations") or {}
        return str(annotations.get(ELASTIC_ANNOTATION, "")).lower() == "true"

    def admitted_pods(self) -> int | None:
        """Elastic and admitted: the pods it runs with now (None: its full size)."""
        if not self.elastic or not self.admitted:
            return None
        if self.assumed_pods is not None:
            return self.assumed_pods
        pods = self.status.get("admittedPods")
        return pods if isinstance(pods, int) and not isinstance(pods, bool) else None

    def admitted_demand(self) -> Demand | None:
        """What it holds now: its demand at its admitted size when elastic."""
        demand = self.demand
        if demand is None or not self.elastic or elastic_problem(
                demand, wrapped_kinds(self.spec)) is not None:
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
        duration = (self.spec.get("schedulingSpec") or {}).get("dispatchDuration") or {}
        value = duration.get(name) if isinstance(duration, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
            else None

    def dispatched_at(self) -> datetime | None:
        return parse_time(self.status.get("dispatchTimestamp"))

    def requeues(self) -> int:
        return int(self.status.get("numberOfRequeueings", 0) or 0)

    @property
    def priority(self) -> int:
        """``spec.priority`` (0 when absent or unreadable)."""
        try:
            return int(self.spec.get("priority", 0) or 0)
        except (TypeError, ValueError):
            return 0

    def priority_slope(self) -> float:
        slope = self.spec.get("priorityslope")
        return float(slope) if isinstance(slope, int | float) and not isinstance(slope, bool) \
            else 0.0

    def components(self) -> list[tuple[str, str, str]]:
        """(apiVersion, kind, name) of the objects the current dispatch created, as
        recorded in the status when it was persisted."""
        return [(str(c.get("apiVersion", "")), str(c.get("kind", "")), str(c.get("name", "")))
                for c in self.status.get("componentStatus") or [] if isinstance(c, dict)]

    # -- updating -----------------------------------------------------------------------
    def update(self, obj: dict[str, Any]) -> bool:
        """Take a newer version of the object; False when ``obj`` is older than ours."""
        if resource_version(obj) and resource_version(obj) < resource_version(self.obj):
            return False
        _slim(obj)
        self.obj = obj
        self.entry = None
        if self.status.get("clusterName") == self.assumed_cluster:
            self.assumed_cluster = self.assumed_pods = None
        generation = int(self.meta.get("generation", 0) or 0)
        if generation != self.demand_generation:
            self.demand_generation = generation
            self.planned = None
            try:
                self.demand, self.demand_error = appwrapper_demand(self.spec), None
            except DemandError as err:
                self.demand, self.demand_error = None, str(err)
        return True

    def core_entry(self, config: RunConfig) -> AppWrapperEntry:
        if self.entry is None:
            scheduling = self.spec.get("schedulingSpec") or {}
            cluster_scheduling = scheduling.get("clusterScheduling") or {}
            created = parse_time(self.meta.get("creationTimestamp")) or datetime.min
            requeued = parse_time(self.status.get("requeueTimestamp"))
            policy = self.requeue_policy(config)
            requeuing = self.condition("Requeuing") or {}
            why = requeuing.get("reason")
            not_before = requeued + timedelta(seconds=policy.pause_time_in_seconds) \
                if requeued and why not in UNCOUNTED_REASONS else None
            try:
                selector = ClusterSelector.from_spec(cluster_scheduling.get("clusterSelector"))
            except ValueError:
                selector = ClusterSelector.from_spec(None)
            demand, demand_error = self.demand, self.demand_error
            elastic_min = full_pods = None
            if self.elastic and demand is not None:
                problem = elastic_problem(demand, wrapped_kinds(self.spec))
                if problem is not None:
                    demand, demand_error = None, problem
                else:
                    elastic_min = demand.min_available
                    if self.admitted:
                        full_pods, demand = demand.pods, self.admitted_demand()
                    else:
                        demand = sized(demand, demand.pods)
            self.entry = AppWrapperEntry(
                key=self.key, uid=self.uid, priority=self.priority,
                created=created, demand=demand, demand_error=demand_error,
                quota_labels=dict(self.meta.get("labels") or {}),
                clusters=tuple(c.get("name", "") for c in cluster_scheduling.get("clusters")
                               or [] if isinstance(c, dict)),
                cluster_selector=selector,
                phase=Admitted(ClusterName(self.cluster)) if self.admitted else QUEUED,
                avoid_cluster=self.status.get("previousCluster") or None,
                not_before=not_before, queued_since=requeued,
                kinds=wrapped_kinds(self.spec), priority_slope=self.priority_slope(),
                dispatched=self.dispatched_at() if self.admitted else None,
                draining=bool(self.admitted and requeuing.get("status") == "True"),
                draining_for=AppWrapperKey(str(self.status["preemptedBy"]))
                if self.admitted and self.status.get("preemptedBy") else None,
                expected_end=parse_time(self.status.get("expectedEnd"))
                if self.admitted else None, elastic_min=elastic_min, full_pods=full_pods)
        return self.entry


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
