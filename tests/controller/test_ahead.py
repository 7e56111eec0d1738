"""An AppWrapper that outranks the whole queue is dispatched as it arrives, ahead of it
(``Dispatcher.ahead``, ``mcad.core.cycle.ahead``), without a cycle over the queue; and a
core deciding in its thread meanwhile has its dispatches dropped, since they counted on
the room the newcomer took."""

from __future__ import annotations

from typing import Any

import pytest

from mcad.controller import dispatcher as dispatcher_module
from mcad.controller.records import AppWrapperRecord, key_of
from tests.controller.seam import job_appwrapper
from tests.controller.test_carried_snapshot import World
from tests.controller.test_cycle_thread import Gate


def arrive(world: World, name: str, *, pods: int, priority: int) -> AppWrapperRecord:
    """A new AppWrapper in the records, as the hub cache adds it, and its trigger."""
    obj: dict[str, Any] = job_appwrapper(name, pods=pods, gpus=4)
    obj["spec"]["priority"] = priority
    obj["metadata"].update(uid=f"uid-{name}", creationTimestamp="2026-11-26T11:00:00Z")
    rec = AppWrapperRecord()
    world.take(rec, obj)
    world.state.appwrappers[key_of(obj)] = rec
    world.dispatcher.trigger(priority=priority)
    return rec


def ready(world: World) -> None:
    world.dispatcher._ready = lambda: True  # (as ``run`` sets it)


async def test_one_that_outranks_a_queue_that_waits_is_dispatched_ahead_of_it() -> None:
    world = World()
    for _ in range(3):
        world.add(7)  # 28 GPUs: more than a spoke has (24)
    ready(world)
    world.dispatcher.cycle()
    assert world.dispatcher.top_pending == 0
    cycles: list[int] = []
    world.dispatcher.cycle = lambda: cycles.append(1)  # type: ignore[assignment, method-assign, return-value]
    probe = arrive(world, "probe", pods=2, priority=100)
    assert probe.live_dispatch() is not None
    assert cycles == []  # (no cycle over the queue decided it)
    assert world.dispatcher.wanted.is_set()  # the queue behind it: the next cycle's
    assert all(rec.live_dispatch() is None for rec in world.records() if rec is not probe)


async def test_one_that_cannot_be_told_ahead_is_decided_by_a_cycle_as_before() -> None:
    """A tie with the queue's top: no one outranks it, so the full cycle decides."""
    world = World()
    world.add(7)
    ready(world)
    world.dispatcher.cycle()
    world.dispatcher.top_pending = -1  # (so the tie still asks for a prompt cycle)
    probe = arrive(world, "tied", pods=2, priority=0)
    assert probe.live_dispatch() is not None  # by the cycle run in the callback
    assert world.dispatcher.last is not None
    assert len(world.dispatcher.last[0].appwrappers) == 2


async def test_a_core_deciding_meanwhile_has_its_dispatches_dropped() -> None:
    world = World()
    world.add(2)
    world.add(2)
    ready(world)
    probe: list[AppWrapperRecord] = []
    gate = Gate(world, lambda: probe.append(arrive(world, "probe", pods=3, priority=100)))
    result = await gate.step()
    assert [d.key for d in result.dispatches] == []  # (dropped: it counted on the room)
    assert probe[0].live_dispatch() is not None
    others = [rec for rec in world.records() if rec is not probe[0]]
    assert all(rec.live_dispatch() is None for rec in others)
    assert world.dispatcher.wanted.is_set()
    after = world.dispatcher.cycle()  # decided again, with the probe's pods counted
    assert sorted(d.key for d in after.dispatches) == sorted(rec.key for rec in others)


async def test_a_cycle_with_nothing_queued_runs_no_core() -> None:
    """Every AppWrapper dispatched (assumed, then persisted): the cycles their echoes ask
    for decide nothing, and the core is not asked (``idle``)."""
    world = World()
    world.add(1)
    world.add(1)
    first = world.dispatcher.cycle()
    assert len(first.dispatches) == 2
    for rec in world.records():
        world.persist(rec)

    def core(_snapshot: object) -> object:
        raise AssertionError("the core decided an idle cycle")

    world.dispatcher.carried.decide = core  # type: ignore[assignment, method-assign]
    result = world.dispatcher.cycle()
    assert (result.dispatches, result.pending, result.evictions, result.resizes) == \
        ((), (), (), ())
    assert world.dispatcher.top_pending is None


async def test_a_failure_deciding_ahead_leaves_it_to_the_cycle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``trigger`` runs in the hub cache's callback: a bug in the cut must not end the
    watch; the cycle run there decides the arrival as before."""
    world = World()
    world.add(7)
    ready(world)
    world.dispatcher.cycle()

    def broken(_snapshot: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(dispatcher_module, "decide_ahead", broken)
    probe = arrive(world, "probe", pods=2, priority=100)
    assert probe.live_dispatch() is not None
