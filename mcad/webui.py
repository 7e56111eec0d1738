"""The live web view: ``/ui/``, served by the leader next to ``/metrics``.

What people look at, in one page: the queue in dispatch order with reasons and
estimated starts, the clusters as a picture (a square per node, filled by the GPUs in
use), the quota trees with use against limits, what runs where, and one AppWrapper's
page (its conditions and the explain checks). The page fetches ``/ui/state`` every two
seconds and redraws, so a change shows without a reload; it is one HTML file with its
script and styles inline, fetching nothing else (no CDN: it works where the cluster has
no internet). Read-only: nothing here writes.

Reached like ``mcad queue``: ``kubectl port-forward -n mcad-system pod/<leader> 8080``
then http://127.0.0.1:8080/ui/, or through the Service; a standby answers 503 with the
leader's name (the page says so and keeps trying).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from importlib import resources
from typing import Any

from aiohttp import web

from mcad.controller.clock import rfc3339
from mcad.controller.estimator import Plan
from mcad.core.capacity import AppWrapperKey
from mcad.core.explain import charged_quota, describe_demand, explain, queue_rows
from mcad.core.snapshot import Admitted, CycleResult, Snapshot

GPU = "nvidia.com/gpu"
NANO = 10**9
LastCycle = Callable[[], "tuple[Snapshot, CycleResult] | str"]
LastPlan = Callable[[], "Plan | None"]
Conditions = Callable[[AppWrapperKey], "list[dict[str, Any]] | None"]
"""An AppWrapper's status conditions as the hub has them (None: not known)."""


def view(snapshot: Snapshot, result: CycleResult, plan: Plan | None) -> dict[str, Any]:
    """Everything the page shows, from the last cycle and the last plan."""
    starts = plan.estimates.starts if plan is not None else {}
    queue = []
    for row in queue_rows(snapshot, result):
        found = starts.get(row.key)
        queue.append({
            "position": row.position, "key": row.key, "priority": row.priority,
            "quota": [f"{tree}/{node}" for tree, node in row.quota], "demand": row.demand,
            "waitingSince": rfc3339(row.waiting_since), "reason": row.reason,
            "message": row.message,
            "estimatedStart": rfc3339(found.start) if found and found.start else None})
    running = [{"key": e.key, "cluster": e.phase.cluster, "demand": describe_demand(e.demand),
                "priority": e.priority,
                "dispatched": rfc3339(e.dispatched) if e.dispatched else None,
                "draining": e.draining}
               for e in snapshot.appwrappers if isinstance(e.phase, Admitted)]
    dispatched = {d.key: d.cluster for d in result.dispatches}
    clusters = []
    for cluster in snapshot.clusters:
        ordered = sorted(cluster.nodes, key=lambda n: n.name)
        totals = [n.allocatable.get(GPU, 0) // NANO for n in ordered]
        used = [min(n.requested.get(GPU, 0), n.allocatable.get(GPU, 0)) // NANO
                for n in ordered]
        nodes = [{"name": n.name, "gpus": total, "used": inuse, "ready": n.usable}
                 for n, total, inuse in zip(ordered, totals, used, strict=True)]
        clusters.append({"name": cluster.name, "ready": cluster.usable,
                         "gpus": sum(totals), "used": sum(used), "nodes": nodes,
                         "starting": sorted(k for k, c in dispatched.items()
                                            if c == cluster.name)})
    quota = charged_quota(snapshot)
    trees = [{"tree": tree, "node": node, "path": quota.path(tree, node),
              "limit": _amounts(quota.limit(tree, node)),
              "used": _amounts(quota.usage(tree, node))}
             for tree, node in quota.nodes()]
    return {"cycle": rfc3339(snapshot.now), "queue": queue, "running": running,
            "clusters": clusters, "quota": trees,
            "planned": rfc3339(plan.made_at) if plan is not None else None}


def _amounts(amounts: Mapping[str, int]) -> dict[str, float]:
    """Whole units (GPUs, cores, bytes) from the core's nano-units."""
    return {name: value / NANO for name, value in amounts.items()}


def routes(last: LastCycle, plan: LastPlan, conditions: Conditions) -> list[web.RouteDef]:
    page = resources.files("mcad").joinpath("ui/index.html").read_text()

    async def index(_: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html", headers={
            "Cache-Control": "no-store",
            "Content-Security-Policy": "default-src 'self'; style-src 'unsafe-inline'; "
                                       "script-src 'unsafe-inline'; img-src 'self' data:"})

    async def to_index(_: web.Request) -> web.Response:
        raise web.HTTPFound("ui/")  # (relative: it works through the hub's pod proxy too)

    async def state(_: web.Request) -> web.Response:
        got = last()
        if isinstance(got, str):
            return _json({"unavailable": got}, status=503)
        return _json(view(*got, plan()))

    async def one(request: web.Request) -> web.Response:
        got = last()
        if isinstance(got, str):
            return _json({"unavailable": got}, status=503)
        snapshot, result = got
        key = AppWrapperKey(f"{request.query.get('namespace', '')}/"
                            f"{request.query.get('name', '')}")
        found = explain(snapshot, result, key)
        if found is None:
            return _json({"message": f"{key} is not queued or running"}, status=404)
        planned = plan()
        start, basis = (planned.describe(key) if planned is not None
                        and planned.estimate(key) is not None
                        else (found.estimated_start, found.estimate_basis))
        return _json({"key": key, "outcome": found.outcome, "message": found.message,
                      "position": found.position,
                      "checks": [{"step": c.step, "ok": c.ok, "detail": c.detail}
                                 for c in found.checks],
                      "clusters": [{"cluster": c.cluster, "ok": c.ok, "detail": c.detail}
                                   for c in found.clusters],
                      "estimatedStart": rfc3339(start) if start else None, "basis": basis,
                      "conditions": conditions(key) or []})

    return [web.get("/ui", to_index), web.get("/ui/", index), web.get("/ui/state", state),
            web.get("/ui/appwrapper", one)]


def _json(body: dict[str, Any], *, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body, default=_default), status=status,
                        content_type="application/json", headers={"Cache-Control": "no-store"})


def _default(value: object) -> str:
    return rfc3339(value) if isinstance(value, datetime) else str(value)
