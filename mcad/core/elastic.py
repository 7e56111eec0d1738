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

from mcad.core.capacity import NodeName, NodePool
from mcad.core.demand import Demand
from mcad.core.placement import fit_gang
from mcad.core.preemption import Holder
from mcad.core.resources import ResourceList

ELASTIC_ANNOTATION = "workload.codeflare.dev/elastic"


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
    resizes): a Job's ``parallelism``, a PodGroup's ``minMember`` (never above it)."""
    spec = manifest.get("spec") or {}
    if (api_version, kind) == ("batch/v1", "Job"):
        return {"spec": {"parallelism": pods}}
    if kind == "PodGroup" and api_version.startswith("scheduling.x-k8s.io/"):
        wanted = spec.get("minMember")
        if isinstance(wanted, int) and wanted > pods:
            return {"spec": {"minMember": pods}}
        return None
    return None


def merged(manifest: Mapping[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    """``manifest`` with ``change`` (a merge patch of ``spec`` fields) applied."""
    out = dict(manifest)
    out["spec"] = {**(manifest.get("spec") or {}), **change.get("spec", {})}
    return out
