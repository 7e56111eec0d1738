"""A spoke whose API server freezes (as behind a partition) for longer than
``spokeLostSeconds``: its gang is requeued (SpokeLost, not counted) and runs on the other
spoke; what it left on the frozen spoke is recorded on the SpokeCluster and deleted once
it answers again, before it gets new work; deleting an AppWrapper there finishes after
``spokeLostSeconds``; and no two copies of a gang ever ran where mcad could see them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from e2e.clusters import Cluster
from e2e.controller import (
    AW,
    SPOKE,
    ControllerProcess,
    condition,
    create_aw,
    get_aw,
    job_appwrapper,
    wait_state,
)
from e2e.faults.conftest import SPOKE_LOST_SECONDS, Copies, controller_with, paused
from e2e.waiting import wait_until


async def spoke_status(hub: Cluster, name: str) -> dict[str, Any]:
    obj = await hub.custom.get_cluster_custom_object(*SPOKE[:2], SPOKE[2], name)
    return dict(obj.get("status") or {})


async def running_pods(cluster: Cluster, namespace: str) -> int:
    pods = (await cluster.core.list_namespaced_pod(namespace)).items
    return sum(1 for p in pods if p.status.phase == "Running" and
               not p.metadata.deletion_timestamp)


async def test_a_frozen_spokes_gang_runs_elsewhere_and_its_leftovers_go_on_return(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        testbed_dir: Path, tmp_path: Path, copies: Copies) -> None:
    hub = clusters["hub"]
    with controller_with(mcad, tmp_path, spokeLostSeconds=SPOKE_LOST_SECONDS):
        body = job_appwrapper("lost", pods=2, gpus=8, runtime=None)
        created = await create_aw(hub, aw_namespace, body)
        running = await wait_state(hub, aw_namespace, "lost", "Running", within=60)
        first = running["status"]["clusterName"]
        other = next(s for s in ("spoke-1", "spoke-2") if s != first)
        copies.start(created["metadata"]["uid"])

        async def pods_up() -> bool:
            return await running_pods(clusters[first], aw_namespace) == 2

        await wait_until(pods_up, within=30, what=f"the gang's 2 pods to run on {first}")
        with paused(testbed_dir, first):
            frozen = time.monotonic()
            moved = await wait_until(
                lambda: _on(hub, aw_namespace, "lost", other), within=SPOKE_LOST_SECONDS + 60,
                what=f"the gang to be dispatched to {other}")
            moved_after = time.monotonic() - frozen
            assert moved_after >= SPOKE_LOST_SECONDS - 1, moved_after
            status = moved["status"]
            assert status["numberOfRequeueings"] == 0  # not the gang's doing
            assert status["previousCluster"] == first
            assert condition(moved, "Requeuing")["reason"] == "SpokeLost"
            ledger = (await spoke_status(hub, first)).get("leftovers") or []
            assert {(e["kind"], e["name"], e["uid"]) for e in ledger} == {
                ("Job", "lost", created["metadata"]["uid"])}
            # A second AppWrapper, deleted while its spoke is frozen, does not hang.
            await wait_until(lambda: _pods_on(clusters[other], aw_namespace, 2), within=60,
                             what=f"the gang's pods on {other}")
        # Back: the leftover Job is deleted, the ledger emptied, the spoke usable again.

        async def collected() -> bool:
            jobs = (await clusters[first].batch.list_namespaced_job(aw_namespace)).items
            ledger = (await spoke_status(hub, first)).get("leftovers") or []
            return not jobs and not ledger

        resumed = time.monotonic()
        await wait_until(collected, within=60, what=f"the leftovers on {first} to be deleted")
        collected_after = time.monotonic() - resumed
        await copies.stop()
        # Two spokes both running the gang: only while the frozen one's copy was a
        # recorded leftover being collected (it could not be stopped while frozen).
        overlap = [t for t, _ in copies.both_running() if t >= resumed]
        assert all(t - resumed <= collected_after + 1 for t in overlap)
        assert not [t for t, _ in copies.both_running() if t < resumed]
        print(f"lost-spoke figures: moved after {moved_after:.1f}s, leftovers collected "
              f"{collected_after:.1f}s after resume, {len(overlap)} overlapping samples")


async def test_deleting_an_appwrapper_on_a_frozen_spoke_finishes_after_spoke_lost_seconds(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        testbed_dir: Path, tmp_path: Path) -> None:
    hub = clusters["hub"]
    with controller_with(mcad, tmp_path, spokeLostSeconds=SPOKE_LOST_SECONDS):
        await create_aw(hub, aw_namespace, job_appwrapper("doomed", pods=1, gpus=1,
                                                          runtime=None))
        running = await wait_state(hub, aw_namespace, "doomed", "Running", within=60)
        spoke = running["status"]["clusterName"]
        await wait_until(lambda: _pods_on(clusters[spoke], aw_namespace, 1), within=30,
                         what="the pod to run")
        with paused(testbed_dir, spoke):
            started = time.monotonic()
            await hub.custom.delete_namespaced_custom_object(*AW[:2], aw_namespace, AW[2],
                                                             "doomed")

            async def gone() -> bool:
                listed = await hub.custom.list_namespaced_custom_object(
                    *AW[:2], aw_namespace, AW[2])
                return not listed["items"]

            await wait_until(gone, within=SPOKE_LOST_SECONDS + 60,
                             what="the deletion to finish without the spoke")
            took = time.monotonic() - started
            assert took >= SPOKE_LOST_SECONDS - 3, took
            ledger = (await spoke_status(hub, spoke)).get("leftovers") or []
            assert [e["name"] for e in ledger] == ["doomed"]

        async def collected() -> bool:
            jobs = (await clusters[spoke].batch.list_namespaced_job(aw_namespace)).items
            return not jobs and not (await spoke_status(hub, spoke)).get("leftovers")

        await wait_until(collected, within=60, what="the leftover Job to be deleted")


async def _on(hub: Cluster, namespace: str, name: str, cluster: str) -> dict[str, Any] | None:
    obj = await get_aw(hub, namespace, name)
    status = obj.get("status") or {}
    return obj if status.get("clusterName") == cluster and status.get("state") == "Running" \
        else None


async def _pods_on(cluster: Cluster, namespace: str, count: int) -> bool:
    return await running_pods(cluster, namespace) >= count
