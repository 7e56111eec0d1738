"""The controller under injected hub failures stays up and recovers: a watch line that
is too long or not JSON relists; 403s and 500s on status writes back off and retry
(no cycle per event against a failing hub); a hub that answers 500 for minutes leaves
the controller running and not ready, then it carries on; a bug in a task restarts the
task, not the process. Each case ends with the AppWrapper dispatched and its Job
created on the spoke exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from mcad.core.cycle.decide import CycleResult, Snapshot
from mcad.gateway import connection as conn_module
from mcad.gateway import watch as watch_module
from mcad.gateway.transport import Reply
from tests.controller.seam import (
    AW_PATH,
    Hub,
    Running,
    job_appwrapper,
    run_controller,
    spoke_transport,
)
from tests.gateway.scripted import Request, reply, status
from tests.metrics.sample import sample

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
JOBS = "/apis/batch/v1/namespaces/ns/jobs"
STATUS = "/apis/workload.codeflare.dev/v1beta1/namespaces/ns/appwrappers/train/status"


@pytest.fixture(autouse=True)
def fast_watch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "BACKOFF_MIN_S", 0.01)


@pytest_asyncio.fixture(loop_scope="function")
async def running() -> AsyncIterator[Running]:
    hub = Hub()
    spoke = spoke_transport()
    spoke.on("POST", JOBS, reply(201, {}))
    async for run in run_controller(hub, spoke):
        yield run


async def dispatched(run: Running, name: str = "train", within: float = 120) -> str:
    """Wait (in loop time) until the AppWrapper is Running on the hub; its cluster."""
    for _ in range(int(within * 10)):
        obj = run.hub.appwrappers.get(("ns", name))
        if obj and (obj.get("status") or {}).get("state") == "Running" and \
                run.spoke.sent("POST", JOBS):
            return str(obj["status"]["clusterName"])
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name} was not dispatched: "
                         f"{(run.hub.appwrappers.get(('ns', name)) or {}).get('status')}")


async def test_an_appwrapper_is_dispatched_and_its_job_created_once(running: Running) -> None:
    running.hub.add(job_appwrapper("train"))
    assert await dispatched(running) == "local"
    await asyncio.sleep(30)
    assert len(running.spoke.sent("POST", JOBS)) == 1
    status_ = running.hub.get("ns", "train")["status"]
    assert status_["clusterName"] == "local"
    assert "workload.codeflare.dev/finalizer" in running.hub.get("ns", "train")["metadata"][
        "finalizers"]


@pytest.mark.parametrize("garbage", [
    pytest.param(b"{this is not json}\n", id="bad-json"),
    pytest.param(b"x" * 3000, id="line-too-long"),
])
async def test_a_garbled_appwrapper_watch_relists_and_carries_on(
        running: Running, garbage: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conn_module, "MAX_LINE_BYTES", 2000)
    await asyncio.sleep(1)
    lists_before = len(running.hub.transport.sent("GET", AW_PATH))
    running.hub.transport.live[AW_PATH].raw(garbage)
    running.hub.add(job_appwrapper("train"))  # seen only by the relist
    assert await dispatched(running) == "local"
    assert len(running.hub.transport.sent("GET", AW_PATH)) > lists_before
    assert not running.task.done()


@pytest.mark.parametrize(("code", "per_attempt"), [(403, 1), (500, 2)])
async def test_a_status_write_that_fails_backs_off_and_is_retried(
        running: Running, code: int, per_attempt: int) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(1)
    running.hub.add(job_appwrapper("train"))
    failures = 3 * per_attempt  # three dispatch attempts fail (500s are retried once each)
    running.hub.transport.first("PATCH", STATUS, *[status(code)] * failures)
    started = loop.time()
    assert await dispatched(running) == "local"
    assert len(running.hub.transport.sent("PATCH", STATUS)) == failures + 1
    # Between dispatch attempts the AppWrapper sat out 1 s, then 2 s, then 4 s.
    assert loop.time() - started >= 1 + 2 + 4
    assert len(running.spoke.sent("POST", JOBS)) == 1
    assert not running.task.done()


async def test_a_hub_that_answers_500_for_minutes_leaves_it_running_then_it_recovers(
) -> None:
    hub = Hub()
    spoke = spoke_transport()
    spoke.on("POST", JOBS, reply(201, {}))
    loop = asyncio.get_running_loop()
    down_until = loop.time() + 180
    (answer_list,) = hub.transport.answers("GET", AW_PATH)

    def etcd_down_for_3_minutes(request: Request) -> Reply:
        if loop.time() < down_until:
            return status(500, "", "etcd is down")
        return answer_list(request)  # type: ignore[operator]

    hub.transport.only("GET", AW_PATH, etcd_down_for_3_minutes)
    async for run in run_controller(hub, spoke):
        await asyncio.sleep(170)
        assert not run.controller.ready()
        assert "appwrappers" in run.controller.not_ready_reason()
        hub.add(job_appwrapper("train"))
        assert await dispatched(run, within=120) == "local"
        assert run.controller.ready()
        assert not run.task.done()


async def test_a_bug_in_the_dispatcher_restarts_it_not_the_process(
        running: Running, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    before = sample("mcad_task_restarts_total", task="dispatcher") or 0
    decide = running.controller.dispatcher._decide
    calls = 0

    def broken_twice(snapshot: Snapshot) -> CycleResult:
        """Two cores fail, wherever they run: in the arrival's cycle, where it arrived
        (``trigger`` logs it and leaves it to the task), or in the task, which then ends
        and is restarted by the supervisor."""
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise RuntimeError("a bug in the cycle")
        return decide(snapshot)

    monkeypatch.setattr(running.controller.dispatcher, "_decide", broken_twice)
    running.hub.add(job_appwrapper("train"))
    assert await dispatched(running) == "local"
    where_it_arrived = sum("outranks the queue failed" in r.getMessage()
                           for r in caplog.records)
    assert where_it_arrived <= 1
    restarts = (sample("mcad_task_restarts_total", task="dispatcher") or 0) - before
    assert restarts == 2 - where_it_arrived
