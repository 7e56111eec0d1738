"""Long-lived tasks that are restarted, not lost, when they fail.

Why: the controller is a handful of loops that must run for months (watches, the
dispatch loop, the work queue's workers, one set per spoke). A loop that dies on an
unexpected answer must neither take the process down (one bad spoke is not a reason
to stop dispatching to the others) nor vanish silently (a dead watch freezes what the
controller believes). kopf guards its tasks the same way. So each loop runs under
``Supervisor.spawn``: when it raises, the failure is logged once (a traceback unless
it is an API error, which says enough in one line), counted in
``mcad_task_restarts_total{task}``, and the loop is started again after a backoff that
doubles from 0.5 s to 60 s and resets once the loop has run a minute without failing.
Cancellation is never swallowed: stopping the supervisor stops every task and waits
for them.

Tasks are started inside one TaskGroup (``run``), so structured concurrency holds:
nothing outlives the supervisor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from mcad import metrics
from mcad.gateway.errors import GatewayError

log = logging.getLogger(__name__)
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.5, 60.0
HEALTHY_AFTER_S = 60.0

TaskFactory = Callable[[], Awaitable[None]]


class Supervisor:
    """Runs named long-lived coroutines and restarts them when they fail."""

    def __init__(self, *, prefix: str = "", backoff_min: float = BACKOFF_MIN_S,
                 backoff_max: float = BACKOFF_MAX_S) -> None:
        self.prefix = prefix
        """Put before task names in logs and metrics (``spoke east pods``)."""
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self._group: asyncio.TaskGroup | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._started = asyncio.Event()

    async def run(self, *initial: tuple[str, TaskFactory]) -> None:
        """Host the tasks until cancelled; ``initial`` are spawned at once."""
        async with asyncio.TaskGroup() as group:
            self._group = group
            for name, factory in initial:
                self.spawn(name, factory)
            self._started.set()
            try:
                await asyncio.Event().wait()  # the tasks run in the group; wait for cancel
            finally:
                self._group = None

    async def started(self) -> None:
        await self._started.wait()

    def spawn(self, name: str, factory: TaskFactory) -> None:
        """Run ``factory()`` as task ``name``, restarting it whenever it fails."""
        if self._group is None:
            raise RuntimeError(f"cannot start {name}: the supervisor is not running")
        if name in self._tasks:
            raise RuntimeError(f"a task named {name} already runs")
        metrics.register_task(self.prefix + name)  # its restarts show as 0, not as nothing
        task = self._group.create_task(self._guard(name, factory), name=self.prefix + name)
        self._tasks[name] = task
        task.add_done_callback(lambda t: self._tasks.pop(name, None)
                               if self._tasks.get(name) is t else None)

    def cancel(self, name: str) -> asyncio.Task[None] | None:
        """Stop task ``name`` (if it runs); returns the task, to await if need be."""
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()
        return task

    def names(self) -> list[str]:
        return sorted(self._tasks)

    async def _guard(self, name: str, factory: TaskFactory) -> None:
        name = self.prefix + name
        backoff = self.backoff_min
        while True:
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                await factory()
                log.warning("task %s returned; starting it again", name)
            except asyncio.CancelledError:
                raise
            except GatewayError as err:
                log.warning("task %s failed: %s", name, err)
            except Exception:
                log.exception("task %s failed (a bug in mcad); restarting it", name)
            metrics.count_task_restart(name)
            if loop.time() - started >= HEALTHY_AFTER_S:
                backoff = self.backoff_min
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.backoff_max)
