"""The supervisor: a task that fails (an API error or a bug) is logged, counted in
``mcad_task_restarts_total{task}`` and started again after a backoff that doubles to a
cap; the other tasks never notice; cancelling the supervisor stops every task."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from mcad.controller.supervisor import Supervisor
from mcad.gateway.errors import ServerError
from tests.metrics.sample import sample

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]


async def test_a_failing_task_is_restarted_with_doubling_backoff_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    starts: list[float] = []
    healthy = 0

    async def flaky() -> None:
        starts.append(loop.time())
        if len(starts) % 2:
            raise ServerError("etcdserver: request timed out", cluster="hub")
        raise ValueError("a bug in mcad")

    async def steady() -> None:
        nonlocal healthy
        while True:
            healthy += 1
            await asyncio.sleep(1)

    before = sample("mcad_task_restarts_total", task="test flaky") or 0
    supervisor = Supervisor(prefix="test ", backoff_min=0.5, backoff_max=4)
    running = asyncio.create_task(supervisor.run(("flaky", flaky), ("steady", steady)))
    with caplog.at_level(logging.WARNING, logger="mcad.controller.supervisor"):
        await asyncio.sleep(20)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(starts)]
    assert gaps[:5] == [0.5, 1, 2, 4, 4]
    assert healthy >= 19  # the other task ran throughout
    restarts = (sample("mcad_task_restarts_total", task="test flaky") or 0) - before
    assert restarts == len(starts) - (0 if len(starts) == restarts else 1)
    api = [r for r in caplog.records if "etcdserver" in r.getMessage()]
    bugs = [r for r in caplog.records if "a bug in mcad" in r.getMessage() or
            (r.exc_info and "a bug in mcad" in str(r.exc_info[1]))]
    assert api and all(r.exc_info is None for r in api)  # an API error: one line
    assert bugs and all(r.exc_info is not None for r in bugs)  # a bug: a traceback


async def test_cancel_stops_one_task_and_the_supervisor_stops_all() -> None:
    stopped: list[str] = []

    def forever(name: str) -> object:
        async def run() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                stopped.append(name)
        return run

    supervisor = Supervisor()
    running = asyncio.create_task(supervisor.run(("a", forever("a")),  # type: ignore[arg-type]
                                                 ("b", forever("b"))))  # type: ignore[arg-type]
    await supervisor.started()
    await asyncio.sleep(0)
    task = supervisor.cancel("a")
    assert task is not None
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stopped == ["a"] and supervisor.names() == ["b"]
    supervisor.spawn("c", forever("c"))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert sorted(stopped) == ["a", "b", "c"]


async def test_a_task_name_is_unique() -> None:
    supervisor = Supervisor()
    running = asyncio.create_task(supervisor.run())
    await supervisor.started()

    async def idle() -> None:
        await asyncio.Event().wait()

    supervisor.spawn("x", idle)
    with pytest.raises(RuntimeError, match="already runs"):
        supervisor.spawn("x", idle)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
