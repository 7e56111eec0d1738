"""Dispatch, completion, capacity and cleanup, on the real hub and two spokes."""

from __future__ import annotations

import asyncio
from typing import Any

from e2e.clusters import Cluster
from e2e.dispatch.conftest import (
    AW,
    ControllerProcess,
    create_aw,
    get_aw,
    job_appwrapper,
    wait_state,
)
from e2e.waiting import wait_until

SPOKES = ("spoke-1", "spoke-2")


async def jobs_named(clusters: dict[str, Cluster], namespace: str, name: str
                     ) -> dict[str, Any]:
    """The Job ``name`` on each spoke that has it."""
    found = {}
    for spoke in SPOKES:
        jobs = (await clusters[spoke].batch.list_namespaced_job(namespace)).items
        for job in jobs:
            if job.metadata.name == name:
                found[spoke] = job
    return found


async def test_mcad_v1_appwrapper_wrapping_a_job_is_dispatched_and_completes(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str
) -> None:
    hub = clusters["hub"]
    await create_aw(hub, aw_namespace, job_appwrapper("train", pods=4, gpus=2, runtime="2s"))
    done = await wait_state(hub, aw_namespace, "train", "Completed", within=60)
    status = done["status"]
    assert status["clusterName"] in SPOKES
    assert (status["Succeeded"], status["running"], status["failed"]) == (4, 0, 0)
    jobs = await jobs_named(clusters, aw_namespace, "train")
    assert list(jobs) == [status["clusterName"]]
    job = jobs[status["clusterName"]]
    assert job.metadata.labels["appwrapper.mcad.ibm.com"] == "train"
    assert job.spec.template.metadata.labels["appwrapper.mcad.ibm.com"] == "train"
    events = await hub.core.list_namespaced_event(aw_namespace)
    assert {"Dispatched", "Completed"} <= {e.reason for e in events.items}


async def test_capacity_is_respected_across_two_spokes_under_a_burst(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str
) -> None:
    hub = clusters["hub"]
    names = [f"burst-{i}" for i in range(14)]  # 14 x 8 GPUs against 64 GPUs: waves
    await asyncio.gather(*(create_aw(hub, aw_namespace, job_appwrapper(
        n, pods=1, gpus=8, runtime="3s")) for n in names))
    unschedulable: list[str] = []

    async def all_completed() -> bool:
        for spoke in SPOKES:
            pods = (await clusters[spoke].core.list_namespaced_pod(aw_namespace)).items
            unschedulable.extend(p.metadata.name for p in pods for c in
                                 p.status.conditions or [] if c.reason == "Unschedulable")
        states = [(await get_aw(hub, aw_namespace, n)).get("status", {}).get("state")
                  for n in names]
        return all(s == "Completed" for s in states)

    await wait_until(all_completed, within=120, what="all 14 AppWrappers to complete",
                     interval=0.5)
    assert unschedulable == [], "a pod waited on a spoke for lack of GPUs"
    used = {(await get_aw(hub, aw_namespace, n))["status"]["clusterName"] for n in names}
    assert used == set(SPOKES)


async def test_split_free_gpus_do_not_take_a_one_pod_8_gpu_gang(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str
) -> None:
    hub = clusters["hub"]
    # Half of every node's GPUs taken: 4 pods x 4 GPUs per spoke, spread one per node.
    for spoke in SPOKES:
        filler = job_appwrapper(f"filler-{spoke}", pods=4, gpus=4, runtime=None,
                                scheduling={"clusterScheduling": {"clusters": [{"name": spoke}]}})
        await create_aw(hub, aw_namespace, filler)
    for spoke in SPOKES:
        await wait_state(hub, aw_namespace, f"filler-{spoke}", "Running")

        async def spread(spoke: str = spoke) -> bool:
            pods = (await clusters[spoke].core.list_namespaced_pod(aw_namespace)).items
            nodes = {p.spec.node_name for p in pods if p.status.phase == "Running"}
            return len(nodes) == 4

        await wait_until(spread, within=60, what=f"filler pods on 4 nodes of {spoke}")
    await create_aw(hub, aw_namespace, job_appwrapper("big", pods=1, gpus=8, runtime=None))
    await create_aw(hub, aw_namespace, job_appwrapper("small", pods=1, gpus=4, runtime=None))
    await wait_state(hub, aw_namespace, "small", "Running")

    async def big_pending() -> dict[str, Any] | None:
        obj = await get_aw(hub, aw_namespace, "big")
        queued = [c for c in obj.get("status", {}).get("conditions", [])
                  if c["type"] == "Queued" and c["status"] == "True"]
        return obj if queued and queued[0]["reason"] == "InsufficientCapacity" else None

    big = await wait_until(big_pending, within=30, what="big pending for capacity")
    assert big["status"]["state"] == "Pending" and not big["status"].get("clusterName")
    assert "nvidia.com/gpu" in big["status"]["message"]
    assert await jobs_named(clusters, aw_namespace, "big") == {}
    # Freeing one spoke's nodes lets the gang in.
    await hub.custom.delete_namespaced_custom_object(*AW[:2], aw_namespace, AW[2],
                                                     "filler-spoke-1")
    running = await wait_state(hub, aw_namespace, "big", "Running", within=60)
    assert running["status"]["clusterName"] == "spoke-1"


async def test_deleting_an_appwrapper_removes_everything_from_the_spoke(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str
) -> None:
    hub = clusters["hub"]
    await create_aw(hub, aw_namespace, job_appwrapper("doomed", pods=2, gpus=1, runtime=None))
    running = await wait_state(hub, aw_namespace, "doomed", "Running")
    spoke = clusters[running["status"]["clusterName"]]

    async def pods_running() -> bool:
        pods = (await spoke.core.list_namespaced_pod(aw_namespace)).items
        return len([p for p in pods if p.status.phase == "Running"]) == 2

    await wait_until(pods_running, within=30, what="the 2 pods to run")
    await hub.custom.delete_namespaced_custom_object(*AW[:2], aw_namespace, AW[2], "doomed")

    async def all_gone() -> bool:
        listed = await hub.custom.list_namespaced_custom_object(*AW[:2], aw_namespace, AW[2])
        jobs = (await spoke.batch.list_namespaced_job(aw_namespace)).items
        pods = (await spoke.core.list_namespaced_pod(aw_namespace)).items
        return not listed["items"] and not jobs and not pods

    await wait_until(all_gone, within=60, what="the AppWrapper, its Job and pods to be gone")


async def test_controller_killed_mid_burst_leaves_no_duplicate_and_everything_completes(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str
) -> None:
    hub = clusters["hub"]
    names = [f"restart-{i}" for i in range(12)]
    for n in names:
        await create_aw(hub, aw_namespace, job_appwrapper(n, pods=2, gpus=4, runtime="3s"))

    async def some_dispatched() -> bool:
        states = [(await get_aw(hub, aw_namespace, n)).get("status", {}).get("state")
                  for n in names]
        return states.count("Running") >= 3

    await wait_until(some_dispatched, within=60, what="a few dispatches")
    mcad.kill()
    mcad.start()

    async def all_completed() -> bool:
        states = [(await get_aw(hub, aw_namespace, n)).get("status", {}).get("state")
                  for n in names]
        return all(s == "Completed" for s in states)

    await wait_until(all_completed, within=180, what="every AppWrapper to complete",
                     interval=0.5)
    for n in names:
        jobs = await jobs_named(clusters, aw_namespace, n)
        assert len(jobs) == 1, f"{n} has Jobs on {sorted(jobs)}"
        (job,) = jobs.values()
        assert job.status.succeeded == 2
