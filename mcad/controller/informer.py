"""A cache of one kind of object on one cluster, kept current by a watch.

Why one class for the hub and every spoke: the rules for trusting a cache are the same
everywhere (client-go's informers). A full list replaces the cache, and whatever it
lacks was deleted while nobody watched, so a DELETED is synthesized for it; a broken
stream makes the cache *known to be stale* (``synced`` False) until the next list; every
change goes to one handler with the object as it was last seen. ``keep`` slims what is
stored (a pod's few read fields, not its whole spec), so 100,000 pods stay cheap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any

from mcad.gateway.connection import Connection
from mcad.gateway.errors import ApiError, Forbidden, NotFound
from mcad.gateway.refs import ResourceRef
from mcad.gateway.watch import Changed, Relisted, StreamBroken, watch_objects

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Handler = Callable[[str, Obj], None]
"""Called with ``ADDED``, ``MODIFIED`` or ``DELETED`` and the object (the last version
seen, for DELETED)."""


def by_namespace_and_name(obj: Obj) -> Hashable:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace", ""), meta.get("name", ""))


def _unchanged(obj: Obj) -> Obj:
    return obj


class Informer:
    """List-then-watch one resource into a dict, telling ``handle`` about every change."""

    def __init__(self, conn: Connection, ref: ResourceRef, handle: Handler, *,
                 namespace: str | None = None, label_selector: str | None = None,
                 key: Callable[[Obj], Hashable] = by_namespace_and_name,
                 keep: Callable[[Obj], Obj] = _unchanged,
                 on_sync: Callable[[bool, ApiError | None], None] | None = None,
                 shared: bool = True, optional: bool = False) -> None:
        self.conn = conn
        self.ref = ref
        self.handle = handle
        self.namespace = namespace
        self.label_selector = label_selector
        self.key = key
        self.keep = keep
        self.on_sync = on_sync
        self.shared = shared
        """Decode watch events sharing keys and short values (``Connection.loads``); off
        where only a few fields are kept, and those are interned by ``keep``."""
        self.optional = optional
        """A resource the cluster may not serve (a CRD not installed), or mcad may not be
        allowed to list (an install whose rights predate it): then an empty, synced
        cache, said once; it is listed when it appears."""
        self.objects: dict[Hashable, Obj] = {}
        self.synced = False
        self.error: ApiError | None = None
        self.absent = False

    async def run(self) -> None:
        """Follow the resource forever (the stream reconnects by itself)."""
        try:
            async for event in watch_objects(self.conn, self.ref, namespace=self.namespace,
                                             label_selector=self.label_selector,
                                             shared=self.shared):
                if isinstance(event, Changed):
                    self._changed(event.type, event.obj)
                elif isinstance(event, Relisted):
                    self._relisted(event.items)
                else:
                    self._broken(event)
                # A Relisted holds the whole list: kept in ``event`` until the next change
                # (on a quiet resource, for ever), every node's whole object stayed alive.
                del event
        finally:
            self._set_synced(False, self.error)

    def _changed(self, kind: str, obj: Obj) -> None:
        key = self.key(obj)
        if kind == "DELETED":
            self.objects.pop(key, None)
        else:
            kind = "MODIFIED" if key in self.objects else "ADDED"
            self.objects[key] = self.keep(obj)
        self.handle(kind, obj)

    def _relisted(self, items: list[Obj]) -> None:
        fresh = {self.key(item): item for item in items}
        for key in [k for k in self.objects if k not in fresh]:
            self.handle("DELETED", self.objects.pop(key))
        for key, item in fresh.items():
            kind = "MODIFIED" if key in self.objects else "ADDED"
            self.objects[key] = self.keep(item)
            self.handle(kind, item)
        self.error = None
        self._set_synced(True, None)

    def _broken(self, event: StreamBroken) -> None:
        if self.optional and isinstance(event.error, NotFound | Forbidden):
            if not self.absent:
                log.log(logging.INFO if isinstance(event.error, NotFound) else logging.WARNING,
                        "%s are %s on %s: none are read (looked for again from time to "
                        "time)", self.ref.plural,
                        "not served" if isinstance(event.error, NotFound)
                        else "not readable with mcad's rights (list, watch)", self.conn.name)
                self.absent = True
            self._relisted([])
            return
        self.absent = False
        self.error = event.error
        log.warning("watch of %s on %s broke: %s (retrying in %.1fs)", self.ref.plural,
                    self.conn.name, event.error.message, event.retry_in)
        self._set_synced(False, event.error)

    def _set_synced(self, synced: bool, error: ApiError | None) -> None:
        changed = synced != self.synced
        self.synced = synced
        if self.on_sync is not None and (changed or error is not None):
            self.on_sync(synced, error)
