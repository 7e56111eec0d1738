"""What mcad left on a lost spoke, recorded on the hub, and collected when it returns.

Why a ledger: when a spoke stops answering for ``spokeLostSeconds``, its AppWrappers are
requeued (and may run elsewhere) and deletions there stop waiting, but the objects
mcad created there cannot be deleted yet. So they are written down first, in the
SpokeCluster's ``status.leftovers`` (on the hub, where it survives a restart of mcad or
a change of leader), and only then is the AppWrapper moved on. When the spoke answers
again, its reconcile deletes every recorded object that belongs to an AppWrapper now
placed elsewhere or gone, then clears the ledger; until the ledger is empty the spoke
gets no new work (``SpokeLink.leftovers``). An entry whose AppWrapper turns out to
still be placed on that spoke (a requeue that did not persist) is dropped, not deleted.

Both writes go through the SpokeCluster's status, conditionally on its resourceVersion,
so two AppWrappers recording at once cannot lose each other's entries (the second gets
a Conflict and is retried with the informer's newer copy).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mcad.controller.records import AppWrapperRecord
from mcad.controller.state import ControllerState
from mcad.core.life.wrapping import is_ours
from mcad.gateway import refs, verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import Conflict, NotFound, UnknownKind

log = logging.getLogger(__name__)
CONFLICT_RETRIES = 5


def leftovers_of(spoke: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [dict(e) for e in ((spoke or {}).get("status") or {}).get("leftovers") or []
            if isinstance(e, dict)]


class Leftovers:
    def __init__(self, *, hub: Connection, state: ControllerState) -> None:
        self.hub = hub
        self.state = state

    async def record(self, cluster: str, rec: AppWrapperRecord,
                     created: list[tuple[str, str, str]]) -> None:
        """Write down what ``rec`` leaves on ``cluster`` (raises on a failed write)."""
        spoke = self.state.spoke_objects.get(cluster)
        if spoke is None or not spoke["metadata"].get("uid"):
            log.warning("%s leaves its objects on %s, which has no SpokeCluster to record "
                        "them in; delete them there by hand: %s", rec.key, cluster, created)
            return
        added = [{"apiVersion": api_version, "kind": kind, "namespace": rec.namespace,
                  "name": name, "uid": rec.uid} for api_version, kind, name in created]
        await self._update(cluster, spoke, lambda entries: entries + [
            e for e in added if e not in entries])

    async def _update(self, cluster: str, spoke: dict[str, Any],
                      change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
        """Read, change, write the ledger, conditionally; on a Conflict read it afresh."""
        for _ in range(CONFLICT_RETRIES):
            entries = change(leftovers_of(spoke))
            try:
                answer = await verbs.merge_patch(self.hub, refs.SPOKECLUSTERS, cluster, {
                    "metadata": {"resourceVersion": spoke["metadata"].get("resourceVersion")},
                    "status": {"leftovers": entries}}, subresource="status")
            except Conflict:
                spoke = await verbs.get(self.hub, refs.SPOKECLUSTERS, cluster)
                continue
            self.state.spoke_objects[cluster] = answer
            link = self.state.links.get(cluster)
            if link is not None:
                link.leftovers = len(entries)
            return
        raise Conflict(f"the leftovers of SpokeCluster {cluster} kept changing under us",
                       cluster=self.hub.name)

    async def collect(self, cluster: str) -> float | None:
        """Delete what the ledger of ``cluster`` lists, once it answers; then clear it."""
        spoke = self.state.spoke_objects.get(cluster)
        entries = leftovers_of(spoke)
        link = self.state.links.get(cluster)
        if not entries or spoke is None or link is None:
            return None
        if not link.health.ready or link.conn is None or link.discovery is None:
            return None  # its health change queues this cluster again
        done = []
        for entry in entries:
            key = self.state.by_uid.get(entry["uid"])
            owner = self.state.appwrappers.get(key) if key is not None else None
            if owner is not None and owner.cluster == cluster:
                done.append(entry)  # still placed there after all: not a leftover
                continue
            try:
                ref = await link.discovery.resource_for(entry["apiVersion"], entry["kind"])
                existing = await verbs.get(link.conn, ref, entry["name"],
                                           namespace=entry["namespace"])
            except (NotFound, UnknownKind):
                done.append(entry)
                continue
            if is_ours(existing, uid=entry["uid"]) and \
                    not (existing.get("metadata") or {}).get("deletionTimestamp"):
                await verbs.delete(link.conn, ref, entry["name"], namespace=entry["namespace"],
                                   propagation="Background")
                log.info("deleted leftover %s %s/%s on %s", entry["kind"],
                         entry["namespace"], entry["name"], cluster)
            done.append(entry)
        await self._update(cluster, spoke, lambda now: [e for e in now if e not in done])
        return None
