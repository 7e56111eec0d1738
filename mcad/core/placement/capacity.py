"""What each cluster can still take: nodes, their free room, and pods on their way.

A dispatch decision is a bet that the wrapped pods will find nodes. Summing a
cluster's free resources is not enough for that bet: 8 free GPUs split 4 + 4 over two
nodes cannot hold one 8-GPU pod. So capacity is kept per node, and a pod set is
fitted node by node (``NodePool``).

Per-node free = allocatable - requested (non-terminal pods bound to the node) - what
the cluster's *unbound pods* take: pods of AppWrappers already dispatched but not yet
bound, which will land somewhere soon. They are placed first, first-fit in
the same order a new AppWrapper would be placed, so a dispatch never counts on room
that an earlier dispatch already claimed. Unbound pods that fit nowhere are
dropped from the per-node view (they are pending in the cluster and claim nothing
yet).

Nodes that are not ready or are cordoned (``unschedulable``) take no new pods and
are left out of ``allocatable`` and ``free``; ``capacity`` counts every node.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NewType, Protocol

from mcad.core.life.health import NodeHealth
from mcad.core.workload.demand import PodSet, Taint, Toleration
from mcad.core.workload.resources import EMPTY, ResourceList, summed, totals
from mcad.core.workload.topology import TopologyPin

AppWrapperKey = NewType("AppWrapperKey", str)
"""``namespace/name`` of an AppWrapper."""

ClusterName = NewType("ClusterName", str)
NodeName = NewType("NodeName", str)

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
"""Taint effects that keep an untolerating pod off a node (PreferNoSchedule only
discourages, so placement ignores it)."""


def blocking_taints(taints: Iterable[Taint], tolerations: Sequence[Toleration]) -> list[Taint]:
    """The taints among ``taints`` that keep a pod with ``tolerations`` off the node."""
    return [t for t in taints
            if t.effect in BLOCKING_EFFECTS and not any(o.tolerates(t) for o in tolerations)]


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """One node as placement sees it."""

    name: NodeName
    allocatable: ResourceList
    requested: ResourceList = EMPTY
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    health: NodeHealth = NodeHealth.OK
    """Its GPUs' health, as its label says (``mcad.core.life.health.NodeHealthRules``)."""
    usable: bool = field(init=False, repr=False, compare=False)
    """True when the node takes new pods: ready, not cordoned, and not marked by its GPU
    health as taking no new work (``NO_SCHEDULE``, ``NO_EXECUTE``)."""
    room: dict[str, int] = field(init=False, repr=False, compare=False)
    """Allocatable minus requested per allocatable resource, never below zero. Worked out
    with ``usable`` once per node (the controller keeps a node while nothing on it
    changes) and copied by each cycle's pool (``NodePool``); never changed."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "usable", self.ready and not self.unschedulable
             and self.health < NodeHealth.NO_SCHEDULE)
        requested = self.requested
        room = {}
        for name, value in self.allocatable.items():
            left = value - requested[name] if requested else value
            room[name] = left if left > 0 else 0
        set_(self, "room", room)

    @property
    def free(self) -> ResourceList:
        """Allocatable minus requested, never below zero (unbound pods not included)."""
        return (self.allocatable - self.requested).clamp_zero()

    def selects(self, node_selector: Iterable[tuple[str, str]]) -> bool:
        """True when every ``key=value`` of a pod's nodeSelector is a label of this node."""
        labels = self.labels
        return all(labels.get(k) == v for k, v in node_selector)

    def accepts(self, pod_set: PodSet) -> bool:
        """True when pods of ``pod_set`` may be bound here (room aside)."""
        return (self.usable and self.selects(pod_set.node_selector)
                and not blocking_taints(self.taints, pod_set.tolerations))


@dataclass(frozen=True, slots=True)
class UnboundPods:
    """Pods of a dispatched AppWrapper that are not bound to a node yet: room they will
    take soon, so the cycle places them first (not to be confused with the head of the
    line's reservation, ``mcad.core.cycle.backfill.HeadReservation``)."""

    key: AppWrapperKey
    pod_sets: tuple[PodSet, ...]
    pin: TopologyPin | None = None
    """The domains its pods are pinned to (``mcad.core.workload.topology``): placed there only."""


@dataclass(frozen=True)
class ClusterCapacity:
    """One cluster: its nodes, its labels, and the pods already on their way to it."""

    name: ClusterName
    nodes: tuple[NodeCapacity, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True
    schedulable: bool = True
    unbound: tuple[UnboundPods, ...] = ()
    kinds: frozenset[tuple[str, str]] | None = None
    """The (apiVersion, kind) pairs the cluster serves; None when not known (then any)."""
    held_by: Mapping[AppWrapperKey, tuple[tuple[NodeName, ResourceList], ...]] = field(
        default_factory=dict)
    """What each dispatched AppWrapper's bound pods request, per node: what evicting it
    would give back (read by preemption only)."""
    topology: tuple[str, ...] = ()
    """Its topology levels: node label keys, broadest first (the SpokeCluster's
    ``spec.topology.levels``, else the policy's); empty: a node label an AppWrapper names
    is a level as it stands (``mcad.core.placement.domains``)."""
    closed_namespaces: frozenset[str] = frozenset()
    """Its namespaces that its admin labelled ``cluster.codeflare.dev/closed: "true"``:
    no AppWrapper of those namespaces goes there (``mcad.core.placement.namespaces``)."""
    identity_namespace: str | None = None
    """The namespace of the ServiceAccount mcad acts as there (None: not one): no
    AppWrapper of that namespace goes there, where a Pod could mount its token."""

    @property
    def usable(self) -> bool:
        """True when new AppWrappers may go to this cluster."""
        return self.ready and self.schedulable

    def serves(self, kinds: Iterable[tuple[str, str]]) -> bool:
        """True when objects of every one of ``kinds`` can be created here."""
        return self.kinds is None or all(kind in self.kinds for kind in kinds)

    def unserved(self, kinds: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        return [] if self.kinds is None else [k for k in kinds if k not in self.kinds]

    def capacity(self) -> ResourceList:
        """Allocatable resources of every node, usable or not."""
        return _sum(n.allocatable for n in self.nodes)

    def allocatable(self) -> ResourceList:
        """Allocatable resources of the nodes that take new pods."""
        return _sum(n.allocatable for n in self.nodes if n.usable)

    def requested(self) -> ResourceList:
        """Requests of the pods bound to nodes that take new pods."""
        return _sum(n.requested for n in self.nodes if n.usable)

    def free(self) -> ResourceList:
        """Free room on nodes that take new pods, after placing the unbound pods."""
        return ResourceList(NodePool.of(self).free_total())

    def node_free(self) -> dict[NodeName, ResourceList]:
        """Free room per usable node after placing the unbound pods."""
        pool = NodePool.of(self)
        return {name: ResourceList(free) for name, free in zip(pool.names, pool.free,
                                                                strict=True)}


def _sum(lists: Iterable[ResourceList]) -> ResourceList:
    out: dict[str, int] = {}
    for rl in lists:
        for name, value in rl.items():
            out[name] = out.get(name, 0) + value
    return ResourceList(out)


_NAME = operator.attrgetter("name")
_HEALTH = operator.attrgetter("health")
_ROOM = operator.attrgetter("room")


def _DOUBTFUL_LAST(node: NodeCapacity) -> tuple[bool, str]:  # noqa: N802 (a sort key)
    return (node.health is NodeHealth.PREFER_NOT, node.name)


Take = tuple[int, int]
"""``(node index, pods)``: pods of one pod set put on one node of a ``NodePool``."""


class NodePool:
    """The usable nodes of one cluster with mutable free room, for one decision cycle.

    Nodes are kept in name order (the deterministic first-fit order), those whose GPUs
    are in doubt last. ``fit`` puts
    pods onto nodes and returns the takes, ``give_back`` undoes them: a gang is
    placed whole or not at all. Per-node free and the pool's total free are kept as
    plain ``dict[str, int]`` because this is the innermost loop of the cycle.
    """

    __slots__ = ("_accepting", "_index", "_members", "_scope", "_start", "allocatable", "free",
                 "levels", "memo", "names", "nodes", "total")

    def __init__(self, nodes: Iterable[NodeCapacity], levels: Sequence[str] = ()) -> None:
        # Name order, but nodes whose GPUs are in doubt (PREFER_NOT) last: first-fit
        # then uses them only when the healthy ones are full.
        usable = [n for n in nodes if n.usable]
        if NodeHealth.PREFER_NOT in map(_HEALTH, usable):
            usable.sort(key=_DOUBTFUL_LAST)
        else:
            usable.sort(key=_NAME)
        self.nodes: tuple[NodeCapacity, ...] = tuple(usable)
        self.names: tuple[NodeName, ...] = tuple(map(_NAME, usable))
        # The innermost loops of a cycle read these plain dicts; a cycle over 50
        # clusters of 1,000 nodes builds 50,000 of them, so copies of the nodes' own.
        self.free: list[dict[str, int]] = list(map(dict, map(_ROOM, usable)))
        self.total: dict[str, int] = totals(self.free)
        self.allocatable: dict[str, int] = summed(n.allocatable for n in usable)
        self._index = dict(zip(self.names, range(len(usable)), strict=True))
        self._accepting: dict[tuple[object, ...], tuple[int, ...]] = {}
        # Where first-fit may start for a pod shape: the first accepting node (by
        # position) that had room for one such pod. Room only shrinks between
        # ``give_back`` calls, so no node before it can have room; ``give_back`` resets.
        self._start: dict[tuple[object, ...], int] = {}
        self.levels: tuple[str, ...] = tuple(levels)
        """The cluster's topology levels (``ClusterCapacity.topology``)."""
        self.memo: dict[object, object] = {}
        """Facts derived from the nodes alone (their topology domains), shared by copies
        and views, which have the same nodes."""
        self._members: tuple[int, ...] | None = None
        """A view (``within``): the nodes it may use, in the order to fill them."""
        self._scope: object | None = None

    @classmethod
    def of(cls, cluster: ClusterCapacity) -> NodePool:
        """The pool of ``cluster`` with its unbound pods already placed (a pinned one
        inside its domains)."""
        pool = cls(cluster.nodes, cluster.topology)
        for unbound in cluster.unbound:
            pin = unbound.pin
            target = pool if pin is None else pool.within(
                i for i, node in enumerate(pool.nodes) if pin.holds(node.labels))
            for pod_set in unbound.pod_sets:
                target.take(pod_set, target.fit(pod_set, pod_set.count, partial=True))
        return pool

    @classmethod
    def empty(cls, nodes: Iterable[NodeCapacity], levels: Sequence[str] = ()) -> NodePool:
        """The pool of ``nodes`` with nothing running on them: what could ever fit."""
        return cls((dataclasses.replace(n, requested=EMPTY) for n in nodes), levels)

    def within(self, indices: Iterable[int], *, tightest: str | None = None) -> NodePool:
        """A view of this pool that may use only the nodes at ``indices`` (a topology
        domain, or several): what is fitted and taken on it is charged to this pool, so
        a gang placed inside a rack holds that room for the whole cycle. ``tightest``
        (a resource): fill the nodes with the least of it free first (best fit), which
        keeps whole nodes free for the gangs that need them."""
        view = NodePool.__new__(NodePool)
        view.nodes, view.names, view._index = self.nodes, self.names, self._index
        view.free, view.total, view.allocatable = self.free, self.total, self.allocatable
        view.levels, view.memo = self.levels, self.memo
        members = sorted(set(indices))
        if self._members is not None:  # a view of a view stays inside the first
            inside = set(self._members)
            members = [i for i in members if i in inside]
        if tightest is not None:
            members.sort(key=lambda i: (self.free[i].get(tightest, 0), i))
        view._members = tuple(members)
        view._accepting = {}
        # One start cache for the pool and its views (so a give-back anywhere clears it),
        # keyed by the view: positions differ from view to view.
        view._start, view._scope = self._start, object()
        return view

    def free_total(self) -> dict[str, int]:
        return {k: v for k, v in self.total.items() if v > 0}

    def accepting(self, pod_set: PodSet) -> tuple[int, ...]:
        """Indices of the nodes that may take pods of ``pod_set`` (room aside); cached."""
        key = (pod_set.node_selector, pod_set.tolerations)
        found = self._accepting.get(key)
        if found is None:
            nodes = self.nodes
            indices = range(len(nodes)) if self._members is None else self._members
            selector, tolerations = pod_set.node_selector, pod_set.tolerations
            # (the checks skipped where there is nothing to check: 50 pools of 1,000 nodes
            # ask them for each pod shape, and most nodes are untainted)
            found = tuple(i for i in indices
                          if (not selector or nodes[i].selects(selector))
                          and (not nodes[i].taints
                               or not blocking_taints(nodes[i].taints, tolerations)))
            self._accepting[key] = found
        return found

    def fit(self, pod_set: PodSet, count: int, *, partial: bool = False) -> list[Take]:
        """First-fit ``count`` pods of ``pod_set``; the takes, not yet applied.

        Returns every take needed, or ``[]`` when they do not all fit (unless
        ``partial``, which returns as many as fit).
        """
        requests = tuple((k, v) for k, v in pod_set.requests.items() if v > 0)
        accepting = self.accepting(pod_set)
        shape = (self._scope, pod_set.node_selector, pod_set.tolerations, requests)
        start = self._start.get(shape, 0)
        free = self.free
        takes: list[Take] = []
        left = count
        first_room = len(accepting)
        for position in range(start, len(accepting)):
            index = accepting[position]
            room = free[index]
            n = left
            for name, amount in requests:
                q = room.get(name, 0) // amount
                if q < n:
                    n = q
                    if not n:
                        break
            if n:
                if not takes:
                    first_room = position
                takes.append((index, n))
                left -= n
                if not left:
                    break
        self._start[shape] = first_room
        if left and not partial:
            return []
        return takes

    def copy(self) -> NodePool:
        """An independent pool with the same nodes and free room (to try evictions on)."""
        twin = NodePool.__new__(NodePool)
        twin.nodes, twin.names, twin._index = self.nodes, self.names, self._index
        twin.free = [dict(free) for free in self.free]
        twin.total, twin.allocatable = dict(self.total), self.allocatable
        twin._accepting, twin._start = self._accepting, {}
        twin.levels, twin.memo = self.levels, self.memo
        twin._members, twin._scope = self._members, self._scope
        return twin

    def free_on(self, node: str, resource: str) -> int:
        """Free ``resource`` on ``node`` now (0 for a node not in the pool)."""
        index = self._index.get(NodeName(node))
        return 0 if index is None else self.free[index].get(resource, 0)

    def room_on(self, node: str) -> ResourceList:
        """Everything free on ``node`` now (empty for a node not in the pool)."""
        index = self._index.get(NodeName(node))
        return ResourceList() if index is None else ResourceList(self.free[index])

    def release(self, node: str, requests: ResourceList, sign: int = 1) -> None:
        """Add ``requests`` to ``node``'s free room (``sign=-1``: take them); a node not in
        the pool (not ready, cordoned) is ignored."""
        index = self._index.get(NodeName(node))
        if index is None:
            return
        self._start.clear()
        room = self.free[index]
        total = self.total
        for name, amount in requests.items():
            room[name] = room.get(name, 0) + sign * amount
            total[name] = total.get(name, 0) + sign * amount

    def take(self, pod_set: PodSet, takes: Iterable[Take]) -> None:
        """Apply takes from ``fit``: the pods now occupy their nodes."""
        self._move(pod_set, takes, -1)

    def give_back(self, pod_set: PodSet, takes: Iterable[Take]) -> None:
        """Undo ``take``."""
        self._start.clear()
        self._move(pod_set, takes, 1)

    def _move(self, pod_set: PodSet, takes: Iterable[Take], sign: int) -> None:
        requests = pod_set.requests
        total = self.total
        for index, pods in takes:
            room = self.free[index]
            for name, amount in requests.items():
                delta = sign * amount * pods
                room[name] = room.get(name, 0) + delta
                total[name] = total.get(name, 0) + delta


class Board(Protocol):
    """Every cluster and its pool of free room, side by side by index: what
    ``mcad.core.placement.clusters.ClusterBoard`` is, as the parts that read it
    (topology, closed namespaces) need to know it without importing what builds on them."""

    @property
    def clusters(self) -> Sequence[ClusterCapacity]: ...

    @property
    def pools(self) -> Sequence[NodePool]: ...
