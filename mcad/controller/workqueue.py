"""One ordered work queue per object key, as controller-runtime's workqueue.

Why: every change to an AppWrapper (its hub object, its pods on a spoke, a dispatch
decision, a timer it asked for) is a reason to look at it again, and several of them
arrive at once. Instead of callbacks, flags and timers that several actors share, each
change only *adds the key*; workers take keys one at a time and reconcile the object
from the caches. The rules:

- a key is in the queue at most once (adding it again while it waits is a no-op);
- a key is never processed by two workers at once: added while being processed, it
  is queued again when the worker is done (so no change is lost);
- ``add_after`` asks for a look later; only the earliest pending moment per key is
  kept, so however often a timer is asked for, one runs;
- a key whose reconcile failed comes back after a per-key exponential backoff (5 ms
  doubling to 1000 s, controller-runtime's default), reset by ``forget`` on success;
- urgent keys (a dispatch to persist) go before ordinary ones (a pending reason to
  write), so a backlog of status writes does not delay a dispatch; among urgent keys
  the higher ``rank`` (the AppWrapper's priority) goes first, then the earlier added,
  so a high-priority dispatch decided behind a backlog of a thousand low-priority ones
  is persisted next, not after them;
- keys that ``following`` names (those of running AppWrappers, whose status follows
  their pods) wait in a line of their own, with a share of the workers: up to
  ``following_workers`` of them are processed at once, before urgent keys, so a drain
  of thousands of dispatches never starves them; beyond that share urgent keys go
  first, so the other workers are always there for a dispatch (what following keys
  write is metered by ``controller/pacing.py``); ordinary keys come after both;
- at most ``capacity`` keys are processed at once, however many workers wait (the
  controller moves it with the hub's write latency: ``controller/inflight.py``); the
  following line's share is then at most half of it. A place freed goes to the next
  key by the rules above, so lowering it never lets a later key pass a priority one.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from enum import IntEnum
from typing import Generic, TypeVar

from mcad import metrics
from mcad.gateway.errors import ApiError

log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)
BASE_DELAY_S = 0.005
MAX_DELAY_S = 1000.0


class Line(IntEnum):
    """Where a key waits; a key added again may move to a better (lower) line."""

    URGENT = 0
    FOLLOWING = 1
    ORDINARY = 2


class WorkQueue(Generic[K]):
    """Keys to reconcile: deduplicated, one at a time per key, delayed, rate-limited."""

    def __init__(self, name: str, *, base_delay: float = BASE_DELAY_S,
                 max_delay: float = MAX_DELAY_S,
                 following: Callable[[K], bool] = lambda _key: False,
                 following_workers: int = 0, capacity: int | None = None) -> None:
        self.name = name
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.following = following
        """Whether a key added without urgency waits in the following line (asked when
        it is added)."""
        self._urgent: list[tuple[int, int, K]] = []
        """A heap of (-rank, sequence, key)."""
        self._sequence = itertools.count()
        self.following_workers = following_workers
        """How many following keys may be processed at once before urgent keys."""
        self.capacity = capacity
        """How many keys may be processed at once (None: as many as there are workers)."""
        self._following: deque[K] = deque()
        self._normal: deque[K] = deque()
        self._following_busy: set[K] = set()
        """Following keys being processed."""
        self._waiting: dict[K, Line] = {}
        """Keys in the queue, and the line each waits in (entries of other lines for
        it are stale and skipped)."""
        self._processing: set[K] = set()
        self._dirty: dict[K, tuple[bool, int]] = {}
        """Keys added while being processed (whether urgently, and the rank)."""
        self._timers: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._failures: dict[K, int] = {}
        self._takeable = asyncio.Event()
        """Set when a waiting worker may find a key it can take: one was added, a
        place was freed, or the capacity grew."""
        metrics.register_work_queue(name)

    # -- adding -------------------------------------------------------------------------
    def add(self, key: K, *, urgent: bool = False, rank: int = 0) -> None:
        """Reconcile ``key`` (once, however often it is added before a worker takes it);
        ``rank`` orders urgent keys (higher first)."""
        if key in self._processing:
            was_urgent, was_rank = self._dirty.get(key, (False, rank))
            self._dirty[key] = (was_urgent or urgent, max(was_rank, rank) if urgent
                                else was_rank)
            return
        line = Line.URGENT if urgent else \
            Line.FOLLOWING if self.following(key) else Line.ORDINARY
        queued = self._waiting.get(key)
        if queued is not None and queued <= line:
            return  # already waiting, as well placed
        self._waiting[key] = line  # a place in a worse line is now stale
        if line is Line.URGENT:
            heapq.heappush(self._urgent, (-rank, next(self._sequence), key))
        elif line is Line.FOLLOWING:
            self._following.append(key)
        else:
            self._normal.append(key)
        self._takeable.set()

    def add_after(self, key: K, delay: float) -> None:
        """Reconcile ``key`` in ``delay`` seconds, unless an earlier look is already due."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        current = self._timers.get(key)
        if current is not None:
            if current[0] <= due:
                return
            current[1].cancel()
        self._timers[key] = (due, loop.call_at(due, self._fire, key))

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: K) -> float:
        """Reconcile ``key`` again after its backoff; returns the delay chosen."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = min(self.base_delay * 2.0 ** min(failures, 40), self.max_delay)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """``key`` succeeded: its next failure starts the backoff afresh."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    def discard(self, key: K) -> None:
        """The object is gone: drop its timer and its backoff."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer[1].cancel()
        self._failures.pop(key, None)

    # -- taking -------------------------------------------------------------------------
    async def get(self) -> K:
        """The next key; the caller must call ``done(key)`` when it is finished with it."""
        while True:
            if self.capacity is None or len(self._processing) < self.capacity:
                key = self._pop()
                if key is not None:
                    self._processing.add(key)
                    return key
            self._takeable.clear()
            await self._takeable.wait()

    def set_capacity(self, capacity: int) -> None:
        """At most ``capacity`` keys processed at once from now on (those in progress
        above it finish; none is taken until the count is under it)."""
        grown = self.capacity is None or capacity > self.capacity
        self.capacity = capacity
        if grown:
            self._takeable.set()

    def busy(self) -> int:
        """How many keys are being processed."""
        return len(self._processing)

    def _pop(self) -> K | None:
        """Following keys within their share of the workers, then urgent keys, then
        following keys beyond their share, then ordinary ones."""
        share = self.following_workers if self.capacity is None else \
            min(self.following_workers, max(1, self.capacity // 2))
        if len(self._following_busy) < share:
            key = self._pop_following()
            if key is not None:
                return key
        while self._urgent:
            key = heapq.heappop(self._urgent)[2]
            if self._waiting.get(key) is Line.URGENT:
                del self._waiting[key]
                return key
        key = self._pop_following()
        return key if key is not None else self._pop_line(self._normal, Line.ORDINARY)

    def _pop_following(self) -> K | None:
        key = self._pop_line(self._following, Line.FOLLOWING)
        if key is not None:
            self._following_busy.add(key)
        return key

    def _pop_line(self, line: deque[K], which: Line) -> K | None:
        while line:
            key = line.popleft()
            if self._waiting.get(key) is which:
                del self._waiting[key]
                return key
        return None

    def done(self, key: K) -> None:
        self._processing.discard(key)
        self._following_busy.discard(key)
        again = self._dirty.pop(key, None)
        if again is not None:
            self.add(key, urgent=again[0], rank=again[1])
        if self._waiting:
            self._takeable.set()  # (a place is free: a worker held by the capacity takes it)

    def __len__(self) -> int:
        return len(self._waiting)

    def close(self) -> None:
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()


Reconcile = Callable[[K], Awaitable[float | None]]
"""Look at one key; return seconds after which to look again, or None."""


async def run_workers(queue: WorkQueue[K], reconcile: Reconcile[K], *, workers: int) -> None:
    """Take keys from ``queue`` with ``workers`` concurrent workers, forever.

    A reconcile that raises is logged (one line for an API error, a traceback for
    anything else) and its key comes back after its backoff; the worker goes on.
    """
    try:
        async with asyncio.TaskGroup() as group:
            for i in range(workers):
                group.create_task(_work(queue, reconcile), name=f"{queue.name} worker {i}")
    finally:
        queue.close()


async def _work(queue: WorkQueue[K], reconcile: Reconcile[K]) -> None:
    while True:
        key = await queue.get()
        try:
            again = await reconcile(key)
        except asyncio.CancelledError:
            queue.done(key)
            raise
        except ApiError as err:
            delay = queue.add_rate_limited(key)
            metrics.count_reconcile_error(queue.name)
            log.warning("%s %s: %s; retrying in %.3gs", queue.name, key, err, delay)
        except Exception:
            delay = queue.add_rate_limited(key)
            metrics.count_reconcile_error(queue.name)
            log.exception("%s %s failed (a bug in mcad); retrying in %.3gs", queue.name,
                          key, delay)
        else:
            queue.forget(key)
            if again is not None:
                queue.add_after(key, again)
        queue.done(key)
        metrics.report_queue_depth(queue.name, len(queue))
