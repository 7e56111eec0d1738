"""The AppWrapper as ``workload.codeflare.dev/v1beta2`` (project-codeflare/appwrapper v1.2.1).

Why a second version of one kind: MCAD is retired and its AppWrapper lives on as v1beta2,
which Kueue integrates and the CodeFlare platforms install; its users write
``spec.components[]`` and read ``status.phase``. The CRD serves both versions; v1beta1
stays the storage version (everything mcad keeps and decides is in it), and the
conversion webhook (``mcad.api.conversion``) translates each object both ways without
losing what one version cannot say.

The spec is v1beta2's, field for field. The status has v1beta2's fields (``phase``,
``resettingCount``, its conditions QuotaReserved, ResourcesDeployed, PodsReady,
Unhealthy, DeletingResources, and ``componentStatus`` parallel to the components), all
derived by the conversion from what mcad keeps, and beside them mcad's own facts under
their v1beta1 names (``state``, ``message``, ``clusterName``, the requeue counters, ...;
its conditions Queued, Dispatched, Requeuing, Completed, Failed, ... follow v1beta2's in
``conditions``): ``kubectl`` reads the newest version by default, so these stay in sight.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

from pydantic import Field, field_validator

from mcad.api import appwrapper
from mcad.api.meta import Condition, EmbeddedObject, FreeForm, ObjectMeta, WireModel

GROUP: Final = appwrapper.GROUP
VERSION: Final = "v1beta2"
API_VERSION: Final = "workload.codeflare.dev/v1beta2"
KIND: Final = appwrapper.KIND

Phase = Literal["", "Suspended", "Resuming", "Running", "Resetting", "Suspending",
                "Succeeded", "Failed", "Terminating"]


class AppWrapperPodSet(WireModel):
    """A set of identical pods a component makes: ``replicas`` pods from the pod template
    at ``path``."""

    replicas: int | None = Field(None, ge=0)
    """The number of pods in this podSet (absent: 1)."""
    path: str = Field(min_length=1)
    """Where the PodTemplateSpec is inside the component's template, e.g.
    template.spec.template (template is the wrapped object)."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Free key-value metadata about the podSet (accepted and kept; mcad reads none)."""


class AppWrapperPodSetInfo(WireModel):
    """What Kueue injects into an admitted podSet's template (mcad does not read it: it
    places the pods itself)."""

    annotations: dict[str, str] = Field(default_factory=dict)
    """Annotations to add to the pod template."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Labels to add to the pod template."""
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    """Node selector terms to add to the pod template."""
    tolerations: list[FreeForm] = Field(default_factory=list)
    """Tolerations to add to the pod template."""
    scheduling_gates: list[FreeForm] = Field(default_factory=list, alias="schedulingGates")
    """Scheduling gates to add to the pod template."""


class AppWrapperComponent(WireModel):
    """One wrapped Kubernetes object and the pods it makes."""

    IGNORED: ClassVar[dict[str, str]] = {
        "pod_set_infos": "Kueue's injection for the pods it admits; mcad places the pods "
                         "itself",
    }

    annotations: dict[str, str] = Field(default_factory=dict)
    """Free key-value metadata about the component (accepted and kept; mcad reads none)."""
    pod_sets: list[AppWrapperPodSet] = Field(default_factory=list, alias="podSets")
    """The pods the component makes; inferred when absent for Pod, Job, Deployment,
    StatefulSet, JobSet, PyTorchJob, RayCluster, RayJob and LeaderWorkerSet (and the
    other kinds mcad reads). Declared ones must lead to pod templates, and for the kinds
    the AppWrapper project infers must match what it infers. Immutable."""
    pod_set_infos: list[AppWrapperPodSetInfo] | None = Field(None, alias="podSetInfos")
    """What Kueue would inject into the admitted podSets; accepted and not acted on."""
    template: EmbeddedObject
    """The wrapped object, any kind, kept verbatim and created on dispatch."""

    @field_validator("template")
    @classmethod
    def _is_kubernetes_object(cls, value: dict[str, Any]) -> dict[str, Any]:
        return appwrapper.kubernetes_object(value, "template")


class AppWrapperSpec(WireModel):
    """What to run, as one gang."""

    components: list[AppWrapperComponent]
    """The wrapped objects."""
    suspend: bool = False
    """True keeps the AppWrapper out of the queue (a running one is taken back first)
    until it is set to false."""
    managed_by: str | None = Field(None, alias="managedBy")
    """The controller that runs this AppWrapper; any other than
    workload.codeflare.dev/appwrapper-controller (mcad, in the AppWrapper controller's
    place) leaves it alone. Immutable."""


class ComponentStatus(WireModel):
    """One component as deployed: parallel to spec.components."""

    name: str
    """The wrapped object's name."""
    kind: str
    """The wrapped object's kind."""
    api_version: str = Field(alias="apiVersion")
    """The wrapped object's apiVersion."""
    pod_sets: list[AppWrapperPodSet] = Field(default_factory=list, alias="podSets")
    """Its podSets, declared or inferred."""
    conditions: list[Condition] = Field(default_factory=list)
    """ResourcesDeployed: whether the object is (or is being) created on its cluster."""


class AppWrapperStatus(appwrapper.AppWrapperStatus):
    """v1beta2's status, derived from mcad's own facts, which follow under their v1beta1
    names; written only by the controller (as v1beta1)."""

    phase: Phase = ""
    """Suspended (queued), Resuming (dispatched, its objects being created), Running,
    Resetting (its gang deleted to be created again in place), Suspending (taken back to
    the queue), Succeeded, Failed or Terminating (deleted, its objects being removed)."""
    component_status: list[ComponentStatus] = Field(  # type: ignore[assignment]
        default_factory=list, alias="componentStatus")
    """One entry per component: the object, its podSets, and whether it is deployed."""
    conditions: list[Condition] = Field(default_factory=list)
    """v1beta2's conditions QuotaReserved, ResourcesDeployed, PodsReady, Unhealthy,
    DeletingResources; then mcad's own (Queued, Dispatched, Requeuing, Completed,
    Failed, CleanupPending, Resetting)."""


class AppWrapper(WireModel):
    """A gang of Kubernetes objects dispatched, requeued and deleted as one."""

    api_version: Literal["workload.codeflare.dev/v1beta2"] = Field(
        API_VERSION, alias="apiVersion")
    kind: Literal["AppWrapper"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: AppWrapperSpec
    """What to run."""
    status: AppWrapperStatus = Field(default_factory=AppWrapperStatus)
    """What mcad observed and decided."""
