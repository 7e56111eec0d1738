"""Elastic AppWrappers: start with the pods there is room for, grow, shrink before eviction.

An AppWrapper annotated ``workload.codeflare.dev/elastic: "true"`` whose pods all come
from one batch/v1 Job may run with fewer pods than the Job asks (its ``parallelism``),
down to ``schedulingSpec.minAvailable``. The rules, applied by the dispatch cycle:

1. **Start small.** Queued, it is decided like any other AppWrapper at its full size;
   only when that is refused for quota or capacity (not for its place in line, not
   while something is held for the head of the line) is it tried at every smaller size
   down to its minimum, largest first, on one cluster, within quota.
2. **Grow last.** After every queued AppWrapper of the cycle has been decided, admitted
   elastic AppWrappers below their full size grow (highest priority first) into what is
   left on *their* cluster and in quota, so growth never takes room from a waiting
   AppWrapper that fits, nor from a head of line that holds room.
3. **Shrink before evicting.** When priority preemption needs room on a cluster, lower-
   priority elastic AppWrappers above their minimum are shrunk first (lowest priority,
   then most recently dispatched, first); victims are evicted only when shrinking all of
   them to their minimum is not enough. Quota preemption (reclaim, or priority within a
   quota node) likewise shrinks the elastic ones among its victims pod by pod until the
   preemptor's quota fits, evicting them only if their minimum is still too much.
   Which pods the Job controller removes is its choice, so the plan assumes the pods
   on the nodes the preemptor can use go first;
   if the Job removes others, the preemptor is still waiting and the next cycle plans
   again from what is really free.

Sizes are whole pods of the one pod shape; quota is charged for the admitted size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mcad.core.cycle.books import BooksView, RunningWork
from mcad.core.cycle.plans import Grow, HoldRoom, LeavingPods, PreemptionPlan, ShrinkOrder
from mcad.core.cycle.snapshot import Admitted, AppWrapperEntry
from mcad.core.placement.capacity import AppWrapperKey, NodeName, NodePool
from mcad.core.placement.clusters import ClusterBoard, PlacementPolicy
from mcad.core.placement.domainfit import pinned_pool
from mcad.core.placement.gangfit import gang_fits
from mcad.core.placement.nodefit import Placement
from mcad.core.placement.victims import Holder
from mcad.core.quota.forest import QuotaAssignment, QuotaForest
from mcad.core.workload.demand import Demand
from mcad.core.workload.resources import GPU, ResourceList

ELASTIC_ANNOTATION = "workload.codeflare.dev/elastic"
GROW, SHRINK = "Grow", "Shrink"
"""The reasons of ``Resize`` orders."""


def sized(demand: Demand, pods: int) -> Demand:
    """``demand`` (one pod set) at ``pods`` pods, all of which must fit together: an
    elastic AppWrapper's ``minAvailable`` is the size it may shrink to, not a gang
    minimum, so what it runs with is always placed whole (never pods left Pending)."""
    (pod_set,) = demand.pod_sets
    resized = replace(pod_set, count=pods)
    # Pinned to whole domains of its level, so that growth has the domain's room.
    topology = None if demand.topology is None else replace(demand.topology, grows=True)
    return Demand(pod_sets=(resized,), min_available=pods,
                  total=pod_set.requests.scale(pods), pods=pods, raised=demand.raised,
                  topology=topology)


def elastic_problem(demand: Demand, kinds: Sequence[tuple[str, str]]) -> str | None:
    """Why an AppWrapper may not be elastic (None: it may)."""
    jobs = [k for k in kinds if k == ("batch/v1", "Job")]
    if len(jobs) != 1 or len(demand.pod_sets) != 1:
        return (f"the annotation {ELASTIC_ANNOTATION} needs exactly one wrapped batch/v1 Job "
                "whose pods are all of one shape (mcad resizes a Job through its "
                "parallelism; other kinds cannot be resized)")
    return None


def pods_on(holder: Holder, per_pod: ResourceList) -> list[NodeName]:
    """The node of each of ``holder``'s pods (pods of one shape ``per_pod``)."""
    out: list[NodeName] = []
    for node, requests in holder.pods_on:
        count = _count(requests, per_pod)
        out.extend([node] * count)
    return out


def _count(requests: ResourceList, per_pod: ResourceList) -> int:
    for name, value in per_pod.items():
        if value:
            return max(0, requests.get(name, 0) // value)
    return 0


@dataclass(frozen=True, slots=True)
class Shrunk:
    """One elastic AppWrapper in a shrink plan: its new size and the pods assumed to go."""

    pods: int
    gone: LeavingPods


@dataclass(frozen=True, slots=True)
class ShrinkPlan:
    """Shrinks that make a gang fit on one cluster.

    ``orders``: who must shrink, to what. ``settling``: elastic AppWrappers whose pods
    beyond their admitted size are still bound (a shrink ordered earlier is under way):
    those pods are counted as leaving; the room they free is part of the plan, so the
    room is held for the gang and they must not grow back into it.
    """

    orders: Mapping[AppWrapperKey, Shrunk]
    settling: Mapping[AppWrapperKey, LeavingPods]


@dataclass(frozen=True, slots=True)
class ShrinkCandidate:
    """An admitted elastic AppWrapper that may shrink, in the order to shrink them."""

    holder: Holder
    admitted: int
    minimum: int
    per_pod: ResourceList


def shrink_plan(demand: Demand, pool: NodePool,
                candidates: Sequence[ShrinkCandidate]) -> ShrinkPlan | None:
    """Shrinks that make ``demand``'s gang fit on ``pool``, or None.

    Pods bound beyond a candidate's admitted size are already going (an earlier shrink):
    they are counted as free first, and named in ``settling``. Pods on the nodes with
    the most room go first: they free whole nodes soonest.
    """
    trial = pool.copy()
    orders: dict[AppWrapperKey, Shrunk] = {}
    settling: dict[AppWrapperKey, LeavingPods] = {}
    nodes_of: dict[str, list[NodeName]] = {}
    for candidate in candidates:
        per_pod = candidate.per_pod
        nodes = pods_on(candidate.holder, per_pod)
        leaving = nodes[candidate.admitted:]
        for node in leaving:
            trial.release(node, per_pod)
        if leaving:
            settling[candidate.holder.key] = tuple((node, per_pod) for node in leaving)
        nodes_of[candidate.holder.key] = nodes[:candidate.admitted]
    if _fits(trial, demand):
        return ShrinkPlan({}, settling)
    for candidate in candidates:
        nodes = nodes_of[candidate.holder.key]
        per_pod = candidate.per_pod
        main = GPU if per_pod.get(GPU) else "cpu"
        nodes.sort(key=lambda node: trial.free_on(node, main))
        size, gone = candidate.admitted, []
        while size > candidate.minimum and nodes:
            node = nodes.pop()
            trial.release(node, per_pod)
            size -= 1
            gone.append((node, per_pod))
            orders[candidate.holder.key] = Shrunk(size, tuple(gone))
            if _fits(trial, demand):
                return ShrinkPlan(orders, settling)
    return None


def _fits(pool: NodePool, demand: Demand) -> bool:
    """Would ``demand``'s gang fit on ``pool`` now? The pool is left as it was."""
    return gang_fits(pool, demand)


def resized_manifest(kind: str, api_version: str, manifest: Mapping[str, Any],
                     pods: int) -> dict[str, Any] | None:
    """The change that runs a wrapped object at ``pods`` pods (None: not one mcad
    resizes): a Job's ``parallelism``; a PodGroup's ``minMember``, lowered to ``pods``
    when it asks for more and back to what the template says when it grows again."""
    spec = manifest.get("spec") or {}
    if (api_version, kind) == ("batch/v1", "Job"):
        return {"spec": {"parallelism": pods}}
    if kind == "PodGroup" and api_version.startswith("scheduling.x-k8s.io/"):
        wanted = spec.get("minMember")
        if isinstance(wanted, int) and not isinstance(wanted, bool):
            return {"spec": {"minMember": min(wanted, pods)}}
        return None
    return None


def merged(manifest: Mapping[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    """``manifest`` with ``change`` (a merge patch of ``spec`` fields) applied."""
    out = dict(manifest)
    out["spec"] = {**(manifest.get("spec") or {}), **change.get("spec", {})}
    return out


@dataclass(frozen=True, slots=True)
class ElasticStart:
    """A queued elastic AppWrapper starts with ``pods`` pods, placed on ``placement``."""

    pods: int
    placement: Placement


def start_small(entry: AppWrapperEntry, demand: Demand, *, quota: QuotaForest,
                assignment: QuotaAssignment, board: ClusterBoard, candidates: tuple[int, ...],
                policy: PlacementPolicy) -> ElasticStart | None:
    """The largest size below its full one, down to its minimum, that fits ``quota``
    and one cluster now (rule 1); None when none does. The board is left as it was."""
    minimum = entry.elastic_min
    assert minimum is not None
    for pods in range(demand.pods - 1, minimum - 1, -1):
        trial = sized(demand, pods)
        if quota.fits(assignment, trial.total) is not None:
            continue
        placement = board.place(trial, candidates, policy=policy, avoid=entry.avoid_cluster)
        if isinstance(placement, Placement):
            board.unplace(placement)
            return ElasticStart(pods, placement)
    return None


def shrinking_now(entry: AppWrapperEntry, pods_on_cluster: Sequence[tuple[NodeName,
                                                                          ResourceList]]
                  ) -> bool:
    """True when more of ``entry``'s pods are bound than its admitted size: a shrink is
    under way, and until those pods are gone the room they free is spoken for."""
    demand = entry.demand
    if demand is None or not demand.pod_sets:
        return False
    per_pod = demand.pod_sets[0].requests
    bound = sum(_count(requests, per_pod) for _, requests in pods_on_cluster)
    return bound > demand.pods


def growers(books: BooksView) -> list[RunningWork]:
    """Admitted elastic AppWrappers that may grow (rule 2), highest priority first, then
    the earliest dispatched: below their full size, not draining, evicted or shrinking,
    and with no shrink under way."""
    out = []
    for work in books.running:
        entry = work.entry
        if (entry.elastic_min is None or entry.full_pods is None or entry.demand is None
                or entry.demand.pods >= entry.full_pods or entry.draining
                or entry.key in books.evicted or entry.key in books.shrinking):
            continue
        index = books.board.index(work.cluster) if work.cluster else None
        if index is not None and shrinking_now(
                entry, books.board.clusters[index].held_by.get(entry.key, ())):
            continue
        out.append(work)
    out.sort(key=lambda w: (-w.entry.priority, w.entry.dispatched or books.now, w.entry.key))
    return out


def growth(work: RunningWork, books: BooksView) -> Grow | None:
    """How much ``work`` grows into what is left on its own cluster and in quota, after
    every queued AppWrapper was decided (so growth never takes room from one that fits,
    nor from the head of the line: its held quota and closed cluster are respected)."""
    entry = work.entry
    assert entry.demand is not None and entry.full_pods is not None
    if work.cluster is None:
        return None
    index = books.board.index(work.cluster)
    if index is None or not books.line.open((index,)):
        return None
    quota = books.line.held_quota or books.quota
    # Inside the domains it is pinned to, where its new pods will be kept.
    pin = entry.phase.pin if isinstance(entry.phase, Admitted) else None
    pool = pinned_pool(books.board.pools[index], pin)
    for extra in range(entry.full_pods - entry.demand.pods, 0, -1):
        more = replace(sized(entry.demand, extra), topology=None)
        if quota.fits(work.assignment, more.total) is not None:
            continue
        if not _fits(pool, more):
            continue
        size = entry.demand.pods + extra
        return Grow(entry.key, index, size, extra,
                    f"room for {extra} more pod{'s' if extra > 1 else ''}: grows to {size} "
                    f"of {entry.full_pods}" + (f" in {pin.describe()}" if pin else ""),
                    pin)
    return None


def shrink_for_capacity(books: BooksView, entry: AppWrapperEntry, demand: Demand,
                        lower: Sequence[AppWrapperEntry], candidates: tuple[int, ...]
                        ) -> PreemptionPlan | None:
    """Room for ``entry`` on one cluster by shrinking lower-priority elastic AppWrappers
    there, never below their minimum (rule 3); None when that is not enough (evict
    instead). Among clusters, the one where the fewest pods go."""
    best: tuple[tuple[int, str], int, ShrinkPlan] | None = None
    for i in books.line.open(candidates):
        cluster = books.board.clusters[i]
        elastic = sorted(
            (e for e in lower if e.elastic_min is not None and e.demand is not None
             and isinstance(e.phase, Admitted) and e.phase.cluster == cluster.name),
            key=lambda e: (e.priority, -(e.dispatched or books.now).timestamp(), e.key))
        if not elastic:
            continue
        plan = shrink_plan(demand, books.board.pools[i], [
            ShrinkCandidate(holder, e.demand.pods, e.elastic_min or 0,
                            e.demand.pod_sets[0].requests)
            for e, holder in zip(elastic, books.holders_on(i, elastic), strict=True)
            if e.demand is not None])
        if plan is None:
            continue
        gone = sum(len(shrunk.gone) for shrunk in plan.orders.values())
        if best is None or (gone, cluster.name) < best[0]:
            best = ((gone, cluster.name), i, plan)
    if best is None:
        return None
    _, index, plan = best
    name = books.board.clusters[index].name
    orders = tuple(
        ShrinkOrder(key, shrunk.pods, ResourceList(),
                    f"shrunk to {shrunk.pods} pods to make room for {entry.key} (priority "
                    f"{entry.priority}) on cluster {name}")
        for key, shrunk in sorted(plan.orders.items()))
    leaving = tuple(Holder(key, 0, name, ResourceList(), None, pods)
                    for key, pods in [*((k, s.gone) for k, s in plan.orders.items()),
                                      *plan.settling.items()])
    what = ", ".join(f"{o.key} to {o.pods} pods" for o in orders)
    return PreemptionPlan(
        entry.key, waiting=(f"waiting for elastic AppWrappers on cluster {name} to shrink: "
                            f"{what}" if orders else
                            f"waiting for elastic AppWrappers on cluster {name} to finish "
                            "shrinking"),
        shrink=orders, settling=tuple(sorted(plan.settling)),
        hold=(HoldRoom(index, leaving),))


@dataclass(frozen=True, slots=True)
class QuotaShrink:
    """Elastic victims shrunk instead of evicted: who is still evicted, and the shrinks."""

    evict: tuple[AppWrapperKey, ...]
    orders: tuple[ShrinkOrder, ...]


def shrink_instead(books: BooksView, assignment: QuotaAssignment, total: ResourceList,
                   victims: Sequence[AppWrapperKey], view: QuotaForest, *, why: str
                   ) -> QuotaShrink | None:
    """Shrink the elastic ``victims`` (never below their minimum) rather than evict them,
    when that with the others' eviction gives ``assignment`` room for ``total`` on
    ``view``; None: evict them all."""
    running = {w.entry.key: w for w in books.running}
    elastic = [v for v in victims
               if (e := running[v].entry).elastic_min is not None and e.demand is not None
               and e.demand.pods > e.elastic_min and v not in books.shrinking]
    if not elastic:
        return None
    amounts = {c.key: c for c in books.eviction_candidates()}
    trial = view.copy()
    evicted = tuple(v for v in victims if v not in elastic)
    for victim in evicted:
        trial.release(amounts[victim].assignment, amounts[victim].amount)
    sizes: dict[AppWrapperKey, tuple[int, ResourceList]] = {}
    for victim in elastic:
        work = running[victim]
        entry = work.entry
        assert entry.demand is not None and entry.elastic_min is not None
        per_pod = entry.demand.pod_sets[0].requests
        size = entry.demand.pods
        while size > entry.elastic_min:
            trial.release(work.assignment, per_pod)
            size -= 1
            sizes[victim] = (size, per_pod.scale(entry.demand.pods - size))
            if trial.fits(assignment, total) is None:
                return QuotaShrink(evicted, tuple(
                    ShrinkOrder(key, pods, gives_back, f"shrunk to {pods} pods {why}")
                    for key, (pods, gives_back) in sorted(sizes.items())))
    return None

