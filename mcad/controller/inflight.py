"""How many AppWrappers are reconciled at once: a limit that follows the hub's write latency.

Why: every reconcile that dispatches writes to the hub (the dispatch persisted, then
more status) and to a spoke (the wrapped objects). With the API servers' CPU full, the
writes of 32 reconciles at once wait behind each other in the servers, and so does the
write of a priority job decided ahead of the queue: behind 4,000 queued its Job came
0.95 s after it was submitted with 32 at once, 0.33 s with 8 (docs/benchmarks.md, "the
tenth stop"); the hub's mean status PATCH went from 58-68 ms to 20-21 ms, and the
drain's rate did not move. With servers that have CPU to spare, though, 8 at once cap a
drain at 8 over a dispatch's write time, where 32 would not. No fixed count is right
for both, so the count follows what the hub answers, as TCP Vegas sets its window and
Netflix's concurrency-limits set theirs:

- every answered write on the hub is a sample: its round trip, and how many reconciles
  were in progress when it came back;
- once a window holds ``MIN_SAMPLES`` and ``WINDOW_S`` has passed, it is read:
  ``rtt`` is its median round trip, ``base`` the lowest window's median in the last
  ``BASE_S`` (the server with nothing of ours queued ahead; a median against medians,
  since the spread of one window's answers is not a line in the server), ``in_flight``
  the mean count in progress;
- ``queued = in_flight * (1 - base / rtt)``: by Little's law, how many of ours wait
  in the server rather than being served;
- between ``ALPHA`` and ``BETA`` queued the limit holds; above ``BETA`` it comes down
  half way towards ``in_flight - queued + (ALPHA + BETA) / 2``, enough to keep the
  server busy with a short line; under ``ALPHA`` it goes up half way towards the same,
  and only while the limit is used (at least half of it in progress): a quiet spell
  neither raises it on no evidence nor lowers it, since nothing of ours waits;
- it stays between ``least`` (8, or ``workers`` if lower: the count measured to
  dispatch as fast on saturated servers) and ``most`` (the ``workers`` setting), and
  starts at ``most``, today's behaviour until the hub says otherwise.

The hub alone is read: every dispatch writes there, and a limit shared by all
AppWrappers is not the lever for one slow spoke (a spoke's writes hold only the
workers of its own AppWrappers, up to the request timeout). The order in which keys
are taken is the work queue's, so a priority job still takes the next free place.

Pure: samples and the time are passed in.
"""

from __future__ import annotations

import math
from collections import deque
from statistics import median

WINDOW_S = 0.5
"""The shortest window read."""
MIN_SAMPLES = 8
"""The fewest answers a window is read with (fewer: it waits for more)."""
BASE_S = 600.0
"""How long the lowest window's round trip is remembered: long enough that a drain of minutes,
whose every write waits, does not take its own waits for the server's pace."""
ALPHA = 3.0
"""Fewer of ours queued than this: the limit may grow."""
BETA = 6.0
"""More of ours queued than this: the limit shrinks."""
LEAST = 8
"""The floor (or ``most`` if lower)."""


class InflightLimit:
    """How many reconciles may be in progress: ``limit``, moved by ``observe``."""

    def __init__(self, *, most: int, least: int = LEAST) -> None:
        self.most = most
        self.least = min(least, most)
        self.limit = most
        self._rtts: list[float] = []
        self._in_flight: list[int] = []
        self._opened: float | None = None
        self._lows: deque[tuple[float, float]] = deque()
        """(when a window was read, its median round trip) for the windows of the last
        ``BASE_S`` that no later window undercut: oldest first, rising, so the first is
        ``base``."""
        self.base: float | None = None
        self.queued = 0.0
        """The last window's estimate of ours waiting in the server (for the log)."""

    def observe(self, rtt: float, *, in_flight: int, now: float) -> bool:
        """One write answered after ``rtt`` seconds, with ``in_flight`` reconciles in
        progress; True when the limit changed."""
        if self._opened is None:
            self._opened = now
        self._rtts.append(rtt)
        self._in_flight.append(in_flight)
        if len(self._rtts) < MIN_SAMPLES or now - self._opened < WINDOW_S:
            return False
        return self._read(now)

    def _read(self, now: float) -> bool:
        rtts, counts = self._rtts, self._in_flight
        self._rtts, self._in_flight, self._opened = [], [], None
        rtt = median(rtts)
        while self._lows and self._lows[-1][1] >= rtt:
            self._lows.pop()  # (never the lowest again: this one is lower and later)
        self._lows.append((now, rtt))
        while self._lows[0][0] < now - BASE_S:
            self._lows.popleft()
        base = self.base = self._lows[0][1]
        in_flight = sum(counts) / len(counts)
        self.queued = queued = in_flight * (1 - base / rtt) if rtt > 0 else 0.0
        target = in_flight - queued + (ALPHA + BETA) / 2
        if queued < ALPHA:  # the server keeps up: more, if the limit is used
            if target <= self.limit or in_flight < self.limit / 2:
                return False  # (little used: no evidence that more would be served)
        elif queued > BETA:  # ours wait in the server: fewer
            if target >= self.limit:
                return False
        else:
            return False
        wanted = (self.limit + target) / 2
        limit = math.ceil(wanted) if wanted > self.limit else math.floor(wanted)
        limit = max(self.least, min(self.most, limit))
        changed = limit != self.limit
        self.limit = limit
        return changed
