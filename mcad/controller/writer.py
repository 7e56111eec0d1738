"""Writing to the hub: AppWrapper status, finalizers and Events.

Every write carries the resourceVersion it was computed from, so a decision made
on a stale view fails with Conflict instead of overwriting a newer one (a pending
reason can never undo a dispatch). The answer to a successful write is an observation
of the object: the record takes it at once (``Observed.take``), so the next decision
does not wait for the watch to echo it.

A Conflict is not always a lost race: the connection retries a write after a time-out
or a 5xx, and the first attempt may have been committed, in which case the retry meets
its own write as "a newer version". A caller that can tell its own write
(``committed``) has the object read again; when the hub shows it, the write stands, and
the case is logged once with what was expected and what was found.

Events go through the controller's one ``EventSender`` (``controller/events.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import Enum
from typing import Any

from mcad import metrics
from mcad.api.appwrapper import FINALIZER
from mcad.controller.clock import rfc3339, utcnow
from mcad.controller.events import EventSender
from mcad.controller.records import AppWrapperRecord
from mcad.gateway import refs, verbs
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


class Write(Enum):
    """How a conditional write ended; true only when it is on the hub."""

    DONE = "written"
    CONFLICT = "the object moved on"
    GONE = "the object is gone"
    FAILED = "the hub refused or did not answer"

    def __bool__(self) -> bool:
        return self is Write.DONE


class HubWriter:
    """Status, finalizer and Event writes for AppWrappers on the hub.

    Not locked: every write about one AppWrapper happens in its reconcile, and the work
    queue never runs two reconciles of one key at once.
    """

    def __init__(self, hub: Connection, events: EventSender) -> None:
        self.hub = hub
        self.events = events

    async def patch_status(self, rec: AppWrapperRecord, status: Mapping[str, Any], *,
                           conditions: tuple[tuple[str, str, str, str], ...] = (),
                           committed: Callable[[dict[str, Any]], bool] | None = None
                           ) -> Write:
        """Merge ``status`` (and set ``conditions``: (type, status, reason, message)).

        ``CONFLICT`` when the object moved on, ``GONE`` when it is gone: the caller
        decides again from the newer version the watch brings. With ``committed``, a
        Conflict first reads the object again, and ``DONE`` when ``committed`` says the
        hub already holds this very write.
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
        expected = rec.meta.get("resourceVersion")
        patch = {"metadata": {"resourceVersion": expected}, "status": body}
        try:
            answer = await verbs.merge_patch(self.hub, refs.APPWRAPPERS, rec.name, patch,
                                             namespace=rec.namespace, subresource="status")
        except NotFound:
            return Write.GONE
        except Conflict:
            return await self._after_conflict(rec, expected, committed)
        except ApiError as err:
            metrics.count_api_error(self.hub.name, err.reason or type(err).__name__)
            raise
        rec.observed.take(answer)
        return Write.DONE

    async def _after_conflict(self, rec: AppWrapperRecord, expected: object,
                              committed: Callable[[dict[str, Any]], bool] | None) -> Write:
        if committed is None:
            return Write.CONFLICT
        try:
            current = await verbs.get(self.hub, refs.APPWRAPPERS, rec.name,
                                      namespace=rec.namespace)
        except NotFound:
            return Write.GONE
        found = (current.get("metadata") or {}).get("resourceVersion")
        if committed(current):
            log.info("%s: the write at resourceVersion %s met a Conflict, but the hub (at %s) "
                     "already holds it: a retried request whose first attempt was committed; "
                     "kept", rec.key, expected, found)
            rec.observed.take(current)
            return Write.DONE
        log.info("%s: the write at resourceVersion %s lost to a newer version (%s); decided "
                 "again from it", rec.key, expected, found)
        rec.observed.take(current)
        return Write.CONFLICT

    async def set_finalizer(self, rec: AppWrapperRecord, *, present: bool) -> Write:
        finalizers = list(rec.meta.get("finalizers") or [])
        if (FINALIZER in finalizers) == present:
            return Write.DONE
        finalizers = [*finalizers, FINALIZER] if present else \
            [f for f in finalizers if f != FINALIZER]
        patch = {"metadata": {"resourceVersion": rec.meta.get("resourceVersion"),
                              "finalizers": finalizers}}
        try:
            answer = await verbs.merge_patch(self.hub, refs.APPWRAPPERS, rec.name, patch,
                                             namespace=rec.namespace)
        except Conflict:
            return Write.CONFLICT
        except NotFound:
            return Write.GONE
        rec.observed.take(answer)
        return Write.DONE

    def event(self, rec: AppWrapperRecord, *, reason: str, message: str,
              warning: bool = False) -> None:
        """Record a Kubernetes Event for the AppWrapper (queued; best effort)."""
        self.events.send(rec.observed.head, reason=reason, message=message, warning=warning)
