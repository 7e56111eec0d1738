"""The core decides beside the event loop (``Dispatcher.step``), and what changed
meanwhile is decided again.

What must hold: the loop runs while the core decides (on it, every answer the hub sent
waited out the cycle); a decision is ordered only for an AppWrapper as the snapshot saw
it, or one only written meanwhile in ways the core does not read (mcad's finalizer, a
status echo); one changed, deleted or recreated meanwhile gets no order, and the next
cycle is asked for; a cycle cancelled while deciding leaves nothing carried. And the
thread is taken only while cores are costly (``THREAD_OVER_S``): a cheap core decides on
the loop, where the thread buys nothing measurable.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable
from typing import Any

import pytest

from mcad.controller import dispatcher as dispatcher_module
from mcad.controller.dispatcher import THREAD_OVER_S
from mcad.controller.records import AppWrapperRecord
from mcad.core.cycle.carried import CarriedCycle
from mcad.core.cycle.decide import CycleResult, Snapshot
from tests.controller.test_carried_snapshot import World

WAIT_S = 10.0
"""How long the gated core waits for the loop before it gives up (never, when it works)."""


class Gate:
    """Holds the core's decision until the loop has run ``meanwhile``: a core that ran on
    the loop would wait for it in vain."""

    def __init__(self, world: World, meanwhile: Callable[[], None]) -> None:
        self.world = world
        self.meanwhile = meanwhile
        self.opened = threading.Event()
        self.thread: threading.Thread | None = None
        self.waited = False
        self.started = asyncio.Event()
        """Set (on the loop) once the core has its snapshot and has started."""
        loop = asyncio.get_running_loop()
        decide = world.dispatcher.carried.decide

        def gated(snapshot: Snapshot) -> CycleResult:
            self.thread = threading.current_thread()
            loop.call_soon_threadsafe(self.started.set)
            self.waited = self.opened.wait(WAIT_S)
            return decide(snapshot)

        world.dispatcher.carried.decide = gated  # type: ignore[method-assign]

    async def step(self) -> CycleResult:
        task = asyncio.create_task(self.world.dispatcher.step())
        await asyncio.wait_for(self.started.wait(), WAIT_S)
        self.meanwhile()
        self.opened.set()
        return await task


def one_queued() -> tuple[World, AppWrapperRecord]:
    world = World()
    world.add(1)
    (rec,) = world.records()
    return world, rec


async def test_the_loop_runs_while_the_core_decides() -> None:
    world, rec = one_queued()
    gate = Gate(world, lambda: None)
    result = await gate.step()
    assert gate.waited and gate.thread is not threading.main_thread()
    assert [d.key for d in result.dispatches] == [rec.key]
    assert rec.live_dispatch() is not None


def finalized(world: World, rec: AppWrapperRecord) -> None:
    obj = copy.deepcopy(rec.obj)
    obj["metadata"]["finalizers"] = ["workload.codeflare.dev/finalizer"]
    world.take(rec, obj)


def reprioritized(world: World, rec: AppWrapperRecord) -> None:
    obj = copy.deepcopy(rec.obj)
    obj["spec"]["priority"] = 50
    obj["metadata"]["generation"] = int(obj["metadata"].get("generation") or 1) + 1
    world.take(rec, obj)


def deleted(world: World, rec: AppWrapperRecord) -> None:
    world.delete(rec)


def recreated(world: World, rec: AppWrapperRecord) -> None:
    world.delete(rec)
    obj = copy.deepcopy(rec.obj)
    obj["metadata"]["uid"] = "another"
    again = AppWrapperRecord()
    world.take(again, obj)
    world.state.appwrappers[rec.key] = again


async def test_one_only_written_meanwhile_is_dispatched() -> None:
    """mcad's own finalizer write landing while the core decides (every backlog AppWrapper
    created without the webhook gets one) changes nothing the core read."""
    world, rec = one_queued()
    result = await Gate(world, lambda: finalized(world, rec)).step()
    assert [d.key for d in result.dispatches] == [rec.key]
    assert rec.live_dispatch() is not None
    assert not world.dispatcher.wanted.is_set()


@pytest.mark.parametrize("change", [reprioritized, deleted, recreated])
async def test_one_changed_meanwhile_is_decided_again(
        change: Callable[[World, AppWrapperRecord], None]) -> None:
    world, rec = one_queued()
    result = await Gate(world, lambda: change(world, rec)).step()
    assert [d.key for d in result.dispatches] == [rec.key]  # (what the core decided)
    now = world.state.appwrappers.get(rec.key)
    assert now is None or now.orders.dispatch is None
    assert world.dispatcher.wanted.is_set()  # the next cycle decides it again
    world.dispatcher.wanted.clear()
    if now is not None:  # and it does, on what it is now
        world.dispatcher.cycle()
        assert now.live_dispatch() is not None


async def test_a_cycle_cancelled_while_deciding_leaves_nothing_carried() -> None:
    world, rec = one_queued()
    carried = world.dispatcher.carried
    gate = Gate(world, lambda: None)
    task = asyncio.create_task(world.dispatcher.step())
    await asyncio.wait_for(gate.started.wait(), WAIT_S)
    task.cancel()
    gate.opened.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rec.orders.dispatch is None
    assert world.dispatcher.carried is not carried
    assert isinstance(world.dispatcher.carried, CarriedCycle)


async def test_a_bug_in_the_core_leaves_nothing_carried() -> None:
    """The supervisor restarts the dispatcher's task; its next cycle is in full."""
    world, rec = one_queued()
    carried = world.dispatcher.carried

    def broken(snapshot: Snapshot) -> CycleResult:
        raise RuntimeError("a bug in the core")

    carried.decide = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="a bug in the core"):
        await world.dispatcher.step()
    assert world.dispatcher.carried is not carried and rec.orders.dispatch is None


class CpuClock:
    """``time.thread_time`` as the core sees it: each decision costs ``per_core`` s."""

    def __init__(self, per_core: float) -> None:
        self.per_core = per_core
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        if self.reads % 2 == 0:  # the read after the decision
            self.now += self.per_core
        return self.now


@pytest.mark.parametrize(("cost", "in_thread"), [(0.01, False), (THREAD_OVER_S, True)])
async def test_the_core_decides_in_the_thread_only_once_cores_are_costly(
        monkeypatch: pytest.MonkeyPatch, cost: float, in_thread: bool) -> None:
    world, _ = one_queued()
    monkeypatch.setattr(dispatcher_module.time, "thread_time", CpuClock(cost))
    world.dispatcher.cycle()  # the first core: its cost decides where the next runs
    assert world.dispatcher.core_s == pytest.approx(cost)
    world.add(1)
    threads: list[threading.Thread] = []
    ordered = asyncio.Event()
    decide, order = world.dispatcher.carried.decide, world.dispatcher._order

    def seen(snapshot: Snapshot) -> CycleResult:
        threads.append(threading.current_thread())
        return decide(snapshot)

    def orders(*args: Any, **kwargs: Any) -> CycleResult:
        result = order(*args, **kwargs)
        ordered.set()
        return result

    world.dispatcher.carried.decide = seen  # type: ignore[method-assign]
    monkeypatch.setattr(world.dispatcher, "_order", orders)
    task = asyncio.create_task(world.dispatcher.run(lambda: True))
    try:
        await asyncio.wait_for(ordered.wait(), WAIT_S)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert (threads[0] is not threading.main_thread()) is in_thread
    assert all(r.live_dispatch() is not None for r in world.records())


def test_one_cheap_core_after_costly_ones_keeps_the_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A carried cycle among full ones halves the cost remembered, not forgets it: the
    next full one would otherwise hold the loop again."""
    world, _ = one_queued()
    clock = CpuClock(0.2)
    monkeypatch.setattr(dispatcher_module.time, "thread_time", clock)
    world.dispatcher.cycle()
    clock.per_core = 0.001
    costs = []
    for _ in range(3):
        world.dispatcher.cycle()
        costs.append(world.dispatcher.core_s)
    assert costs == pytest.approx([0.1, 0.05, 0.025])
    assert costs[1] >= THREAD_OVER_S > costs[2]
