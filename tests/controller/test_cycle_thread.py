"""The core decides beside the event loop (``Dispatcher.step``), and what changed
meanwhile is decided again.

What must hold: the loop runs while the core decides (on it, every answer the hub sent
waited out the cycle); a decision is ordered only for an AppWrapper as the snapshot saw
it, or one only written meanwhile in ways the core does not read (mcad's finalizer, a
status echo); one changed, deleted or recreated meanwhile gets no order, and the next
cycle is asked for; a cycle cancelled while deciding leaves nothing carried.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable

import pytest

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
