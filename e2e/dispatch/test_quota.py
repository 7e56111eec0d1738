"""Quota trees on the hub: borrowing, hardLimit, the default node and unknown nodes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.clusters import Cluster
from e2e.controller import subtree
from e2e.dispatch.conftest import (
    QST,
    ControllerProcess,
    create_aw,
    get_aw,
    job_appwrapper,
    wait_state,
)
from e2e.waiting import wait_until

TREE = "quota_e2e"


@pytest.fixture
async def quota_tree(mcad: ControllerProcess, clusters: dict[str, Cluster]
                     ) -> AsyncIterator[None]:
    """root (hard, 24 GPUs) > gold (soft, 8), silver (hard, 4), default (hard, 2)."""
    hub = clusters["hub"]
    trees = [subtree(TREE, "e2e-root", parent=None, children=[("root", 24, True)]),
             subtree(TREE, "e2e-children", parent="root",
                     children=[("gold", 8, False), ("silver", 4, True), ("default", 2, True)])]
    for tree in trees:
        await hub.custom.create_namespaced_custom_object(*QST[:2], "kube-system", QST[2], tree)

    async def known() -> bool:
        return mcad.sample("mcad_quota_limit", tree=TREE, node="silver",
                           resource="nvidia.com/gpu") == 4

    await wait_until(known, within=30, what="the controller to load the quota tree")
    yield
    for tree in trees:
        await hub.custom.delete_namespaced_custom_object(*QST[:2], "kube-system", QST[2],
                                                         tree["metadata"]["name"])


async def queued_reason(hub: Cluster, namespace: str, name: str, reason: str
                        ) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        obj = await get_aw(hub, namespace, name)
        for cond in obj.get("status", {}).get("conditions", []):
            if cond["type"] == "Queued" and cond["status"] == "True" and cond["reason"] == reason:
                return obj
        return None

    return await wait_until(probe, within=30, what=f"{name} pending with {reason}")


async def test_quota_borrowing_hard_limits_default_and_unknown_nodes(
    quota_tree: None, mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str
) -> None:
    hub = clusters["hub"]

    def aw(name: str, gpus: int, node: str | None) -> dict[str, Any]:
        return job_appwrapper(name, pods=1, gpus=gpus, runtime=None,
                              labels={TREE: node} if node else {})

    # gold's own 8, then 8 more borrowed from root (gold is soft): both run.
    await create_aw(hub, aw_namespace, aw("gold-a", 8, "gold"))
    await wait_state(hub, aw_namespace, "gold-a", "Running")
    await create_aw(hub, aw_namespace, aw("gold-b", 8, "gold"))
    await wait_state(hub, aw_namespace, "gold-b", "Running")
    # No label: the default node (hard, 2 GPUs).
    await create_aw(hub, aw_namespace, aw("nolabel", 2, None))
    await wait_state(hub, aw_namespace, "nolabel", "Running")
    await create_aw(hub, aw_namespace, aw("nolabel-more", 1, None))
    more = await queued_reason(hub, aw_namespace, "nolabel-more", "QuotaExceeded")
    assert "node default" in more["status"]["message"]
    # silver is hard at 4: 8 never fits, even with the root's room.
    await create_aw(hub, aw_namespace, aw("silver-a", 8, "silver"))
    silver = await queued_reason(hub, aw_namespace, "silver-a", "QuotaExceeded")
    assert "node silver" in silver["status"]["message"]
    assert "nvidia.com/gpu" in silver["status"]["message"]
    # gold may borrow, but the root (24, with 18 used) is hard.
    await create_aw(hub, aw_namespace, aw("gold-c", 8, "gold"))
    gold_c = await queued_reason(hub, aw_namespace, "gold-c", "QuotaExceeded")
    assert "node root" in gold_c["status"]["message"]
    # A node the tree does not have.
    await create_aw(hub, aw_namespace, aw("lost", 1, "platinum"))
    lost = await queued_reason(hub, aw_namespace, "lost", "QuotaNodeNotFound")
    assert "platinum" in lost["status"]["message"]
    assert mcad.sample("mcad_quota_used", tree=TREE, node="gold",
                       resource="nvidia.com/gpu") == 16
    # Releasing quota lets the waiting gold gang in.
    await hub.custom.delete_namespaced_custom_object(
        "workload.codeflare.dev", "v1beta1", aw_namespace, "appwrappers", "gold-a")
    await wait_state(hub, aw_namespace, "gold-c", "Running", within=60)
