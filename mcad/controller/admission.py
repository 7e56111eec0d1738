"""Before dispatch: persist a dispatch order, or say why the AppWrapper waits.

Both run inside the AppWrapper's reconcile (one at a time per AppWrapper), carrying
out the dispatcher's orders, and record what they did in the record's ``Progress``:

- ``hold_finalizer``: the finalizer, when a queued AppWrapper is first seen (so the
  dispatch itself is one status write and the objects' creation);
- ``persist_dispatch``: the finalizer if it is not on yet, then the decision in the
  status with its run
  (``status.runId``), written *conditionally on the resourceVersion* (a stale decision
  fails instead of winning). A Conflict is not taken at its word: the request may have
  been retried after a time-out whose first attempt was committed, so the object is
  read again, and when the hub already records this run the dispatch stands. Otherwise
  the order failed: the dispatcher drops it at its next cycle, and a Conflict or any
  other failure keeps the AppWrapper out of cycles for a backoff that doubles per
  failure (1 s to 5 min), so a hub that refuses writes is not hammered by a cycle per
  event; the work queue's timer for the key ends the hold.
- ``write_pending``: the latest pending reason, skipped when nothing changed and
  coalesced when only the numbers in the message changed (at most every 10 s).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.clock import parse_time, rfc3339, utcnow
from mcad.controller.objects import ObjectManager
from mcad.controller.records import AppWrapperRecord, DispatchOrder, promise_status
from mcad.controller.writer import HubWriter, Write
from mcad.core.life.requeue import readiness_timeout
from mcad.core.life.wrapping import Refusal
from mcad.gateway.errors import ApiError

log = logging.getLogger(__name__)
PENDING_REWRITE_S = 10.0
PERSIST_BACKOFF_MIN_S, PERSIST_BACKOFF_MAX_S = 1.0, 300.0


def persist_backoff(failures: int) -> float:
    """Seconds a failed dispatch persist keeps the AppWrapper out of cycles."""
    return min(PERSIST_BACKOFF_MIN_S * 2.0 ** max(failures - 1, 0), PERSIST_BACKOFF_MAX_S)


class Admission:
    def __init__(self, *, config: RunConfig, writer: HubWriter, objects: ObjectManager,
                 changed: Callable[[], None]) -> None:
        self.config = config
        self.writer = writer
        self.objects = objects
        self.changed = changed
        """Tells the dispatcher that quota or capacity was given back."""

    async def persist_dispatch(self, rec: AppWrapperRecord, order: DispatchOrder) -> bool:
        """Persist the dispatch order; True when the hub now records its run."""
        progress = rec.progress
        try:
            outcome = await self._persist(rec, order)
            problem = "the hub holds a newer version of it (Conflict)"
        except ApiError as err:
            outcome, problem = Write.FAILED, err.message
        if outcome is Write.DONE:
            progress.persisted, progress.persist_failures, progress.hold_until = \
                order.run, 0, None
            return True
        progress.failed = order.run
        if outcome is not Write.GONE:
            progress.persist_failures += 1
            pause = persist_backoff(progress.persist_failures)
            progress.hold_until = utcnow() + timedelta(seconds=pause)
            log.warning("dispatching %s to %s could not be recorded on the hub: %s; it "
                        "waits %.0fs before it is considered again", rec.key, order.cluster,
                        problem, pause)
        self.changed()
        return False

    async def _persist(self, rec: AppWrapperRecord, order: DispatchOrder) -> Write:
        planned = self.objects.plan(rec)
        if isinstance(planned, Refusal):
            await self.objects.refuse(rec, planned)
            return Write.GONE  # Failed for good: nothing to hold it back for
        finalizer = await self.writer.set_finalizer(rec, present=True)
        if not finalizer:
            return finalizer
        cluster = order.cluster
        now = utcnow()
        # Queue wait runs from creation, or from the last requeue when there was one.
        since = parse_time(rec.status.get("requeueTimestamp")) or \
            parse_time(rec.meta.get("creationTimestamp")) or now
        policy = rec.requeue_policy(self.config)
        message = f"dispatched to cluster {cluster}"
        if order.promise is not None:  # the user learns the bargain when it is struck
            message += (f" by reservation backfill, on the promise to end by "
                        f"{promise_status(order.promise)['endBy']}, when the room it "
                        f"takes is reserved for {order.promise.head}; still running then, "
                        "it is evicted (Preempted)")
        pods = order.pods if order.pods is not None else (rec.demand.pods if rec.demand
                                                          else None)
        ok = await self.writer.patch_status(rec, {
            "state": "Running", "clusterName": cluster, "runId": order.run,
            "message": message, "dispatchTimestamp": rfc3339(now),
            "componentStatus": [{"apiVersion": w.api_version, "kind": w.kind, "name": w.name}
                                for w in planned],
            "dispatchedSpecHash": rec.spec_digest(),
            "controllerfirstdispatchtimestamp": rec.status.get(
                "controllerfirstdispatchtimestamp") or rfc3339(now),
            "controllerfirsttimestamp": rec.status.get("controllerfirsttimestamp")
            or rfc3339(now),
            "requeueingTimeInSeconds": readiness_timeout(policy, rec.requeues()),
            "expectedEnd": _after(now, rec.run_expected()),
            "runDeadline": _after(now, rec.run_limit()),
            **({"admittedPods": pods, "fullPods": rec.demand.pods}
               if rec.elastic and rec.demand else {}),
            # Where its pods are kept (read back at creation, after a restart too);
            # None removes an earlier run's.
            "topology": order.pin.to_status() if order.pin is not None else None,
            # The promise it starts on, for whichever leader is there when it is due.
            "backfillPromise": promise_status(order.promise)
            if order.promise is not None else None,
        }, conditions=(("Queued", "False", "Dispatched", message),
                       ("Dispatched", "True", "Dispatched", message),
                       ("PodsReady", "False", "WaitingForPods", "waiting for the gang's pods")),
            committed=lambda obj: (obj.get("status") or {}).get("runId") == order.run)
        if not ok:
            return ok
        progress = rec.progress
        progress.counts_written_at = now  # written with none: the first pods wait their turn
        progress.last_pending = None
        metrics.count_dispatch(cluster)
        metrics.observe_queue_wait(max(0.0, (now - since).total_seconds()))
        self.writer.event(rec, reason="Dispatched", message=message)
        return Write.DONE

    async def hold_finalizer(self, rec: AppWrapperRecord) -> None:
        """Put mcad's finalizer on a queued AppWrapper (once; a Conflict is retried at
        its next reconcile, or by the dispatch's own check)."""
        await self.writer.set_finalizer(rec, present=True)

    async def write_pending(self, rec: AppWrapperRecord, now: datetime) -> float | None:
        """Write the latest pending reason; seconds until a coalesced write is due."""
        wanted = rec.orders.pending
        progress = rec.progress
        if wanted is None or wanted == progress.last_pending:
            return None
        last = progress.last_pending
        if last is not None and last.reason == wanted.reason and \
                progress.last_pending_at is not None:
            due = progress.last_pending_at + timedelta(seconds=PENDING_REWRITE_S)
            if now < due:
                return (due - now).total_seconds()  # same reason, new numbers: later
        ok = await self.writer.patch_status(rec, {
            "state": "Pending", "message": wanted.message,
            "controllerfirsttimestamp": rec.status.get("controllerfirsttimestamp")
            or rfc3339(now),
        }, conditions=(("Queued", "True", wanted.reason, wanted.message),))
        if ok:
            if wanted.reason == "WaitingForPreemption" and (
                    last is None or last.reason != wanted.reason):
                self.writer.event(rec, reason="Preempting", message=wanted.message)
            progress.last_pending, progress.last_pending_at = wanted, now
        return None


def _after(start: datetime, seconds: int | None) -> str | None:
    return rfc3339(start + timedelta(seconds=seconds)) if seconds else None
