"""A cluster's topology domains: the tree its node labels make, and the free room in it.

The tree is built from the usable nodes of a ``NodePool`` and a list of levels (node
label keys, broadest first), as Kueue's TAS snapshot builds it: a node sits in the domain
named by its label values along the levels, each domain in the one named by the same
values less the last. A node that lacks a level's label is in no domain of that level or
below (Kueue likewise leaves such nodes out of topology-aware placement).

Which levels a request finds on a cluster (``levels_for``): a cluster that declares
levels (``ClusterCapacity.topology``) offers exactly those; one that declares none offers
the label the request names, as it stands, when any of its nodes carries it (a one-level
topology), so a user can ask for ``example.com/rack`` on a spoke nobody described.

The free room per domain and the fragmentation (free GPUs on nodes that are not wholly
free, which a gang of whole-node pods cannot use) are what the metrics and the
SpokeCluster status show (``summary``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mcad.core.placement.capacity import ClusterCapacity, NodePool
from mcad.core.workload.quantity import format_quantity
from mcad.core.workload.resources import GPU
from mcad.core.workload.topology import HOSTNAME, level_name


@dataclass(frozen=True, slots=True)
class Domain:
    """One domain: its level (``depth`` into the levels), its label values from the top,
    and the indices of its nodes in the pool."""

    depth: int
    path: tuple[str, ...]
    members: tuple[int, ...]

    @property
    def name(self) -> str:
        return "/".join(self.path)


@dataclass(frozen=True)
class DomainTree:
    """Every domain of a pool's nodes along ``levels``."""

    levels: tuple[str, ...]
    by_depth: tuple[tuple[Domain, ...], ...]
    _children: dict[tuple[str, ...], tuple[Domain, ...]]

    def at(self, depth: int) -> tuple[Domain, ...]:
        """The domains of level ``depth``, in path order."""
        return self.by_depth[depth]

    def children(self, domain: Domain) -> tuple[Domain, ...]:
        return self._children.get(domain.path, ())

    def below(self, domain: Domain, depth: int) -> tuple[Domain, ...]:
        """The domains of level ``depth`` (at or below ``domain``'s) inside ``domain``."""
        found = [domain]
        for _ in range(domain.depth, depth):
            found = [child for d in found for child in self.children(d)]
        return tuple(found)


def tree_of(pool: NodePool, levels: tuple[str, ...]) -> DomainTree:
    """The domains of ``pool``'s nodes along ``levels`` (kept in the pool's memo: the
    nodes do not change within a cycle, and copies and views share them)."""
    key = ("topology", levels)
    found = pool.memo.get(key)
    if isinstance(found, DomainTree):
        return found
    members: list[dict[tuple[str, ...], list[int]]] = [{} for _ in levels]
    for index, node in enumerate(pool.nodes):
        path: tuple[str, ...] = ()
        for depth, level in enumerate(levels):
            value = node.labels.get(level)
            if value is None:
                break
            path = (*path, value)
            members[depth].setdefault(path, []).append(index)
    by_depth = tuple(tuple(Domain(depth, path, tuple(nodes))
                           for path, nodes in sorted(found_at.items()))
                     for depth, found_at in enumerate(members))
    children: dict[tuple[str, ...], list[Domain]] = {}
    for domains in by_depth[1:]:
        for domain in domains:
            children.setdefault(domain.path[:-1], []).append(domain)
    tree = DomainTree(levels, by_depth, {k: tuple(v) for k, v in children.items()})
    pool.memo[key] = tree
    return tree


def levels_for(pool: NodePool, level: str, *, cluster: str = "the cluster"
               ) -> tuple[str, ...] | str:
    """The levels ``pool`` offers a request for ``level``, or why it offers none."""
    if pool.levels:
        if level in pool.levels:
            return pool.levels
        return (f"{cluster} has no topology level {level} (its levels: "
                f"{', '.join(pool.levels)})")
    key = ("labelled", level)  # looked for once per cycle: the nodes do not change
    labelled = pool.memo.get(key)
    if labelled is None:
        labelled = pool.memo[key] = any(level in node.labels for node in pool.nodes)
    if labelled:
        return (level,)
    return f"no usable node of {cluster} has the label {level}"


def lowest_placed_depth(levels: Sequence[str]) -> int:
    """The deepest level mcad chooses domains at: the last one, unless that is the node
    itself (``kubernetes.io/hostname``), where the nodes are fitted directly."""
    return len(levels) - 1 - (1 if len(levels) > 1 and levels[-1] == HOSTNAME else 0)


def free_of(pool: NodePool, members: Iterable[int], resource: str | None) -> int:
    """Free ``resource`` on the nodes at ``members`` (0 for no resource)."""
    if resource is None:
        return 0
    free = pool.free
    return sum(free[i].get(resource, 0) for i in members)


# -- what the metrics and the status show -------------------------------------------------

@dataclass(frozen=True, slots=True)
class DomainRoom:
    """Free room of one domain in ``resource``: what is free, and what of it is on nodes
    that are wholly free."""

    level: str
    domain: str
    free: int
    on_free_nodes: int


@dataclass(frozen=True)
class TopologySummary:
    """A cluster's free ``resource`` per domain and its fragmentation."""

    resource: str
    levels: tuple[str, ...]
    free: int
    fragmented: int
    """Free on nodes that are not wholly free: room a whole-node pod cannot use."""
    domains: tuple[DomainRoom, ...]

    def line(self) -> str:
        """One line for ``kubectl get spokeclusters``: free per domain of the lowest
        level above the nodes, then the fragmentation."""
        short = "GPU" if self.resource == GPU else self.resource
        shown = [d for d in self.domains if d.level == self.levels[
            lowest_placed_depth(self.levels)]] if self.levels else []
        per = ", ".join(f"{d.domain} {self._q(d.free)}" for d in shown)
        head = f"free {short} per {level_name(shown[0].level)}: {per}; " if shown else ""
        return (f"{head}{self._q(self.fragmented)} of {self._q(self.free)} free {short} on "
                "partly used nodes")

    def to_status(self) -> dict[str, Any]:
        """As the SpokeCluster's ``status.topology`` says it (as QuotaSubtrees say their
        usage: the numbers, and one line for ``kubectl get``)."""
        return {"levels": list(self.levels), "free": self._q(self.free),
                "fragmented": self._q(self.fragmented),
                "domains": [{"level": d.level, "domain": d.domain, "free": self._q(d.free),
                             "onFreeNodes": self._q(d.on_free_nodes)} for d in self.domains],
                "summary": self.line()}

    def _q(self, value: int) -> str:
        return format_quantity(value, resource=self.resource)


def summary(cluster: ClusterCapacity, resource: str = GPU) -> TopologySummary:
    """Free ``resource`` per domain of every declared level but the nodes themselves, and
    how much of the free room is on partly used nodes (unbound pods placed first)."""
    pool = NodePool.of(cluster)
    whole = [i for i, node in enumerate(pool.nodes)
             if node.allocatable.get(resource, 0) > 0
             and pool.free[i].get(resource, 0) >= node.allocatable.get(resource, 0)]
    free = free_of(pool, range(len(pool.nodes)), resource)
    on_whole = free_of(pool, whole, resource)
    rooms: list[DomainRoom] = []
    levels = tuple(cluster.topology)
    if levels:
        tree = tree_of(pool, levels)
        whole_set = set(whole)
        for depth in range(lowest_placed_depth(levels) + 1):
            for domain in tree.at(depth):
                rooms.append(DomainRoom(levels[depth], domain.name,
                                        free_of(pool, domain.members, resource),
                                        free_of(pool, (i for i in domain.members
                                                       if i in whole_set), resource)))
    return TopologySummary(resource, levels, free, free - on_whole, tuple(rooms))
