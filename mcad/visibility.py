"""``/queue`` and ``/explain``: the leader answers from its last dispatch cycle.

Why from the controller and not from status: positions change with every dispatch,
and writing each waiting AppWrapper's position into its status would be a write storm
on a long queue (Kueue's visibility API answers on demand for the same reason). The
leader keeps its last cycle's snapshot and decisions (``Dispatcher.last``); these
endpoints only read them (``mcad.core.explain``), so the CLI never re-implements the
queue and what it shows is what the dispatcher decided.

- ``GET /queue[?namespace=NS]``: the queued AppWrappers in the order the last cycle
  considered them, with position, priority, quota node, demand, waiting since, reason,
  and the estimated start of the estimator's last plan (``mcad.controller.estimator``).
- ``GET /explain?namespace=NS&name=NAME``: one AppWrapper taken through the checks.
- ``POST /explain`` with an AppWrapper (JSON or YAML): a dry run for one not yet
  submitted, added to the last snapshot as if created now.

A standby replica answers 503 naming the leader. Served next to ``/metrics`` (reach it
with ``mcad queue --controller URL``, or through the hub's pod proxy).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict, replace
from datetime import datetime
from typing import Any

import yaml
from aiohttp import web

from mcad.config import RunConfig
from mcad.controller.clock import rfc3339, utcnow
from mcad.controller.estimator import Plan
from mcad.controller.records import AppWrapperRecord
from mcad.core.capacity import AppWrapperKey
from mcad.core.cycle import dispatch_cycle
from mcad.core.explain import Explanation, explain, queue_rows, with_candidate
from mcad.core.snapshot import CycleResult, Snapshot
from mcad.validation import check_appwrapper

LastCycle = Callable[[], "tuple[Snapshot, CycleResult] | str"]
"""The last cycle, or the sentence that says why there is none (standby, starting)."""
LastPlan = Callable[[], "Plan | None"]
"""The estimator's last plan (``mcad.controller.estimator``), None before the first."""
DryPlan = Callable[[Snapshot, CycleResult, AppWrapperRecord],
                   Awaitable[tuple[datetime | None, str]]]
"""A plan for an AppWrapper not submitted (``Estimator.dry_run``)."""


def routes(last: LastCycle, config: RunConfig, plan: LastPlan = lambda: None,
           dry_plan: DryPlan | None = None) -> list[web.RouteDef]:
    async def queue(request: web.Request) -> web.Response:
        got = last()
        if isinstance(got, str):
            return _unavailable(got)
        snapshot, result = got
        namespace = request.query.get("namespace", "")
        rows = [r for r in queue_rows(snapshot, result)
                if not namespace or r.key.split("/", 1)[0] == namespace]
        planned = plan()

        def start_of(key: AppWrapperKey) -> str | None:
            found = planned.estimate(key) if planned is not None else None
            return rfc3339(found.start) if found is not None and found.start else None

        return _json({"cycle": rfc3339(snapshot.now), "items": [
            {"position": r.position, "namespace": r.key.split("/", 1)[0],
             "name": r.key.split("/", 1)[1], "priority": r.priority,
             "quota": [f"{tree}/{node}" for tree, node in r.quota], "demand": r.demand,
             "waitingSince": rfc3339(r.waiting_since), "reason": r.reason,
             "message": r.message, "estimatedStart": start_of(r.key)} for r in rows]})

    async def explain_one(request: web.Request) -> web.Response:
        got = last()
        if isinstance(got, str):
            return _unavailable(got)
        snapshot, result = got
        namespace, name = request.query.get("namespace", ""), request.query.get("name", "")
        if not namespace or not name:
            return _problem(400, "give ?namespace=...&name=...")
        key = AppWrapperKey(f"{namespace}/{name}")
        found = explain(snapshot, result, key)
        if found is None:
            return _problem(404, f"AppWrapper {namespace}/{name} is not queued or running "
                                 "(completed, failed, deleted, or not seen yet)")
        planned = plan()
        if planned is not None and planned.estimate(key) is not None \
                and found.outcome not in ("Running", "Dispatched"):
            start, basis = planned.describe(key)
            found = replace(found, estimated_start=start,
                            estimate_basis=f"{basis} (planned at {rfc3339(planned.made_at)})")
        return _json(_explanation(found, snapshot))

    async def dry_run(request: web.Request) -> web.Response:
        got = last()
        if isinstance(got, str):
            return _unavailable(got)
        snapshot, _ = got
        try:
            body = yaml.safe_load(await request.text())
        except yaml.YAMLError as err:
            return _problem(400, f"the body is not YAML or JSON: {err}")
        checked = check_appwrapper(body, config=config)
        if checked.problems:
            return _problem(422, "the AppWrapper is not valid: " + "; ".join(checked.problems))
        meta = body.setdefault("metadata", {})
        meta.setdefault("namespace", request.query.get("namespace", "default"))
        meta.setdefault("uid", "dry-run")
        meta["creationTimestamp"] = rfc3339(utcnow())
        record = AppWrapperRecord.of(body)
        trial = with_candidate(snapshot, record.core_entry(config))
        decided = dispatch_cycle(trial)
        found = explain(trial, decided, record.key)
        assert found is not None
        if dry_plan is not None and found.outcome not in ("Running", "Dispatched"):
            start, basis = await dry_plan(trial, decided, record)
            found = replace(found, estimated_start=start, estimate_basis=basis)
        return _json({**_explanation(found, trial), "dryRun": True})

    return [web.get("/queue", queue), web.get("/explain", explain_one),
            web.post("/explain", dry_run)]


def _explanation(found: Explanation, snapshot: Snapshot) -> dict[str, Any]:
    out = asdict(found)
    out["key"] = str(found.key)
    out["ahead"] = [str(k) for k in found.ahead]
    out["cycle"] = rfc3339(snapshot.now)
    out["estimated_start"] = rfc3339(found.estimated_start) if found.estimated_start else None
    return out


def _json(body: dict[str, Any]) -> web.Response:
    return web.Response(text=json.dumps(body, default=_default), content_type="application/json")


def _default(value: object) -> str:
    return rfc3339(value) if isinstance(value, datetime) else str(value)


def _problem(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=json.dumps({"message": message}),
                        content_type="application/json")


def _unavailable(why: str) -> web.Response:
    return _problem(503, why)
