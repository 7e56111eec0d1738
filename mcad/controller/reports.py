"""What the controller tells the world: Prometheus gauges and SpokeCluster status.

Why apart from the decisions: reporting reads the caches and writes only observations
(capacity, readiness, usage), never decisions, so it runs on its own rhythm: at most
once a second, and only when something changed. A SpokeCluster status is rewritten only
when what it says changed; a failed write is logged and tried again next round.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mcad import metrics
from mcad.controller.clock import rfc3339, utcnow
from mcad.controller.spokes import SpokeLink
from mcad.controller.state import ControllerState
from mcad.controller.writer import set_condition
from mcad.core.quota import QuotaAssignment
from mcad.gateway import objects as verbs
from mcad.gateway import resources as refs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import ApiError

log = logging.getLogger(__name__)
REPORT_EVERY_S = 1.0
STATES = ("Pending", "Running", "RunningHoldCompletion", "Completed", "Failed")


class Reports:
    def __init__(self, *, hub: Connection, state: ControllerState) -> None:
        self.hub = hub
        self.state = state
        self._dirty = asyncio.Event()
        self._spoke_status: dict[str, dict[str, Any]] = {}
        self._failed: dict[str, str] = {}
        """The last write error per SpokeCluster, logged once rather than every round."""

    def dirty(self) -> None:
        self._dirty.set()

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            self.report_metrics()
            for name, link in list(self.state.links.items()):
                await self._write_spoke_status(name, link)
            await asyncio.sleep(REPORT_EVERY_S)

    def report_metrics(self) -> None:
        counts = dict.fromkeys(STATES, 0)
        forest = self.state.forest.copy()
        for rec in self.state.appwrappers.values():
            state = rec.state if rec.state in counts else "Pending"
            counts["Running" if rec.assumed_cluster else state] += 1
            if rec.admitted and rec.demand is not None:
                assignment = forest.resolve(rec.meta.get("labels") or {})
                if isinstance(assignment, QuotaAssignment):
                    forest.charge(assignment, rec.demand.total)
        metrics.report_appwrapper_states(counts)
        for tree, node in forest.nodes():
            metrics.report_quota(tree, node, limit=forest.limit(tree, node),
                                 used=forest.usage(tree, node))
        for name, link in list(self.state.links.items()):
            cluster = link.capacity()
            metrics.report_cluster(name, ready=link.health.ready, capacity=cluster.capacity(),
                                   allocatable=cluster.allocatable(), free=cluster.free())

    async def _write_spoke_status(self, name: str, link: SpokeLink) -> None:
        cluster = link.capacity()
        status: dict[str, Any] = {
            "capacity": cluster.capacity().to_strings(),
            "allocatable": cluster.allocatable().to_strings(),
            "free": cluster.free().to_strings(), "nodes": len(cluster.nodes),
            "readyNodes": sum(1 for n in cluster.nodes if n.ready)}
        health = ("True" if link.health.ready else "False", link.health.reason,
                  link.health.message)
        if self._spoke_status.get(name) == {**status, "health": health}:
            return
        spoke = self.state.spoke_objects.get(name)
        if spoke is None or not spoke["metadata"].get("uid"):
            return  # gone, or the implicit "local" cluster of --local, with no object
        now = utcnow()
        conditions = set_condition(
            list((spoke.get("status") or {}).get("conditions") or []), type_="Ready",
            status=health[0], reason=health[1], message=health[2], now=now,
            generation=int(spoke["metadata"].get("generation", 0) or 0))
        try:
            answer = await verbs.merge_patch(self.hub, refs.SPOKECLUSTERS, name, {
                "status": {**status, "conditions": conditions, "lastSyncTime": rfc3339(now)}},
                subresource="status")
        except ApiError as err:
            if self._failed.get(name) != err.message:
                log.warning("SpokeCluster %s status not written: %s", name, err)
            self._failed[name] = err.message
            self._dirty.set()
            return
        self._failed.pop(name, None)
        self._spoke_status[name] = {**status, "health": health}
        if name in self.state.spoke_objects and answer.get("metadata"):
            self.state.spoke_objects[name] = answer  # its newest resourceVersion
