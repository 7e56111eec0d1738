"""The hub's budget for the status writes that follow a dispatch (``controller/pacing.py``).

The bucket alone (``StatusPace``): a burst of writes goes at once up to its depth, then
one per turn at its rate, first come first served; a turn asked for twice is one turn;
each created run brings a token; a turn nobody takes is forgotten. The work queue: keys
of running AppWrappers have a share of the workers ahead of dispatches, dispatches go
first beyond it, ordinary keys come after both.

Through the gateway seam (a whole controller over a scripted hub whose status writes
take 20 ms, 4 workers):

- a burst of pod events for a hundred running AppWrappers (their pods lose readiness at
  once, as when a node goes) reaches the hub at the bucket's rate, a dispatch decided in
  the middle of it is persisted as fast as on a quiet hub, and every AppWrapper ends with
  its final counts and PodsReady;
- while a backlog of dispatches drains (status writes of 100 ms), the PodsReady writes
  of the AppWrappers already dispatched go inside the drain, not after its last
  dispatch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from mcad.controller import pacing
from mcad.controller.pacing import StatusPace
from mcad.controller.workqueue import WorkQueue
from mcad.gateway import watch as watch_module
from mcad.gateway.transport import Reply
from tests.controller.seam import (
    Hub,
    Running,
    SpokeJobs,
    job_appwrapper,
    run_controller,
    spoke_transport,
    until,
)
from tests.gateway.scripted import Request, listing

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
NS_AW = "/apis/workload.codeflare.dev/v1beta1/namespaces/ns/appwrappers"
WRITE_S = 0.02
"""How long the scripted hub takes to answer a status write (loop time)."""


# -- the bucket ------------------------------------------------------------------------------

async def test_a_burst_goes_at_once_up_to_the_depth_then_one_per_turn_in_order() -> None:
    pace = StatusPace(rate=10, burst=3)
    assert [pace.turn(f"k{i}", 100.0) for i in range(3)] == [0.0, 0.0, 0.0]
    waits = [pace.turn(f"k{i}", 100.0) for i in range(3, 6)]
    assert waits == pytest.approx([0.1, 0.2, 0.3])
    assert pace.turn("k4", 100.05) == pytest.approx(0.15)  # asked again: the same turn
    assert pace.waiting() == 3
    assert pace.turn("k3", 100.1) == 0.0  # its turn came: it writes, the turn is used
    assert pace.turn("k3", 100.1) == pytest.approx(0.3)  # a new write waits its own turn
    assert pace.turn("k4", 100.2) == 0.0


async def test_a_token_short_by_less_than_the_clocks_resolution_is_no_turn() -> None:
    """At epoch seconds a float resolves about 0.2 us: a turn that close is now, and is
    not kept for a key that will never come back for it."""
    pace = StatusPace(rate=20, burst=1)
    now = 1_795_799_666.985705
    assert pace.turn("a", now) == 0.0
    assert pace.turn("b", now + 0.05 - 1e-7) == 0.0
    assert pace.waiting() == 0


async def test_a_created_run_brings_a_token_and_the_depth_caps_them() -> None:
    pace = StatusPace(rate=1, burst=2)
    pace.turn("a", 0.0)
    pace.turn("b", 0.0)
    assert pace.turn("c", 0.0) == pytest.approx(1.0)
    pace.earn(0.0)
    assert pace.turn("d", 0.0) == pytest.approx(1.0)  # after c, not before it
    for _ in range(10):
        pace.earn(50.0)
    assert [pace.turn(k, 50.0) for k in "efg"] == [0.0, 0.0, pytest.approx(1.0)]


async def test_a_turn_nobody_takes_is_forgotten() -> None:
    pace = StatusPace(rate=1, burst=1)
    pace.turn("a", 0.0)
    assert pace.turn("gone", 0.0) == pytest.approx(1.0)
    pace.turn("b", 1.0 + pacing.FORGET_S + 1)
    assert pace.waiting() == 0


# -- the work queue's lines ------------------------------------------------------------------

def drain(queue: WorkQueue[str]) -> list[str]:
    out = []
    while (key := queue._pop()) is not None:
        out.append(key)
    return out


async def test_following_keys_have_their_share_of_the_workers_then_dispatches_go_first(
        ) -> None:
    running = {"f1", "f2", "f3"}
    queue: WorkQueue[str] = WorkQueue("t", following=running.__contains__,
                                      following_workers=2)
    queue.add("o1")
    for key in ("f1", "f2", "f3"):
        queue.add(key)
    for i in range(4):
        queue.add(f"d{i}", urgent=True)
    assert [queue._pop() for _ in range(4)] == ["f1", "f2", "d0", "d1"]
    queue.done("f1")  # a share comes free: the following line first again
    assert drain(queue) == ["f3", "d2", "d3", "o1"]


async def test_an_ordinary_key_moves_up_when_its_appwrapper_runs() -> None:
    running: set[str] = set()
    queue: WorkQueue[str] = WorkQueue("t", following=running.__contains__)
    queue.add("a")
    queue.add("b")
    running.add("b")
    queue.add("b")  # now running: its place in the following line
    queue.add("d", urgent=True)
    assert drain(queue) == ["d", "b", "a"]


# -- through the seam ------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def fast_watch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "BACKOFF_MIN_S", 0.01)


def pods_ready(hub: Hub, name: str) -> dict[str, Any]:
    status = hub.get("ns", name).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "PodsReady"), {})


class Writes:
    """Every status write to the scripted hub, with its moment (loop time); each takes
    ``WRITE_S`` to answer, as a busy API server's would."""

    def __init__(self, hub: Hub, write_s: float) -> None:
        self.hub = hub
        self.write_s = write_s
        self.seen: list[tuple[float, str, dict[str, Any]]] = []

    def slow(self, name: str) -> None:
        path = f"{NS_AW}/{name}/status"
        answer = self.hub.transport.answers("PATCH", path)[0]
        assert callable(answer)

        async def timed(request: Request) -> Reply:
            self.seen.append((asyncio.get_running_loop().time(), name,
                              request.body.get("status") or {}))
            await asyncio.sleep(self.write_s)
            got = answer(request)
            assert isinstance(got, Reply)
            return got

        self.hub.transport.only("PATCH", path, timed)

    def add(self, aw: dict[str, Any]) -> None:
        self.hub.add(aw)
        self.slow(aw["metadata"]["name"])

    def when(self, pick: Callable[[str, dict[str, Any]], bool]) -> list[float]:
        return [t for t, name, status in self.seen if pick(name, status)]


def ready_is(value: str, reason: str | None = None) -> Callable[[str, dict[str, Any]], bool]:
    def pick(_name: str, status: dict[str, Any]) -> bool:
        return any(c["type"] == "PodsReady" and c["status"] == value
                   and (reason is None or c["reason"] == reason)
                   for c in status.get("conditions") or [])
    return pick


def dispatch_of(name: str) -> Callable[[str, dict[str, Any]], bool]:
    return lambda n, status: n == name and bool(status.get("clusterName"))


@contextlib.asynccontextmanager
async def controller(count: int, *, write_s: float = WRITE_S
                     ) -> AsyncIterator[tuple[Hub, SpokeJobs, Writes, Running]]:
    """``count`` one-pod AppWrappers queued on a hub whose status writes take
    ``write_s``; a task gives every Job its pod, Running and Ready, once it exists."""
    hub, spoke = Hub(), spoke_transport(nodes=20, gpus=8)
    jobs = SpokeJobs(spoke)
    spoke.only("GET", "/apis/batch/v1/jobs", lambda _r: listing(list(jobs.jobs.values())))
    writes = Writes(hub, write_s)
    for i in range(count):
        writes.add(job_appwrapper(f"aw-{i:03d}", gpus=1))

    async def start_pods() -> None:
        while True:
            for name in list(jobs.jobs):
                if name not in jobs.pods:
                    jobs.pod(name, 0, node="n0")
            await asyncio.sleep(0.01)

    async for run in run_controller(hub, spoke):
        starter = asyncio.create_task(start_pods())
        try:
            yield hub, jobs, writes, run
        finally:
            starter.cancel()


def at_most_the_budget(times: list[float], start: float, *, rate: float,
                       burst: float) -> list[str]:
    """The writes that came sooner than the bucket allows (none expected)."""
    late = []
    for number, moment in enumerate(sorted(times), start=1):
        allowed = burst + rate * (moment - start) + 1  # +1: the token being refilled
        if number > allowed:
            late.append(f"write {number} at +{moment - start:.3f}s (at most {allowed:.1f})")
    return late


async def test_a_burst_of_pod_events_reaches_the_hub_at_the_bounded_rate() -> None:
    count = 100
    async with controller(count) as (hub, jobs, writes, run):
        names = [f"aw-{i:03d}" for i in range(count)]
        await until("every AppWrapper's pods ready", lambda: all(
            pods_ready(hub, n).get("status") == "True" for n in names), within=60)
        loop = asyncio.get_running_loop()

        # A dispatch on a quiet hub, for comparison.
        await asyncio.sleep(10)  # the bucket full again
        quiet_at = loop.time()
        writes.add(job_appwrapper("quiet", gpus=1))
        await until("quiet dispatched", lambda: writes.when(dispatch_of("quiet")))
        quiet = writes.when(dispatch_of("quiet"))[0] - quiet_at
        await until("quiet ready", lambda: pods_ready(hub, "quiet").get("status") == "True")
        await asyncio.sleep(10)

        # The burst: every pod loses readiness at once; a dispatch is decided meanwhile.
        burst_at = loop.time()
        for name in names:
            jobs.pod(name, 0, ready=False, kind="MODIFIED")
        await asyncio.sleep(0.5)
        busy_at = loop.time()
        writes.add(job_appwrapper("busy", gpus=1))
        await until("busy dispatched", lambda: writes.when(dispatch_of("busy")))
        busy = writes.when(dispatch_of("busy"))[0] - busy_at
        await until("every AppWrapper's PodsReady False", lambda: all(
            pods_ready(hub, n).get("reason") == "PodsNotReady" for n in names), within=60)

        not_ready = writes.when(ready_is("False", "PodsNotReady"))
        assert len(not_ready) == count  # one write each, however it was paced
        assert at_most_the_budget(not_ready, burst_at, rate=pacing.RATE_PER_S,
                                  burst=pacing.BURST + 2) == []  # +2: the two runs made
        spread = max(not_ready) - burst_at
        least = (count - pacing.BURST - 2) / pacing.RATE_PER_S
        assert least * 0.9 <= spread <= least + 1.0  # paced, and nothing starved it
        assert busy <= quiet + WRITE_S  # the dispatch waited for no status write
        assert busy_at + busy < burst_at + spread / 2

        # Nothing lost: the pods come back and every AppWrapper says so, counts and all.
        for name in names:
            jobs.pod(name, 0, kind="MODIFIED")
        await until("every AppWrapper's PodsReady True again", lambda: all(
            pods_ready(hub, n).get("status") == "True" for n in names), within=60)
        for name in names:
            status = hub.get("ns", name)["status"]
            assert (status.get("running"), status.get("pending", 0)) == (1, 0), name
            assert status["state"] == "Running"
        assert run.controller.reconciler.lifecycle.pace.waiting() == 0


async def test_the_writes_that_follow_dispatches_go_inside_the_drain() -> None:
    count = 80
    async with controller(count, write_s=0.1) as (hub, _jobs, writes, _run):
        names = [f"aw-{i:03d}" for i in range(count)]
        await until("every AppWrapper's pods ready", lambda: all(
            pods_ready(hub, n).get("status") == "True" for n in names), within=120)
        dispatched = sorted(t for t, name, status in writes.seen if status.get("clusterName"))
        ready = sorted(writes.when(ready_is("True")))
        assert len(dispatched) == len(ready) == count
        first, last = dispatched[0], dispatched[-1]
        assert last - first > 1.0  # a drain, not an instant
        inside = [t for t in ready if t < last]
        assert len(inside) >= count // 2, (
            f"{len(inside)} of {count} PodsReady writes before the last dispatch")
        assert ready[-1] - last < 1.0  # and none left long after it
