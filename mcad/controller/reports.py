"""What the controller tells the world: gauges, SpokeCluster and QuotaSubtree status.

Why apart from the decisions: reporting reads the caches and writes only observations
(capacity, readiness, usage), never decisions, so it runs on its own rhythm: at most
once a second, and at most ``REPORT_SHARE`` of the controller's time, and only when
something changed. A SpokeCluster status is rewritten only
when what it says changed; a failed write is logged and tried again next round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import Any

from mcad import metrics
from mcad.controller.clock import rfc3339, utcnow
from mcad.controller.spoke_link import SpokeLink
from mcad.controller.state import ControllerState
from mcad.controller.writer import set_condition
from mcad.core.placement.domains import summary as topology_summary
from mcad.core.quota.forest import QuotaAssignment, QuotaForest
from mcad.core.quota.status import subtree_status, valid
from mcad.gateway import refs, verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import ApiError

log = logging.getLogger(__name__)
REPORT_EVERY_S = 1.0
REPORT_SHARE = 0.03
"""The most of the controller's time the gauges may take: after a round of d seconds the
next waits at least d / REPORT_SHARE. Each round walks every record (states, quota use)
and every node (capacity, topology); at 10,000 AppWrappers over 3,000 nodes that was
about 65 ms a second, a sixth of the controller's CPU while a backlog drained, for
gauges scraped every 15 to 30 s."""
SUBTREE_EVERY_S = 3.0
SUMMARY_EVERY_S = 60.0
STATES = ("Pending", "Running", "RunningHoldCompletion", "Completed", "Failed")


def pause_after(took: float) -> float:
    """Seconds to wait after a round that took ``took`` seconds of work."""
    return max(REPORT_EVERY_S, took / REPORT_SHARE)


class Reports:
    def __init__(self, *, hub: Connection, state: ControllerState) -> None:
        self.hub = hub
        self.state = state
        self._dirty = asyncio.Event()
        self._spoke_status: dict[str, dict[str, Any]] = {}
        self._subtree_status: dict[str, dict[str, Any]] = {}
        self._subtree_written: dict[str, datetime] = {}
        self._failed: dict[str, str] = {}
        """The last write error per SpokeCluster or QuotaSubtree, logged once rather than
        every round."""

    def dirty(self) -> None:
        self._dirty.set()

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            started = time.perf_counter()
            forest = self.report_metrics()
            took = time.perf_counter() - started
            for name, link in list(self.state.links.items()):
                await self._write_spoke_status(name, link)
            await self._write_subtree_statuses(forest)
            await asyncio.sleep(pause_after(took))

    async def summarize(self, every: float = SUMMARY_EVERY_S) -> None:
        """One info line per minute: someone reading the log sees it is alive and what
        it does (queued, running, dispatched and requeued since the last line)."""
        last = metrics.totals()
        while True:
            await asyncio.sleep(every)
            now = metrics.totals()
            queued = sum(1 for r in self.state.appwrappers.values() if r.queued)
            running = sum(1 for r in self.state.appwrappers.values() if r.admitted)
            ready = sum(1 for link in self.state.links.values() if link.health.ready)
            log.info("summary: %d queued, %d running; %d dispatched and %d requeued in the "
                     "last %.0fs; %d of %d clusters ready", queued, running,
                     now[0] - last[0], now[1] - last[1], every, ready,
                     len(self.state.links))
            last = now

    def report_metrics(self) -> QuotaForest:
        """Report the gauges; returns the quota forest charged with what runs."""
        counts = dict.fromkeys(STATES, 0)
        forest = self.state.forest.copy()
        for rec in self.state.appwrappers.values():
            state = rec.state if rec.state in counts else "Pending"
            counts["Running" if rec.live_dispatch() is not None else state] += 1
            held = rec.admitted_demand() if rec.admitted else None  # elastic: as admitted
            if held is not None:
                assignment = forest.resolve(rec.meta.get("labels") or {})
                if isinstance(assignment, QuotaAssignment):
                    forest.charge(assignment, held.total)
        metrics.report_appwrapper_states(counts)
        metrics.report_elastic({
            (rec.namespace, rec.name): (rec.admitted_pods() or rec.demand.pods,
                                        rec.demand.pods)
            for rec in self.state.appwrappers.values()
            if rec.elastic and rec.admitted and rec.demand is not None})
        for tree, node in forest.nodes():
            metrics.report_quota(tree, node, limit=forest.limit(tree, node),
                                 used=forest.usage(tree, node))
        for name, link in list(self.state.links.items()):
            cluster = link.capacity()
            metrics.report_cluster(name, ready=link.health.ready, capacity=cluster.capacity(),
                                   allocatable=cluster.allocatable(), free=cluster.free())
            room = topology_summary(cluster)
            metrics.report_topology(name, fragmented=room.fragmented, domains=(
                (d.level, d.domain, d.free) for d in room.domains))
        return forest

    async def _write_subtree_statuses(self, forest: QuotaForest) -> None:
        """Usage per node into each QuotaSubtree's status: only what changed, and each
        object at most every ``SUBTREE_EVERY_S`` (usage moves with every dispatch)."""
        now = utcnow()
        for ident, obj in list(self.state.subtrees.items()):
            status = subtree_status(obj, forest, self.state.quota_problems)
            condition = valid(obj, self.state.quota_problems)
            said = {**status, "valid": condition}
            if self._subtree_status.get(ident) == said:
                continue
            last = self._subtree_written.get(ident)
            if last is not None and (now - last).total_seconds() < SUBTREE_EVERY_S:
                self._dirty.set()  # not now: the next round after the interval
                continue
            if await self._write_status(refs.QUOTASUBTREES, obj, ident, status,
                                        ("Valid", *condition), now=now) is None:
                continue
            self._subtree_status[ident] = said
            self._subtree_written[ident] = now

    async def _write_spoke_status(self, name: str, link: SpokeLink) -> None:
        cluster = link.capacity()
        status: dict[str, Any] = {
            "capacity": cluster.capacity().to_strings(),
            "allocatable": cluster.allocatable().to_strings(),
            # Every resource the nodes have, "0" when none is free: the status is a merge
            # patch, and a resource left out would keep its last value.
            "free": {**dict.fromkeys(cluster.capacity(), "0"), **cluster.free().to_strings()},
            "nodes": len(cluster.nodes),
            "readyNodes": sum(1 for n in cluster.nodes if n.ready),
            "topology": topology_summary(cluster).to_status()}
        health = ("True" if link.health.ready else "False", link.health.reason,
                  link.health.message)
        if self._spoke_status.get(name) == {**status, "health": health}:
            return
        spoke = self.state.spoke_objects.get(name)
        if spoke is None or not spoke["metadata"].get("uid"):
            return  # gone, or the implicit "local" cluster of --local, with no object
        now = utcnow()
        answer = await self._write_status(refs.SPOKECLUSTERS, spoke, name,
                                          {**status, "lastSyncTime": rfc3339(now)},
                                          ("Ready", *health), now=now)
        if answer is None:
            return
        self._spoke_status[name] = {**status, "health": health}
        if name in self.state.spoke_objects and answer.get("metadata"):
            self.state.spoke_objects[name] = answer  # its newest resourceVersion

    async def _write_status(self, ref: refs.ResourceRef, obj: dict[str, Any], ident: str,
                            status: dict[str, Any], condition: tuple[str, str, str, str], *,
                            now: datetime) -> dict[str, Any] | None:
        """Merge ``status`` and one condition (type, status, reason, message) into the
        status of ``obj`` (``ident`` in the log); the hub's answer, or None when the write
        failed: logged once per error rather than every round, and tried again next round.
        """
        meta = obj.get("metadata") or {}
        type_, value, reason, message = condition
        conditions = set_condition(
            list((obj.get("status") or {}).get("conditions") or []), type_=type_,
            status=value, reason=reason, message=message, now=now,
            generation=int(meta.get("generation", 0) or 0))
        try:
            answer = await verbs.merge_patch(
                self.hub, ref, str(meta.get("name")),
                {"status": {**status, "conditions": conditions}},
                namespace=str(meta.get("namespace")) if ref.namespaced else None,
                subresource="status")
        except ApiError as err:
            if self._failed.get(ident) != err.message:
                log.warning("%s %s status not written: %s", ref.kind, ident, err)
            self._failed[ident] = err.message
            self._dirty.set()
            return None
        self._failed.pop(ident, None)
        return answer
