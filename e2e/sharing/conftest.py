"""Preemption and fair sharing on the real test bed: each test runs its own controller
(``controller_with``) with the preemption policy it is about, and reads what happened
from the AppWrappers' status and Events."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from e2e.clusters import Cluster
from e2e.controller import QST, ControllerProcess, get_aw, subtree
from e2e.waiting import wait_until

TREE = "sharing_e2e"


@pytest.fixture
async def two_teams(clusters: dict[str, Cluster]) -> AsyncIterator[
        Callable[[ControllerProcess], Any]]:
    """root (hard, 16 GPUs) > team-a (8, may borrow), team-b (8, may borrow). Call the
    fixture's value with the running controller to wait until it knows the tree."""
    hub = clusters["hub"]
    trees = [subtree(TREE, "sharing-root", parent=None, children=[("root", 16, True)]),
             subtree(TREE, "sharing-teams", parent="root",
                     children=[("team-a", 8, False), ("team-b", 8, False)])]
    for tree in trees:
        await hub.custom.create_namespaced_custom_object(*QST[:2], "kube-system", QST[2], tree)

    async def loaded(controller: ControllerProcess) -> None:
        async def known() -> bool:
            return controller.sample("mcad_quota_limit", tree=TREE, node="team-b",
                                     resource="nvidia.com/gpu") == 8

        await wait_until(known, within=30, what="the controller to load the quota tree")

    yield loaded
    for tree in trees:
        await hub.custom.delete_namespaced_custom_object(*QST[:2], "kube-system", QST[2],
                                                         tree["metadata"]["name"])


async def status_of(hub: Cluster, namespace: str, names: list[str]) -> dict[str, dict[str, Any]]:
    return {name: (await get_aw(hub, namespace, name)).get("status") or {} for name in names}


async def events_for(hub: Cluster, namespace: str, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the Events about AppWrapper ``name``."""
    listed = await hub.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}")
    return [(e.reason or "", e.message or "") for e in listed.items]
