"""Every answer of the visibility API, built in one place from the last cycle and forecast.

Why one place: the queue rows (``mcad queue``), one AppWrapper's explanation (``mcad
explain``, the page's detail) and the page's whole state are three views of the same
facts, the dispatcher's last ``Snapshot`` and ``CycleResult`` and the estimator's last
``Forecast``; built in two modules they disagreed on the estimated start. Here:

- **one rule for the estimate**: the estimator's last forecast says when a queued
  AppWrapper should start, and what that rests on (``estimated_start``); before the
  first forecast there is none, and a running one has none. A dry run gets a forecast of its
  own, made the same way.
- **one filter**: every answer takes the caller's ``Scope``; rows, running work and
  quota nodes outside it are left out, and sentences are cleaned of other namespaces'
  AppWrappers (``scope.redact``).

The answers are Kubernetes-shaped objects (``apiVersion``, ``kind``, ``metadata``), so
``kubectl get pendingappwrappers -n team-a -o yaml`` reads them as well as mcad's CLI.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any

from mcad.api.visibility import GROUP_VERSION
from mcad.controller.clock import rfc3339
from mcad.controller.estimator import Forecast
from mcad.core.cycle.snapshot import Admitted, CycleResult, Snapshot
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.quota.forest import QuotaAssignment, QuotaForest
from mcad.core.views.explain import (
    Explanation,
    QueueRow,
    charged_quota,
    describe_demand,
    queue_rows,
)
from mcad.core.workload.resources import GPU
from mcad.visibility.scope import Scope, redact

NANO = 10**9
Conditions = Callable[[AppWrapperKey], "list[dict[str, Any]] | None"]
"""An AppWrapper's status conditions as the hub has them (None: not known)."""


def estimated_start(plan: Forecast | None, key: AppWrapperKey) -> tuple[datetime | None, str]:
    """When ``key`` should start and what that rests on: the one rule (module docstring)."""
    if plan is None:
        return None, ("no estimate yet: the leader makes its first plan a few seconds after "
                      "it starts")
    start, basis = plan.describe(key)
    return start, f"{basis} (planned at {rfc3339(plan.made_at)})"


def known_keys(snapshot: Snapshot) -> frozenset[str]:
    """Every AppWrapper the snapshot names (what ``redact`` may have to hide)."""
    return frozenset(str(e.key) for e in snapshot.appwrappers)


def pending_list(snapshot: Snapshot, result: CycleResult, plan: Forecast | None, scope: Scope, *,
                 namespace: str | None = None) -> dict[str, Any]:
    """The queue in the order the last cycle considered it, as the caller may see it
    (only ``namespace``'s rows when given)."""
    known = known_keys(snapshot)
    items = [pending_item(row, plan, scope, known) for row in queue_rows(snapshot, result)
             if scope.sees(row.key) and (namespace is None
                                         or row.key.partition("/")[0] == namespace)]
    return {"apiVersion": GROUP_VERSION, "kind": "PendingAppWrapperList",
            "metadata": {}, "cycle": rfc3339(snapshot.now), "items": items}


def pending_item(row: QueueRow, plan: Forecast | None, scope: Scope, known: Collection[str]
                 ) -> dict[str, Any]:
    namespace, _, name = row.key.partition("/")
    found = plan.estimate(row.key) if plan is not None else None
    return {"apiVersion": GROUP_VERSION, "kind": "PendingAppWrapper",
            "metadata": {"namespace": namespace, "name": name},
            "position": row.position, "priority": row.priority,
            "quota": [f"{tree}/{node}" for tree, node in row.quota], "demand": row.demand,
            "waitingSince": rfc3339(row.waiting_since), "reason": row.reason,
            "message": redact(row.message, scope, known),
            "estimatedStart": rfc3339(found.start) if found is not None and found.start
            else None}


def explanation(found: Explanation, snapshot: Snapshot, plan: Forecast | None, scope: Scope, *,
                conditions: list[dict[str, Any]] | None = None,
                estimate: tuple[datetime | None, str] | None = None,
                dry_run: bool = False) -> dict[str, Any]:
    """One AppWrapper taken through the checks (``mcad.core.views.explain``), with the estimate
    of the rule (or ``estimate``, a dry run's own) and its conditions on the hub."""
    known = known_keys(snapshot) | {str(found.key)}

    def clean(text: str) -> str:
        return redact(text, scope, known)

    namespace, _, name = found.key.partition("/")
    waiting = found.outcome not in ("Running", "Dispatched")
    start, basis = (estimate or estimated_start(plan, found.key)) if waiting else (None, "")
    outcome, message = found.outcome, found.message
    if found.outcome == "Running":  # what gang health says of it, when it says something
        for kind in ("Resetting", "Unhealthy"):
            cond = next((c for c in conditions or () if c.get("type") == kind), None)
            if cond is not None and cond.get("status") == "True":
                outcome, message = kind, f"{found.message}; {cond.get('message', '')}"
                break
    ahead = [str(k) for k in found.ahead if scope.sees(k)]
    return {
        "apiVersion": GROUP_VERSION, "kind": "Explanation",
        "metadata": {"namespace": namespace, "name": name},
        "key": str(found.key), "outcome": outcome, "message": clean(message),
        "position": found.position,
        "checks": [{"step": c.step, "ok": c.ok, "detail": clean(c.detail)}
                   for c in found.checks],
        "clusters": [{"cluster": c.cluster, "ok": c.ok, "detail": clean(c.detail),
                      "domains": [{"domain": d.domain, "ok": d.ok, "detail": clean(d.detail)}
                                  for d in c.domains]}
                     for c in found.clusters],
        "ahead": ahead, "aheadOthers": len(found.ahead) - len(ahead),
        "estimatedStart": rfc3339(start) if start else None, "estimateBasis": clean(basis),
        "conditions": conditions or [], "cycle": rfc3339(snapshot.now),
        **({"dryRun": True} if dry_run else {}),
    }


def overview(snapshot: Snapshot, result: CycleResult, plan: Forecast | None, scope: Scope
             ) -> dict[str, Any]:
    """The web view's state: the queue, what runs where, the clusters as pictures and the
    quota trees, as the caller may see them."""
    known = known_keys(snapshot)
    queue = [pending_item(row, plan, scope, known) for row in queue_rows(snapshot, result)
             if scope.sees(row.key)]
    running = [{"key": e.key, "cluster": e.phase.cluster, "demand": describe_demand(e.demand),
                "priority": e.priority,
                "dispatched": rfc3339(e.dispatched) if e.dispatched else None,
                "draining": e.draining}
               for e in snapshot.appwrappers
               if isinstance(e.phase, Admitted) and scope.sees(e.key)]
    dispatched = {d.key: d.cluster for d in result.dispatches if scope.sees(d.key)}
    clusters = []
    for cluster in snapshot.clusters:
        ordered = sorted(cluster.nodes, key=lambda n: n.name)
        totals = [n.allocatable.get(GPU, 0) // NANO for n in ordered]
        used = [min(n.requested.get(GPU, 0), n.allocatable.get(GPU, 0)) // NANO
                for n in ordered]
        nodes = [{"name": n.name if scope.node_names else f"node {i}", "gpus": total,
                  "used": inuse, "ready": n.usable}
                 for i, (n, total, inuse) in enumerate(zip(ordered, totals, used, strict=True),
                                                        start=1)]
        clusters.append({"name": cluster.name, "ready": cluster.usable,
                         "gpus": sum(totals), "used": sum(used), "nodes": nodes,
                         "starting": sorted(k for k, c in dispatched.items()
                                            if c == cluster.name)})
    quota = charged_quota(snapshot)
    shown = None if scope.everything else _charged_by(snapshot, scope, quota)
    trees = [{"tree": tree, "node": node, "path": quota.path(tree, node),
              "limit": _amounts(quota.limit(tree, node)),
              "used": _amounts(quota.usage(tree, node))}
             for tree, node in quota.nodes() if shown is None or (tree, node) in shown]
    return {"apiVersion": GROUP_VERSION, "kind": "View", "metadata": {"name": "state"},
            "cycle": rfc3339(snapshot.now), "queue": queue, "running": running,
            "clusters": clusters, "quota": trees,
            "planned": rfc3339(plan.made_at) if plan is not None else None,
            "scope": {"everything": scope.everything,
                      "namespaces": sorted(scope.namespaces)}}


def _charged_by(snapshot: Snapshot, scope: Scope, quota: QuotaForest
                ) -> frozenset[tuple[str, str]]:
    """The quota nodes the caller's AppWrappers charge (or would, once admitted): their
    own nodes and every ancestor, whose use includes theirs."""
    shown: set[tuple[str, str]] = set()
    labels_seen: set[tuple[tuple[str, str], ...]] = set()
    for entry in snapshot.appwrappers:
        if not scope.sees(entry.key):
            continue
        labels = tuple(sorted(entry.quota_labels.items()))
        if labels in labels_seen:
            continue
        labels_seen.add(labels)
        assignment = quota.resolve(entry.quota_labels)
        if isinstance(assignment, QuotaAssignment):
            shown |= quota.charged_nodes(assignment)
    return frozenset(shown)


def _amounts(amounts: Mapping[str, int]) -> dict[str, float]:
    """Whole units (GPUs, cores, bytes) from the core's nano-units."""
    return {name: value / NANO for name, value in amounts.items()}
