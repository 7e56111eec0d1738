"""Gang health carried out through the gateway seam (``controller/resets.py``): a whole
controller over a scripted hub and spoke.

- a failed pod is Unhealthy with the sentence for the failure grace, then the whole
  gang is reset: its Job deleted, a pause, a new Job made on the same cluster, the
  count in ``status.resettingCount``; the AppWrapper holds its quota meanwhile;
- past the retry limit it is Failed and its Job deleted;
- a terminal exit code fails it at once, with no reset;
- a gang whose pods never come is reset after the admission grace;
- a running pod on a node labelled EVICT resets the gang at once, uncounted;
- a wrapped Job deleted by someone else fails it;
- a reset interrupted by a controller restart is finished by the next one, once;
- a completed AppWrapper with a success TTL is deleted after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcad.config import RunConfig
from mcad.controller.records import AppWrapperRecord
from mcad.core.life import health
from mcad.core.placement.capacity import AppWrapperKey
from mcad.gateway import watch as watch_module
from tests.controller.seam import (
    AW_PATH,
    Hub,
    Running,
    SpokeJobs,
    job_appwrapper,
    run_controller,
    spoke_transport,
    until,
)
from tests.gateway.scripted import Request, listing, reply

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
NS_AW = "/apis/workload.codeflare.dev/v1beta1/namespaces/ns/appwrappers"
FAST = {health.FAILURE_GRACE: "30s", health.RETRY_PAUSE: "10s"}


@pytest.fixture(autouse=True)
def fast_watch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "BACKOFF_MIN_S", 0.01)


def status_of(hub: Hub, name: str = "train") -> dict[str, Any]:
    return dict(hub.get("ns", name).get("status") or {})


def condition(hub: Hub, type_: str, name: str = "train") -> dict[str, Any]:
    for cond in status_of(hub, name).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def events(hub: Hub, reason: str) -> list[Request]:
    return [r for r in hub.transport.sent("POST", "/api/v1/namespaces/ns/events")
            if r.body.get("reason") == reason]


@contextlib.asynccontextmanager
async def gang(annotations: dict[str, str], *, pods: int = 4, gpus: int = 2,
               labels: Any = None, config: RunConfig | None = None
               ) -> AsyncIterator[tuple[Hub, SpokeJobs, Running]]:
    """A controller with a ``pods``-pod Job AppWrapper running, every pod Running."""
    hub, spoke = Hub(), spoke_transport(labels=labels)
    jobs = SpokeJobs(spoke, cascade=True)
    spoke.only("GET", "/apis/batch/v1/jobs", lambda _r: listing(list(jobs.jobs.values())))
    hub.add(job_appwrapper("train", pods=pods, gpus=gpus, annotations=annotations))
    async for run in run_controller(hub, spoke, config):
        await until("the Job created", lambda: "train" in jobs.jobs)
        for i in range(pods):
            jobs.pod("train", i, node=f"n{i % 4}")
        await until("PodsReady", lambda: condition(hub, "PodsReady").get("status") == "True")
        yield hub, jobs, run


async def test_a_failed_pod_waits_the_grace_then_the_whole_gang_is_reset() -> None:
    async with gang(FAST) as (hub, jobs, run):
        first_uid = jobs.jobs["train"]["metadata"]["uid"]
        jobs.pod("train", 2, phase="Failed", ready=False, node="n2", exit_code=137,
                 reason="OOMKilled", kind="MODIFIED")
        await until("Unhealthy", lambda: condition(hub, "Unhealthy").get("status") == "True")
        unhealthy = condition(hub, "Unhealthy")
        assert unhealthy["reason"] == health.FOUND_FAILED_PODS
        assert unhealthy["message"].startswith(
            "pod train-2 failed with exit code 137 (OOMKilled) at 2026-01-01T00:00:10+00:00; "
            "the gang is reset at ")
        assert unhealthy["message"].endswith("unless it recovers (reset 1 of 3)")
        assert "train" in jobs.jobs and jobs.deleted == []  # not within the grace
        await asyncio.sleep(20)
        assert jobs.deleted == []
        await until("the Job deleted", lambda: jobs.deleted == ["train"], within=20)
        assert condition(hub, "Resetting").get("status") == "True"
        assert status_of(hub)["resettingCount"] == 1
        # It keeps its quota and its room while it pauses: still dispatched there.
        rec = run.controller.state.appwrappers[AppWrapperKey("ns/train")]
        assert rec.admitted and status_of(hub)["clusterName"] == "local"
        await until("a new Job", lambda: "train" in jobs.jobs, within=30)
        assert jobs.jobs["train"]["metadata"]["uid"] != first_uid
        resumed = condition(hub, "Resetting")
        assert (resumed["status"], resumed["reason"]) == ("False", "Resumed")
        assert len(events(hub, "Resetting")) == 1
        for i in range(4):
            jobs.pod("train", i, node=f"n{i}")
        await until("ready again", lambda: condition(hub, "PodsReady").get("status") == "True")
        for i in range(4):
            jobs.pod("train", i, phase="Succeeded", ready=False, node=f"n{i}", kind="MODIFIED")
        jobs.set_conditions("train", Complete="True")
        await until("Completed", lambda: status_of(hub).get("state") == "Completed")


async def test_a_pod_that_recovers_within_the_grace_is_left_alone() -> None:
    async with gang(FAST) as (hub, jobs, _):
        jobs.pod("train", 1, phase="Failed", ready=False, exit_code=1, kind="MODIFIED")
        await until("Unhealthy", lambda: condition(hub, "Unhealthy").get("status") == "True")
        jobs.pod("train", 1, phase="Failed", kind="DELETED")  # its controller replaced it
        jobs.pod("train", 5, node="n1")
        await until("Recovered", lambda: condition(hub, "Unhealthy").get("reason")
                    == "Recovered")
        await asyncio.sleep(60)
        assert jobs.deleted == [] and status_of(hub).get("resettingCount", 0) == 0


async def test_past_the_retry_limit_it_is_failed_and_its_job_deleted() -> None:
    async with gang({**FAST, health.RETRY_LIMIT: "0"}) as (hub, jobs, run):
        jobs.pod("train", 0, phase="Failed", ready=False, exit_code=1, kind="MODIFIED")
        await until("Failed", lambda: status_of(hub).get("state") == "Failed", within=60)
        failed = condition(hub, "Failed")
        assert failed["reason"] == health.RETRY_LIMIT_REACHED
        assert failed["message"].endswith("it was already reset 0 times (retryLimit 0)")
        assert jobs.deleted == ["train"] and "train" not in jobs.jobs
        rec = run.controller.state.appwrappers[AppWrapperKey("ns/train")]
        assert not rec.admitted  # quota and room released


async def test_a_terminal_exit_code_fails_it_at_once() -> None:
    async with gang({**FAST, health.TERMINAL_EXIT_CODES: "42"}) as (hub, jobs, _):
        jobs.pod("train", 3, phase="Failed", ready=False, exit_code=42, kind="MODIFIED")
        await until("Failed", lambda: status_of(hub).get("state") == "Failed", within=5)
        assert condition(hub, "Failed")["reason"] == health.TERMINAL_EXIT_CODE
        assert status_of(hub).get("resettingCount", 0) == 0 and events(hub, "Resetting") == []


async def test_pods_that_never_come_are_reset_after_the_admission_grace() -> None:
    hub, spoke = Hub(), spoke_transport()
    jobs = SpokeJobs(spoke, cascade=True)
    spoke.only("GET", "/apis/batch/v1/jobs", lambda _r: listing(list(jobs.jobs.values())))
    hub.add(job_appwrapper("train", pods=2, gpus=2, annotations={
        health.ADMISSION_GRACE: "20s", health.WARMUP_GRACE: "60s",
        health.RETRY_PAUSE: "5s"}))
    async for _ in run_controller(hub, spoke):
        await until("the Job created", lambda: "train" in jobs.jobs)
        jobs.pod("train", 0, phase="Pending", ready=False, node="")
        await asyncio.sleep(15)
        assert jobs.deleted == []
        await until("reset", lambda: jobs.deleted == ["train"], within=10)
        assert condition(hub, "Unhealthy")["reason"] == health.INSUFFICIENT_PODS
        assert condition(hub, "Unhealthy")["message"].startswith(
            "1 of its 2 pods created (Pending or later) 20s after its objects were created "
            "(admissionGracePeriodDuration)")


async def test_a_pod_on_an_evict_node_resets_the_gang_uncounted() -> None:
    labels = {"n0": {}, "n1": {}, "n2": {}, "n3": {}}

    async with gang(FAST, labels=lambda i: labels[f"n{i}"]) as (hub, jobs, run):
        spoke = run.spoke
        node = {"metadata": {"name": "n2", "labels": {health.AUTOPILOT_LABEL: "EVICT"}},
                "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "32",
                                           "memory": "256Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True"}]}}
        spoke.live["/api/v1/nodes"].event("MODIFIED", node)
        await until("reset", lambda: jobs.deleted == ["train"], within=5)
        unhealthy = condition(hub, "Unhealthy")
        assert unhealthy["reason"] == health.NODE_EVICT
        assert unhealthy["message"].startswith("node n2 must be evacuated (GPU health EVICT)")
        assert status_of(hub).get("resettingCount", 0) == 0
        await until("a new Job", lambda: "train" in jobs.jobs, within=30)
        affinity = jobs.jobs["train"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        assert required["nodeSelectorTerms"][0]["matchExpressions"] == [
            {"key": health.AUTOPILOT_LABEL, "operator": "NotIn",
             "values": ["ERR", "EVICT", "TESTING"]}]


async def test_a_job_deleted_by_someone_else_fails_it() -> None:
    async with gang(FAST) as (hub, jobs, _):
        job = jobs.jobs.pop("train")
        jobs._watch("DELETED", job)
        await until("Failed", lambda: status_of(hub).get("state") == "Failed", within=5)
        assert condition(hub, "Failed")["reason"] == health.MISSING_COMPONENT
        assert condition(hub, "Failed")["message"] == (
            "Job/train deleted by someone other than mcad: the workload was taken apart")


async def test_a_reset_interrupted_by_a_restart_finishes_once() -> None:
    hub, spoke = Hub(), spoke_transport()
    jobs = SpokeJobs(spoke, cascade=True)
    spoke.only("GET", "/apis/batch/v1/jobs", lambda _r: listing(list(jobs.jobs.values())))
    hub.add(job_appwrapper("train", pods=2, gpus=2, annotations={
        **FAST, health.FAILURE_GRACE: "0s", health.RETRY_PAUSE: "60s"}))
    async for _ in run_controller(hub, spoke):
        await until("the Job created", lambda: "train" in jobs.jobs)
        jobs.pod("train", 0)
        jobs.pod("train", 1, phase="Failed", ready=False, exit_code=1)
        await until("resetting", lambda: condition(hub, "Resetting").get("status") == "True"
                    and jobs.deleted == ["train"])
    # The controller stops in the pause; a new one (a new leader) carries on.
    assert "train" not in jobs.jobs
    async for _ in run_controller(hub, spoke):
        await until("a new Job", lambda: "train" in jobs.jobs, within=90)
        await asyncio.sleep(30)
    assert jobs.made == 2 and status_of(hub)["resettingCount"] == 1
    assert [r.body.get("reason") for r in hub.transport.sent(
        "POST", "/api/v1/namespaces/ns/events")].count("Resetting") == 1


async def test_a_completed_appwrapper_is_deleted_after_its_success_ttl() -> None:
    async with gang({health.SUCCESS_TTL: "10s"}, pods=1) as (hub, jobs, _):
        deleted: list[str] = []
        hub.transport.on("DELETE", f"{NS_AW}/train",
                         lambda r: deleted.append(r.path) or reply(200, {}))
        jobs.pod("train", 0, phase="Succeeded", ready=False, kind="MODIFIED")
        jobs.set_conditions("train", Complete="True")
        await until("Completed", lambda: status_of(hub).get("state") == "Completed")
        await asyncio.sleep(5)
        assert deleted == []
        await until("deleted", lambda: deleted == [f"{NS_AW}/train"], within=10)


async def test_without_annotations_a_completed_appwrapper_is_kept() -> None:
    """MCAD never deleted a completed AppWrapper: one that sets no annotation has no
    success TTL (faultTolerance.mcadV1Defaults); any annotation brings v1beta2's week."""
    config = RunConfig()
    plain = AppWrapperRecord.of(job_appwrapper("train"))
    assert plain.fault_policy(config).success_ttl is None
    assert plain.fault_policy(config).graces is False
    annotated = AppWrapperRecord.of(job_appwrapper("train", annotations=FAST))
    assert annotated.fault_policy(config).success_ttl == 7 * 86400
    assert annotated.fault_policy(config).graces is True


async def test_a_requeue_during_the_grace_leaves_the_next_dispatch_healthy() -> None:
    """Unhealthy belongs to one run: the spec changes while a failed pod's grace runs
    (a requeue, SpecChanged), and the AppWrapper goes back to the queue with Unhealthy
    False, so its next dispatch is not judged by the last one's trouble."""
    async with gang(FAST) as (hub, jobs, _):
        jobs.pod("train", 2, phase="Failed", ready=False, exit_code=1, kind="MODIFIED")
        await until("Unhealthy", lambda: condition(hub, "Unhealthy").get("status") == "True")
        aw = hub.appwrappers[("ns", "train")]
        aw["spec"]["priority"] = 1
        aw["spec"]["schedulingSpec"]["minAvailable"] = 3  # a change of what it runs
        aw["metadata"]["generation"] += 1
        aw["metadata"]["resourceVersion"] = str(next(hub.versions))
        hub.transport.live[AW_PATH].event("MODIFIED", aw)
        await until("requeued", lambda: condition(hub, "Requeuing").get("reason")
                    == "SpecChanged" and condition(hub, "Requeuing").get("status") == "False")
        assert condition(hub, "Unhealthy")["status"] == "False"
        assert condition(hub, "Unhealthy")["reason"] == "Requeued"
