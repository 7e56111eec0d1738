"""The dispatch cycle, driven by events: snapshot, decide (``mcad.core``), apply.

Phases, as in Kueue:

1. Snapshot the caches into a ``mcad.core.cycle.Snapshot`` (entries are cached per
   AppWrapper version; capacity per node is kept current by the spoke links; the
   pods of dispatched AppWrappers that are not bound yet are reservations).
2. ``dispatch_cycle`` decides.
3. Apply: each dispatch is *assumed* at once (the next cycle already counts it),
   then persisted in the background: finalizer, then the decision in the status
   (conditional on the resourceVersion, so a stale decision fails instead of
   winning), then the wrapped objects (idempotent: an object that exists with our
   uid label is ours). A failed persist rolls the assumption back.
   Pending reasons go to a small write queue that keeps only the latest per
   AppWrapper and writes only what changed. Evictions are handed to the lifecycle.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.clock import parse_time, rfc3339, utcnow
from mcad.controller.objects import ObjectManager
from mcad.controller.records import AppWrapperRecord
from mcad.controller.state import ControllerState
from mcad.controller.writer import HubWriter
from mcad.core.capacity import AppWrapperKey, ClusterCapacity, Reservation
from mcad.core.cycle import CycleResult, Snapshot, dispatch_cycle
from mcad.core.demand import PodSet
from mcad.core.requeue import readiness_timeout
from mcad.core.wrapping import Refusal

log = logging.getLogger(__name__)
PENDING_REWRITE_S = 10.0
PENDING_WRITERS = 4


def _trim(pod_sets: tuple[PodSet, ...], placed: int) -> tuple[PodSet, ...]:
    """The pod sets less ``placed`` pods (those already bound or finished)."""
    out = []
    for pod_set in pod_sets:
        take = min(placed, pod_set.count)
        placed -= take
        if pod_set.count - take:
            out.append(PodSet(pod_set.count - take, pod_set.requests, pod_set.node_selector,
                              pod_set.tolerations, pod_set.source))
    return tuple(out)


class Dispatcher:
    """Runs cycles when something relevant changed and applies their decisions."""

    def __init__(self, *, state: ControllerState, config: RunConfig, writer: HubWriter,
                 objects: ObjectManager, evict: Callable[[AppWrapperKey, str, str], None],
                 follow: Callable[[AppWrapperKey], None]) -> None:
        self.state = state
        self.config = config
        self.writer = writer
        self.objects = objects
        self.evict = evict
        self.follow = follow
        """Hands a persisted dispatch to the lifecycle, which creates the objects (one
        owner per AppWrapper, so creation is never attempted twice at once)."""
        self.wanted = asyncio.Event()
        self._pending_writes: dict[AppWrapperKey, tuple[str, str]] = {}
        self._pending_ready = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._wakeups: set[datetime] = set()

    def trigger(self) -> None:
        self.wanted.set()

    def trigger_at(self, moment: datetime) -> None:
        """Run a cycle at ``moment`` (once, however often it is asked for)."""
        if moment in self._wakeups:
            return
        self._wakeups.add(moment)

        def wake() -> None:
            self._wakeups.discard(moment)
            self.trigger()

        delay = max(0.0, (moment - utcnow()).total_seconds())
        asyncio.get_running_loop().call_later(delay + 0.01, wake)

    # -- the loop -----------------------------------------------------------------------
    async def run(self, ready: Callable[[], bool]) -> None:
        async with asyncio.TaskGroup() as group:
            for i in range(PENDING_WRITERS):
                group.create_task(self._write_pending(), name=f"pending writer {i}")
            while True:
                await self.wanted.wait()
                await asyncio.sleep(0.005)  # let a burst of events land in one cycle
                self.wanted.clear()
                if not ready():
                    continue
                self.cycle()

    def snapshot(self, now: datetime) -> Snapshot:
        entries = []
        reservations: dict[str, list[Reservation]] = {}
        for rec in self.state.appwrappers.values():
            if rec.queued or rec.admitted:
                entries.append(rec.core_entry(self.config))
            if rec.admitted and rec.demand is not None:
                link = self.state.links.get(rec.cluster)
                if link is not None:
                    left = _trim(rec.demand.pod_sets, link.placed_pods_of(rec.uid))
                    if left:
                        reservations.setdefault(rec.cluster, []).append(
                            Reservation(rec.key, left))
        clusters: list[ClusterCapacity] = [
            link.capacity(tuple(reservations.get(name, ())))
            for name, link in sorted(self.state.links.items())]
        policy = self.config.cycle_policy()
        return Snapshot(now=now, appwrappers=tuple(entries), clusters=tuple(clusters),
                        quota=self.state.forest, policy=policy)

    def cycle(self) -> CycleResult:
        started = time.perf_counter()
        now = utcnow()
        snapshot = self.snapshot(now)
        result = dispatch_cycle(snapshot)
        metrics.observe_dispatch_cycle(time.perf_counter() - started,
                                       appwrappers=len(snapshot.appwrappers))
        for dispatch in result.dispatches:
            rec = self.state.appwrappers[dispatch.key]
            rec.assumed_cluster, rec.entry = dispatch.cluster, None
            self._spawn(self._dispatch(rec, dispatch.cluster), f"dispatch {dispatch.key}")
        reasons: dict[str, int] = {}
        for pending in result.pending:
            reasons[pending.reason] = reasons.get(pending.reason, 0) + 1
            rec = self.state.appwrappers[pending.key]
            if (pending.reason, pending.message) != rec.last_pending:
                self._pending_writes[pending.key] = (pending.reason, pending.message)
                self._pending_ready.set()
            if pending.reason == "RequeuePause" and rec.entry and rec.entry.not_before:
                self.trigger_at(rec.entry.not_before)
        for eviction in result.evictions:
            self.evict(eviction.key, eviction.reason, eviction.message)
        metrics.report_pending_reasons(reasons)
        return result

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    # -- applying -----------------------------------------------------------------------
    async def _dispatch(self, rec: AppWrapperRecord, cluster: str) -> None:
        async with self.writer.lock(rec.key):
            try:
                await self._persist_dispatch(rec, cluster)
            finally:
                if rec.assumed_cluster == cluster and rec.status.get("clusterName") != cluster:
                    rec.assumed_cluster, rec.entry = None, None  # not persisted: undo
                    self.trigger()
        if rec.status.get("clusterName") == cluster:
            self.follow(rec.key)

    async def _persist_dispatch(self, rec: AppWrapperRecord, cluster: str) -> None:
        planned = self.objects.plan(rec)
        if isinstance(planned, Refusal):
            await self.objects.refuse(rec, planned)
            return
        if not await self.writer.set_finalizer(rec, present=True):
            return
        now = utcnow()
        # Queue wait runs from creation, or from the last requeue when there was one.
        since = parse_time(rec.status.get("requeueTimestamp")) or \
            parse_time(rec.meta.get("creationTimestamp")) or now
        policy = rec.requeue_policy(self.config)
        message = f"dispatched to cluster {cluster}"
        ok = await self.writer.patch_status(rec, {
            "state": "Running", "clusterName": cluster, "message": message,
            "dispatchTimestamp": rfc3339(now),
            "controllerfirstdispatchtimestamp": rec.status.get(
                "controllerfirstdispatchtimestamp") or rfc3339(now),
            "controllerfirsttimestamp": rec.status.get("controllerfirsttimestamp")
            or rfc3339(now),
            "requeueingTimeInSeconds": readiness_timeout(policy, rec.requeues()),
        }, conditions=(("Queued", "False", "Dispatched", message),
                       ("Dispatched", "True", "Dispatched", message),
                       ("PodsReady", "False", "Dispatched", "waiting for the gang's pods")))
        if not ok:
            return
        rec.objects_ensured = False
        metrics.count_dispatch(cluster)
        metrics.observe_queue_wait(max(0.0, (now - since).total_seconds()))
        self.writer.event(rec, reason="Dispatched", message=message)

    async def _write_pending(self) -> None:
        while True:
            while not self._pending_writes:
                self._pending_ready.clear()
                await self._pending_ready.wait()
            key, (reason, message) = self._pending_writes.popitem()
            rec = self.state.appwrappers.get(key)
            if rec is None or not rec.queued:
                continue
            now = utcnow()
            if (rec.last_pending[0] == reason and rec.last_pending_at is not None
                    and now - rec.last_pending_at < timedelta(seconds=PENDING_REWRITE_S)):
                continue  # same reason, new numbers: not worth a write every cycle
            async with self.writer.lock(key):
                if not rec.queued:
                    continue
                ok = await self.writer.patch_status(rec, {
                    "state": "Pending", "message": message,
                    "controllerfirsttimestamp": rec.status.get("controllerfirsttimestamp")
                    or rfc3339(now),
                }, conditions=(("Queued", "True", reason, message),))
            if ok:
                rec.last_pending, rec.last_pending_at = (reason, message), now
