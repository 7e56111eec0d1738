"""The one actor per AppWrapper: every write about an AppWrapper happens here.

``reconcile(key)`` is what the work queue's workers call. It reads the AppWrapper's
record (what was observed, what the dispatcher ordered, what was done: see
``controller/records.py``) and takes the next steps, in this order:

1. gone from the hub: nothing (its timers and backoff are dropped);
2. being deleted: clean its cluster up, then drop the finalizer (``Lifecycle.cleanup``);
3. a dispatch ordered and not yet on the hub: persist it (``Admission``); a failed
   persist keeps it out of cycles for a while (a work queue timer ends the hold); then,
   whatever its state, mcad's finalizer on it if it is not (when first seen, unless the
   mutating webhook put it on at creation; or when something took it off);
4. dispatched: take it back when it must go (lost cluster, requeue under way, an
   eviction order for this run, a changed spec: ``Lifecycle.take_back``); else create
   what of this run is missing (``Creation``), carry out a resize order for this run
   (``Lifecycle.resize``), and follow its pods and objects (``Lifecycle.follow_progress``);
5. completed: deleted once its success TTL is over (``Resets.expire``);
6. queued: write why it waits, when that changed; when a hold or a requeue pause ends,
   tell the dispatcher (the reconciler keeps that timer, not the dispatcher); likewise,
   for one admitted by reservation backfill, when its promise to the head comes due.

Because the work queue never runs one key twice at once, none of this needs a lock,
and because each step reads the caches afresh, a reconcile that was asked for three
times runs once and sees all three changes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from mcad.config import RunConfig
from mcad.controller.admission import Admission
from mcad.controller.clock import utcnow
from mcad.controller.creation import Creation
from mcad.controller.lifecycle import Lifecycle
from mcad.controller.records import AppWrapperRecord
from mcad.controller.state import ControllerState
from mcad.controller.workqueue import WorkQueue
from mcad.core.placement.capacity import AppWrapperKey


class Reconciler:
    def __init__(self, *, state: ControllerState, config: RunConfig,
                 queue: WorkQueue[AppWrapperKey], admission: Admission, creation: Creation,
                 lifecycle: Lifecycle, changed: Callable[[], None]) -> None:
        self.state = state
        self.config = config
        self.queue = queue
        self.admission = admission
        self.creation = creation
        self.lifecycle = lifecycle
        self.changed = changed

    async def reconcile(self, key: AppWrapperKey) -> float | None:
        rec = self.state.appwrappers.get(key)
        if rec is None:
            self.queue.discard(key)
            return None
        if rec.deleting:
            return await self.lifecycle.cleanup(rec)
        order = rec.live_dispatch()
        if order is not None and not await self.admission.persist_dispatch(rec, order):
            return self._wake(rec, utcnow())
        # Every AppWrapper mcad keeps holds its finalizer (no write when it does): put on
        # at creation by the mutating webhook, else here when first seen, and put back
        # here whenever something else takes it off (an edit; an apply that counts the
        # webhook's addition as its own), so a deletion always waits for the cleanup.
        await self.admission.hold_finalizer(rec)
        if rec.admitted:
            again = await self._admitted(rec)
            wake = self._wake(rec, utcnow())
            return min((t for t in (again, wake) if t is not None), default=None)
        if rec.queued:
            now = utcnow()
            again = await self.admission.write_pending(rec, now)
            wake = self._wake(rec, now)
            return min((t for t in (again, wake) if t is not None), default=None)
        if rec.state == "Completed":
            return await self.lifecycle.resets.expire(rec)  # its success TTL
        return None

    async def _admitted(self, rec: AppWrapperRecord) -> float | None:
        """Step 4: take back, create, resize, follow."""
        step = await self.lifecycle.take_back(rec)
        if step is not None:
            return step.again
        if rec.progress.created != rec.run:
            step = await self.creation.create(rec)
            if step is not None:
                return step.again
        if rec.live_resize() is not None:
            await self.lifecycle.resize(rec)
        return await self.lifecycle.follow_progress(rec)

    def _wake(self, rec: AppWrapperRecord, now: datetime) -> float | None:
        """The AppWrapper's timer for a moment at which time alone changes what the
        dispatcher decides: when a queued one's hold (after a failed persist) or requeue
        pause ends, or an admitted one's backfill promise comes due, the dispatcher is
        told, so it decides again (the dispatcher keeps no timers)."""
        progress = rec.progress
        if progress.wake_at is not None and progress.wake_at <= now:
            progress.wake_at = None
            self.changed()
        due: tuple[datetime | None, ...]
        if rec.admitted:
            promise = rec.backfill_promise
            due = (promise.end if promise is not None else None,)
        else:
            due = (progress.hold_until, rec.pause_ends(self.config))
        moments = [m for m in due if m is not None and m > now]
        if not moments:
            return None
        progress.wake_at = min(moments)
        return (progress.wake_at - now).total_seconds() + 0.01
