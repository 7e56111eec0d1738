"""After dispatch: follow each AppWrapper to completion, requeue, failure or deletion.

``reconcile(key)`` runs whenever something about one AppWrapper changed (its hub
object, its pods or wrapped objects on the spoke, a timer it asked for), one at a
time per AppWrapper, many AppWrappers in parallel. It reads the pods and the wrapped
objects' conditions, asks ``mcad.core.progress`` what they mean, and applies that:

- running: pod counts and PodsReady to the status; a timer for the readiness deadline;
- completed: Completed or RunningHoldCompletion (quota and capacity released);
- requeue: condition Requeuing, delete every wrapped object, wait until they and their
  pods are gone (force-deleting pods stuck past forceDeletionTimeInSeconds), then
  back to the queue with the counter, the timestamp and the cluster to avoid;
- fail: delete the wrapped objects and mark Failed (the requeue limit fired);
- deleted: delete everything on the spoke, then drop the finalizer; an unreachable
  spoke is retried and the status says so (condition CleanupPending).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.clock import parse_time, rfc3339, utcnow
from mcad.controller.objects import ObjectManager
from mcad.controller.records import FINALIZER, AppWrapperRecord
from mcad.controller.state import ControllerState
from mcad.controller.writer import HubWriter
from mcad.core.capacity import AppWrapperKey
from mcad.core.progress import (
    Completed,
    ItemState,
    KeepRunning,
    count_pods,
    progress,
)
from mcad.core.requeue import Fail, Requeue, force_deletion_due, readiness_timeout
from mcad.core.wrapping import Refusal

log = logging.getLogger(__name__)
RECHECK_S = 2.0


class Lifecycle:
    def __init__(self, *, state: ControllerState, config: RunConfig, writer: HubWriter,
                 objects: ObjectManager, released: Callable[[], None]) -> None:
        self.state = state
        self.config = config
        self.writer = writer
        self.objects = objects
        self.released = released
        self._queue: asyncio.Queue[AppWrapperKey] = asyncio.Queue()
        self._queued: set[AppWrapperKey] = set()
        self._running: set[AppWrapperKey] = set()
        self._again: set[AppWrapperKey] = set()
        self._evictions: dict[AppWrapperKey, tuple[str, str]] = {}

    # -- scheduling work ----------------------------------------------------------------
    def enqueue(self, key: AppWrapperKey) -> None:
        if key in self._running:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def enqueue_at(self, key: AppWrapperKey, moment: datetime) -> None:
        delay = max(0.0, (moment - utcnow()).total_seconds())
        asyncio.get_running_loop().call_later(delay + 0.01, self.enqueue, key)

    def evict(self, key: AppWrapperKey, reason: str, message: str) -> None:
        self._evictions[key] = (reason, message)
        self.enqueue(key)

    async def run(self, workers: int = 16) -> None:
        async with asyncio.TaskGroup() as group:
            for i in range(workers):
                group.create_task(self._work(), name=f"lifecycle worker {i}")

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._running.add(key)
            try:
                await self.reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reconciling %s failed; retrying in %ss", key, RECHECK_S)
                self.enqueue_at(key, utcnow() + timedelta(seconds=RECHECK_S))
            finally:
                self._running.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.enqueue(key)

    # -- deciding -----------------------------------------------------------------------
    async def reconcile(self, key: AppWrapperKey) -> None:
        rec = self.state.appwrappers.get(key)
        if rec is None:
            return
        if rec.deleting:
            await self._cleanup(rec)
            return
        if not rec.admitted or rec.assumed_cluster:
            return  # queued, finished, or its dispatch is still being persisted
        link = self.objects.usable_link(rec.cluster)
        if link is None or not link.health.ready:
            self.enqueue_at(key, utcnow() + timedelta(seconds=RECHECK_S * 2))
            return
        requeuing = rec.condition("Requeuing")
        if requeuing and requeuing.get("status") == "True":
            await self._finish_requeue(rec)
            return
        if key in self._evictions:
            reason, message = self._evictions.pop(key)
            metrics.count_eviction(reason)
            await self._start_requeue(rec, reason, message)
            return
        if not rec.objects_ensured and not await self.objects.ensure(rec):
            if rec.admitted:
                self.enqueue_at(key, utcnow() + timedelta(seconds=RECHECK_S))
            return
        await self._follow(rec)

    async def _follow(self, rec: AppWrapperRecord) -> None:
        link = self.objects.usable_link(rec.cluster)
        assert link is not None
        now = utcnow()
        pods = count_pods(link.pods_of(rec.uid))
        planned = self.objects.plan(rec)
        items = [] if isinstance(planned, Refusal) else [
            ItemState(w.completion, link.item_conditions(w.kind, rec.namespace, w.name) or {})
            for w in planned]
        demand = rec.demand
        decision = progress(
            now=now, policy=rec.requeue_policy(self.config),
            dispatched_at=rec.dispatched_at() or now, requeue_count=rec.requeues(),
            min_available=demand.min_available if demand else 1,
            expected_pods=demand.pods if demand else 0, pods=pods, items=items)
        counts = {"pending": pods.pending, "running": pods.running,
                  "Succeeded": pods.succeeded, "failed": pods.failed}
        if isinstance(decision, KeepRunning):
            if decision.recheck_at is not None:
                self.enqueue_at(rec.key, decision.recheck_at)
            ready = "True" if decision.ready else "False"
            message = (f"{pods.ready + pods.succeeded} of "
                       f"{demand.min_available if demand else 1} pods ready")
            cond = rec.condition("PodsReady") or {}
            if counts == {k: rec.status.get(k, 0) for k in counts} and \
                    cond.get("status") == ready and rec.state == "Running":
                return
            async with self.writer.lock(rec.key):
                await self.writer.patch_status(rec, {**counts, "state": "Running"},
                                               conditions=(("PodsReady", ready,
                                                            "PodsReady" if decision.ready
                                                            else "WaitingForPods", message),))
            if decision.ready and cond.get("status") != "True":
                self.writer.event(rec, reason="PodsReady", message=message)
        elif isinstance(decision, Completed):
            state = "RunningHoldCompletion" if decision.hold else "Completed"
            if rec.state == state and counts == {k: rec.status.get(k, 0) for k in counts}:
                return
            message = "every item is complete" + (", pods still running" if decision.hold
                                                   else "")
            async with self.writer.lock(rec.key):
                ok = await self.writer.patch_status(rec, {**counts, "state": state,
                                                          "message": message},
                                                    conditions=(("Completed",
                                                                 "False" if decision.hold
                                                                 else "True", state,
                                                                 message),))
            if ok and state == "Completed":
                self.writer.event(rec, reason="Completed", message=message)
                self.released()
        elif isinstance(decision, Requeue):
            await self._start_requeue(rec, decision.reason, decision.message)
        elif isinstance(decision, Fail):
            await self.objects.clear(rec)  # the pods must not keep holding GPUs
            async with self.writer.lock(rec.key):
                ok = await self.writer.patch_status(rec, {
                    **counts, "state": "Failed", "message": decision.message,
                }, conditions=(("Failed", "True", decision.reason, decision.message),))
            if ok:
                self.writer.event(rec, reason=decision.reason, message=decision.message,
                                  warning=True)
                self.released()

    # -- requeue --------------------------------------------------------------------------
    async def _start_requeue(self, rec: AppWrapperRecord, reason: str, message: str) -> None:
        async with self.writer.lock(rec.key):
            if not await self.writer.patch_status(
                    rec, {"message": message},
                    conditions=(("Requeuing", "True", reason, message),)):
                return
        self.writer.event(rec, reason="Requeuing", message=message, warning=True)
        await self._finish_requeue(rec)

    async def _clear_spoke(self, rec: AppWrapperRecord, *, since: datetime,
                           unreachable_retry_s: float = RECHECK_S) -> int | None:
        """One step of removing the AppWrapper from its cluster: delete what is there,
        force-delete pods stuck past forceDeletionTimeInSeconds (counted from ``since``),
        and look again later unless nothing is left (0). None: the cluster does not
        answer."""
        left = await self.objects.clear(rec)
        if left and force_deletion_due(rec.requeue_policy(self.config), since, utcnow()):
            await self.objects.force_delete_pods(rec)
        if left != 0:
            delay = RECHECK_S if left else unreachable_retry_s
            self.enqueue_at(rec.key, utcnow() + timedelta(seconds=delay))
        return left

    async def _finish_requeue(self, rec: AppWrapperRecord) -> None:
        cond = rec.condition("Requeuing") or {}
        since = parse_time(cond.get("lastTransitionTime")) or utcnow()
        if await self._clear_spoke(rec, since=since) != 0:
            return
        policy = rec.requeue_policy(self.config)
        now = utcnow()
        count = rec.requeues() + 1
        reason = str(cond.get("reason", "Requeued"))
        message = (f"requeued after: {cond.get('message', reason)}; may be dispatched again "
                   f"after {rfc3339(now + timedelta(seconds=policy.pause_time_in_seconds))}")
        cluster = rec.cluster
        async with self.writer.lock(rec.key):
            ok = await self.writer.patch_status(rec, {
                "state": "Pending", "clusterName": "", "previousCluster": cluster,
                "numberOfRequeueings": count, "requeueTimestamp": rfc3339(now),
                "requeueingTimeInSeconds": readiness_timeout(policy, count),
                "pending": 0, "running": 0, "Succeeded": 0, "failed": 0, "message": message,
            }, conditions=(("Requeuing", "False", "Requeued", message),
                           ("Dispatched", "False", "Requeued", message),
                           ("PodsReady", "False", "Requeued", message),
                           ("Queued", "True", "RequeuePause", message)))
        if ok:
            rec.objects_ensured = False
            metrics.count_requeue(reason)
            self.released()

    # -- deletion ---------------------------------------------------------------------------
    async def _cleanup(self, rec: AppWrapperRecord) -> None:
        if FINALIZER not in (rec.meta.get("finalizers") or []):
            return
        cluster = rec.cluster
        if cluster:
            deleted_at = parse_time(rec.meta.get("deletionTimestamp")) or utcnow()
            left = await self._clear_spoke(rec, since=deleted_at,
                                           unreachable_retry_s=self.config.deletion_retry_seconds)
            if left is None:
                message = (f"cannot remove the wrapped objects from cluster {cluster}: it is "
                           "not reachable; retrying")
                cond = rec.condition("CleanupPending") or {}
                if cond.get("message") != message:
                    async with self.writer.lock(rec.key):
                        await self.writer.patch_status(rec, {"message": message}, conditions=(
                            ("CleanupPending", "True", "ClusterUnreachable", message),))
            if left != 0:
                return
        async with self.writer.lock(rec.key):
            await self.writer.set_finalizer(rec, present=False)
        self.released()
