"""The work queue: a key is queued once, never processed twice at once, re-queued when
changed while processed, delayed to the earliest moment asked for, backed off
exponentially per key after failures (5 ms doubling to 1000 s), and urgent keys go
first. Timers run on looptime's fake loop clock, so nothing here sleeps for real."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from mcad.controller.workqueue import WorkQueue, run_workers
from mcad.gateway.errors import Forbidden

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]


def drain(queue: WorkQueue[str]) -> list[str]:
    out = []
    while (key := queue._pop()) is not None:
        out.append(key)
    return out


async def test_a_key_added_twice_before_it_is_taken_is_queued_once() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    for key in ("a", "b", "a", "a"):
        queue.add(key)
    assert len(queue) == 2
    assert drain(queue) == ["a", "b"]


async def test_urgent_keys_go_first_and_an_ordinary_key_can_be_promoted() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    for key in ("a", "b", "c"):
        queue.add(key)
    queue.add("d", urgent=True)
    queue.add("c", urgent=True)
    assert drain(queue) == ["d", "c", "a", "b"]


async def test_a_higher_ranked_urgent_key_goes_before_an_earlier_backlog() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    for i in range(3):
        queue.add(f"low-{i}", urgent=True, rank=1)
    queue.add("ordinary")
    queue.add("probe", urgent=True, rank=100)
    queue.add("low-2", urgent=True, rank=100)  # already queued: keeps its place
    assert drain(queue) == ["probe", "low-0", "low-1", "low-2", "ordinary"]


async def test_a_rank_asked_for_while_processed_is_kept_for_the_next_turn() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    queue.add("a")
    queue.add("b", urgent=True, rank=5)
    assert await queue.get() == "b"
    queue.add("a")
    key = await queue.get()
    assert key == "a"
    queue.add("a", urgent=True, rank=10)
    queue.add("c", urgent=True, rank=7)
    queue.done("a")
    assert drain(queue) == ["a", "c"]


async def test_a_key_added_while_processed_comes_back_after_done() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("a")
    assert len(queue) == 0  # not while it is being processed
    queue.done("a")
    assert await queue.get() == "a"


async def test_a_key_is_never_processed_by_two_workers_at_once() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    running: set[str] = set()
    overlaps: list[str] = []
    seen = 0

    async def reconcile(key: str) -> None:
        nonlocal seen
        if key in running:
            overlaps.append(key)
        running.add(key)
        seen += 1
        await asyncio.sleep(0.01)
        running.discard(key)

    workers = asyncio.create_task(run_workers(queue, reconcile, workers=4))
    for _ in range(20):
        queue.add("a")
        await asyncio.sleep(0.003)
    await asyncio.sleep(1)
    workers.cancel()
    with pytest.raises(asyncio.CancelledError):
        await workers
    assert overlaps == []
    assert 2 <= seen < 20  # coalesced, and the last change was still seen


async def test_add_after_keeps_only_the_earliest_moment(looptime: float) -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    loop = asyncio.get_running_loop()
    start = loop.time()
    queue.add_after("a", 10)
    queue.add_after("a", 3)
    queue.add_after("a", 7)
    assert await queue.get() == "a"
    assert loop.time() - start == pytest.approx(3, abs=0.05)
    queue.done("a")
    await asyncio.sleep(20)
    assert len(queue) == 0  # the 7 s and 10 s timers were dropped, not queued later


async def test_failures_back_off_exponentially_per_key_until_forgotten() -> None:
    queue: WorkQueue[str] = WorkQueue("t", base_delay=0.005, max_delay=1000)
    delays = [queue.add_rate_limited("a") for _ in range(5)]
    assert delays == [0.005, 0.01, 0.02, 0.04, 0.08]
    assert queue.add_rate_limited("b") == 0.005
    many = [queue.add_rate_limited("a") for _ in range(30)]
    assert many[-1] == 1000
    queue.forget("a")
    assert queue.add_rate_limited("a") == 0.005


async def test_a_failing_reconcile_is_retried_with_backoff_and_the_worker_survives() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    loop = asyncio.get_running_loop()
    calls: list[tuple[str, float]] = []

    async def reconcile(key: str) -> float | None:
        calls.append((key, loop.time()))
        if key == "bad" and len([c for c in calls if c[0] == "bad"]) < 4:
            if len(calls) % 2:
                raise Forbidden("appwrappers is forbidden", cluster="hub")
            raise KeyError("a bug")
        return None

    workers = asyncio.create_task(run_workers(queue, reconcile, workers=2))
    queue.add("bad")
    await asyncio.sleep(5)
    queue.add("good")
    await asyncio.sleep(1)
    workers.cancel()
    with pytest.raises(asyncio.CancelledError):
        await workers
    bad = [t for k, t in calls if k == "bad"]
    assert len(bad) == 4
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(bad)]
    assert gaps == [0.005, 0.01, 0.02]
    assert ("good" in [k for k, _ in calls])


async def test_a_reconcile_that_asks_to_look_again_is_queued_then(looptime: float) -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    loop = asyncio.get_running_loop()
    times: list[float] = []

    async def reconcile(key: str) -> float | None:
        times.append(loop.time())
        return 30.0 if len(times) < 3 else None

    start = loop.time()
    workers = asyncio.create_task(run_workers(queue, reconcile, workers=1))
    queue.add("a")
    await asyncio.sleep(100)
    workers.cancel()
    with pytest.raises(asyncio.CancelledError):
        await workers
    assert [round(t - start) for t in times] == [0, 30, 60]


async def test_at_most_capacity_keys_are_processed_and_a_freed_place_goes_by_rank() -> None:
    queue: WorkQueue[str] = WorkQueue("t", capacity=2)
    for key in ("a", "b", "c"):
        queue.add(key, urgent=True, rank=1)
    first, second = await queue.get(), await queue.get()
    third = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    assert not third.done()  # two in progress: the third waits, however many workers
    queue.add("probe", urgent=True, rank=100)
    await asyncio.sleep(0)
    assert not third.done()  # a key added does not pass the capacity either
    queue.done(first)
    assert await third == "probe"  # the freed place goes to the priority key
    assert queue.busy() == 2 and {first, second} == {"a", "b"}


async def test_a_capacity_lowered_holds_new_takes_until_under_it_and_raised_frees_them() -> None:
    queue: WorkQueue[str] = WorkQueue("t", capacity=3)
    for key in "abcde":
        queue.add(key, urgent=True)
    taken = [await queue.get() for _ in range(3)]
    queue.set_capacity(1)
    queue.done(taken[0])
    waiting = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    assert not waiting.done()  # two still in progress, above the new capacity of 1
    queue.set_capacity(4)
    assert await waiting == "d"


async def test_the_following_share_is_at_most_half_the_capacity() -> None:
    queue: WorkQueue[str] = WorkQueue("t", following=lambda key: key.startswith("run"),
                                      following_workers=16, capacity=4)
    for i in range(4):
        queue.add(f"run-{i}")
    queue.add("dispatch", urgent=True)
    # two following keys (half of 4) go before the dispatch, not sixteen
    assert [await queue.get() for _ in range(3)] == ["run-0", "run-1", "dispatch"]
