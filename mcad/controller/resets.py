"""Carrying out what gang health decides (``mcad.core.life.health``): a step of the reconcile.

Why a module of its own: ``lifecycle`` follows a run to completion, requeue or failure
by MCAD's rules; what AppWrapper v1beta2 adds is a second life of the same run, a
**reset**, with its own states written on the hub so that a restart or a new leader
carries it on exactly once:

- ``Unhealthy`` True (reason and sentence) while a failed pod's grace runs: its
  lastTransitionTime is when the trouble was first seen, so the grace survives a restart;
- ``Resetting`` True while the whole gang is deleted (pods force-deleted past the
  forceful-deletion grace), then paused for ``retryPausePeriod`` counted from the
  reset's start; then ``Resetting`` False (reason ``Resumed``, whose lastTransitionTime
  is when its objects are made again: the graces count from it) and the run's objects
  are created again on the same cluster. ``status.resettingCount`` counts the resets
  that count (a node's eviction does not). The AppWrapper stays dispatched throughout,
  so it keeps its quota and its room on the cluster (the dispatcher reserves room for
  pods not bound yet): what queued behind it cannot take its place while it pauses;
- give up: ``Failed``, its objects deleted at once, or kept for
  ``deletionOnFailureGracePeriod`` (condition ``DeletingResources`` False,
  ``DeletionPaused``) while it still holds its quota, for someone to look at them;
- a completed AppWrapper is deleted ``successTTL`` after it completed.

Every write is conditional (the hub writer), and every step reads the state afresh from
the record: a reset interrupted anywhere (a crash, a lost Lease) is finished by whoever
reconciles next, once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.clock import parse_time, rfc3339, utcnow
from mcad.controller.records import AppWrapperRecord
from mcad.controller.spoke_link import SpokeLink
from mcad.controller.writer import HubWriter
from mcad.core.life.completion import ItemState
from mcad.core.life.health import (
    FaultPolicy,
    GangState,
    GiveUp,
    Health,
    Healthy,
    Mending,
    Reset,
    judge,
)
from mcad.gateway import refs, verbs
from mcad.gateway.errors import ApiError, NotFound

log = logging.getLogger(__name__)
RECHECK_S = 2.0
RESUMED = "Resumed"
DELETION_PAUSED = "DeletionPaused"
DELETING = "Deleting"
HOLDING = (DELETION_PAUSED, DELETING)
"""Reasons of ``DeletingResources`` False: a Failed AppWrapper whose objects are still
there (kept, or being deleted), which holds its quota and room until they are gone."""

Clear = Callable[[AppWrapperRecord, datetime, float], Awaitable["int | None"]]
"""Delete the run's objects, force-deleting pods past the given seconds since the given
moment; how many are left (None: the cluster does not answer)."""


def resetting(rec: AppWrapperRecord) -> bool:
    return (rec.condition("Resetting") or {}).get("status") == "True"


def deployed_at(rec: AppWrapperRecord) -> datetime | None:
    """When its objects were last made: its dispatch, or the end of its last reset."""
    dispatched = rec.dispatched_at()
    cond = rec.condition("Resetting") or {}
    resumed = parse_time(cond.get("lastTransitionTime")) \
        if cond.get("status") == "False" and cond.get("reason") == RESUMED else None
    if dispatched is None or resumed is None:
        return dispatched or resumed
    return max(dispatched, resumed)


class Resets:
    def __init__(self, *, config: RunConfig, writer: HubWriter, hub: Any,
                 clear: Clear, changed: Callable[[], None]) -> None:
        self.config = config
        self.writer = writer
        self.hub = hub
        """The hub connection (``writer.hub``): deleting an expired AppWrapper."""
        self.clear = clear
        self.changed = changed

    # -- judging --------------------------------------------------------------------------
    def judge(self, rec: AppWrapperRecord, link: SpokeLink, items: list[tuple[str, ItemState]],
              *, expected: int, now: datetime) -> tuple[Health, FaultPolicy]:
        """The gang's health now, and the policy it was judged by."""
        policy = rec.fault_policy(self.config)
        gang = link.gang(rec.uid, expected)
        failed = tuple(name for name, item in items if item.failed)
        if failed:
            gang = GangState(gang.expected, gang.pending, gang.running, gang.succeeded,
                             gang.failed, gang.on_evict_nodes, gang.missing, failed)
        cond = rec.condition("Unhealthy") or {}
        since = parse_time(cond.get("lastTransitionTime")) \
            if cond.get("status") == "True" else None
        verdict = judge(now=now, policy=policy, gang=gang,
                        deployed_at=deployed_at(rec) or now, unhealthy_since=since,
                        resets=rec.resets())
        return verdict, policy

    async def act(self, rec: AppWrapperRecord, verdict: Health, policy: FaultPolicy, *,
                  counts: dict[str, int], now: datetime) -> float | None:
        """Carry out an unhealthy verdict; when to look again."""
        if isinstance(verdict, Mending):
            cond = rec.condition("Unhealthy") or {}
            news = cond.get("status") != "True" or cond.get("reason") != verdict.reason
            if news and await self.writer.patch_status(
                    rec, {**counts, "message": verdict.message},
                    conditions=(("Unhealthy", "True", verdict.reason, verdict.message),)):
                self.writer.event(rec, reason="Unhealthy", message=verdict.message,
                                  warning=True)
            return max(0.0, (verdict.until - now).total_seconds()) + 0.01
        if isinstance(verdict, Reset):
            return await self.start(rec, verdict, counts=counts)
        assert isinstance(verdict, GiveUp)
        return await self.give_up(rec, verdict, policy, counts=counts)

    async def recovered(self, rec: AppWrapperRecord) -> None:
        """Its trouble went within the grace: say so once."""
        cond = rec.condition("Unhealthy") or {}
        if cond.get("status") != "True":
            return
        message = "recovered within its failureGracePeriod: no failed pod left"
        if await self.writer.patch_status(rec, {"message": message}, conditions=(
                ("Unhealthy", "False", "Recovered", message),)):
            self.writer.event(rec, reason="Recovered", message=message)

    # -- the reset --------------------------------------------------------------------------
    async def start(self, rec: AppWrapperRecord, verdict: Reset, *,
                    counts: dict[str, int]) -> float | None:
        count = rec.resets() + (1 if verdict.counted else 0)
        if not await self.writer.patch_status(
                rec, {**counts, "resettingCount": count, "message": verdict.message},
                conditions=(("Unhealthy", "True", verdict.reason, verdict.message),
                            ("Resetting", "True", verdict.reason, verdict.message),
                            ("PodsReady", "False", "Resetting", verdict.message))):
            return None
        log.info("%s: resetting the gang on %s (%s): %s", rec.key, rec.cluster, verdict.reason,
                 verdict.message)
        metrics.count_reset(verdict.reason)
        self.writer.event(rec, reason="Resetting", message=verdict.message, warning=True)
        return await self.carry_on(rec)

    async def carry_on(self, rec: AppWrapperRecord) -> float | None:
        """Delete, pause, resume: the next step of a reset under way."""
        cond = rec.condition("Resetting") or {}
        now = utcnow()
        since = parse_time(cond.get("lastTransitionTime")) or now
        policy = self._policy(rec)
        left = await self.clear(rec, since, policy.forceful_deletion_grace)
        if left is None:
            return None  # its cluster does not answer: lifecycle's take_back handles that
        if left:
            return RECHECK_S
        resume_at = since + timedelta(seconds=policy.retry_pause)
        if now < resume_at:
            return (resume_at - now).total_seconds() + 0.01
        message = (f"reset {rec.resets()} of {policy.retry_limit}: everything was deleted; "
                   f"created again on cluster {rec.cluster}")
        if await self.writer.patch_status(rec, {"message": message, "pending": 0,
                                                "running": 0, "Succeeded": 0, "failed": 0},
                                          conditions=(("Resetting", "False", RESUMED, message),
                                                      ("Unhealthy", "False", RESUMED,
                                                       message))):
            rec.progress.created = None  # the run's objects are made again
            self.writer.event(rec, reason=RESUMED, message=message)
        return 0.01

    # -- giving up ----------------------------------------------------------------------------
    async def give_up(self, rec: AppWrapperRecord, verdict: GiveUp, policy: FaultPolicy, *,
                      counts: dict[str, int]) -> float | None:
        """Failed: written first (the evidence, a failed pod, goes with the objects), with
        ``DeletingResources`` False until its objects are gone, so it holds its quota
        while they are deleted, or kept for the deletion-on-failure grace."""
        grace = policy.deletion_on_failure_grace
        until = utcnow() + timedelta(seconds=grace)
        if grace > 0:
            why = (DELETION_PAUSED, f"its objects are kept until {rfc3339(until)} "
                                    "(deletionOnFailureGracePeriodDuration), holding its quota")
        else:
            why = (DELETING, "its objects are being deleted")
        ok = await self.writer.patch_status(
            rec, {**counts, "state": "Failed", "message": verdict.message},
            conditions=(("Failed", "True", verdict.reason, verdict.message),
                        ("Unhealthy", "True", verdict.reason, verdict.message),
                        ("DeletingResources", "False", *why)))
        if not ok:
            return None
        metrics.count_failure(verdict.reason)
        self.writer.event(rec, reason=verdict.reason, message=verdict.message, warning=True)
        return await self.finish_failure(rec)

    async def finish_failure(self, rec: AppWrapperRecord) -> float | None:
        """A Failed AppWrapper whose objects are still there: delete them once the
        deletion-on-failure grace is over (then it lets go of its quota)."""
        cond = rec.condition("DeletingResources") or {}
        policy = self._policy(rec)
        since = parse_time(cond.get("lastTransitionTime")) or utcnow()
        grace = policy.deletion_on_failure_grace if cond.get("reason") == DELETION_PAUSED \
            else 0.0
        until = since + timedelta(seconds=grace)
        now = utcnow()
        if now < until:
            return (until - now).total_seconds() + 0.01
        left = await self.clear(rec, until, policy.forceful_deletion_grace)
        if left is None or left:
            return RECHECK_S
        message = "its objects were deleted" + (
            " after its deletionOnFailureGracePeriodDuration" if grace else "")
        if await self.writer.patch_status(rec, {"message": message}, conditions=(
                ("DeletingResources", "True", "ResourcesDeleted", message),)):
            self.changed()
        return None

    # -- success TTL ----------------------------------------------------------------------------
    async def expire(self, rec: AppWrapperRecord) -> float | None:
        """A completed AppWrapper: delete it once its success TTL is over."""
        policy = self._policy(rec)
        if policy.success_ttl is None:
            return None
        cond = rec.condition("Completed") or {}
        done = parse_time(cond.get("lastTransitionTime"))
        if done is None:
            return None
        until = done + timedelta(seconds=policy.success_ttl)
        now = utcnow()
        if now < until:
            return (until - now).total_seconds() + 0.01
        try:
            await verbs.delete(self.hub, refs.APPWRAPPERS, rec.name, namespace=rec.namespace)
        except NotFound:
            return None
        except ApiError as err:
            log.warning("%s: deleting it after its success TTL failed: %s", rec.key, err)
            return RECHECK_S * 5
        log.info("%s: deleted %.0fs after it completed (successTTLDuration)", rec.key,
                 policy.success_ttl)
        return None

    def _policy(self, rec: AppWrapperRecord) -> FaultPolicy:
        try:
            return rec.fault_policy(self.config)
        except ValueError:  # refused at admission; one that slipped by takes the defaults
            return self.config.fault_tolerance.policy(mcad_v1=False)


def is_healthy(verdict: Health) -> bool:
    return isinstance(verdict, Healthy)
