"""The hub's budget for the status writes that follow a dispatch: pod counts and PodsReady.

Why: a running AppWrapper's status reports how its pods are doing, and every dispatch
is followed by such a write a moment later, when its pods are up. When 10,000 were
dispatched in one drain, the work queue took every dispatch first and left these
writes for the end: they kept the hub's API server at 0.87 of a core for over a minute
after the last dispatch (docs/benchmarks.md, "Scale"), and a stream of submissions
longer than the backlog would have paid them inside its own window. They are paced
inside the drain instead, by this rule, which shares the hub between the two kinds of
write:

1. Dispatches (and evictions and resizes) are never metered. Keys of running
   AppWrappers (whose status follows their pods) have a share of the work queue's
   workers, half of them: within it they are taken first, so a drain never starves
   them; beyond it dispatches go first, so the other half of the workers is always
   there for a dispatch (``WorkQueue``'s ``following`` line).
2. The writes that only report (``Lifecycle.follow_progress`` while the AppWrapper
   keeps running: pod counts, PodsReady) take a token from one bucket, ``StatusPace``.
   It refills at ``RATE_PER_S`` up to ``BURST``, and each run whose objects are created
   adds one token: the write its pods will ask for. So these writes reach the hub at
   most ``RATE_PER_S`` a second faster than runs are started: a drain pays for its own
   as it goes and leaves none behind, and a storm that no dispatch caused (a spoke
   relisted, a node lost with hundreds of pods) reaches the hub at ``RATE_PER_S``.
3. A write that finds no token is given the next turn in line (first come, first
   served) and waits for it: the AppWrapper's key comes back at that moment and writes
   whatever is true by then, so however many pod events came meanwhile, one write goes
   (coalesced per AppWrapper). Writes that change what is decided (completion, a
   requeue, failure, a reset) are not metered.

The time is passed in (seconds, from the controller's clock); how many writes wait for
their turn is reported as ``mcad_status_writes_waiting``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from mcad import metrics

RATE_PER_S = 20.0
"""Tokens a second beside those the created runs bring."""
BURST = 40.0
"""The most tokens the bucket holds."""
FORGET_S = 60.0
"""A turn not taken this long after its moment is dropped (the write it was for was no
longer wanted, or its AppWrapper is gone)."""


class StatusPace:
    """A token bucket with turns: ``turn(key, now)`` is 0 when the key may write now, else
    the seconds until its turn (kept for it, so asking again does not queue it twice)."""

    def __init__(self, *, rate: float = RATE_PER_S, burst: float = BURST) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        """May go below zero: the turns handed out ahead of the refill."""
        self._at: float | None = None
        self._turns: OrderedDict[Hashable, float] = OrderedDict()
        """Keys waiting for their turn, by the moment of it (handed out in order)."""

    def earn(self, now: float) -> None:
        """A run's objects were created: one token for the write its pods will need."""
        self._refill(now)
        self._tokens = min(self.burst, self._tokens + 1)

    def turn(self, key: Hashable, now: float) -> float:
        """0 when ``key`` may write now (a token taken, or its turn come), else the
        seconds until its turn."""
        self._refill(now)
        self._forget(now)
        wait = self._turn(key, now)
        metrics.report_status_writes_waiting(len(self._turns))
        return wait

    def _turn(self, key: Hashable, now: float) -> float:
        due = self._turns.get(key)
        if due is not None:
            if due > now:
                return due - now
            del self._turns[key]
            return 0.0
        self._tokens -= 1
        due = now - self._tokens / self.rate  # when the refill reaches this token
        if due <= now:  # (a token short by less than the clock's resolution: none)
            return 0.0
        self._turns[key] = due
        return due - now

    def waiting(self) -> int:
        """Keys holding a turn (for tests and metrics)."""
        return len(self._turns)

    def _refill(self, now: float) -> None:
        if self._at is not None and now > self._at:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        if self._at is None or now > self._at:
            self._at = now

    def _forget(self, now: float) -> None:
        while self._turns:
            key, due = next(iter(self._turns.items()))
            if due + FORGET_S > now:
                return
            del self._turns[key]
