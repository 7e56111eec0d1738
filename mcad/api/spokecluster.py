"""The SpokeCluster (``cluster.codeflare.dev/v1alpha1``): a cluster AppWrappers can run on.

Why a resource of its own: in multi-cluster mode the hub dispatches AppWrappers to
spokes, and administrators register spokes the way MultiKueue registers workers: a
cluster-scoped object pointing at a Secret, in the controller's namespace, whose key
(``kubeconfig`` by default) holds a kubeconfig. ``spec.local: true`` without a Secret
means "the hub itself" and is how single-cluster mode is declared. ``spec.labels`` are
what an AppWrapper's ``clusterSelector`` matches; ``spec.unschedulable`` drains a spoke
(running AppWrappers stay, new ones go elsewhere); ``spec.topology.levels`` names the
node labels that say which nodes share a block, a rack, ... (``mcad.core.workload.topology``).

The status is the capacity the controller keeps from watching the spoke's nodes and
pods, so ``kubectl get spoke`` answers "where is there room?" without a metrics stack.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import ConfigDict, Field, model_validator

from mcad.api.meta import (
    Condition,
    ObjectMeta,
    ResourceQuantities,
    Timestamp,
    WireModel,
    field_error,
)
from mcad.core.workload.topology import label_key_problem

GROUP: Final = "cluster.codeflare.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "cluster.codeflare.dev/v1alpha1"
KIND: Final = "SpokeCluster"
DEFAULT_KUBECONFIG_KEY = "kubeconfig"


class SecretKeyReference(WireModel):
    """A key of a Secret in the controller's namespace."""

    name: str = Field(min_length=1)
    """The Secret's name."""
    key: str = Field(DEFAULT_KUBECONFIG_KEY, min_length=1)
    """The key whose value is the kubeconfig."""


_ONE_SOURCE_RULE = "has(self.kubeconfigSecret) != (has(self.local) && self.local)"
_ONE_SOURCE_MESSAGE = (
    "a SpokeCluster names exactly one way to reach it: spec.kubeconfigSecret for a "
    "remote cluster, or spec.local: true for the hub itself"
)


class TopologyLevels(WireModel):
    """How the spoke's nodes are grouped, as Kueue's Topology object says it."""

    levels: list[str] = Field(default_factory=list, max_length=8)
    """Node label keys, broadest first (e.g. example.com/block, example.com/rack,
    kubernetes.io/hostname): nodes with the same value of a level (and of every level
    above it) share that domain. AppWrappers ask for one of them in
    schedulingSpec.topology."""

    @model_validator(mode="after")
    def _label_keys_once(self) -> TopologyLevels:
        for index, key in enumerate(self.levels):
            problem = label_key_problem(key)
            if problem is not None:
                raise field_error(f"levels[{index}]", problem)
            if key in self.levels[:index]:
                raise field_error(f"levels[{index}]", f"names {key} twice; each level once")
        return self


class SpokeClusterSpec(WireModel):
    """How to reach the cluster and how AppWrappers may use it."""

    model_config = ConfigDict(json_schema_extra={
        "x-kubernetes-validations": [{"rule": _ONE_SOURCE_RULE, "message": _ONE_SOURCE_MESSAGE}]
    })

    kubeconfig_secret: SecretKeyReference | None = Field(None, alias="kubeconfigSecret")
    """Secret (in the controller's namespace) holding the spoke's kubeconfig."""
    local: bool = False
    """True: this spoke is the hub itself (single-cluster mode); no Secret is needed."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Labels that AppWrappers' schedulingSpec.clusterScheduling.clusterSelector match."""
    unschedulable: bool = False
    """True: no new AppWrappers are dispatched here; running ones stay."""
    topology: TopologyLevels | None = None
    """The node labels that are this spoke's topology levels; absent: the policy's
    (topologyLevels), or else any node label an AppWrapper names is a level as it is."""

    @model_validator(mode="after")
    def _one_way_to_reach_it(self) -> SpokeClusterSpec:
        if (self.kubeconfig_secret is None) == (not self.local):
            subpath = "kubeconfigSecret" if self.local else "local"
            raise field_error(
                subpath,
                ("is set together with local: true; " if self.local else "is not true and "
                 "there is no kubeconfigSecret; ") + _ONE_SOURCE_MESSAGE,
            )
        return self


class Leftover(WireModel):
    """An object mcad created on this cluster and could not delete, because the cluster
    was lost (did not answer for spokeLostSeconds) while its AppWrapper moved on."""

    api_version: str = Field(alias="apiVersion")
    kind: str
    namespace: str
    name: str
    uid: str
    """The uid of the AppWrapper it was created for (its label
    workload.codeflare.dev/appwrapper-uid)."""


class DomainFree(WireModel):
    """Free GPUs of one topology domain."""

    level: str
    """The level's node label key."""
    domain: str
    """The domain's label values from the top, joined by '/'."""
    free: str
    """Free GPUs there."""
    on_free_nodes: str = Field(alias="onFreeNodes")
    """Of them, those on nodes with every GPU free."""


class TopologyStatus(WireModel):
    """Free GPUs per topology domain, and how fragmented the free room is."""

    levels: list[str] = Field(default_factory=list)
    """The levels in use (spec.topology.levels, or the policy's)."""
    free: str = "0"
    """Free GPUs on the spoke."""
    fragmented: str = "0"
    """Free GPUs on nodes that are partly used: room no whole-node pod can use."""
    domains: list[DomainFree] = Field(default_factory=list)
    """Per domain of every level above the nodes."""
    summary: str = ""
    """One line: free GPUs per domain of the lowest level above the nodes, and the
    fragmentation (a printer column)."""


class SpokeClusterStatus(WireModel):
    """What the controller last saw of the cluster; written only by the controller."""

    conditions: list[Condition] = Field(default_factory=list)
    """Ready: True when the spoke's API server answers and its capacity is known."""
    capacity: ResourceQuantities = Field(default_factory=dict)
    """Sum of the capacity of the spoke's nodes."""
    allocatable: ResourceQuantities = Field(default_factory=dict)
    """Sum of the allocatable resources of the spoke's ready, schedulable nodes."""
    free: ResourceQuantities = Field(default_factory=dict)
    """Allocatable minus what running and dispatched pods request."""
    nodes: int = Field(0, ge=0)
    """Number of nodes."""
    ready_nodes: int = Field(0, alias="readyNodes", ge=0)
    """Number of nodes that are Ready and schedulable."""
    last_sync_time: Timestamp | None = Field(None, alias="lastSyncTime")
    """When this status was last brought up to date."""
    leftovers: list[Leftover] = Field(default_factory=list)
    """Objects to delete when the cluster answers again, before it gets new work."""
    topology: TopologyStatus | None = None
    """Free GPUs per topology domain and the fragmentation."""


class SpokeCluster(WireModel):
    """A cluster AppWrappers can be dispatched to."""

    api_version: Literal["cluster.codeflare.dev/v1alpha1"] = Field(
        API_VERSION, alias="apiVersion"
    )
    kind: Literal["SpokeCluster"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: SpokeClusterSpec
    """How to reach the cluster."""
    status: SpokeClusterStatus = Field(default_factory=SpokeClusterStatus)
    """Capacity last seen."""

    def ready(self) -> bool:
        """True when the Ready condition is True."""
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions)
