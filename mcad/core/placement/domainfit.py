"""Placing a gang inside topology domains, and choosing the cluster and the domain together.

The rules (after Kueue's TAS assignment, KEP 2724, in mcad's terms: whole gangs, many
clusters):

1. **Scope.** A gang that asks for level L goes into the *tightest* domain of L where
   the whole gang fits: the one with the least free of the gang's weighed-first resource
   (GPUs), as Kueue's "BestFit" picks the domain with the smallest capacity that still
   holds the pod set, and as Volcano's network-topology bin packing prefers the fullest
   HyperNode. A required gang that fits in no such domain waits, with a sentence that
   names the domain that came closest. A preferred one looks one level up, then the
   next (the tightest domain there), and in the end the whole cluster.
2. **Fewest domains.** Inside its scope a preferred gang takes as few domains of L as
   the free nodes allow: the domains with the most free room first, until the gang fits,
   the last one replaced by the tightest that still completes it (Kueue does the same,
   level by level). Then, level by level down to the lowest level above the nodes, the
   same rule picks the fewest child domains.
3. **Nodes.** Inside the chosen domains the pods are fitted on the fullest nodes first,
   so whole nodes (and, by rule 1, whole racks) stay free for the gangs that need them:
   seed 004's bin packing and consolidation.
4. **Pin.** The gang is pinned (``mcad.core.workload.topology.TopologyPin``) to the domains of
   the lowest declared level its pods use (to the nodes themselves when
   ``kubernetes.io/hostname`` is the last level, as Kueue's TAS assigns nodes), except an
   elastic gang, pinned to whole domains of its level so that it can grow inside them.
5. **Clusters.** Among the clusters it may use, the gang goes where it stays within one
   domain of its level (preferred: the fewest levels up and the fewest domains), in the
   tightest one; then the usual policy's order (``ClusterBoard.ranked``). Neither
   MultiKueue nor Volcano chooses the cluster by topology: mcad sees every spoke's nodes.

Victims for a gang that needs room (``domain_victims``) are found inside one domain of
its level at a time, the cheapest domain winning, so preemption frees a rack rather than
a scattered set of nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from mcad.core.placement.capacity import Board, ClusterCapacity, NodePool
from mcad.core.placement.domains import (
    Domain,
    DomainTree,
    free_of,
    levels_for,
    lowest_placed_depth,
    tree_of,
)
from mcad.core.placement.nodefit import (
    GangTakes,
    NoFit,
    Placement,
    fit_pods,
    give_back,
    placement_of,
    pods_fit,
    resource_weight_order,
    undone,
)
from mcad.core.placement.victims import Holder, capacity_victims, gpus
from mcad.core.workload.demand import Demand
from mcad.core.workload.quantity import format_quantity
from mcad.core.workload.topology import TopologyPin, TopologyRequest, level_name

SHOWN_DOMAINS = 12
"""Domains ``mcad explain`` lists per cluster (the best first)."""


@dataclass(frozen=True, slots=True)
class DomainFit:
    """A gang fitted inside domains of one cluster (its takes are applied)."""

    takes: GangTakes
    pin: TopologyPin | None
    rise: int
    """Levels above the asked one it had to look (0: it fits in one domain of its level)."""
    spread: int
    """Domains of the asked level its pods use."""
    leftover: int
    """Free of its weighed-first resource left in those domains: smaller is tighter."""


def fit_in_domains(pool: NodePool, demand: Demand, *, explain: bool = True,
                   cluster: str = "the cluster") -> DomainFit | str:
    """Fit ``demand`` (which asks for a topology) on ``pool`` by the module's rules and
    apply the takes; or the sentence why not (``""`` unless ``explain``)."""
    request = demand.topology
    assert request is not None
    levels = levels_for(pool, request.level, cluster=cluster)
    if isinstance(levels, str):
        return levels if explain else ""
    depth = levels.index(request.level)
    tree = tree_of(pool, levels)
    plain = replace(demand, topology=None)
    key = _key(demand)
    chosen: list[Domain] | None = None
    rise = 0
    scope = _tightest(pool, tree.at(depth), plain, key)
    if scope is not None:
        chosen = [scope]
    elif request.required:
        return (_why_no_domain(pool, tree, depth, plain, key=key, request=request)
                if explain else "")
    else:
        for up in range(depth - 1, -1, -1):
            parent = _tightest(pool, tree.at(up), plain, key)
            if parent is not None:
                chosen, rise = _fewest(pool, tree.below(parent, depth), plain, key), depth - up
                break
        if chosen is None:
            chosen, rise = _fewest(pool, tree.at(depth), plain, key), depth + 1
    if chosen is None:  # not even all its domains together: nodes outside any are needed
        takes = fit_pods(pool, plain, explain=explain)
        if isinstance(takes, str):
            return takes
        return DomainFit(takes, None, depth + 1, len(tree.at(depth)), 0)
    level = depth
    while level < lowest_placed_depth(levels):
        fewer = _fewest(pool, [c for d in chosen for c in tree.children(d)], plain, key)
        if fewer is None:
            break
        chosen, level = fewer, level + 1
    members = [i for d in chosen for i in d.members]
    takes = fit_pods(pool.within(members, tightest=key), plain, explain=False)
    if isinstance(takes, str):  # fullest-first missed what name order found: name order
        takes = fit_pods(pool.within(members), plain, explain=explain)
        if isinstance(takes, str):
            return takes
    used = sorted({index for _, set_takes in takes for index, _ in set_takes})
    pin_depth = depth if request.grows else len(levels) - 1
    asked = _domains_of(tree, depth, used)
    return DomainFit(takes, _pin(tree, pin_depth, used), rise, len(asked),
                     sum(free_of(pool, d.members, key) for d in asked))


def fit_gang_in_domains(pool: NodePool, demand: Demand, *, explain: bool = True
                        ) -> GangTakes | str:
    """``fit_gang`` for a gang that asks for a topology: the takes alone."""
    fit = fit_in_domains(pool, demand, explain=explain)
    return fit if isinstance(fit, str) else fit.takes


def place_ranked(board: Board, demand: Demand, ranked: Sequence[int], *,
                 avoid: str | None) -> Placement | NoFit:
    """Choose the cluster (of ``ranked``, the policy's order) and the domains together,
    and charge the gang there (rule 5)."""
    best: tuple[tuple[bool, int, int, int, int], int, DomainFit] | None = None
    for rank, i in enumerate(ranked):
        fit = fit_in_domains(board.pools[i], demand, explain=False)
        if isinstance(fit, str):
            continue
        key = (board.clusters[i].name == avoid, fit.rise, fit.spread, fit.leftover, rank)
        if best is None or key < best[0]:
            if best is not None:
                give_back(board.pools[best[1]], best[2].takes)
            best = (key, i, fit)
        else:
            give_back(board.pools[i], fit.takes)
    if best is not None:
        _, index, fit = best
        return placement_of(board.clusters[index].name, board.pools[index], fit.takes,
                            pin=fit.pin)
    reasons = []
    for i in ranked:
        why = fit_in_domains(board.pools[i], demand, cluster=board.clusters[i].name)
        assert isinstance(why, str)
        reasons.append(f"{board.clusters[i].name}: {why}")
    return NoFit("; ".join(reasons))


def candidates_knowing(board: Board, candidates: tuple[int, ...],
                       request: TopologyRequest) -> tuple[int, ...] | str:
    """The candidates that know ``request``'s level (declared, or a label of their
    nodes), or the sentence refusing a level no cluster it may use knows."""
    knowing = []
    reasons = []
    for i in candidates:
        name = board.clusters[i].name
        found = levels_for(board.pools[i], request.level, cluster=name)
        if isinstance(found, str):
            reasons.append(found)
        else:
            knowing.append(i)
    if knowing:
        return tuple(knowing)
    return (f"no cluster it may use knows the topology level {request.level} it asks for "
            f"({request.source}): {'; '.join(reasons)}; name one of their levels")


def domain_victims(demand: Demand, pool: NodePool,
                   holders: Sequence[Holder]) -> list[Holder] | None:
    """The fewest lower-priority AppWrappers to evict so that ``demand``'s gang fits in
    one domain of its level, the cheapest domain (fewest GPUs freed, then fewest
    victims) winning; None when the gang fits already or no domain can be freed."""
    request = demand.topology
    assert request is not None
    levels = levels_for(pool, request.level)
    if isinstance(levels, str) or _fits_in_domains(pool, demand):
        return None
    tree = tree_of(pool, levels)
    plain = replace(demand, topology=None)
    index = {name: i for i, name in enumerate(pool.names)}
    best: tuple[tuple[int, int, int, tuple[str, ...]], list[Holder]] | None = None
    for domain in tree.at(levels.index(request.level)):
        members = set(domain.members)
        inside = [h for h in holders if any(index.get(node) in members for node, _ in h.pods_on)]
        if not inside:
            continue
        found = capacity_victims(plain, pool.within(domain.members), inside)
        if found is None:
            continue
        rank = (gpus(found), len(found), max(v.priority for v in found), domain.path)
        if best is None or rank < best[0]:
            best = (rank, found)
    return None if best is None else best[1]


def pinned_pool(pool: NodePool, pin: TopologyPin | None) -> NodePool:
    """``pool`` as a gang pinned to ``pin`` may use it (its elastic growth stays there)."""
    if pin is None:
        return pool
    return pool.within(i for i, node in enumerate(pool.nodes) if pin.holds(node.labels))


# -- what explain shows ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DomainVerdict:
    """Whether the whole gang fits in one domain now, and why (not)."""

    domain: str
    ok: bool
    detail: str


def domain_verdicts(cluster: ClusterCapacity, demand: Demand) -> tuple[DomainVerdict, ...]:
    """Per domain of the level ``demand`` asks for: does the whole gang fit there now?
    The ones that fit first, then the most free; at most ``SHOWN_DOMAINS`` and a line for
    the rest."""
    request = demand.topology
    if request is None or not cluster.usable:
        return ()
    pool = NodePool.of(cluster)
    levels = levels_for(pool, request.level, cluster=cluster.name)
    if isinstance(levels, str):
        return ()
    plain = replace(demand, topology=None)
    key = _key(demand)
    rows: list[tuple[bool, int, DomainVerdict]] = []
    name = level_name(request.level)
    for domain in tree_of(pool, levels).at(levels.index(request.level)):
        free = free_of(pool, domain.members, key)
        room = f"{_q(free, key)} {key} free" if key else "free"
        takes = fit_pods(pool.within(domain.members), plain)
        if isinstance(takes, str):
            rows.append((False, free, DomainVerdict(f"{name} {domain.name}", False,
                                                    f"{room}: {takes}")))
            continue
        for pod_set, set_takes in takes:
            pool.give_back(pod_set, set_takes)
        rows.append((True, free, DomainVerdict(f"{name} {domain.name}", True,
                                               f"{room}: the whole gang fits")))
    rows.sort(key=lambda r: (not r[0], -r[1], r[2].domain))
    shown = [r[2] for r in rows[:SHOWN_DOMAINS]]
    if len(rows) > SHOWN_DOMAINS:
        rest = rows[SHOWN_DOMAINS:]
        shown.append(DomainVerdict(f"{len(rest)} more {name}s", any(r[0] for r in rest),
                                   f"{sum(1 for r in rest if r[0])} of them fit it"))
    return tuple(shown)


# -- the parts of the rules --------------------------------------------------------------

def _fits_in_domains(pool: NodePool, demand: Demand) -> bool:
    """Would ``demand``'s gang fit in its domains on ``pool`` now? (The pool is left as
    it was.)"""
    fit = fit_in_domains(pool, demand, explain=False)
    return undone(pool, fit if isinstance(fit, str) else fit.takes)


def _key(demand: Demand) -> str | None:
    """The resource tightness is measured in: the weighed-first one it asks for (GPUs)."""
    order = resource_weight_order(n for n, v in demand.total.items() if v > 0)
    return order[0] if order else None


def _holds(pool: NodePool, domains: Sequence[Domain], demand: Demand) -> bool:
    """Could the domains' free room, summed, hold ``demand``? (Before trying nodes.)"""
    members = [i for d in domains for i in d.members]
    return all(free_of(pool, members, name) >= amount
               for name, amount in demand.total.items() if amount > 0)


def _tightest(pool: NodePool, domains: Sequence[Domain], demand: Demand,
              key: str | None) -> Domain | None:
    """The domain with the least free ``key`` where the whole gang fits (rule 1)."""
    fitting = [d for d in domains if _holds(pool, (d,), demand)]
    fitting.sort(key=lambda d: (free_of(pool, d.members, key), d.path))
    for domain in fitting:
        if pods_fit(pool.within(domain.members), demand):
            return domain
    return None


def _fewest(pool: NodePool, domains: Sequence[Domain], demand: Demand,
            key: str | None) -> list[Domain] | None:
    """The fewest ``domains`` that hold the gang together: most free first, the last
    one then the tightest that still completes it (rule 2); None when all of them
    together do not."""
    if not domains:
        return None
    order = sorted(domains, key=lambda d: (-free_of(pool, d.members, key), d.path))
    chosen: list[Domain] = []
    for domain in order:
        chosen.append(domain)
        if _holds(pool, chosen, demand) and \
                pods_fit(pool.within(i for d in chosen for i in d.members), demand):
            break
    else:
        return None
    rest = chosen[:-1]
    for last in sorted(order[len(rest):], key=lambda d: (free_of(pool, d.members, key),
                                                         d.path)):
        trial = [*rest, last]
        if _holds(pool, trial, demand) and \
                pods_fit(pool.within(i for d in trial for i in d.members), demand):
            return trial
    return chosen


def _domains_of(tree: DomainTree, depth: int, nodes: Sequence[int]) -> list[Domain]:
    """The domains of level ``depth`` that hold any of ``nodes``."""
    wanted = set(nodes)
    return [d for d in tree.at(depth) if wanted.intersection(d.members)]


def _pin(tree: DomainTree, depth: int, nodes: Sequence[int]) -> TopologyPin | None:
    """The domains of level ``depth`` its ``nodes`` are in; a level up when some node
    lacks that level's label (a pin must hold every node the gang counts on)."""
    for level in range(depth, -1, -1):
        domains = _domains_of(tree, level, nodes)
        if {i for d in domains for i in d.members}.issuperset(nodes):
            return TopologyPin(tree.levels[:level + 1], tuple(d.path for d in domains))
    return None


def _why_no_domain(pool: NodePool, tree: DomainTree, depth: int, demand: Demand, *,
                   key: str | None, request: TopologyRequest) -> str:
    """The sentence for a required gang no domain holds: which came closest, and why."""
    name = level_name(request.level)
    domains = tree.at(depth)
    if not domains:
        return f"no usable node is in a {name} ({request.level})"
    closest = min(domains, key=lambda d: (-free_of(pool, d.members, key), d.path))
    why = fit_pods(pool.within(closest.members), demand)
    assert isinstance(why, str)
    need = f" ({_q(demand.total[key], key)} {key})" if key else ""
    room = f"{_q(free_of(pool, closest.members, key), key)} {key} free" if key else "room"
    return (f"no {name} holds the whole gang{need}, as its {request.describe()} asks: the "
            f"closest, {name} {closest.name}, has {room}: {why}")


def _q(value: int, resource: str | None) -> str:
    return format_quantity(value, resource=resource or "")
