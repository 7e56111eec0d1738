"""Before dispatch: persist a dispatch decision, or say why the AppWrapper waits.

Both run inside the AppWrapper's reconcile (one at a time per AppWrapper), carrying
out what the dispatcher recorded:

- ``persist_dispatch``: finalizer, then the decision in the status, written
  *conditionally on the resourceVersion* (a stale decision fails instead of winning).
  A Conflict or NotFound drops the assumption at once (the next cycle decides again on
  the newer object); any other failure drops it and keeps the AppWrapper out of
  cycles for a backoff that doubles per failure (1 s to 5 min), so a hub that refuses
  writes is not hammered by a cycle per event.
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
from mcad.controller.records import AppWrapperRecord
from mcad.controller.writer import HubWriter
from mcad.core.requeue import readiness_timeout
from mcad.core.wrapping import Refusal, dispatch_digest
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

    async def persist_dispatch(self, rec: AppWrapperRecord) -> bool:
        """Persist the assumed dispatch; True when the hub now says it is dispatched."""
        cluster = rec.assumed_cluster
        assert cluster is not None
        try:
            done = await self._persist(rec, cluster)
        except ApiError as err:
            rec.persist_failures += 1
            pause = persist_backoff(rec.persist_failures)
            rec.hold_until = utcnow() + timedelta(seconds=pause)
            log.warning("dispatching %s to %s could not be recorded on the hub: %s; it "
                        "waits %.0fs before it is considered again", rec.key, cluster,
                        err.message, pause)
            done = False
        if rec.assumed_cluster == cluster and rec.status.get("clusterName") != cluster:
            rec.assumed_cluster, rec.assumed_pods, rec.entry = None, None, None  # undo
            self.changed()
        if done:
            rec.persist_failures, rec.hold_until = 0, None
        return done

    async def _persist(self, rec: AppWrapperRecord, cluster: str) -> bool:
        planned = self.objects.plan(rec)
        if isinstance(planned, Refusal):
            await self.objects.refuse(rec, planned)
            return False
        if not await self.writer.set_finalizer(rec, present=True):
            return False
        now = utcnow()
        # Queue wait runs from creation, or from the last requeue when there was one.
        since = parse_time(rec.status.get("requeueTimestamp")) or \
            parse_time(rec.meta.get("creationTimestamp")) or now
        policy = rec.requeue_policy(self.config)
        message = f"dispatched to cluster {cluster}"
        ok = await self.writer.patch_status(rec, {
            "state": "Running", "clusterName": cluster, "message": message,
            "dispatchTimestamp": rfc3339(now),
            "componentStatus": [{"apiVersion": w.api_version, "kind": w.kind, "name": w.name}
                                for w in planned],
            "dispatchedSpecHash": dispatch_digest(rec.spec),
            "controllerfirstdispatchtimestamp": rec.status.get(
                "controllerfirstdispatchtimestamp") or rfc3339(now),
            "controllerfirsttimestamp": rec.status.get("controllerfirsttimestamp")
            or rfc3339(now),
            "requeueingTimeInSeconds": readiness_timeout(policy, rec.requeues()),
            "expectedEnd": _after(now, rec.run_expected()),
            "runDeadline": _after(now, rec.run_limit()),
            **({"admittedPods": rec.admitted_pods() or rec.demand.pods,
                "fullPods": rec.demand.pods} if rec.elastic and rec.demand else {}),
        }, conditions=(("Queued", "False", "Dispatched", message),
                       ("Dispatched", "True", "Dispatched", message),
                       ("PodsReady", "False", "WaitingForPods", "waiting for the gang's pods")))
        if not ok:
            return False
        rec.objects_ensured = False
        rec.counts_written_at = now  # written with none: the first pods wait their turn
        rec.last_pending, rec.wanted_pending = ("", ""), None
        metrics.count_dispatch(cluster)
        metrics.observe_queue_wait(max(0.0, (now - since).total_seconds()))
        self.writer.event(rec, reason="Dispatched", message=message)
        return True

    async def write_pending(self, rec: AppWrapperRecord, now: datetime) -> float | None:
        """Write the latest pending reason; seconds until a coalesced write is due."""
        wanted = rec.wanted_pending
        if wanted is None or wanted == rec.last_pending:
            return None
        reason, message = wanted
        if rec.last_pending[0] == reason and rec.last_pending_at is not None:
            due = rec.last_pending_at + timedelta(seconds=PENDING_REWRITE_S)
            if now < due:
                return (due - now).total_seconds()  # same reason, new numbers: later
        ok = await self.writer.patch_status(rec, {
            "state": "Pending", "message": message,
            "controllerfirsttimestamp": rec.status.get("controllerfirsttimestamp")
            or rfc3339(now),
        }, conditions=(("Queued", "True", reason, message),))
        if ok:
            if reason == "WaitingForPreemption" and rec.last_pending[0] != reason:
                self.writer.event(rec, reason="Preempting", message=message)
            rec.last_pending, rec.last_pending_at = wanted, now
        return None


def _after(start: datetime, seconds: int | None) -> str | None:
    return rfc3339(start + timedelta(seconds=seconds)) if seconds else None
