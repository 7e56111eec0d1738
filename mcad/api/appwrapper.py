"""The AppWrapper (``workload.codeflare.dev/v1beta1``): what users submit, as MCAD v1 wrote it.

Why these models: users bring AppWrappers written for MCAD v1 and expect them to work
unchanged, wire names included (``GenericItems``, ``generictemplate``,
``custompodresources``, ``priorityslope``, ``Succeeded`` with a capital S). Every field
MCAD v1's CRD declared is declared here, so its YAML passes both these models and the
CRD generated from them; fields MCAD declared but never honoured are accepted,
listed in each model's ``IGNORED`` and reported (``mcad validate`` notes, admission
warnings) when given a value.

Status: MCAD v1's fields keep their names and meanings (``state``, the pod counters,
``numberOfRequeueings``, which we actually increment, ``controllerfirsttimestamp``),
``conditions`` become standard ``metav1.Condition``s, and mcad adds
``clusterName`` (the cluster it runs on), ``dispatchTimestamp`` (when the current
dispatch happened: the requeue timer starts here), ``requeueTimestamp`` (when it last went
back to the queue) and ``observedGeneration``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from mcad.api.meta import (
    Condition,
    EmbeddedObject,
    FreeForm,
    LabelSelector,
    ObjectMeta,
    ResourceQuantities,
    Timestamp,
    WireModel,
    field_error,
)
from mcad.core.workload.topology import label_key_problem

GROUP: Final = "workload.codeflare.dev"
VERSION: Final = "v1beta1"
API_VERSION: Final = "workload.codeflare.dev/v1beta1"
KIND: Final = "AppWrapper"
FINALIZER: Final = "workload.codeflare.dev/finalizer"
"""mcad's finalizer: an AppWrapper holding it is not gone until mcad has cleaned up what it
created for it. Put on at creation by the mutating webhook (``mcad.webhook.review.
with_finalizer``), or by the controller when it first sees an AppWrapper without it."""

AppWrapperState = Literal[
    "", "Pending", "Running", "RunningHoldCompletion", "Completed", "Failed", "Deleted"
]
GrowthType = Literal["exponential", "linear", "none"]


class RequeuingSpec(WireModel):
    """When to give up on a dispatch whose pods do not come up, and how often to retry."""

    IGNORED: ClassVar[dict[str, str]] = {
        "initial_time_in_seconds": "timeInSeconds sets the first requeuing time",
        "num_requeuings": "the count is status.numberOfRequeueings",
        "forceful_deletion_after_seconds": "use forceDeletionTimeInSeconds",
    }

    time_in_seconds: int = Field(300, alias="timeInSeconds", ge=0)
    """Seconds after dispatch at which running+succeeded pods must reach minAvailable."""
    max_time_in_seconds: int = Field(0, alias="maxTimeInSeconds", ge=0)
    """Cap on the grown timeout; 0 means no cap."""
    growth_type: GrowthType = Field("exponential", alias="growthType")
    """How the timeout grows after each requeue: exponential (doubles), linear (adds the
    initial value) or none."""
    max_num_requeuings: int = Field(0, alias="maxNumRequeuings", ge=0)
    """Requeues allowed before the AppWrapper fails; 0 means unlimited."""
    pause_time_in_seconds: int = Field(90, alias="pauseTimeInSeconds", ge=0)
    """Seconds a requeued AppWrapper waits before it may be dispatched again."""
    force_deletion_time_in_seconds: int = Field(570, alias="forceDeletionTimeInSeconds", ge=0)
    """Seconds after a requeue's graceful deletion at which leftovers are force-deleted."""
    initial_time_in_seconds: int | None = Field(None, alias="initialTimeInSeconds", ge=0)
    """MCAD v1 bookkeeping; accepted and ignored (the initial value is timeInSeconds)."""
    num_requeuings: int | None = Field(None, alias="numRequeuings", ge=0)
    """MCAD v1 bookkeeping; accepted and ignored (see status.numberOfRequeueings)."""
    forceful_deletion_after_seconds: int | None = Field(
        None, alias="forcefulDeletionAfterSeconds", ge=0
    )
    """Not in any MCAD release (an unmerged MCAD proposal used this name); accepted and
    ignored: mcad's setting is forceDeletionTimeInSeconds."""


class ClusterReference(WireModel):
    """A SpokeCluster by name."""

    name: str = Field(min_length=1)
    """Name of a SpokeCluster."""


class ClusterSchedulingSpec(WireModel):
    """Which clusters may run this AppWrapper; both constraints hold when both are given."""

    IGNORED: ClassVar[dict[str, str]] = {
        "policy_result": "the chosen cluster is status.clusterName",
    }

    clusters: list[ClusterReference] = Field(default_factory=list)
    """Allowed SpokeClusters by name; empty means any."""
    cluster_selector: LabelSelector | None = Field(None, alias="clusterSelector")
    """Allowed SpokeClusters by their spec.labels; absent means any."""
    policy_result: FreeForm | None = Field(None, alias="policyResult")
    """MCAD v1 field; accepted and ignored (the chosen cluster is status.clusterName)."""


class DispatchDurationSpec(WireModel):
    """MCAD v1's wall-clock bounds of one run."""

    IGNORED: ClassVar[dict[str, str]] = {
        "overrun": "MCAD's internal flag; limit is enforced",
    }

    expected: int | None = Field(None, ge=0)
    """Seconds a run is expected to take: recorded at dispatch as status.expectedEnd, for
    estimates (MCAD never read it)."""
    limit: int | None = Field(None, ge=0)
    """Seconds a run may last from dispatch: past it the wrapped objects are deleted and
    the AppWrapper fails (reason DispatchDeadlineExceeded). 0 or absent: no limit."""
    overrun: bool | None = None
    """MCAD's internal flag: informational, answered with a warning."""


class TopologySpec(WireModel):
    """Where the whole gang runs in the spokes' topology (a node label key: a level)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "has(self.required) != has(self.preferred)",
        "message": "give exactly one of required and preferred"}]})

    required: str | None = Field(None, min_length=1)
    """Every pod in one domain of this level (e.g. one rack), or it waits."""
    preferred: str | None = Field(None, min_length=1)
    """As few domains of this level as the free nodes allow, the tightest first."""

    @model_validator(mode="after")
    def _one_label_key(self) -> TopologySpec:
        if (self.required is None) == (self.preferred is None):
            raise field_error("required", "give exactly one of required and preferred "
                                          "(a node label key)")
        for name, key in (("required", self.required), ("preferred", self.preferred)):
            problem = None if key is None else label_key_problem(key)
            if problem is not None:
                raise field_error(name, problem)
        return self


class SchedulingSpec(WireModel):
    """How the wrapped objects are scheduled as one gang."""

    IGNORED: ClassVar[dict[str, str]] = {
        "dispatching_window": "not implemented, by MCAD either",
        "node_selector": "put nodeSelector in the pod templates",
    }

    min_available: int | None = Field(None, alias="minAvailable", ge=0)
    """Pods that must be ready (Running with Ready True) or Succeeded for the gang to
    count as up; absent means all pods."""
    requeuing: RequeuingSpec = Field(default_factory=RequeuingSpec)
    """Requeue policy when the gang does not come up in time."""
    cluster_scheduling: ClusterSchedulingSpec | None = Field(None, alias="clusterScheduling")
    """Cluster constraints (multi-cluster mode)."""
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    """MCAD v1 field, never read by MCAD; accepted and reported (put nodeSelector in the
    pod templates: that is what placement reads and the pods obey)."""
    dispatch_duration: DispatchDurationSpec | None = Field(None, alias="dispatchDuration")
    """Wall-clock bounds of each run (``limit`` is enforced)."""
    dispatching_window: FreeForm | None = Field(None, alias="dispatchingWindow")
    """MCAD v1 field; accepted and ignored."""
    topology: TopologySpec | None = None
    """Keep the gang inside one domain of a topology level (required) or in as few as
    possible (preferred); Kueue's podset-required-topology and
    podset-preferred-topology pod-template annotations say the same."""


class CustomPodResources(WireModel):
    """Pods of one shape an item will create, declared instead of derived from its template."""

    replicas: int = Field(ge=0)
    """How many pods of this shape."""
    requests: ResourceQuantities
    """Per-pod requests; a resource missing here falls back to its limit."""
    limits: ResourceQuantities = Field(default_factory=dict)
    """Per-pod limits."""


def kubernetes_object(value: dict[str, Any], field: str) -> dict[str, Any]:
    """``value``, when it names its apiVersion and kind (a wrapped object must)."""
    missing = [k for k in ("apiVersion", "kind") if not isinstance(value.get(k), str)
               or not value.get(k)]
    if missing:
        raise ValueError(
            f"the wrapped object has no {' or '.join(missing)}; every {field} must be a "
            "complete Kubernetes object"
        )
    return value


class GenericItem(WireModel):
    """One wrapped Kubernetes object and the pods it stands for."""

    IGNORED: ClassVar[dict[str, str]] = {
        "allocated": "MCAD bookkeeping",
        "priority": "spec.priority orders and preempts",
        "priority_slope": "use spec.priorityslope",
        "metadata": "put labels on the generictemplate",
    }

    replicas: int | None = Field(None, ge=0)
    """How many times the template's pods count (MCAD v1: desired replicas)."""
    min_available: int | None = Field(None, alias="minavailable", ge=0)
    """Pods of this item that must be available."""
    allocated: int | None = Field(None, ge=0)
    """MCAD v1 field; accepted and ignored."""
    priority: int | None = None
    """MCAD v1 per-item priority; accepted and ignored (spec.priority rules)."""
    priority_slope: float | None = Field(None, alias="priorityslope")
    """MCAD v1 per-item priority slope; accepted and ignored."""
    generic_template: EmbeddedObject = Field(alias="generictemplate")
    """The wrapped object, any kind, kept verbatim and created on dispatch."""
    custom_pod_resources: list[CustomPodResources] = Field(
        default_factory=list, alias="custompodresources"
    )
    """Declared pod shapes; when present they replace what the template implies."""
    completion_status: str = Field("", alias="completionstatus")
    """Comma-separated condition types (e.g. Complete,Failed); the item is complete when
    the wrapped object has one of them with status True."""
    metadata: FreeForm | None = None
    """Seen in MCAD v1 examples; accepted and ignored."""

    @field_validator("generic_template")
    @classmethod
    def _is_kubernetes_object(cls, value: dict[str, Any]) -> dict[str, Any]:
        return kubernetes_object(value, "generictemplate")

    def completion_conditions(self) -> tuple[str, ...]:
        """The condition types named by completionstatus, in order, without blanks."""
        return tuple(p.strip() for p in self.completion_status.split(",") if p.strip())


class Resources(WireModel):
    """The wrapped objects."""

    IGNORED: ClassVar[dict[str, str]] = {
        "items": "objects are created only from GenericItems",
        "metadata": "not read",
    }

    generic_items: list[GenericItem] = Field(default_factory=list, alias="GenericItems")
    """The objects to create on dispatch, each with the pods it accounts for."""
    items: list[FreeForm] | None = Field(None, alias="Items")
    """MCAD v1 legacy list; accepted and ignored."""
    metadata: FreeForm | None = None
    """Seen in MCAD v1 examples; accepted and ignored."""


class ServiceSpec(WireModel):
    """MCAD v1's service stanza; accepted and ignored."""

    spec: FreeForm = Field(default_factory=dict)


class AppWrapperSpec(WireModel):
    """What to run, how urgently, as one gang."""

    IGNORED: ClassVar[dict[str, str]] = {
        "service": "wrap a Service as a GenericItem",
        "selector": "not read",
    }

    priority: int = 0
    """Higher runs first and may preempt lower."""
    priority_slope: float | None = Field(None, alias="priorityslope")
    """MCAD v1 dynamic priority: the priority grows by this much per second the
    AppWrapper waits in the queue (it orders the queue; preemption uses ``priority``)."""
    resources: Resources
    """The wrapped objects."""
    scheduling_spec: SchedulingSpec = Field(default_factory=SchedulingSpec,
                                            alias="schedulingSpec")
    """Gang size, requeue policy and cluster constraints."""
    service: ServiceSpec | None = None
    """MCAD v1 field; accepted and ignored."""
    selector: LabelSelector | None = None
    """MCAD v1 field; accepted and ignored."""


class ComponentStatus(WireModel):
    """One object created on the cluster for the AppWrapper."""

    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str


class TopologyAssignment(WireModel):
    """Topology domains: label keys, broadest first, and each domain's values."""

    levels: list[str]
    domains: list[list[str]]
    """Each domain's label values along levels."""


class BackfillPromiseStatus(WireModel):
    """The promise a run started by reservation backfill was admitted on."""

    head: str
    """The head of the line it took reserved room from (namespace/name)."""
    end_by: Timestamp = Field(alias="endBy")
    """The start of that head's reservation: still running then, while the head waits,
    the run is evicted for it (reason Preempted)."""


class AppWrapperStatus(WireModel):
    """What mcad observed and decided; written only by the controller."""

    state: AppWrapperState = ""
    """Pending, Running, RunningHoldCompletion, Completed, Failed or Deleted (MCAD v1
    states; empty before the controller first sees the AppWrapper)."""
    message: str = ""
    """Why the AppWrapper is in its state, as a sentence (e.g. why it is pending)."""
    pending: int = Field(0, ge=0)
    """Pods of the AppWrapper that are Pending."""
    running: int = Field(0, ge=0)
    """Pods of the AppWrapper that are Running."""
    succeeded: int = Field(0, alias="Succeeded", ge=0)
    """Pods of the AppWrapper that Succeeded (capital S on the wire, as in MCAD v1)."""
    failed: int = Field(0, ge=0)
    """Pods of the AppWrapper that Failed."""
    number_of_requeueings: int = Field(0, alias="numberOfRequeueings", ge=0)
    """Times the AppWrapper was requeued (compared with maxNumRequeuings)."""
    resetting_count: int = Field(0, alias="resettingCount", ge=0)
    """Times its gang was reset whole, everything deleted and created again on the same
    cluster (compared with the retryLimit annotation; a reset for a node whose GPUs must
    be evacuated does not count)."""
    requeueing_time_in_seconds: int = Field(0, alias="requeueingTimeInSeconds", ge=0)
    """The current requeue timeout in seconds, grown after each requeue."""
    controller_first_timestamp: Timestamp | None = Field(None, alias="controllerfirsttimestamp")
    """When the controller first saw the AppWrapper."""
    controller_first_dispatch_timestamp: Timestamp | None = Field(
        None, alias="controllerfirstdispatchtimestamp"
    )
    """When the AppWrapper was first dispatched."""
    cluster_name: str = Field("", alias="clusterName")
    """The SpokeCluster the AppWrapper is dispatched to; empty while queued."""
    previous_cluster: str = Field("", alias="previousCluster")
    """The cluster of the last attempt that was requeued; the next dispatch prefers
    another cluster where the AppWrapper fits."""
    run_id: str = Field("", alias="runId")
    """Identifies the current dispatch (a run), unique per dispatch; empty while queued.
    Every order of the controller (evict, resize) names the run it is for, and a retried
    write that was committed is recognised by it."""
    dispatch_timestamp: Timestamp | None = Field(None, alias="dispatchTimestamp")
    """When the current dispatch happened; the requeue timer starts here."""
    requeue_timestamp: Timestamp | None = Field(None, alias="requeueTimestamp")
    """When the AppWrapper last went back to the queue."""
    component_status: list[ComponentStatus] = Field(default_factory=list,
                                                    alias="componentStatus")
    """The objects created for the current dispatch, by apiVersion, kind and name: what
    a requeue or deletion removes, even when the spec was changed meanwhile."""
    expected_end: Timestamp | None = Field(None, alias="expectedEnd")
    """Dispatch time plus schedulingSpec.dispatchDuration.expected: when the current run
    should end, for estimates."""
    run_deadline: Timestamp | None = Field(None, alias="runDeadline")
    """Dispatch time plus schedulingSpec.dispatchDuration.limit: a run still going then
    fails (reason DispatchDeadlineExceeded)."""
    admitted_pods: int | None = Field(None, alias="admittedPods", ge=0)
    """Elastic (annotation workload.codeflare.dev/elastic): the pods its Job runs with
    now (its parallelism), between schedulingSpec.minAvailable and fullPods."""
    full_pods: int | None = Field(None, alias="fullPods", ge=0)
    """Elastic: the pods its templates ask for, the size it grows back to."""
    backfill_promise: BackfillPromiseStatus | None = Field(None, alias="backfillPromise")
    """Set when the current dispatch started by reservation backfill in room reserved for
    the head of the line, on the promise to end before that head's reservation (backfill:
    reservation); it is held to it."""
    preempted_by: str = Field("", alias="preemptedBy")
    """While it is being evicted to make room for another: that one (namespace/name)."""
    topology: TopologyAssignment | None = None
    """The topology domains the current dispatch keeps its pods in (a required node
    affinity in every pod template)."""
    dispatched_spec_hash: str = Field("", alias="dispatchedSpecHash")
    """A digest of what the current dispatch created (resources and scheduling); a spec
    that no longer matches it is applied through a requeue (reason SpecChanged)."""
    observed_generation: int = Field(0, alias="observedGeneration", ge=0)
    """The .metadata.generation this status describes."""
    conditions: list[Condition] = Field(default_factory=list)
    """Standard conditions: Queued (with the pending reason), Dispatched (reason
    Creating while the objects' creation is retried), PodsReady, Requeuing (with the
    requeue's reason, e.g. Preempted), Unhealthy (why its gang is unhealthy: a failed
    pod, a sick node...), Resetting (while its gang is reset), DeletingResources (a
    Failed one's objects kept or deleted), Completed, Failed, CleanupPending."""


class AppWrapper(WireModel):
    """A gang of Kubernetes objects dispatched, requeued and deleted as one."""

    api_version: Literal["workload.codeflare.dev/v1beta1"] = Field(
        API_VERSION, alias="apiVersion"
    )
    kind: Literal["AppWrapper"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: AppWrapperSpec
    """What to run."""
    status: AppWrapperStatus = Field(default_factory=AppWrapperStatus)
    """What mcad observed and decided."""
