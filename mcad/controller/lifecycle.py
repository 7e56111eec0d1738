"""After dispatch: follow each AppWrapper to completion, requeue, failure or deletion.

Called from the AppWrapper's reconcile (one at a time per AppWrapper, many AppWrappers
in parallel), whenever something about it changed: its hub object, its pods or
wrapped objects on the spoke, an eviction order, a timer it asked for. It reads the
pods and the wrapped objects' conditions, asks ``mcad.core.progress`` what they mean,
and applies that:

- running: pod counts and PodsReady to the status; a look again at the readiness
  deadline (returned as seconds: the work queue keeps the timer);
- completed: Completed or RunningHoldCompletion (quota and capacity released);
- requeue: condition Requeuing, delete every wrapped object, wait until they and their
  pods are gone (force-deleting pods stuck past forceDeletionTimeInSeconds), then
  back to the queue with the counter, the timestamp and the cluster to avoid;
- evicted (an order from the dispatcher, valid for the run it was given for): the
  same requeue, with the order's reason;
- fail: delete the wrapped objects and mark Failed (the requeue limit fired);
- deleted: delete everything on the spoke, then drop the finalizer; an unreachable
  spoke is retried and the status says so (condition CleanupPending).

Every method returns the seconds after which to look again, or None.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.clock import parse_time, rfc3339, utcnow
from mcad.controller.objects import ObjectManager
from mcad.controller.records import FINALIZER, AppWrapperRecord
from mcad.controller.writer import HubWriter
from mcad.core.progress import Completed, ItemState, KeepRunning, count_pods, progress
from mcad.core.requeue import Fail, Requeue, force_deletion_due, readiness_timeout
from mcad.core.wrapping import Refusal

log = logging.getLogger(__name__)
RECHECK_S = 2.0


class Lifecycle:
    def __init__(self, *, config: RunConfig, writer: HubWriter, objects: ObjectManager,
                 changed: Callable[[], None]) -> None:
        self.config = config
        self.writer = writer
        self.objects = objects
        self.changed = changed
        """Tells the dispatcher that quota or capacity was given back."""

    # -- deciding -----------------------------------------------------------------------
    async def follow(self, rec: AppWrapperRecord) -> float | None:
        """The dispatched AppWrapper's next step."""
        link = self.objects.usable_link(rec.cluster)
        if link is None or not link.health.ready:
            return RECHECK_S * 2  # the link tells us when it is back; this is a safety net
        requeuing = rec.condition("Requeuing")
        if requeuing and requeuing.get("status") == "True":
            return await self._finish_requeue(rec)
        order = rec.eviction
        if order is not None:
            rec.eviction = None
            if order.dispatch == str(rec.status.get("dispatchTimestamp", "")):
                metrics.count_eviction(order.reason)
                self.writer.event(rec, reason=order.reason, message=order.message,
                                  warning=True)
                return await self._start_requeue(rec, order.reason, order.message)
        if not rec.objects_ensured and not await self.objects.ensure(rec):
            return RECHECK_S if rec.admitted else None
        return await self._progress(rec)

    async def _progress(self, rec: AppWrapperRecord) -> float | None:
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
        same_counts = counts == {k: rec.status.get(k, 0) for k in counts}
        if isinstance(decision, KeepRunning):
            again = None if decision.recheck_at is None else \
                max(0.0, (decision.recheck_at - now).total_seconds()) + 0.01
            ready = "True" if decision.ready else "False"
            message = (f"{pods.ready + pods.succeeded} of "
                       f"{demand.min_available if demand else 1} pods ready")
            cond = rec.condition("PodsReady") or {}
            if same_counts and cond.get("status") == ready and rec.state == "Running":
                return again
            await self.writer.patch_status(
                rec, {**counts, "state": "Running"},
                conditions=(("PodsReady", ready, "PodsReady" if decision.ready
                             else "WaitingForPods", message),))
            if decision.ready and cond.get("status") != "True":
                self.writer.event(rec, reason="PodsReady", message=message)
            return again
        if isinstance(decision, Completed):
            state = "RunningHoldCompletion" if decision.hold else "Completed"
            if rec.state == state and same_counts:
                return None
            message = "every item is complete" + (", pods still running" if decision.hold
                                                   else "")
            ok = await self.writer.patch_status(
                rec, {**counts, "state": state, "message": message},
                conditions=(("Completed", "False" if decision.hold else "True", state,
                             message),))
            if ok and state == "Completed":
                self.writer.event(rec, reason="Completed", message=message)
                self.changed()
            return None
        if isinstance(decision, Requeue):
            return await self._start_requeue(rec, decision.reason, decision.message)
        assert isinstance(decision, Fail)
        await self.objects.clear(rec)  # the pods must not keep holding GPUs
        ok = await self.writer.patch_status(
            rec, {**counts, "state": "Failed", "message": decision.message},
            conditions=(("Failed", "True", decision.reason, decision.message),))
        if ok:
            self.writer.event(rec, reason=decision.reason, message=decision.message,
                              warning=True)
            self.changed()
        return None

    # -- requeue --------------------------------------------------------------------------
    async def _start_requeue(self, rec: AppWrapperRecord, reason: str,
                             message: str) -> float | None:
        if not await self.writer.patch_status(
                rec, {"message": message}, conditions=(("Requeuing", "True", reason, message),)):
            return None
        self.writer.event(rec, reason="Requeuing", message=message, warning=True)
        return await self._finish_requeue(rec)

    async def _clear_spoke(self, rec: AppWrapperRecord, *, since: datetime) -> int | None:
        """One step of removing the AppWrapper from its cluster: delete what is there and
        force-delete pods stuck past forceDeletionTimeInSeconds (counted from ``since``).
        Returns how many objects and pods are left (0: all gone), None when the cluster
        does not answer."""
        left = await self.objects.clear(rec)
        if left and force_deletion_due(rec.requeue_policy(self.config), since, utcnow()):
            await self.objects.force_delete_pods(rec)
        return left

    async def _finish_requeue(self, rec: AppWrapperRecord) -> float | None:
        cond = rec.condition("Requeuing") or {}
        since = parse_time(cond.get("lastTransitionTime")) or utcnow()
        left = await self._clear_spoke(rec, since=since)
        if left != 0:
            return RECHECK_S
        policy = rec.requeue_policy(self.config)
        now = utcnow()
        count = rec.requeues() + 1
        reason = str(cond.get("reason", "Requeued"))
        message = (f"requeued after: {cond.get('message', reason)}; may be dispatched again "
                   f"after {rfc3339(now + timedelta(seconds=policy.pause_time_in_seconds))}")
        cluster = rec.cluster
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
            rec.objects_ensured, rec.eviction = False, None
            rec.last_pending, rec.last_pending_at = ("RequeuePause", message), now
            metrics.count_requeue(reason)
            self.changed()
        return None

    # -- deletion ---------------------------------------------------------------------------
    async def cleanup(self, rec: AppWrapperRecord) -> float | None:
        """The AppWrapper is being deleted: empty its cluster, then drop the finalizer."""
        if FINALIZER not in (rec.meta.get("finalizers") or []):
            return None
        cluster = rec.cluster
        if cluster:
            deleted_at = parse_time(rec.meta.get("deletionTimestamp")) or utcnow()
            left = await self._clear_spoke(rec, since=deleted_at)
            if left is None:
                message = (f"cannot remove the wrapped objects from cluster {cluster}: it is "
                           "not reachable; retrying")
                cond = rec.condition("CleanupPending") or {}
                if cond.get("message") != message:
                    await self.writer.patch_status(rec, {"message": message}, conditions=(
                        ("CleanupPending", "True", "ClusterUnreachable", message),))
                return self.config.deletion_retry_seconds
            if left:
                return RECHECK_S
        await self.writer.set_finalizer(rec, present=False)
        self.changed()
        return None
