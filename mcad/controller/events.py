"""Kubernetes Events about AppWrappers: one supervised, bounded sender that aggregates.

Why one sender: Events are for people reading ``kubectl describe``, never on the
critical path of a dispatch, and must not pile up unbounded tasks when the hub is slow.
So ``send`` only puts the Event in a bounded queue (full: the Event is dropped and
counted in ``mcad_events_dropped_total``), and one long-lived task, named ``events``
under the controller's supervisor, posts them. Normal Events may hold only a small share
of the queue (``NORMAL_QUEUED``), so that Warnings (a requeue, a failure, a lost spoke),
which people look for, find room in a storm of them.

Repeats are aggregated as client-go's event correlator does: an Event with the same
object, type, reason and message as one posted in the last ``AGGREGATE_S`` seconds
raises that Event's ``count`` and ``lastTimestamp`` (a merge patch) instead of making a
new one. A POST (``generateName``) is never retried blind: a time-out may have created
it already (``mcad.gateway.verbs.create``); a failed Event is logged at debug and
forgotten, as kubelet does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcad import metrics
from mcad.controller.clock import rfc3339, utcnow
from mcad.gateway import refs, verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import ApiError, NotFound

log = logging.getLogger(__name__)
QUEUE_SIZE = 100
"""How many Events wait to be posted at most, Warnings and Normal ones together: how
late one can be. At 1,000 a drain of 2,000 AppWrappers, whose Events came faster than
one sender posts them (70% were dropped), left a full queue that kept the hub busy for
seconds after the last dispatch; Normal Events now have a smaller share of it."""
NORMAL_QUEUED = 20
"""How many Normal Events (Dispatched, PodsReady, Completed) wait to be posted at most.
In a drain they come twice per AppWrapper, faster than one sender posts them through a
busy hub (10,000 queued: 45 a second wanted, 13 a second posted), so the queue is full
whatever its size and the share posted is the same; what the size sets is how late a
posted one is, and how many are left for after the last dispatch. At 100 that was
about 7 s late and up to 100 POSTs (a few milliseconds of the hub's CPU each) left
after the drain, about the whole of the hub's allowance for its idle level; at 20, it
is 1.5 s and 20. Out of a drain the hub answers a POST in milliseconds, and the
sender keeps up with dispatches by far."""
AGGREGATE_S = 600.0
REMEMBERED = 4096
"""Events remembered for aggregation (oldest forgotten first)."""


@dataclass(frozen=True, slots=True)
class EventKey:
    """What makes two Events the same (client-go's correlator key, less the source)."""

    namespace: str
    uid: str
    type: str
    reason: str
    message: str


@dataclass(slots=True)
class _Posted:
    name: str
    count: int
    first: str
    at: float


@dataclass(frozen=True, slots=True)
class _Wanted:
    key: EventKey
    involved: Mapping[str, Any]


class EventSender:
    """Queues Events and posts them from one task (``run``)."""

    def __init__(self, hub: Connection, *, size: int = QUEUE_SIZE,
                 normal: int = NORMAL_QUEUED) -> None:
        self.hub = hub
        self._queue: asyncio.Queue[_Wanted] = asyncio.Queue(maxsize=size)
        self._normal_limit = normal
        self._normal = 0
        """Normal Events in the queue now."""
        self._posted: OrderedDict[EventKey, _Posted] = OrderedDict()

    def send(self, obj: Mapping[str, Any], *, reason: str, message: str,
             warning: bool = False) -> None:
        """Record an Event about the object ``obj`` (never blocks, never raises)."""
        meta = obj.get("metadata") or {}
        key = EventKey(str(meta.get("namespace", "")), str(meta.get("uid", "")),
                       "Warning" if warning else "Normal", reason, message[:1024])
        involved = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind") or "AppWrapper",
                    "name": meta.get("name"), "namespace": meta.get("namespace"),
                    "uid": meta.get("uid")}
        if not warning and self._normal >= self._normal_limit:
            metrics.count_event_dropped()
            return
        try:
            self._queue.put_nowait(_Wanted(key, involved))
        except asyncio.QueueFull:
            metrics.count_event_dropped()
            return
        if not warning:
            self._normal += 1

    async def next(self) -> _Wanted:
        """The next Event to post (waits for one)."""
        wanted = await self._queue.get()
        if wanted.key.type == "Normal":
            self._normal -= 1
        return wanted

    async def run(self) -> None:
        """Post queued Events, forever (a supervised task)."""
        while True:
            wanted = await self.next()
            try:
                await self._post(wanted)
            except ApiError as err:
                log.debug("event %s not recorded: %s", wanted.key.reason, err)

    async def _post(self, wanted: _Wanted) -> None:
        key, now = wanted.key, rfc3339(utcnow())
        posted = self._posted.get(key)
        if posted is not None and time.monotonic() - posted.at < AGGREGATE_S:
            posted.count += 1
            posted.at = time.monotonic()
            self._posted.move_to_end(key)
            try:
                await verbs.merge_patch(self.hub, refs.EVENTS, posted.name,
                                        {"count": posted.count, "lastTimestamp": now},
                                        namespace=key.namespace)
                return
            except NotFound:
                del self._posted[key]  # expired on the hub: post anew
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{wanted.involved.get('name')}.",
                         "namespace": key.namespace},
            "involvedObject": dict(wanted.involved),
            "reason": key.reason, "message": key.message, "type": key.type,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "source": {"component": "mcad"}, "reportingComponent": "mcad",
        }
        answer = await verbs.create(self.hub, refs.EVENTS, body, namespace=key.namespace)
        name = str((answer.get("metadata") or {}).get("name", ""))
        if name:
            self._posted[key] = _Posted(name, 1, now, time.monotonic())
            while len(self._posted) > REMEMBERED:
                self._posted.popitem(last=False)
