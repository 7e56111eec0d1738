"""A spoke link's caches after a relist: what the new list lacks was deleted while the
watch was down, for nodes, pods and wrapped objects alike (a stale wrapped object's
conditions, e.g. Failed=True, must not outlive it)."""

from __future__ import annotations

from typing import Any

from mcad.controller.spokes import SpokeLink
from mcad.core.wrapping import UID_LABEL
from mcad.gateway import resources as refs
from mcad.gateway.resources import ResourceRef

JOBS = ResourceRef("batch/v1", "Job", "jobs", namespaced=True)


def job(name: str, **conditions: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": {UID_LABEL: "u1"}},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conditions.items()]}}


def pod(uid: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": uid, "namespace": "ns", "uid": uid,
                         "labels": {UID_LABEL: "u1"}},
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]},
            "status": {"phase": "Running"}}


def link() -> tuple[SpokeLink, list[tuple[str, tuple[str, ...], bool]]]:
    changes: list[tuple[str, tuple[str, ...], bool]] = []
    spoke = SpokeLink(name="s", on_change=lambda c, uids, cap: changes.append(
        (c, tuple(uids), cap)), on_health=lambda _c: None)
    return spoke, changes


def test_a_relist_drops_wrapped_objects_deleted_meanwhile() -> None:
    spoke, changes = link()
    handle = spoke.item_handler(JOBS)
    spoke._relist(JOBS, [job("old", Failed="True"), job("kept", Complete="False")], handle)
    assert spoke.item_conditions("Job", "ns", "old") == {"Failed": "True"}
    spoke._relist(JOBS, [job("kept", Complete="True")], handle)
    assert spoke.item_conditions("Job", "ns", "old") is None
    assert spoke.item_conditions("Job", "ns", "kept") == {"Complete": "True"}
    assert ("s", ("u1",), False) in changes


def test_a_relist_drops_pods_deleted_meanwhile_and_frees_their_node() -> None:
    spoke, _ = link()
    spoke._relist(refs.PODS, [pod("a", "n1"), pod("b", "n1")], spoke._on_pod)
    assert spoke.requested["n1"]["nvidia.com/gpu"] == 4 * 10**9
    spoke._relist(refs.PODS, [pod("b", "n1")], spoke._on_pod)
    assert spoke.requested["n1"]["nvidia.com/gpu"] == 2 * 10**9
    assert [p["metadata"]["uid"] for p in spoke.pods_of("u1")] == ["b"]
