"""The one actor per AppWrapper: every write about an AppWrapper happens here.

``reconcile(key)`` is what the work queue's workers call. It reads the AppWrapper's
record (the hub object as last seen, plus what the dispatcher decided about it) and
does the one next thing, in this order:

1. gone from the hub: nothing (its timers and backoff are dropped);
2. being deleted: clean its cluster up, then drop the finalizer (``Lifecycle``);
3. a dispatch decided but not yet on the hub: persist it (``Admission``);
4. dispatched: follow it (objects, pods, readiness, completion, eviction orders);
5. queued: write why it waits, when that changed.

Because the work queue never runs one key twice at once, none of this needs a lock,
and because each step reads the caches afresh, a reconcile that was asked for three
times runs once and sees all three changes.
"""

from __future__ import annotations

from mcad.controller.admission import Admission
from mcad.controller.clock import utcnow
from mcad.controller.lifecycle import Lifecycle
from mcad.controller.state import ControllerState
from mcad.controller.workqueue import WorkQueue
from mcad.core.capacity import AppWrapperKey


class Reconciler:
    def __init__(self, *, state: ControllerState, queue: WorkQueue[AppWrapperKey],
                 admission: Admission, lifecycle: Lifecycle) -> None:
        self.state = state
        self.queue = queue
        self.admission = admission
        self.lifecycle = lifecycle

    async def reconcile(self, key: AppWrapperKey) -> float | None:
        rec = self.state.appwrappers.get(key)
        if rec is None:
            self.queue.discard(key)
            return None
        if rec.deleting:
            return await self.lifecycle.cleanup(rec)
        if (rec.assumed_cluster and rec.status.get("clusterName") != rec.assumed_cluster
                and not await self.admission.persist_dispatch(rec)):
            return None
        if rec.admitted:
            return await self.lifecycle.follow(rec)
        if rec.queued:
            return await self.admission.write_pending(rec, utcnow())
        return None
