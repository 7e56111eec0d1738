"""After dispatch: follow each AppWrapper to completion, requeue, failure or deletion.

Called from the AppWrapper's reconcile (``controller/reconciler.py``: one at a time per
AppWrapper, many AppWrappers in parallel), whenever something about it changed: its
hub object, its pods or wrapped objects on the spoke, an order of the dispatcher, a
timer it asked for. The reconcile takes these steps in order: ``take_back`` (a lost or
unreachable cluster, a requeue under way, an eviction order for this run, a changed
spec), then creation (``controller/creation.py``), then ``resize`` (an order for this
run), then ``follow_progress``, which reads the pods and the wrapped objects'
conditions, asks ``mcad.core.life.completion`` what they mean, and applies that:

- running: pod counts and PodsReady to the status, paced (``controller/pacing.py``: a
  write waits for its turn in the hub's budget, and writes what is true by then); a
  look again at the readiness deadline (returned as seconds: the work queue keeps the
  timer). Readiness is latched: once the gang was ready, losing pods starts a new
  requeuing time (PodsReady False, reason PodsNotReady, since then) rather than
  counting from dispatch;
- completed: Completed or RunningHoldCompletion (quota and capacity released);
- requeue: condition Requeuing, delete every object the dispatch recorded, wait until
  they and their pods are gone (force-deleting pods stuck past
  forceDeletionTimeInSeconds), then back to the queue with the counter, the timestamp
  and the cluster to avoid. Requeues that are not the gang's doing (``SpokeLost``,
  ``SpecChanged``, ``KindNotServed``) are not counted and not paused;
- evicted (an order from the dispatcher, carried out only for the run it was given
  for, once): the same requeue, with the order's reason;
- spec changed after dispatch: applied through a requeue, never half-applied;
- cluster lost (no answer for ``spokeLostSeconds``): what it created there is written
  down (``Leftovers``) and it goes back to the queue without waiting for the cluster;
- fail: delete the wrapped objects and mark Failed (the requeue limit fired, or the run
  outlived its ``dispatchDuration.limit``);
- deleted: delete everything on the spoke, then drop the finalizer; an unreachable
  spoke is retried and the status says so (condition CleanupPending), and a lost one
  is given up on (its leftovers recorded) after ``spokeLostSeconds``.

Every step returns the seconds after which to look again, or None; ``take_back``
returns a ``Next`` when it handled the AppWrapper (the reconcile stops there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from mcad import metrics
from mcad.api.appwrapper import FINALIZER
from mcad.config import RunConfig
from mcad.controller.clock import parse_time, rfc3339, utcnow
from mcad.controller.leftovers import Leftovers
from mcad.controller.objects import ObjectManager
from mcad.controller.pacing import StatusPace
from mcad.controller.records import AppWrapperRecord
from mcad.controller.resets import Resets, resetting
from mcad.controller.writer import HubWriter
from mcad.core.life.completion import Completed, ItemState, KeepRunning, count_pods, progress
from mcad.core.life.health import Healthy
from mcad.core.life.requeue import (
    INSUFFICIENT_PODS_READY,
    SPEC_CHANGED,
    SPOKE_LOST,
    UNCOUNTED_REASONS,
    Fail,
    Requeue,
    force_deletion_due,
    readiness_timeout,
)
from mcad.core.life.wrapping import Refusal

log = logging.getLogger(__name__)
RECHECK_S = 2.0


@dataclass(frozen=True, slots=True)
class Next:
    """A step handled the AppWrapper: look again after ``again`` seconds (None: when
    something changes)."""

    again: float | None

NOT_READY_AGAIN = "PodsNotReady"
COUNTS_EVERY_S = 5.0
"""Pod counts alone (status.pending/running/...) are written at most this often: a
1-pod AppWrapper's pod goes Pending then Running within a second, and writing both
would add a hub write to every dispatch. State and condition changes are written at
once (with the counts of the moment)."""
"""PodsReady False after it was True: the gang lost pods; the requeuing time runs from
this condition's lastTransitionTime."""


class Lifecycle:
    def __init__(self, *, config: RunConfig, writer: HubWriter, objects: ObjectManager,
                 leftovers: Leftovers, changed: Callable[[], None],
                 completed: Callable[[AppWrapperRecord, datetime], None] = lambda *_: None,
                 pace: StatusPace | None = None) -> None:
        self.config = config
        self.writer = writer
        self.objects = objects
        self.leftovers = leftovers
        self.changed = changed
        """Tells the dispatcher that quota or capacity was given back."""
        self.completed = completed
        """Told once per run that completed (written here), with the moment: the run
        times that estimated starts learn from (``RuntimeBook``)."""
        self.resets = Resets(config=config, writer=writer, hub=writer.hub,
                             clear=self._clear_within, changed=changed)
        """Gang health's resets, failures and success TTL (``controller/resets.py``)."""
        self.pace = pace or StatusPace()
        """The hub's budget for the writes that only report how the pods are doing."""

    # -- taking back ----------------------------------------------------------------------
    async def take_back(self, rec: AppWrapperRecord) -> Next | None:
        """What comes before anything else for a dispatched AppWrapper: its cluster lost
        or unreachable, a requeue under way, an eviction order for this run, a spec that
        changed. None when none applies (the reconcile goes on)."""
        link = self.objects.usable_link(rec.cluster)
        if link is None or not link.health.ready:
            return Next(await self._unreachable(rec))
        if rec.kept_after_failure:
            return Next(await self.resets.finish_failure(rec))
        requeuing = rec.condition("Requeuing")
        if requeuing and requeuing.get("status") == "True":
            return Next(await self._finish_requeue(rec))
        order = rec.live_eviction()
        if order is not None:
            rec.progress.evicted = order.run  # carried out once, whatever comes of it
            metrics.count_eviction(order.reason)
            self.writer.event(rec, reason=order.reason, message=order.message, warning=True)
            return Next(await self.start_requeue(rec, order.reason, order.message,
                                                 preempted_by=order.by))
        if resetting(rec):
            return Next(await self.resets.carry_on(rec))
        recorded = rec.status.get("dispatchedSpecHash")
        if recorded and recorded != rec.spec_digest():
            return Next(await self.start_requeue(
                rec, SPEC_CHANGED, "the spec changed after dispatch; the new spec is applied "
                                    "through a requeue (what the old one created is deleted "
                                    "first)"))
        return None

    async def resize(self, rec: AppWrapperRecord) -> None:
        """Carry out the dispatcher's resize order for this run of an elastic AppWrapper."""
        order = rec.live_resize()
        if order is None:
            return
        if not await self.objects.resize(rec, order.pods):
            return  # its cluster cannot be used now: the order waits, status unchanged
        if await self.writer.patch_status(rec, {"admittedPods": order.pods,
                                                "message": order.message}):
            metrics.count_resize(order.reason)
            self.writer.event(rec, reason="Grown" if order.reason == "Grow" else "Shrunk",
                              message=order.message)
            self.changed()

    async def _unreachable(self, rec: AppWrapperRecord) -> float | None:
        """Its cluster does not answer: wait, or after spokeLostSeconds give up on it."""
        lost_for = self._lost_for(rec.cluster)
        if lost_for < self.config.spoke_lost_seconds:
            return min(RECHECK_S * 5, self.config.spoke_lost_seconds - lost_for + 0.1)
        message = (f"cluster {rec.cluster} has not answered for {lost_for:.0f}s "
                   f"(spokeLostSeconds {self.config.spoke_lost_seconds:.0f}); what was "
                   "created there is deleted when it answers again")
        await self.leftovers.record(rec.cluster, rec, self.objects.created(rec))
        self.writer.event(rec, reason=SPOKE_LOST, message=message, warning=True)
        metrics.count_eviction(SPOKE_LOST)
        await self._requeued(rec, SPOKE_LOST, message)
        return None

    def _lost_for(self, cluster: str) -> float:
        now = utcnow()
        link = self.objects.state.links.get(cluster)
        since = link.lost_since() if link is not None else \
            self.objects.state.lost_since.setdefault(cluster, now)
        return (now - since).total_seconds()

    async def follow_progress(self, rec: AppWrapperRecord) -> float | None:
        """Pods and items: keep running, complete, requeue or fail."""
        link = self.objects.usable_link(rec.cluster)
        assert link is not None
        now = utcnow()
        pods = count_pods(link.pods_of(rec.uid))
        followed = self.objects.followed(rec)
        named = [] if isinstance(followed, Refusal) else [
            (f"{w.kind}/{w.name}",
             ItemState(w.completion, link.item_conditions(w.kind, rec.namespace, w.name) or {}))
            for w in followed]
        items = [item for _, item in named]
        demand = rec.admitted_demand()  # elastic: the size it runs at now
        cond = rec.condition("PodsReady") or {}
        if cond.get("status") == "True":
            unready_since: datetime | None = now  # ready until now: if not any more, from now
        elif cond.get("reason") == NOT_READY_AGAIN:
            unready_since = parse_time(cond.get("lastTransitionTime")) or now
        else:
            unready_since = None
        decision = progress(
            now=now, policy=rec.requeue_policy(self.config),
            dispatched_at=rec.dispatched_at() or now, requeue_count=rec.requeues(),
            min_available=demand.min_available if demand else 1,
            expected_pods=demand.pods if demand else 0, pods=pods, items=items,
            unready_since=unready_since, run_limit_seconds=rec.run_limit())
        counts = {"pending": pods.pending, "running": pods.running,
                  "Succeeded": pods.succeeded, "failed": pods.failed}
        same_counts = counts == {k: rec.status.get(k, 0) for k in counts}
        if not isinstance(decision, Completed):
            # Gang health (AppWrapper v1beta2's rules) comes before MCAD's readiness rule.
            try:
                verdict, policy = self.resets.judge(rec, link, named,
                                                    expected=demand.pods if demand else 0,
                                                    now=now)
            except ValueError as err:  # an annotation that does not parse
                verdict, policy = Healthy(), None
                log.warning("%s: its fault-tolerance annotations cannot be read (%s); "
                            "mcad validate and the webhook refuse them", rec.key, err)
            if not isinstance(verdict, Healthy):
                assert policy is not None
                return await self.resets.act(rec, verdict, policy, counts=counts, now=now)
            await self.resets.recovered(rec)
            if policy is not None and policy.graces:
                if isinstance(decision, Requeue) and decision.reason == INSUFFICIENT_PODS_READY:
                    decision = KeepRunning(None, ready=False)  # the graces decide instead
                if isinstance(decision, KeepRunning) and verdict.recheck_at is not None:
                    decision = KeepRunning(verdict.recheck_at if decision.recheck_at is None
                                           else min(verdict.recheck_at, decision.recheck_at),
                                           decision.ready)
        if isinstance(decision, KeepRunning):
            again = None if decision.recheck_at is None else \
                max(0.0, (decision.recheck_at - now).total_seconds()) + 0.01
            was_ready = unready_since is not None
            ready = "True" if decision.ready else "False"
            reason = "PodsReady" if decision.ready else \
                NOT_READY_AGAIN if was_ready else "WaitingForPods"
            message = (f"{pods.ready + pods.succeeded} of "
                       f"{demand.min_available if demand else 1} pods ready")
            unchanged = cond.get("status") == ready and rec.state == "Running" and \
                (decision.ready or cond.get("reason") == reason)
            if unchanged and same_counts:
                return again
            written_at = rec.progress.counts_written_at
            if unchanged and written_at is not None:  # only the counts moved
                wait = COUNTS_EVERY_S - (now - written_at).total_seconds()
                if wait > 0:
                    return wait + 0.01 if again is None else min(again, wait + 0.01)
            wait = self.pace.turn(rec.key, now.timestamp())
            if wait > 0:  # its turn comes then, and it writes what is true by then
                return wait + 0.01 if again is None else min(again, wait + 0.01)
            if await self.writer.patch_status(
                    rec, {**counts, "state": "Running"},
                    conditions=(("PodsReady", ready, reason, message),)):
                rec.progress.counts_written_at = now
            if decision.ready and cond.get("status") != "True":
                self.writer.event(rec, reason="PodsReady", message=message)
            elif reason == NOT_READY_AGAIN and cond.get("status") == "True":
                self.writer.event(rec, reason=NOT_READY_AGAIN, warning=True,
                                  message=f"{message}; it is requeued if it stays so for "
                                          "the requeuing time")
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
                self.completed(rec, utcnow())
                self.changed()
            return None
        if isinstance(decision, Requeue):
            return await self.start_requeue(rec, decision.reason, decision.message)
        assert isinstance(decision, Fail)
        if await self.objects.clear(rec) is None:  # the pods must not keep holding GPUs
            # The cluster does not answer: written down, deleted when it answers again.
            await self.leftovers.record(rec.cluster, rec, self.objects.created(rec))
        ok = await self.writer.patch_status(
            rec, {**counts, "state": "Failed", "message": decision.message},
            conditions=(("Failed", "True", decision.reason, decision.message),))
        if ok:
            self.writer.event(rec, reason=decision.reason, message=decision.message,
                              warning=True)
            self.changed()
        return None

    # -- requeue --------------------------------------------------------------------------
    async def start_requeue(self, rec: AppWrapperRecord, reason: str, message: str, *,
                            preempted_by: str = "") -> float | None:
        """Start taking the AppWrapper back; ``preempted_by`` names the AppWrapper it makes
        room for (the dispatcher holds that room for it while this one drains)."""
        status: dict[str, Any] = {"message": message}
        if preempted_by:
            status["preemptedBy"] = preempted_by
        if not await self.writer.patch_status(
                rec, status, conditions=(("Requeuing", "True", reason, message),)):
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

    async def _clear_within(self, rec: AppWrapperRecord, since: datetime,
                            force_after: float) -> int | None:
        """``_clear_spoke`` for a reset or a failure: pods are force-deleted
        ``force_after`` seconds after ``since`` (forcefulDeletionGracePeriodDuration)."""
        left = await self.objects.clear(rec)
        if left and utcnow() >= since + timedelta(seconds=force_after):
            await self.objects.force_delete_pods(rec)
        return left

    async def _finish_requeue(self, rec: AppWrapperRecord) -> float | None:
        cond = rec.condition("Requeuing") or {}
        since = parse_time(cond.get("lastTransitionTime")) or utcnow()
        left = await self._clear_spoke(rec, since=since)
        if left is None:
            return await self._unreachable(rec)
        if left:
            return RECHECK_S
        reason = str(cond.get("reason", "Requeued"))
        await self._requeued(rec, reason, str(cond.get("message", reason)))
        return None

    async def _requeued(self, rec: AppWrapperRecord, reason: str, why: str) -> None:
        """Write the AppWrapper back to the queue (its cluster is empty, or lost)."""
        policy = rec.requeue_policy(self.config)
        now = utcnow()
        counted = reason not in UNCOUNTED_REASONS
        count = rec.requeues() + (1 if counted else 0)
        again = "at once" if not counted else \
            f"after {rfc3339(now + timedelta(seconds=policy.pause_time_in_seconds))}"
        message = f"requeued after: {why}; may be dispatched again {again}"
        cluster = rec.cluster
        ok = await self.writer.patch_status(rec, {
            "state": "Pending", "clusterName": "", "previousCluster": cluster,
            "numberOfRequeueings": count, "requeueTimestamp": rfc3339(now),
            "requeueingTimeInSeconds": readiness_timeout(policy, count),
            "pending": 0, "running": 0, "Succeeded": 0, "failed": 0, "message": message,
            "componentStatus": [], "dispatchedSpecHash": "", "preemptedBy": "",
            "expectedEnd": None, "runDeadline": None, "admittedPods": None, "runId": None,
            "topology": None,  # the next dispatch chooses its domains anew
            "backfillPromise": None,
        }, conditions=(("Requeuing", "False", reason, message),
                       ("Dispatched", "False", "Requeued", message),
                       ("PodsReady", "False", "Requeued", message),
                       ("Queued", "True", "RequeuePause" if counted else reason, message),
                       # A reset or a failed pod's grace under way belongs to this run
                       # only: the next dispatch starts healthy.
                       *((kind, "False", "Requeued", message)
                         for kind in ("Resetting", "Unhealthy")
                         if (rec.condition(kind) or {}).get("status") == "True")))
        if ok:
            log.info("%s requeued from cluster %s (%s%s): %s", rec.key, cluster, reason,
                     "" if counted else ", not counted", why)
            rec.progress.last_pending, rec.progress.last_pending_at = None, None
            metrics.count_requeue(reason)
            self.changed()

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
                lost_for = self._lost_for(cluster)
                if lost_for < self.config.spoke_lost_seconds:
                    message = (f"cannot remove the wrapped objects from cluster {cluster}: "
                               "it is not reachable; retrying")
                    cond = rec.condition("CleanupPending") or {}
                    if cond.get("message") != message:
                        await self.writer.patch_status(rec, {"message": message}, conditions=(
                            ("CleanupPending", "True", "ClusterUnreachable", message),))
                    return min(self.config.deletion_retry_seconds,
                               self.config.spoke_lost_seconds - lost_for + 0.1)
                await self.leftovers.record(cluster, rec, self.objects.created(rec))
            elif left:
                return RECHECK_S
        await self.writer.set_finalizer(rec, present=False)
        self.changed()
        return None
