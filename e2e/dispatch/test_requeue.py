"""Requeue on readiness timeout: growth, another cluster, and a limit that fails."""

from __future__ import annotations

from e2e.clusters import Cluster
from e2e.dispatch.conftest import (
    ControllerProcess,
    condition,
    create_aw,
    get_aw,
    job_appwrapper,
    wait_state,
)
from e2e.waiting import wait_until


async def test_requeue_grows_moves_and_its_limit_ends_in_failed(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str
) -> None:
    hub = clusters["hub"]
    requeues_before = mcad.sample("mcad_requeues_total", reason="InsufficientPodsReady") or 0
    body = job_appwrapper("stuck", pods=2, gpus=8, runtime=None,
                          annotations={"mcad.test/never-ready": "true"},
                          requeuing={"timeInSeconds": 3, "growthType": "exponential",
                                     "maxNumRequeuings": 2, "pauseTimeInSeconds": 1})
    await create_aw(hub, aw_namespace, body)
    seen: list[tuple[int, int, str, str]] = []

    async def failed() -> bool:
        status = (await get_aw(hub, aw_namespace, "stuck")).get("status", {})
        row = (status.get("numberOfRequeueings", 0), status.get("requeueingTimeInSeconds", 0),
               status.get("clusterName", ""), status.get("previousCluster", ""))
        if not seen or seen[-1] != row:
            seen.append(row)
        return bool(status.get("state") == "Failed")

    await wait_until(failed, within=90, what="the requeue limit to fail the AppWrapper")
    final = await get_aw(hub, aw_namespace, "stuck")
    status = final["status"]
    assert status["numberOfRequeueings"] == 2
    assert condition(final, "Failed")["reason"] == "RequeueLimitReached"
    # The timeout grew 3 -> 6 -> 12 (exponential), and each retry went elsewhere.
    assert {t for _, t, _, _ in seen} >= {3, 6, 12}
    redispatches = [(cluster, previous) for n, _, cluster, previous in seen if n and cluster]
    assert redispatches and all(c != p for c, p in redispatches)
    after = mcad.sample("mcad_requeues_total", reason="InsufficientPodsReady") or 0
    assert after - requeues_before == 2
    # A failed AppWrapper holds nothing on the spoke.
    spoke = clusters[status["clusterName"]]

    async def nothing_left() -> bool:
        jobs = (await spoke.batch.list_namespaced_job(aw_namespace)).items
        pods = (await spoke.core.list_namespaced_pod(aw_namespace)).items
        return not jobs and not pods

    await wait_until(nothing_left, within=60, what="the failed gang's objects to be deleted")


async def test_a_gang_that_comes_up_in_time_is_not_requeued(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str
) -> None:
    hub = clusters["hub"]
    await create_aw(hub, aw_namespace, job_appwrapper(
        "fine", pods=2, gpus=1, runtime="4s",
        requeuing={"timeInSeconds": 2, "maxNumRequeuings": 1}))
    done = await wait_state(hub, aw_namespace, "fine", "Completed", within=60)
    assert done["status"]["numberOfRequeueings"] == 0
    assert condition(done, "PodsReady")["status"] == "True"


async def test_a_run_past_its_dispatch_duration_limit_fails_and_leaves_nothing(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str
) -> None:
    hub = clusters["hub"]
    body = job_appwrapper("overrun", pods=1, gpus=1, runtime=None,
                          scheduling={"dispatchDuration": {"limit": 4, "expected": 3}})
    await create_aw(hub, aw_namespace, body)
    running = await wait_state(hub, aw_namespace, "overrun", "Running")
    status = running["status"]
    assert status["runDeadline"] > status["expectedEnd"] > status["dispatchTimestamp"]
    failed = await wait_state(hub, aw_namespace, "overrun", "Failed", within=30)
    reason = condition(failed, "Failed")
    assert reason["reason"] == "DispatchDeadlineExceeded"
    assert "dispatchDuration.limit is 4s" in reason["message"]
    assert failed["status"].get("numberOfRequeueings", 0) == 0
    spoke = clusters[failed["status"]["clusterName"]]

    async def nothing_left() -> bool:
        jobs = (await spoke.batch.list_namespaced_job(aw_namespace)).items
        pods = [p for p in (await spoke.core.list_namespaced_pod(aw_namespace)).items
                if not p.metadata.deletion_timestamp]
        return not jobs and not pods

    await wait_until(nothing_left, within=30, what="the overrun's objects to be deleted")
