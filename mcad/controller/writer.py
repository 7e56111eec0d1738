"""Writing to the hub: AppWrapper status, finalizers and Events.

Every write carries the resourceVersion it was computed from, so a decision made
on a stale view fails with Conflict instead of overwriting a newer one (a pending
reason can never undo a dispatch). Successful writes update the record at once,
so the next decision does not wait for the watch to echo them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mcad import metrics
from mcad.controller.clock import rfc3339, utcnow
from mcad.controller.records import FINALIZER, AppWrapperRecord
from mcad.gateway import objects
from mcad.gateway import resources as refs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import ApiError, Conflict, NotFound

log = logging.getLogger(__name__)


def set_condition(conditions: list[dict[str, Any]], *, type_: str, status: str, reason: str,
                  message: str, now: datetime, generation: int) -> list[dict[str, Any]]:
    """The conditions with one set; lastTransitionTime moves only when status changes."""
    out, found = [], False
    for existing in conditions:
        cond = existing
        if cond.get("type") == type_:
            found = True
            changed = cond.get("status") != status
            cond = {"type": type_, "status": status, "reason": reason, "message": message,
                    "lastTransitionTime": rfc3339(now) if changed
                    else cond.get("lastTransitionTime", rfc3339(now)),
                    "observedGeneration": generation}
        out.append(cond)
    if not found:
        out.append({"type": type_, "status": status, "reason": reason, "message": message,
                    "lastTransitionTime": rfc3339(now), "observedGeneration": generation})
    return out


class HubWriter:
    """Status, finalizer and Event writes for AppWrappers on the hub.

    Not locked: every write about one AppWrapper happens in its reconcile, and the work
    queue never runs two reconciles of one key at once.
    """

    def __init__(self, hub: Connection) -> None:
        self.hub = hub
        self._events = asyncio.Semaphore(4)
        self._posting: set[asyncio.Task[None]] = set()

    async def patch_status(self, rec: AppWrapperRecord, status: Mapping[str, Any], *,
                           conditions: tuple[tuple[str, str, str, str], ...] = ()
                           ) -> bool:
        """Merge ``status`` (and set ``conditions``: (type, status, reason, message)).

        Returns False when the object moved on (Conflict) or is gone; the caller
        decides again from the newer version the watch brings.
        """
        now = utcnow()
        body: dict[str, Any] = dict(status)
        if conditions:
            current = list(rec.status.get("conditions") or [])
            generation = int(rec.meta.get("generation", 0) or 0)
            for type_, cstatus, reason, message in conditions:
                current = set_condition(current, type_=type_, status=cstatus, reason=reason,
                                        message=message, now=now, generation=generation)
            body["conditions"] = current
        body.setdefault("observedGeneration", int(rec.meta.get("generation", 0) or 0))
        patch = {"metadata": {"resourceVersion": rec.meta.get("resourceVersion")},
                 "status": body}
        try:
            answer = await objects.merge_patch(self.hub, refs.APPWRAPPERS, rec.name, patch,
                                               namespace=rec.namespace, subresource="status")
        except (Conflict, NotFound):
            return False
        except ApiError as err:
            metrics.count_api_error(self.hub.name, err.reason or type(err).__name__)
            raise
        rec.update(answer)
        return True

    async def set_finalizer(self, rec: AppWrapperRecord, *, present: bool) -> bool:
        finalizers = list(rec.meta.get("finalizers") or [])
        if (FINALIZER in finalizers) == present:
            return True
        finalizers = [*finalizers, FINALIZER] if present else \
            [f for f in finalizers if f != FINALIZER]
        patch = {"metadata": {"resourceVersion": rec.meta.get("resourceVersion"),
                              "finalizers": finalizers}}
        try:
            answer = await objects.merge_patch(self.hub, refs.APPWRAPPERS, rec.name, patch,
                                               namespace=rec.namespace)
        except (Conflict, NotFound):
            return False
        rec.update(answer)
        return True

    def event(self, rec: AppWrapperRecord, *, reason: str, message: str,
              warning: bool = False) -> None:
        """Record a Kubernetes Event for the AppWrapper (in the background, best effort)."""
        task = asyncio.get_running_loop().create_task(
            self._post_event(rec.obj, reason, message, warning), name=f"event {rec.key} {reason}")
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)

    async def _post_event(self, obj: Mapping[str, Any], reason: str, message: str,
                          warning: bool) -> None:
        meta = obj.get("metadata") or {}
        now = rfc3339(utcnow())
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.",
                         "namespace": meta.get("namespace")},
            "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": "AppWrapper",
                               "name": meta.get("name"), "namespace": meta.get("namespace"),
                               "uid": meta.get("uid")},
            "reason": reason, "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "source": {"component": "mcad"}, "reportingComponent": "mcad",
        }
        async with self._events:
            try:
                await objects.create(self.hub, refs.EVENTS, body,
                                     namespace=str(meta.get("namespace")))
            except ApiError as err:
                log.debug("event %s not recorded: %s", reason, err)
