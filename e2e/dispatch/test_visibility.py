"""See the queue on the real test bed: ``mcad queue`` lists waiting AppWrappers in the
dispatcher's order, ``mcad explain`` names every spoke and why it says no (also for an
AppWrapper not yet submitted), both through the hub's API server (the visibility API),
and QuotaSubtree status shows who uses the quota."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.clusters import Cluster, kubectl
from e2e.controller import QST, mcad_output, subtree
from e2e.dispatch.conftest import (
    ControllerProcess,
    condition,
    create_aw,
    get_aw,
    job_appwrapper,
    wait_state,
)
from e2e.waiting import wait_until

TREE = "visibility_e2e"


async def cli(*args: str) -> tuple[int, str, str]:
    return await mcad_output(*args)


async def all_ready(hub: Cluster, namespace: str, names: list[str]) -> None:
    async def ready() -> bool:
        for name in names:
            if condition(await get_aw(hub, namespace, name), "PodsReady").get("status") != "True":
                return False
        return True

    await wait_until(ready, within=90, what=f"{len(names)} AppWrappers to run")


async def test_queue_lists_the_waiting_in_order_and_explain_names_each_spoke(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    as_admin = ("--kubeconfig", str(mcad.hub_kubeconfig))
    fillers = [f"fill-{i}" for i in range(8)]  # both spokes: 4 nodes x 8 GPUs each
    for name in fillers:
        await create_aw(hub, ns, job_appwrapper(name, pods=1, gpus=8, runtime=None))
    await all_ready(hub, ns, fillers)
    for name, priority in (("p1", 1), ("p9", 9), ("p5", 5)):
        await create_aw(hub, ns, job_appwrapper(name, pods=1, gpus=8, runtime=None,
                                                priority=priority))

    async def listed() -> list[dict[str, Any]] | None:
        code, out, err = await cli("queue", "-n", ns, "-o", "json", *as_admin)
        assert code == 0, err
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items if len(items) == 3 else None

    items = await wait_until(listed, within=30, what="three AppWrappers in the queue")
    assert [(i["position"], i["metadata"]["name"], i["priority"]) for i in items] == [
        (1, "p9", 9), (2, "p5", 5), (3, "p1", 1)]
    assert {i["reason"] for i in items} == {"InsufficientCapacity"}
    assert {i["demand"] for i in items} == {"1x8 GPU"}
    code, table, _ = await cli("queue", "-n", ns, *as_admin)
    assert code == 0
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["POSITION", "NAMESPACE", "NAME", "PRIORITY"]
    assert [line.split()[2] for line in lines[1:]] == ["p9", "p5", "p1"]

    code, text, err = await cli("explain", "p1", "-n", ns, *as_admin)
    assert code == 0, err
    assert text.startswith(f"AppWrapper {ns}/p1: InsufficientCapacity, position 3")
    spokes = [line for line in text.splitlines() if line.strip().startswith("spoke-")]
    assert [line.split()[0] for line in spokes] == ["spoke-1", "spoke-2"]
    assert all("no node has 8 free nvidia.com/gpu" in line for line in spokes), text
    assert f"Ahead of it (2): {ns}/p9, {ns}/p5" in text
    # The fillers declare no end and have no past runs: before the estimator's first plan
    # there is no estimate; after it, the estimate rests on the policy's default run time.
    estimate = next(line for line in text.splitlines() if line.startswith("Estimated start:"))
    assert ("no estimate" in estimate or "the policy's default: no past runs to go by"
            in estimate), estimate

    # The same question about one not submitted: nothing is created.
    manifest = tmp_path / "maybe.yaml"
    manifest.write_text(yaml.safe_dump(job_appwrapper("maybe", pods=1, gpus=8)))
    code, text, err = await cli("explain", "-f", str(manifest), "-n", ns, *as_admin)
    assert code == 0, err
    assert text.startswith(f"AppWrapper {ns}/maybe (dry run): InsufficientCapacity, "
                           "position 4")
    listed_now = await hub.custom.list_namespaced_custom_object(
        "workload.codeflare.dev", "v1beta1", ns, "appwrappers")
    assert "maybe" not in [o["metadata"]["name"] for o in listed_now["items"]]


@pytest.fixture
async def quota_tree(clusters: dict[str, Cluster]) -> AsyncIterator[None]:
    hub = clusters["hub"]
    trees = [subtree(TREE, "vis-root", parent=None, children=[("root", 32, True)]),
             subtree(TREE, "vis-teams", parent="root",
                     children=[("team-a", 16, False), ("team-b", 8, True)])]
    for tree in trees:
        await hub.custom.create_namespaced_custom_object(*QST[:2], "kube-system", QST[2], tree)
    yield
    for tree in trees:
        await hub.custom.delete_namespaced_custom_object(*QST[:2], "kube-system", QST[2],
                                                         tree["metadata"]["name"])


async def test_a_quota_subtree_shows_what_its_nodes_use(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        quota_tree: None, kubectl_path: Path) -> None:
    hub = clusters["hub"]
    await create_aw(hub, aw_namespace, job_appwrapper("gang", pods=2, gpus=8, runtime=None,
                                                      labels={TREE: "team-a"}))
    await wait_state(hub, aw_namespace, "gang", "Running")

    async def shown() -> dict[str, Any] | None:
        obj = await hub.custom.get_namespaced_custom_object(*QST[:2], "kube-system", QST[2],
                                                            "vis-teams")
        status = obj.get("status") or {}
        team_a = next((c for c in status.get("children") or [] if c["name"] == "team-a"), {})
        used = (team_a.get("allocated") or {}).get("requests", {}).get("nvidia.com/gpu")
        return status if used == "16" else None

    status = await wait_until(shown, within=30, what="team-a's 16 GPUs in the status")
    assert status["totalAllocation"]["name"] == "root"
    assert status["totalAllocation"]["allocated"]["requests"]["nvidia.com/gpu"] == "16"
    assert status["summary"] == "team-a 16/16 gpu, team-b 0/8 gpu"
    valid = next(c for c in status["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "True"
    table = kubectl(kubectl_path, hub, "get", "quotasubtrees", "-n", "kube-system",
                     "vis-teams")
    assert "team-a 16/16 gpu, team-b 0/8 gpu" in table
