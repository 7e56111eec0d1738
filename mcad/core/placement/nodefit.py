"""One gang on one pool of nodes, topology aside: a node for every pod, or why not.
Where an AppWrapper's pods would run: a cluster, and a node for every pod.

A gang is dispatched whole or not at all, so the check is node-level: every pod of
every pod set must get a node that selects it (nodeSelector), lets it in (taints
with effect NoSchedule or NoExecute need a toleration; PreferNoSchedule does not)
and has room. First-fit decreasing is enough: biggest pod sets first (extended
resources such as GPUs weigh first, then cpu, then memory), nodes in name order.
When it does not fit, the answer is a sentence naming the pod, the resource and the
best node, e.g. "no node has 8 free nvidia.com/gpu for a pod of GenericItems[0]
Job/train (largest free: 4 on node spoke-1-node-2)".

A gang that asks for a topology is fitted inside its domains by
``mcad.core.placement.domainfit``, which builds on this module;
``mcad.core.placement.gangfit`` chooses between the two.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mcad.core.placement.capacity import ClusterName, NodeName, NodePool, Take, blocking_taints
from mcad.core.workload.demand import Demand, PodSet
from mcad.core.workload.quantity import format_quantity
from mcad.core.workload.resources import ResourceList
from mcad.core.workload.topology import TopologyPin

# -- results -----------------------------------------------------------------------------

GangTakes = tuple[tuple[PodSet, tuple[Take, ...]], ...]


@dataclass(frozen=True)
class Placement:
    """A gang placed on one cluster: how many pods go to each node (name order)."""

    cluster: ClusterName
    pods: tuple[tuple[NodeName, int], ...]
    takes: GangTakes = field(default=(), compare=False, repr=False)
    node_names: tuple[NodeName, ...] = field(default=(), compare=False, repr=False)
    pin: TopologyPin | None = None
    """The topology domains its pods are kept in (a gang that asks for a topology)."""

    def node_requests(self) -> dict[NodeName, ResourceList]:
        """What the placed pods request on each node."""
        out: dict[NodeName, ResourceList] = {}
        for pod_set, takes in self.takes:
            for index, pods in takes:
                name = self.node_names[index]
                out[name] = out.get(name, ResourceList()) + pod_set.requests.scale(pods)
        return out


@dataclass(frozen=True)
class NoFit:
    """Why an AppWrapper fits nowhere it may go, as one sentence."""

    message: str

# -- fitting a gang on one pool -------------------------------------------------------------

_STANDARD = ("cpu", "memory", "ephemeral-storage", "pods")


def resource_weight_order(names: Iterable[str]) -> list[str]:
    """Resources in the order placement weighs them: extended (GPUs...) first."""
    return sorted(names, key=lambda n: (n in _STANDARD,
                                        _STANDARD.index(n) if n in _STANDARD else 0, n))


def biggest_first(pod_sets: Sequence[PodSet]) -> Sequence[PodSet]:
    """Pod sets by decreasing per-pod request, extended resources weighing first."""
    if len(pod_sets) < 2:
        return pod_sets
    order = resource_weight_order({n for s in pod_sets for n in s.requests})
    return sorted(pod_sets, key=lambda s: tuple(-s.requests[n] for n in order))


def fit_pods(pool: NodePool, demand: Demand, *, explain: bool = True) -> GangTakes | str:
    """Place every pod of ``demand`` on ``pool``, anywhere on its nodes, and apply the
    takes; or explain why not. ``demand``'s topology, if it asks for one, is not read:
    ``mcad.core.placement.gangfit.fit_gang`` is the entry point that honours it.

    On failure nothing stays applied and the answer is the sentence (``""`` unless
    ``explain``: the explanation costs more than the attempt).
    """
    done: list[tuple[PodSet, tuple[Take, ...]]] = []
    for pod_set in biggest_first(demand.pod_sets):
        takes = pool.fit(pod_set, pod_set.count, partial=explain)
        placed = sum(n for _, n in takes)
        if placed < pod_set.count:
            message = ""
            if explain:
                pool.take(pod_set, takes)
                message = _why_not(pool, pod_set, placed)
                pool.give_back(pod_set, takes)
            for earlier, earlier_takes in reversed(done):
                pool.give_back(earlier, earlier_takes)
            return message
        pool.take(pod_set, takes)
        done.append((pod_set, tuple(takes)))
    return tuple(done)


def pods_fit(pool: NodePool, demand: Demand) -> bool:
    """Would every pod of ``demand`` fit on ``pool``'s nodes now, topology aside? The
    pool is left as it was (the takes are given back): cheaper than fitting on a copy."""
    return undone(pool, fit_pods(pool, demand, explain=False))


def give_back(pool: NodePool, takes: GangTakes) -> None:
    """Undo ``takes`` on ``pool``, last pod set first."""
    for pod_set, pod_takes in reversed(takes):
        pool.give_back(pod_set, pod_takes)


def undone(pool: NodePool, fitted: GangTakes | str) -> bool:
    """Whether a trial fit succeeded; its takes, if it did, given back: asking "would it
    fit?" this way leaves the pool as it was and costs less than fitting on a copy."""
    if isinstance(fitted, str):
        return False
    give_back(pool, fitted)
    return True


def pod_of(pod_set: PodSet) -> str:
    """How a misfit message names one of ``pod_set``'s pods (``retell`` relies on it)."""
    return f"a pod of {pod_set.source or 'the AppWrapper'}"


def retell(message: str, told: Sequence[PodSet], to: Sequence[PodSet]) -> str:
    """``message``, written about ``told``'s pods, said of ``to``'s pod sets of the same
    shapes (their sources are their own wrapped objects' names).

    The cycle caches a misfit per pod shape; an AppWrapper answered from the cache must
    not be told about another AppWrapper's Job.
    """
    for was, now in zip(told, to, strict=True):
        if was.source != now.source:
            message = message.replace(pod_of(was), pod_of(now))
    return message


def _why_not(pool: NodePool, pod_set: PodSet, placed: int) -> str:
    what = pod_of(pod_set)
    progress = f" ({placed} of its {pod_set.count} pods fit)" if placed else ""
    accepting = pool.accepting(pod_set)
    if not accepting:
        return _why_no_node_accepts(pool, pod_set, what)
    for name in resource_weight_order(pod_set.requests):
        amount = pod_set.requests[name]
        best_index = max(accepting, key=lambda i: (pool.free[i].get(name, 0), -i))
        best = pool.free[best_index].get(name, 0)
        if best < amount:
            return (f"no node has {format_quantity(amount, resource=name)} free {name} "
                    f"for {what} (largest free: {format_quantity(best, resource=name)} on "
                    f"node {pool.names[best_index]}){progress}")
    return (f"no node has room for {what} ({pod_set.requests.describe()}) in every "
            f"resource at once{progress}")


def _why_no_node_accepts(pool: NodePool, pod_set: PodSet, what: str) -> str:
    if not pool.nodes:
        return "no node is ready and schedulable"
    unselected = [n for n in pool.nodes if not n.selects(pod_set.node_selector)]
    selected = [n for n in pool.nodes if n.selects(pod_set.node_selector)]
    tainted = sorted({f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
                      for n in selected
                      for t in blocking_taints(n.taints, pod_set.tolerations)})
    parts = []
    if unselected:
        selector = ", ".join(f"{k}={v}" for k, v in pod_set.node_selector)
        parts.append(f"{len(unselected)} of {len(pool.nodes)} nodes lack nodeSelector "
                     f"labels {selector}")
    if tainted:
        parts.append(f"{len(selected)} {'other ' if unselected else ''}node"
                     f"{'s have' if len(selected) > 1 else ' has'} taints it does not "
                     f"tolerate ({', '.join(tainted)})")
    return f"no node accepts {what}: {'; '.join(parts)}"


def placement_of(cluster: ClusterName, pool: NodePool, takes: GangTakes, *,
                 pin: TopologyPin | None = None) -> Placement:
    """The ``Placement`` of a gang whose ``takes`` are applied on ``pool``."""
    per_node: dict[int, int] = {}
    for _, set_takes in takes:
        for index, pods in set_takes:
            per_node[index] = per_node.get(index, 0) + pods
    return Placement(cluster, tuple((pool.names[i], n) for i, n in sorted(per_node.items())),
                     takes, pool.names, pin)
