"""Fluent builders for cluster capacity, as the dispatch cycle sees it.

    cluster = (make_cluster("spoke-1").nodes(4, gpu=8, cpu=32, memory="256Gi")
               .label(region="east").used(0, gpu=4).obj())
    racked = make_cluster("s").racks(blocks=2, racks=2, per_rack=2, gpu=8)  # levels too
    node = make_node("n1").alloc(gpu=8).taint("dedicated", "infra").obj()

Resource keywords follow ``ResourceList.of`` (``gpu`` is ``nvidia.com/gpu``). Nodes are
named ``<cluster>-node-<i>`` from 1, in the order they are added.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from mcad.core.placement.capacity import (
    AppWrapperKey,
    ClusterCapacity,
    ClusterName,
    NodeCapacity,
    NodeName,
    UnboundPods,
)
from mcad.core.workload.demand import PodSet, Taint, Toleration
from mcad.core.workload.resources import ResourceList
from mcad.core.workload.topology import HOSTNAME, TopologyPin

BLOCK, RACK = "example.com/block", "example.com/rack"
"""The test topology's level labels (rack values repeat across blocks: b1/r1, b2/r1)."""


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_cluster(name: str) -> ClusterBuilder:
    return ClusterBuilder(name)


def pod_set(count: int = 1, *, source: str = "", node_selector: dict[str, str] | None = None,
            tolerations: Iterable[Toleration] = (), **shape: int | str) -> PodSet:
    """``count`` pods of one shape: ``pod_set(2, gpu=4, cpu=8)``."""
    return PodSet(count=count, requests=ResourceList.of(**shape),
                  node_selector=tuple(sorted((node_selector or {}).items())),
                  tolerations=tuple(tolerations), source=source)


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._node = NodeCapacity(name=NodeName(name), allocatable=ResourceList())

    def alloc(self, **shape: int | str) -> NodeBuilder:
        self._node = dataclasses.replace(self._node, allocatable=ResourceList.of(**shape))
        return self

    def used(self, **shape: int | str) -> NodeBuilder:
        """What bound, non-terminal pods request on this node."""
        self._node = dataclasses.replace(self._node, requested=ResourceList.of(**shape))
        return self

    def label(self, **labels: str) -> NodeBuilder:
        merged = {**self._node.labels, **labels}
        self._node = dataclasses.replace(self._node, labels=merged)
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        taints = (*self._node.taints, Taint(key, value, effect))
        self._node = dataclasses.replace(self._node, taints=taints)
        return self

    def cordoned(self) -> NodeBuilder:
        self._node = dataclasses.replace(self._node, unschedulable=True)
        return self

    def not_ready(self) -> NodeBuilder:
        self._node = dataclasses.replace(self._node, ready=False)
        return self

    def obj(self) -> NodeCapacity:
        return self._node


class ClusterBuilder:
    """A cluster under construction; every method returns the builder."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._nodes: list[NodeBuilder] = []
        self._labels: dict[str, str] = {}
        self._ready = True
        self._schedulable = True
        self._reservations: list[UnboundPods] = []
        self._held: dict[AppWrapperKey, list[tuple[NodeName, ResourceList]]] = {}
        self._levels: tuple[str, ...] = ()
        self._closed: frozenset[str] = frozenset()
        self._identity: str | None = None

    def nodes(self, count: int, **shape: int | str) -> ClusterBuilder:
        """Add ``count`` identical nodes with this allocatable shape."""
        for _ in range(count):
            self._nodes.append(make_node(f"{self.name}-node-{len(self._nodes) + 1}")
                               .alloc(**shape))
        return self

    def racks(self, *, blocks: int, racks: int, per_rack: int,
              **shape: int | str) -> ClusterBuilder:
        """Add ``blocks x racks x per_rack`` nodes labelled ``BLOCK`` (``b1``...),
        ``RACK`` (``r1``... within each block) and hostname, in that order; the cluster's
        levels become (BLOCK, RACK, hostname)."""
        for block in range(1, blocks + 1):
            for rack in range(1, racks + 1):
                for _ in range(per_rack):
                    name = f"{self.name}-node-{len(self._nodes) + 1}"
                    self._nodes.append(make_node(name).alloc(**shape).label(
                        **{BLOCK: f"b{block}", RACK: f"r{rack}", HOSTNAME: name}))
        self._levels = (BLOCK, RACK, HOSTNAME)
        return self

    def levels(self, *keys: str) -> ClusterBuilder:
        """The cluster's declared topology levels (none: a label is a level as it is)."""
        self._levels = keys
        return self

    def node_label(self, index: int, key: str, value: str) -> ClusterBuilder:
        """A label whose key is not a Python name on node ``index``."""
        self._nodes[index].label(**{key: value})
        return self

    def node_shapes(self, shapes: Iterable[dict[str, int | str]]) -> ClusterBuilder:
        """Add one node per allocatable shape."""
        for shape in shapes:
            self.nodes(1, **shape)
        return self

    def node(self, node: NodeBuilder) -> ClusterBuilder:
        self._nodes.append(node)
        return self

    def used(self, index: int, **shape: int | str) -> ClusterBuilder:
        """Node ``index`` (0-based) has bound pods requesting ``shape``."""
        self._nodes[index].used(**shape)
        return self

    def label(self, **labels: str) -> ClusterBuilder:
        self._labels.update(labels)
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule", *,
              nodes: Iterable[int] | None = None) -> ClusterBuilder:
        """Taint the given nodes (0-based indices), or every node added so far."""
        for i in (range(len(self._nodes)) if nodes is None else nodes):
            self._nodes[i].taint(key, value, effect)
        return self

    def node_labels(self, *, nodes: Iterable[int] | None = None,
                    **labels: str) -> ClusterBuilder:
        for i in (range(len(self._nodes)) if nodes is None else nodes):
            self._nodes[i].label(**labels)
        return self

    def cordon(self, *nodes: int) -> ClusterBuilder:
        for i in nodes:
            self._nodes[i].cordoned()
        return self

    def node_not_ready(self, *nodes: int) -> ClusterBuilder:
        for i in nodes:
            self._nodes[i].not_ready()
        return self

    def not_ready(self) -> ClusterBuilder:
        self._ready = False
        return self

    def unschedulable(self) -> ClusterBuilder:
        self._schedulable = False
        return self

    def closes(self, *namespaces: str) -> ClusterBuilder:
        """Its admin labelled these namespaces cluster.codeflare.dev/closed=true."""
        self._closed = self._closed | set(namespaces)
        return self

    def identity(self, namespace: str) -> ClusterBuilder:
        """mcad acts there as a ServiceAccount of ``namespace``."""
        self._identity = namespace
        return self

    def reserve(self, key: str, *pod_sets: PodSet,
                pin: TopologyPin | None = None) -> ClusterBuilder:
        """Pods of a dispatched AppWrapper ``key`` not bound to a node yet."""
        self._reservations.append(UnboundPods(AppWrapperKey(key), tuple(pod_sets), pin))
        return self

    def held(self, key: str, index: int, **shape: int | str) -> ClusterBuilder:
        """Dispatched AppWrapper ``key`` has bound pods requesting ``shape`` on node
        ``index`` (what evicting it gives back; add the same with ``used``)."""
        node = self._nodes[index].obj().name
        self._held.setdefault(AppWrapperKey(key), []).append(
            (node, ResourceList.of(**shape)))
        return self

    def obj(self) -> ClusterCapacity:
        return ClusterCapacity(name=ClusterName(self.name),
                               nodes=tuple(n.obj() for n in self._nodes),
                               labels=dict(self._labels), ready=self._ready,
                               schedulable=self._schedulable,
                               unbound=tuple(self._reservations),
                               held_by={k: tuple(v) for k, v in self._held.items()},
                               topology=self._levels, closed_namespaces=self._closed,
                               identity_namespace=self._identity)
