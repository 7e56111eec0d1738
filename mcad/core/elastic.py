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
from dataclasses import replace
from typing import Any

from mcad.core.capacity import AppWrapperKey, NodeName, NodePool
from mcad.core.deciding import CycleState
from mcad.core.demand import Demand
from mcad.core.placement import Placement, fit_gang
from mcad.core.preemption import Holder
from mcad.core.quota import QuotaAssignment, QuotaForest
from mcad.core.resources import ResourceList
from mcad.core.snapshot import Admitted, AppWrapperEntry, Dispatch, PendingReason, Resize

ELASTIC_ANNOTATION = "workload.codeflare.dev/elastic"
GROW, SHRINK = "Grow", "Shrink"
"""The reasons of ``Resize`` orders."""


def sized(demand: Demand, pods: int) -> Demand:
    """``demand`` (one pod set) at ``pods`` pods, all of which must fit together: an
    elastic AppWrapper's ``minAvailable`` is the size it may shrink to, not a gang
    minimum, so what it runs with is always placed whole (never pods left Pending)."""
    (pod_set,) = demand.pod_sets
    resized = replace(pod_set, count=pods)
    return Demand(pod_sets=(resized,), min_available=pods,
                  total=pod_set.requests.scale(pods), pods=pods, raised=demand.raised)


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


def shrink_plan(demand: Demand, pool: NodePool,
                candidates: Sequence[tuple[Holder, int, int, ResourceList]]
                ) -> dict[str, tuple[int, list[tuple[NodeName, ResourceList]]]] | None:
    """Shrink orders that make ``demand``'s gang fit on ``pool``, or None.

    ``candidates``: (holder, admitted pods, minimum pods, per-pod requests), in the
    order to shrink them. Pods bound beyond a candidate's admitted size are already
    going (an earlier shrink): they are counted as free first. Returns, per key that must
    shrink, (its new size, the pods assumed to go: node and requests).
    """
    trial = pool.copy()
    freed: dict[str, tuple[int, list[tuple[NodeName, ResourceList]]]] = {}
    nodes_of: dict[str, list[NodeName]] = {}
    for holder, admitted, _, per_pod in candidates:
        nodes = pods_on(holder, per_pod)
        for node in nodes[admitted:]:  # already leaving
            trial.release(node, per_pod)
        nodes_of[holder.key] = nodes[:admitted]
    if _fits(trial, demand):
        return {}
    for holder, admitted, minimum, per_pod in candidates:
        nodes = nodes_of[holder.key]
        # Pods on the nodes with the most room go first: they free whole nodes soonest.
        main = "nvidia.com/gpu" if per_pod.get("nvidia.com/gpu") else "cpu"
        nodes.sort(key=lambda node: trial.free_on(node, main))
        size, gone = admitted, []
        while size > minimum and nodes:
            node = nodes.pop()
            trial.release(node, per_pod)
            size -= 1
            gone.append((node, per_pod))
            freed[holder.key] = (size, gone)
            if _fits(trial, demand):
                return freed
    return None


def _fits(pool: NodePool, demand: Demand) -> bool:
    return not isinstance(fit_gang(pool.copy(), demand, explain=False), str)


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


class ElasticSteps(CycleState):
    """The cycle's elastic steps: start small, grow last, shrink before evicting."""

    def start_small(self, entry: AppWrapperEntry, demand: Demand,
                    assignment: QuotaAssignment, candidates: tuple[int, ...]) -> bool:
        """Dispatch an elastic ``entry`` at the largest size down to its minimum that fits
        quota and one cluster now; True when done."""
        minimum = entry.elastic_min
        assert minimum is not None
        quota = self.line.held_quota or self.quota
        for pods in range(demand.pods - 1, minimum - 1, -1):
            trial = sized(demand, pods)
            if quota.fits(assignment, trial.total) is not None:
                continue
            placement = self.board.place(trial, self.line.open(candidates),
                                         policy=self.policy.placement,
                                         avoid=entry.avoid_cluster)
            if isinstance(placement, Placement):
                self.charge(assignment, trial.total)
                self.dispatches.append(Dispatch(entry.key, placement.cluster, placement, pods))
                return True
        return False

    def grow(self) -> None:
        """Admitted elastic AppWrappers below full size take what is left on their own
        cluster and in quota, highest priority first: after every queued AppWrapper was
        decided, so growth never takes room from one that fits, nor from the head of the
        line (its held quota and closed cluster are respected)."""
        growing = [(e, a) for e, a in self.admitted
                   if e.elastic_min is not None and e.full_pods is not None
                   and e.demand is not None and e.demand.pods < e.full_pods
                   and not e.draining and e.key not in self.evicted
                   and e.key not in self.shrinking]
        growing.sort(key=lambda ea: (-ea[0].priority, ea[0].dispatched or self.now, ea[0].key))
        quota = self.line.held_quota or self.quota
        for entry, assignment in growing:
            assert entry.demand is not None and entry.full_pods is not None
            assert isinstance(entry.phase, Admitted)
            index = self.board.index(entry.phase.cluster)
            if index is None or not self.line.open((index,)):
                continue
            for extra in range(entry.full_pods - entry.demand.pods, 0, -1):
                more = sized(entry.demand, extra)
                if quota.fits(assignment, more.total) is not None:
                    continue
                if isinstance(fit_gang(self.board.pools[index], more, explain=False), str):
                    continue
                self.charge(assignment, more.total)
                size = entry.demand.pods + extra
                self.resizes.append(Resize(entry.key, size, GROW,
                                           f"room for {extra} more pod"
                                           f"{'s' if extra > 1 else ''}: grows to {size} of "
                                           f"{entry.full_pods}"))
                break

    def shrink_for(self, entry: AppWrapperEntry, demand: Demand,
                   lower: Sequence[AppWrapperEntry], candidates: tuple[int, ...]) -> bool:
        """Make room for ``entry`` on one cluster by shrinking lower-priority elastic
        AppWrappers there (never below their minimum); True when that is enough (orders
        recorded, room held, ``entry`` pending), False to evict instead."""
        best: tuple[tuple[int, str], int, dict[str, tuple[int, list[tuple[NodeName,
                                                                     ResourceList]]]]] | None
        best = None
        for i in self.line.open(candidates):
            cluster = self.board.clusters[i]
            elastic = sorted(
                (e for e in lower if e.elastic_min is not None and e.demand is not None
                 and isinstance(e.phase, Admitted) and e.phase.cluster == cluster.name),
                key=lambda e: (e.priority, -(e.dispatched or self.now).timestamp(), e.key))
            if not elastic:
                continue
            plan = shrink_plan(demand, self.board.pools[i], [
                (Holder(e.key, e.priority, cluster.name, e.demand.total, e.dispatched,
                        cluster.held_by.get(e.key, ())),
                 e.demand.pods, e.elastic_min or 0, e.demand.pod_sets[0].requests)
                for e in elastic if e.demand is not None])
            if plan is None:
                continue
            gone = sum(len(pods) for _, pods in plan.values())
            if best is None or (gone, cluster.name) < best[0]:
                best = ((gone, cluster.name), i, plan)
        if best is None:
            return False
        _, index, plan = best
        name = self.board.clusters[index].name
        for key, (size, _) in sorted(plan.items()):
            self.shrinking.add(key)
            self.resizes.append(Resize(AppWrapperKey(key), size, SHRINK,
                                       f"shrunk to {size} pods to make room for {entry.key} "
                                       f"(priority {entry.priority}) on cluster {name}"))
        leaving = [Holder(AppWrapperKey(key), 0, name, ResourceList(), None, tuple(pods))
                   for key, (_, pods) in plan.items()]
        self.hold(demand, index, leaving)
        what = ", ".join(f"{key} to {size} pods" for key, (size, _) in sorted(plan.items()))
        self.pend(entry, PendingReason.WAITING_FOR_PREEMPTION,
                  f"waiting for elastic AppWrappers on cluster {name} to shrink: {what}"
                  if plan else f"waiting for elastic AppWrappers on cluster {name} to "
                               "finish shrinking")
        return True

    def shrink_instead(self, assignment: QuotaAssignment, total: ResourceList,
                       victims: Sequence[str], view: QuotaForest
                       ) -> tuple[list[str], dict[str, tuple[int, ResourceList]]] | None:
        """Shrink the elastic ``victims`` (never below their minimum) rather than evict
        them, when that with the others' eviction gives ``assignment`` room for
        ``total``: (whom to evict still, {key: (new size, what it gives back)}), or
        None (evict them all)."""
        admitted = {e.key: (e, a) for e, a in self.admitted}
        elastic = [v for v in victims if (e := admitted[AppWrapperKey(v)][0]).elastic_min
                   is not None and e.demand is not None and e.demand.pods > e.elastic_min
                   and v not in self.shrinking]
        if not elastic:
            return None
        amounts = {c.key: c for c in self.eviction_candidates()}
        trial = view.copy()
        evicted = [v for v in victims if v not in elastic]
        for victim in evicted:
            trial.release(amounts[victim].assignment, amounts[victim].amount)
        sizes: dict[str, tuple[int, ResourceList]] = {}
        for victim in elastic:
            entry, charged = admitted[AppWrapperKey(victim)]
            assert entry.demand is not None and entry.elastic_min is not None
            per_pod = entry.demand.pod_sets[0].requests
            size = entry.demand.pods
            while size > entry.elastic_min:
                trial.release(charged, per_pod)
                size -= 1
                sizes[victim] = (size, per_pod.scale(entry.demand.pods - size))
                if trial.fits(assignment, total) is None:
                    return evicted, sizes
        return None

    def shrink(self, orders: Mapping[str, tuple[int, ResourceList]], view: QuotaForest, *,
               why: str) -> None:
        """Order elastic AppWrappers to shrink, and give back their quota for this cycle."""
        if self.after_evictions is None:
            self.after_evictions = view.copy()
        charges = self.eviction_candidates()
        for charge in charges:
            if charge.key in orders:
                self.after_evictions.release(charge.assignment, orders[charge.key][1])
        self.charges = [c for c in charges if c.key not in orders]
        self.charge_priorities = [c.priority for c in self.charges]
        for key, (size, _) in sorted(orders.items()):
            self.shrinking.add(key)
            self.resizes.append(Resize(AppWrapperKey(key), size, SHRINK,
                                       f"shrunk to {size} pods {why}"))
