"""The dispatcher's pacing, and the one exception to it (``Dispatcher.trigger``): after a
cycle of d seconds the next waits d, unless an AppWrapper that outranks everything the
last cycle left waiting arrives; then it is decided at once (a cycle on the loop, in the
callback that saw it; or, when the core is deciding in its thread, the cycle right
after that one, with no debounce and no pacing), at most once every ``PROMPT_EVERY_S``.
Loop time (looptime): the waits are exact."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import pytest_asyncio

from mcad.config import RunConfig
from mcad.controller import dispatcher as dispatcher_module
from mcad.controller.dispatcher import PROMPT_EVERY_S, THREAD_OVER_S, Dispatcher
from mcad.controller.hub import HubCache
from mcad.controller.state import ControllerState
from mcad.controller.workqueue import WorkQueue
from mcad.core.placement.capacity import AppWrapperKey
from tests.controller.seam import job_appwrapper
from tests.gateway.scripted import ScriptedTransport

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
CYCLE_S = 0.5


class CycleClock:
    """``time.perf_counter`` for the dispatcher: each cycle seems to take ``CYCLE_S``."""

    def __init__(self) -> None:
        self.calls = 0

    def perf_counter(self) -> float:
        self.calls += 1
        return self.calls * CYCLE_S  # (read before and after each cycle)


@dataclass
class Paced:
    dispatcher: Dispatcher
    cycles: list[float] = field(default_factory=list)
    on_loop: list[float] = field(default_factory=list)
    """When cycles ran on the loop (``Dispatcher.cycle``), not through the thread."""
    ran: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    """The dispatcher's task (``Dispatcher.run``)."""

    async def step(self) -> None:
        self.cycles.append(asyncio.get_running_loop().time())
        self.ran.set()

    def cycle(self) -> None:
        self.on_loop.append(asyncio.get_running_loop().time())
        self.cycles.append(self.on_loop[-1])
        self.ran.set()

    async def next_cycle(self) -> float:
        """Loop time from now to the next cycle."""
        start = asyncio.get_running_loop().time()
        self.ran.clear()
        await self.ran.wait()
        return self.cycles[-1] - start


@pytest_asyncio.fixture(loop_scope="function")
async def paced(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Paced]:
    monkeypatch.setattr(dispatcher_module, "time", CycleClock())
    dispatcher = Dispatcher(state=ControllerState(), config=RunConfig(),
                            queue=WorkQueue[AppWrapperKey]("appwrappers"))
    dispatcher.core_s = THREAD_OVER_S  # costly cores: paced cycles take the thread
    out = Paced(dispatcher)
    monkeypatch.setattr(dispatcher, "step", out.step)
    monkeypatch.setattr(dispatcher, "cycle", out.cycle)
    task = out.task = asyncio.create_task(dispatcher.run(lambda: True))
    await out.next_cycle()  # the first, at start
    yield out
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_cycle_waits_as_long_as_the_last_took(paced: Paced) -> None:
    paced.dispatcher.trigger()
    assert await paced.next_cycle() == pytest.approx(CYCLE_S, abs=0.01)


async def test_one_that_outranks_the_queue_is_decided_where_it_arrives(
        paced: Paced) -> None:
    """In the callback that saw it: no hop through the loop, no debounce, no pacing."""
    paced.dispatcher.top_pending = 0
    now = asyncio.get_running_loop().time()
    paced.dispatcher.trigger(priority=100)
    assert paced.on_loop == [now]


async def test_one_that_arrives_while_the_core_decides_is_decided_right_after(
        paced: Paced) -> None:
    """The cycle under way (in its thread) ends first; the next starts at once, on the
    loop, without the debounce or the pacing."""
    paced.dispatcher.top_pending = 0
    paced.dispatcher._stepping = True
    paced.dispatcher.trigger(priority=100)
    assert paced.on_loop == []
    paced.dispatcher._stepping = False
    assert await paced.next_cycle() == 0.0
    assert len(paced.on_loop) == 1


@pytest.mark.parametrize("priority", [0, -5, None])
async def test_one_that_does_not_outrank_the_queue_waits_its_turn(
        paced: Paced, priority: int | None) -> None:
    """A backlog of equals (or an event that is not an arrival) never skips the pacing."""
    paced.dispatcher.top_pending = 0
    paced.dispatcher.trigger(priority=priority)
    assert await paced.next_cycle() == pytest.approx(CYCLE_S, abs=0.01)


async def test_at_most_one_prompt_cycle_a_second(paced: Paced) -> None:
    """Priorities that keep climbing cannot make the cycles run back to back."""
    paced.dispatcher.top_pending = 0
    paced.dispatcher.trigger(priority=100)
    assert len(paced.on_loop) == 1
    paced.dispatcher.trigger(priority=200)
    assert len(paced.on_loop) == 1
    assert await paced.next_cycle() == pytest.approx(CYCLE_S, abs=0.01)
    await asyncio.sleep(PROMPT_EVERY_S)
    paced.dispatcher.trigger(priority=300)
    assert len(paced.on_loop) == 2


async def test_only_an_arrival_asks_to_cut_the_pacing_short() -> None:
    """The hub cache passes a queued AppWrapper's priority when it arrives, never when it
    changes: the events of a backlog being dispatched leave the pacing alone."""
    state = ControllerState()
    dispatcher = Dispatcher(state=state, config=RunConfig(),
                            queue=WorkQueue[AppWrapperKey]("appwrappers"))
    asked: list[int | None] = []
    dispatcher.trigger = lambda *, priority=None: asked.append(priority)  # type: ignore[method-assign]
    cache = HubCache(hub=ScriptedTransport().connection("hub"), state=state,
                     config=RunConfig(), queue=dispatcher.queue, dispatcher=dispatcher,
                     spokes_changed=lambda: None)
    obj = job_appwrapper("train")
    obj["spec"]["priority"] = 7
    obj["metadata"].update(uid="u1", resourceVersion="1")
    cache._on_appwrapper("ADDED", obj)
    changed = copy.deepcopy(obj)
    changed["metadata"].update(resourceVersion="2", labels={"seen": "yes"})
    cache._on_appwrapper("MODIFIED", changed)
    assert asked == [7, None]


async def test_no_cycle_at_an_arrival_while_the_task_is_down(paced: Paced) -> None:
    """A bug ended the dispatcher's task and the supervisor has not restarted it yet: an
    arrival that outranks the queue asks for the cycle, and the restarted task runs it;
    none runs in the callback, on a dispatcher no task is running."""
    assert paced.task is not None
    paced.task.cancel()
    await asyncio.gather(paced.task, return_exceptions=True)
    paced.dispatcher.top_pending = 0
    before = len(paced.on_loop)
    paced.dispatcher.trigger(priority=100)
    assert len(paced.on_loop) == before
    assert paced.dispatcher.prompt.is_set()


async def test_after_a_cycle_with_nothing_to_decide_the_next_waits_the_idle_pacing(
        paced: Paced, monkeypatch: pytest.MonkeyPatch) -> None:
    """Such a cycle is short, and the echoes of a backlog's writes would run them back to
    back; an arrival that outranks the queue still cuts the wait short."""
    monkeypatch.setattr(dispatcher_module, "IDLE_PACING_S", 2.0)
    paced.dispatcher.was_idle = True
    paced.dispatcher.trigger()
    assert await paced.next_cycle() == pytest.approx(2.0, abs=0.01)
    paced.dispatcher.was_idle = True
    paced.dispatcher.trigger()
    await asyncio.sleep(0.1)
    paced.dispatcher.top_pending = 0
    paced.dispatcher._stepping = True  # (so the prompt is the loop's, not the callback's)
    paced.dispatcher.trigger(priority=100)
    paced.dispatcher._stepping = False
    assert await paced.next_cycle() == 0.0
