"""Estimated starts, refreshed from the dispatcher's last cycle (a task of the leader).

Why a task of its own and not a part of every cycle: a forecast plays up to ``maxCycles``
cycles forward (``mcad.core.views.estimates``), tens of times the cost of the real cycle, and
a start estimate that is 15 s old is as useful as a fresh one. So the estimator takes
the last cycle's snapshot and result (frozen values: safe to read from a thread), works
out what each running AppWrapper is expected to take (``RuntimeBook``: declared, else
its family's past runs, else its namespace's, else the default), runs the forecast in a
worker thread, and keeps the answer for ``mcad queue`` and ``mcad explain``. It waits
``everySeconds`` between forecasts, or ten times the last forecast's duration when that is
longer, so forecasting never takes more than a tenth of the controller's time.

It also measures itself: the first estimate each queued AppWrapper got is kept, and
when that AppWrapper is dispatched the difference between the estimate and the real
start is observed in ``mcad_start_estimate_error_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.records import AppWrapperRecord
from mcad.controller.runtimes import RuntimeBook
from mcad.controller.state import ControllerState
from mcad.core.cycle.snapshot import Admitted, AppWrapperEntry, CycleResult, Snapshot
from mcad.core.life.runhistory import RuntimeEstimate
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.views.estimates import Estimate, Estimates, estimate_starts
from mcad.core.workload.durations import format_duration

log = logging.getLogger(__name__)
LastCycle = Callable[[], "tuple[Snapshot, CycleResult] | None"]


@dataclass(frozen=True, slots=True)
class Forecast:
    """The estimator's last answer: when each queued AppWrapper should start."""

    made_at: datetime
    """The moment of the cycle the forecast started from."""
    estimates: Estimates
    runtimes: dict[AppWrapperKey, RuntimeEstimate]
    """What each AppWrapper of the snapshot was expected to run for."""
    seconds: float
    """How long the forecast took to make."""

    def estimate(self, key: AppWrapperKey) -> Estimate | None:
        return self.estimates.starts.get(key)

    def describe(self, key: AppWrapperKey) -> tuple[datetime | None, str]:
        """When ``key`` should start and what that rests on, in a sentence: "estimate:
        after team-a/llama-7 ends, expected ...; team-a/llama-7 runs 2h (from 12 past
        runs of its family)"."""
        found = self.estimates.starts.get(key)
        if found is None:
            return None, "no estimate yet: the forecast is made every few seconds"
        basis = found.basis
        parts = [f"{after} runs {format_duration(self.runtimes[after].seconds)} "
                 f"({self.runtimes[after].describe()})"
                 for after in found.after[:3] if after in self.runtimes]
        if parts:
            basis += "; " + "; ".join(parts)
        errors = [e for after in found.after if after in self.runtimes
                  for e in (self.runtimes[after].error,) if e is not None]
        if errors and found.start is not None:
            basis += f"; give or take {max(errors):.0f}s, as their past runs went"
        own = self.runtimes.get(key)
        if own is not None and found.start is not None:
            basis += f"; it is expected to run {format_duration(own.seconds)} ({own.describe()})"
        return found.start, basis


class Estimator:
    def __init__(self, *, state: ControllerState, config: RunConfig, book: RuntimeBook,
                 last_cycle: LastCycle) -> None:
        self.state = state
        self.config = config
        self.book = book
        self.last_cycle = last_cycle
        self.forecast: Forecast | None = None
        self._first: dict[AppWrapperKey, tuple[str, datetime]] = {}
        """Queued AppWrapper -> (uid, its first estimated start), for the error metric."""

    async def run(self) -> None:
        settings = self.config.estimates
        wait = settings.every_seconds
        while True:
            await asyncio.sleep(wait)
            last = self.last_cycle()
            if last is None:
                continue
            started = time.perf_counter()
            forecast = await self.refresh(*last)
            wait = max(settings.every_seconds, 10 * forecast.seconds)
            log.debug("estimates: %d queued, %d cycles, %.2fs", len(forecast.estimates.starts),
                      forecast.estimates.cycles, time.perf_counter() - started)

    async def refresh(self, snapshot: Snapshot, result: CycleResult) -> Forecast:
        """A forecast from ``snapshot`` (whose cycle gave ``result``) and keep the answer."""
        self.forecast = await self._forecast(snapshot, result, self.runtimes(snapshot))
        metrics.observe_estimate_plan(self.forecast.seconds)
        self.score(snapshot, self.forecast.estimates)
        return self.forecast

    async def dry_run(self, snapshot: Snapshot, result: CycleResult,
                      candidate: AppWrapperRecord) -> tuple[datetime | None, str]:
        """When ``candidate``, not submitted (``snapshot`` holds it as if created now,
        ``result`` is the cycle on it), would start, and what that rests on: a forecast of
        its own, with the run times the last forecast used for the others."""
        last = self.forecast
        runtimes = dict(last.runtimes) if last is not None else self.runtimes(snapshot)
        runtimes[candidate.key] = self.book.expected(candidate)
        return (await self._forecast(snapshot, result, runtimes)).describe(candidate.key)

    async def _forecast(self, snapshot: Snapshot, result: CycleResult,
                    runtimes: dict[AppWrapperKey, RuntimeEstimate]) -> Forecast:
        """The core's forecast in a worker thread (frozen values), within the policy's budget:
        running work ends as ``runtimes`` say, a queued AppWrapper runs its own."""
        settings = self.config.estimates
        default = timedelta(seconds=settings.default_runtime_seconds)

        def runtime_of(entry: AppWrapperEntry) -> timedelta:
            known = runtimes.get(entry.key)
            return known.duration if known is not None else default

        started = time.perf_counter()
        estimates = await asyncio.to_thread(
            estimate_starts, snapshot, expected_end=expected_ends(snapshot, runtimes),
            runtime_of=runtime_of, horizon=timedelta(seconds=settings.horizon_seconds),
            max_steps=settings.max_cycles, first=result)
        return Forecast(snapshot.now, estimates, runtimes, time.perf_counter() - started)

    def runtimes(self, snapshot: Snapshot) -> dict[AppWrapperKey, RuntimeEstimate]:
        out: dict[AppWrapperKey, RuntimeEstimate] = {}
        records = self.state.appwrappers
        for entry in snapshot.appwrappers:
            rec = records.get(entry.key)
            if rec is not None:
                out[entry.key] = self.book.expected(rec)
        return out

    def score(self, snapshot: Snapshot, estimates: Estimates) -> None:
        """Observe the error of the first estimate of every AppWrapper dispatched since
        the last forecast; keep the first estimate of every newly queued one."""
        entries = {e.key: e for e in snapshot.appwrappers}
        for key, (uid, first) in list(self._first.items()):
            entry = entries.get(key)
            if entry is None or entry.uid != uid:
                del self._first[key]  # deleted, or finished before we saw it run
            elif isinstance(entry.phase, Admitted) and entry.dispatched is not None:
                metrics.observe_start_estimate_error(
                    abs((entry.dispatched - first).total_seconds()))
                del self._first[key]
        for key, estimate in estimates.starts.items():
            if estimate.start is not None and key not in self._first and key in entries:
                self._first[key] = (entries[key].uid, estimate.start)


def expected_ends(snapshot: Snapshot, runtimes: dict[AppWrapperKey, RuntimeEstimate]
                  ) -> dict[AppWrapperKey, datetime]:
    """When each running AppWrapper of ``snapshot`` should end: its declared end, else
    its dispatch plus its expected run time."""
    ends: dict[AppWrapperKey, datetime] = {}
    for entry in snapshot.appwrappers:
        if not isinstance(entry.phase, Admitted):
            continue
        learned = runtimes.get(entry.key)
        end = entry.end(learned.seconds if learned is not None else None)
        if end is not None:
            ends[entry.key] = end
    return ends
