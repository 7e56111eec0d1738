"""The controller's decisions through the gateway seam: a whole controller over a
scripted hub and spoke, one case per behaviour. A Conflict on the conditional status
write undoes the assumed dispatch and the next cycle decides again; a watch that breaks
mid-stream relists without a second dispatch; pods drive PodsReady, and a gang that was
ready and lost a pod is not requeued before the requeuing time; the Job's own Complete
completes it; a spec change is applied through a requeue that deletes the old objects;
an eviction order for a run that already ended is void; deletion removes the Job
before the finalizer; a spoke that stops answering for spokeLostSeconds has its
AppWrapper's objects recorded as leftovers and the AppWrapper requeued (not counted)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from mcad.api.appwrapper import FINALIZER
from mcad.config import RunConfig
from mcad.controller.records import EvictionOrder, RunId
from mcad.controller.spoke_link import PROBE_FAILURES, PROBE_PERIOD_S
from mcad.core.placement.capacity import AppWrapperKey
from mcad.gateway import watch as watch_module
from mcad.gateway.connection import ATTEMPTS
from mcad.gateway.transport import Reply, TransportError
from tests.controller.seam import (
    AW_PATH,
    Hub,
    Running,
    SpokeJobs,
    job_appwrapper,
    run_controller,
    spoke_transport,
)
from tests.gateway.scripted import Request, reply, status

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
NS_AW = "/apis/workload.codeflare.dev/v1beta1/namespaces/ns/appwrappers"
STATUS = f"{NS_AW}/train/status"
FINALIZER_PATH = f"{NS_AW}/train"
KEY = AppWrapperKey("ns/train")


@pytest.fixture(autouse=True)
def fast_watch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "BACKOFF_MIN_S", 0.01)


class World:
    """The running controller, its scripted hub and spoke, and the spoke's Jobs."""

    def __init__(self, run: Running, jobs: SpokeJobs) -> None:
        self.run = run
        self.hub = run.hub
        self.jobs = jobs

    def aw(self, name: str = "train") -> dict[str, Any]:
        return self.hub.get("ns", name)

    def status(self, name: str = "train") -> dict[str, Any]:
        return dict(self.aw(name).get("status") or {})

    def condition(self, type_: str, name: str = "train") -> dict[str, Any]:
        for cond in self.status(name).get("conditions") or []:
            if cond["type"] == type_:
                return dict(cond)
        return {}

    async def until(self, what: str, check: Any, within: float = 120) -> None:
        for _ in range(int(within * 10)):
            if check():
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"not {what} after {within}s: {self.status()}")


async def world_with(config: RunConfig | None = None) -> AsyncIterator[World]:
    hub = Hub()
    spoke = spoke_transport()
    jobs = SpokeJobs(spoke)
    async for run in run_controller(hub, spoke, config):
        yield World(run, jobs)


@pytest_asyncio.fixture(loop_scope="function")
async def world() -> AsyncIterator[World]:
    async for w in world_with():
        yield w


async def dispatched(w: World, name: str = "train") -> None:
    await w.until("dispatched", lambda: w.status(name).get("state") == "Running"
                  and name in w.jobs.jobs)


async def test_a_conflict_on_the_status_write_is_decided_again_not_lost(world: World) -> None:
    world.hub.add(job_appwrapper("train"))
    world.hub.transport.first("PATCH", STATUS, status(409, "Conflict"))
    await dispatched(world)
    writes = world.hub.transport.sent("PATCH", STATUS)
    assert len(writes) >= 2
    assert all(w.body["metadata"]["resourceVersion"] for w in writes)  # always conditional
    await asyncio.sleep(10)
    assert list(world.jobs.jobs) == ["train"]


async def test_one_created_with_the_finalizer_costs_its_dispatch_no_finalizer_write(
        world: World) -> None:
    """The mutating webhook puts mcad's finalizer on at creation: the dispatch is then
    one write on the hub (its status), not two in a row. Without it, the controller
    writes the finalizer first (the next test's AppWrapper)."""
    body = job_appwrapper("train")
    body["metadata"]["finalizers"] = [FINALIZER]
    world.hub.add(body)
    await dispatched(world)
    assert world.hub.transport.sent("PATCH", FINALIZER_PATH) == []
    world.hub.add(job_appwrapper("plain"))
    await dispatched(world, "plain")
    (put_on,) = world.hub.transport.sent("PATCH", f"{NS_AW}/plain")
    assert put_on.body["metadata"]["finalizers"] == [FINALIZER]


async def test_a_finalizer_taken_off_a_running_appwrapper_is_put_back(
        world: World) -> None:
    """Its deletion must still wait for the cleanup on the spoke, whoever took it off."""
    body = job_appwrapper("train")
    body["metadata"]["finalizers"] = [FINALIZER]
    world.hub.add(body)
    await dispatched(world)
    aw = world.aw()
    aw["metadata"]["finalizers"] = []
    aw["metadata"]["resourceVersion"] = str(next(world.hub.versions))
    world.hub.transport.live[AW_PATH].event("MODIFIED", aw)
    await world.until("the finalizer back",
                      lambda: world.aw()["metadata"].get("finalizers") == [FINALIZER])
    (put_back,) = world.hub.transport.sent("PATCH", FINALIZER_PATH)
    assert put_back.body["metadata"]["resourceVersion"] == aw["metadata"]["resourceVersion"]


async def test_a_watch_broken_mid_stream_relists_without_a_second_dispatch(
        world: World) -> None:
    world.hub.add(job_appwrapper("train"))
    await dispatched(world)
    lists = len(world.hub.transport.sent("GET", AW_PATH))
    world.hub.transport.live[AW_PATH].raw(b'{"type": "MODIFIED", "obj')  # cut mid-event
    world.hub.transport.live[AW_PATH].fail(TransportError("connection reset by peer"))
    await asyncio.sleep(10)
    assert len(world.hub.transport.sent("GET", AW_PATH)) > lists
    assert len(world.jobs.jobs) == 1 and world.jobs.deleted == []
    assert world.status()["state"] == "Running"


async def test_pods_drive_pods_ready_and_a_lost_pod_gets_the_requeuing_time_again(
        world: World) -> None:
    body = job_appwrapper("train", pods=2, gpus=4)
    body["spec"]["schedulingSpec"]["requeuing"] = {"timeInSeconds": 60}
    world.hub.add(body)
    await dispatched(world)
    world.jobs.pod("train", 0)
    world.jobs.pod("train", 1)
    await world.until("ready", lambda: world.condition("PodsReady").get("status") == "True")
    await asyncio.sleep(600)  # long past the deadline counted from dispatch
    world.jobs.pod("train", 1, ready=False, kind="MODIFIED")
    await world.until("not ready again",
                      lambda: world.condition("PodsReady").get("reason") == "PodsNotReady")
    await asyncio.sleep(45)  # within the requeuing time since the pod was lost
    assert world.condition("Requeuing") == {} and world.status()["state"] == "Running"
    await asyncio.sleep(30)  # now past it: the gang is taken back
    await world.until("requeued", lambda: world.condition("Requeuing").get("reason") ==
                      "InsufficientPodsReady")
    assert "after the gang lost pods" in world.condition("Requeuing")["message"]


async def test_pod_counts_alone_are_written_at_most_every_five_seconds(
        world: World) -> None:
    world.hub.add(job_appwrapper("train", pods=2, gpus=4))
    await dispatched(world)
    writes = len(world.hub.transport.sent("PATCH", STATUS))
    world.jobs.pod("train", 0, phase="Pending", ready=False)
    await asyncio.sleep(2)
    assert len(world.hub.transport.sent("PATCH", STATUS)) == writes  # counts only: later
    await world.until("the count written", lambda: world.status().get("pending") == 1,
                      within=5)
    world.jobs.pod("train", 0, kind="MODIFIED")
    world.jobs.pod("train", 1)
    await world.until("ready", lambda: world.condition("PodsReady").get("status") == "True",
                      within=1)  # a condition that changes is written at once
    assert world.status()["running"] == 2


async def test_the_jobs_own_complete_condition_completes_it(world: World) -> None:
    world.hub.add(job_appwrapper("train"))
    await dispatched(world)
    world.jobs.pod("train", 0, phase="Succeeded", ready=False)
    await asyncio.sleep(5)
    assert world.status()["state"] == "Running"  # pods alone do not say a Job is done
    world.jobs.set_conditions("train", Complete="True")
    await world.until("completed", lambda: world.status()["state"] == "Completed")


async def test_a_spec_change_after_dispatch_is_applied_through_a_requeue(
        world: World) -> None:
    world.hub.add(job_appwrapper("train"))
    await dispatched(world)
    aw = world.aw()
    aw["spec"]["resources"]["GenericItems"][0]["generictemplate"]["metadata"]["name"] = "v2"
    aw["metadata"]["generation"] = 2
    aw["metadata"]["resourceVersion"] = str(next(world.hub.versions))
    world.hub.transport.live[AW_PATH].event("MODIFIED", aw)
    await world.until("running the new spec", lambda: "v2" in world.jobs.jobs)
    assert world.jobs.deleted == ["train"]
    assert world.condition("Requeuing")["reason"] == "SpecChanged"
    assert world.status()["numberOfRequeueings"] == 0
    assert world.status()["componentStatus"] == [{"apiVersion": "batch/v1", "kind": "Job",
                                                  "name": "v2"}]


async def test_an_eviction_order_for_a_run_that_ended_is_void(world: World) -> None:
    world.hub.add(job_appwrapper("train"))
    await dispatched(world)
    rec = world.run.controller.state.appwrappers[KEY]
    rec.orders.eviction = EvictionOrder(RunId("an-earlier-run"), "Preempted", "for a test",
                                        AppWrapperKey("ns/other"))
    world.run.controller.queue.add(KEY)
    world.run.controller.dispatcher.trigger()
    await asyncio.sleep(10)
    assert world.jobs.deleted == [] and world.condition("Requeuing") == {}
    assert rec.orders.eviction is None  # the dispatcher dropped its void order


async def test_a_create_the_spoke_refuses_for_good_fails_with_its_sentence(
        world: World) -> None:
    world.run.spoke.first("POST", "/apis/batch/v1/namespaces/ns/jobs", status(
        422, "Invalid", 'Job.batch "train" is invalid: spec.parallelism: Invalid value: -1'))
    world.hub.add(job_appwrapper("train"))
    await world.until("failed", lambda: world.status().get("state") == "Failed")
    failed = world.condition("Failed")
    assert failed["reason"] == "CreationRefused"
    assert "spec.parallelism: Invalid value: -1" in failed["message"]
    assert len(world.run.spoke.sent("POST", "/apis/batch/v1/namespaces/ns/jobs")) == 1
    await asyncio.sleep(30)  # never retried
    assert len(world.run.spoke.sent("POST", "/apis/batch/v1/namespaces/ns/jobs")) == 1


async def test_a_create_that_fails_for_now_is_retried_and_said_on_dispatched(
        world: World) -> None:
    jobs = "/apis/batch/v1/namespaces/ns/jobs"
    failures = 2 * ATTEMPTS  # the gateway's own retries give up twice
    for _ in range(failures):
        world.run.spoke.first("POST", jobs, status(503, "ServiceUnavailable", "etcd leader lost"))
    world.hub.add(job_appwrapper("train"))
    await world.until("retrying", lambda: world.condition("Dispatched").get("reason")
                      == "Creating")
    assert "retrying" in world.condition("Dispatched")["message"]
    await dispatched(world)
    await world.until("dispatched again", lambda: world.condition("Dispatched").get("reason")
                      == "Dispatched")
    assert len(world.run.spoke.sent("POST", jobs)) == failures + 1
    assert world.status()["state"] == "Running"


async def test_deletion_removes_the_job_then_the_finalizer(world: World) -> None:
    world.hub.add(job_appwrapper("train"))
    await dispatched(world)
    aw = world.aw()
    aw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    aw["metadata"]["resourceVersion"] = str(next(world.hub.versions))
    world.hub.transport.live[AW_PATH].event("MODIFIED", aw)
    await world.until("finalizer removed",
                      lambda: "workload.codeflare.dev/finalizer" not in
                      (world.aw()["metadata"].get("finalizers") or []))
    assert world.jobs.deleted == ["train"]


async def test_deleting_a_completed_appwrapper_removes_its_job_too(world: World) -> None:
    """A completed run holds no quota but its objects stay on its cluster until the
    AppWrapper is deleted: deletion must still find them there."""
    world.hub.add(job_appwrapper("train"))
    await dispatched(world)
    world.jobs.set_conditions("train", Complete="True")
    await world.until("completed", lambda: world.status()["state"] == "Completed")
    aw = world.aw()
    aw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    aw["metadata"]["resourceVersion"] = str(next(world.hub.versions))
    world.hub.transport.live[AW_PATH].event("MODIFIED", aw)
    await world.until("finalizer removed",
                      lambda: "workload.codeflare.dev/finalizer" not in
                      (world.aw()["metadata"].get("finalizers") or []))
    assert world.jobs.deleted == ["train"]


async def test_a_spoke_lost_for_spoke_lost_seconds_records_leftovers_and_requeues() -> None:
    async for w in world_with(RunConfig(spoke_lost_seconds=30)):
        w.hub.add(job_appwrapper("train"))
        await dispatched(w)
        w.run.spoke.only("GET", "/readyz", TransportError("timed out"))
        loop = asyncio.get_running_loop()
        frozen = loop.time()
        def lost(w: World = w) -> bool:
            return w.condition("Requeuing").get("reason") == "SpokeLost"

        await w.until("requeued", lost, within=120)
        assert loop.time() - frozen >= 30
        assert w.status()["numberOfRequeueings"] == 0
        assert w.status()["previousCluster"] == "local"
        ledger = w.hub.spoke_cluster["status"]["leftovers"]
        assert ledger == [{"apiVersion": "batch/v1", "kind": "Job", "namespace": "ns",
                           "name": "train", "uid": "uid-train"}]
        assert w.run.controller.state.links["local"].leftovers == 1


async def test_a_create_a_silent_spoke_never_answers_frees_its_place_once_probes_fail(
        world: World) -> None:
    """A spoke that takes the Job create and says nothing would hold the reconcile's
    place for the request's time-out (30 s, retried for a minute); with the reconcile
    limit at its floor, eight such hold every place. Once the link's probes fail, the
    create is given up at once (not sent again meanwhile), Dispatched says so, and the
    place is free; when the spoke answers again the create is retried and done."""
    jobs = "/apis/batch/v1/namespaces/ns/jobs"
    never = asyncio.Event()

    async def silent(_request: Request) -> Reply:
        await never.wait()
        return reply(201)

    world.run.spoke.first("POST", jobs, silent)
    queue = world.run.controller.queue
    world.hub.add(job_appwrapper("train"))
    await world.until("the create sent", lambda: len(world.run.spoke.sent("POST", jobs)) == 1)
    assert queue.busy() == 1
    loop = asyncio.get_running_loop()
    went_silent = loop.time()
    world.run.spoke.only("GET", "/readyz", TransportError("timed out"))
    await world.until("the place freed", lambda: queue.busy() == 0, within=60)
    assert loop.time() - went_silent <= (PROBE_FAILURES + 1) * PROBE_PERIOD_S + 1
    assert "given up when the cluster was found unreachable" in \
        world.condition("Dispatched")["message"]
    assert world.condition("Dispatched")["reason"] == "Creating"
    await asyncio.sleep(20)
    assert len(world.run.spoke.sent("POST", jobs)) == 1  # nothing sent to a silent spoke
    world.run.spoke.only("GET", "/readyz", reply(200))
    await dispatched(world)
    await world.until("dispatched again", lambda: world.condition("Dispatched").get("reason")
                      == "Dispatched")
    assert len(world.run.spoke.sent("POST", jobs)) == 2
