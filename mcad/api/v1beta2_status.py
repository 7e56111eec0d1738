"""An AppWrapper's status in v1beta2's vocabulary, derived from what mcad keeps (v1beta1).

Why derived, not written: mcad keeps one status, the storage version's (its state, pod
counts, run, requeue counters and conditions), written by one writer. A v1beta2 reader
gets the same facts told the way v1beta2 tells them, worked out by the conversion each
time the object is read, so the two can never disagree and nothing is written twice.

- ``phase``: Terminating once deleted; Suspended while queued; Resuming while dispatched
  and its objects are being created (the Dispatched condition says Creating) or none of
  its pods is seen yet; Running; Resetting while a reset deletes and recreates its gang
  in place (condition Resetting); Suspending while it is taken back to the queue
  (condition Requeuing: a requeue, an eviction, a suspension); Succeeded; Failed.
- ``conditions``: QuotaReserved (True while dispatched: it holds quota and room),
  ResourcesDeployed (True while its objects may exist on a cluster: from dispatch until
  they are deleted), DeletingResources (True while they are being deleted), then mcad's
  own, among them PodsReady and Unhealthy, which mean in v1beta1 what they mean in
  v1beta2.
- ``componentStatus``: one entry per component, with its podSets (declared or
  inferred) and ResourcesDeployed True while its object is part of the current run.
- Everything else mcad keeps follows under its v1beta1 name (``resettingCount`` is the
  same field in both).

``back`` is the inverse for every status mcad writes: the v1beta1 status is the v1beta2
one less what was derived (tests hold the pair to that; ``mcad.api.conversion`` keeps
whatever else a status holds, so no status is ever lost).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

QUOTA_RESERVED = "QuotaReserved"
RESOURCES_DEPLOYED = "ResourcesDeployed"
DELETING_RESOURCES = "DeletingResources"
DERIVED = (QUOTA_RESERVED, RESOURCES_DEPLOYED, DELETING_RESOURCES)
"""The conditions only v1beta2 has: derived, never kept."""
OWN_FIELDS = ("phase", "conditions", "componentStatus")
"""Fields of v1beta2's status that are not copied from v1beta1's as they are."""
DISPATCHED_STATES = ("Running", "RunningHoldCompletion")


def derive(status: Mapping[str, Any], *, meta: Mapping[str, Any],
           components: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The v1beta2 status of an AppWrapper whose v1beta1 status is ``status``;
    ``components``: its v1beta2 components, each with its ``podSets`` declared or
    inferred (``template`` and ``podSets`` are read)."""
    if not status:
        return {}
    out = {k: v for k, v in status.items() if k not in ("conditions", "componentStatus")}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    by_type = {str(c.get("type")): c for c in conditions}
    state = str(status.get("state") or "")
    deleting = bool(meta.get("deletionTimestamp"))
    out["phase"] = _phase(status, state, by_type, deleting)
    derived = _conditions(status, state, by_type, deleting) if state else []
    if derived or "conditions" in status:
        out["conditions"] = [*derived, *(status.get("conditions") or [])]
    if "componentStatus" in status:
        out["componentStatus"] = _components(status, components)
    return out


def back(status: Mapping[str, Any]) -> dict[str, Any]:
    """The v1beta1 status a v1beta2 status was derived from: what ``derive`` added taken
    away (``componentStatus`` read back from its deployed entries)."""
    out = {k: v for k, v in status.items() if k not in OWN_FIELDS}
    kept = [c for c in status.get("conditions") or []
            if not (isinstance(c, Mapping) and c.get("type") in DERIVED)]
    if kept:
        out["conditions"] = kept
    if "componentStatus" in status:
        out["componentStatus"] = [
            {"apiVersion": c.get("apiVersion", ""), "kind": c.get("kind", ""),
             "name": c.get("name", "")}
            for c in status.get("componentStatus") or [] if isinstance(c, Mapping)
            and _true(c.get("conditions"), RESOURCES_DEPLOYED)]
    return out


def _phase(status: Mapping[str, Any], state: str, by_type: Mapping[str, Mapping[str, Any]],
           deleting: bool) -> str:
    if deleting or state == "Deleted":
        return "Terminating"
    if state == "Pending":
        return "Suspended"
    if state == "Completed":
        return "Succeeded"
    if state == "Failed":
        return "Failed"
    if state not in DISPATCHED_STATES:
        return ""
    if _is_true(by_type.get("Resetting")):
        return "Resetting"
    if _is_true(by_type.get("Requeuing")):
        return "Suspending"
    creating = (by_type.get("Dispatched") or {}).get("reason") == "Creating"
    seen = sum(_count(status.get(k)) for k in ("pending", "running", "Succeeded", "failed"))
    if creating or (not seen and not _is_true(by_type.get("PodsReady"))):
        return "Resuming"
    return "Running"


def _conditions(status: Mapping[str, Any], state: str,
                by_type: Mapping[str, Mapping[str, Any]], deleting: bool
                ) -> list[dict[str, Any]]:
    cluster = str(status.get("clusterName") or "")
    dispatched = bool(cluster) and state in DISPATCHED_STATES
    dispatch = by_type.get("Dispatched") or {}
    since_dispatch = dispatch.get("lastTransitionTime") or status.get("dispatchTimestamp")
    out = []
    if dispatched:
        out.append(_condition(QUOTA_RESERVED, True, "Dispatched",
                              f"dispatched to cluster {cluster}: it holds quota and room "
                              "there", since_dispatch))
    elif state == "Pending":
        queued = by_type.get("Queued") or {}
        out.append(_condition(QUOTA_RESERVED, False, str(queued.get("reason") or "Pending"),
                              str(queued.get("message") or status.get("message") or ""),
                              queued.get("lastTransitionTime")))
    else:
        ended = by_type.get(state) or {}
        out.append(_condition(QUOTA_RESERVED, False, str(ended.get("reason") or state),
                              str(ended.get("message") or status.get("message") or ""),
                              ended.get("lastTransitionTime")))
    if cluster:
        out.append(_condition(RESOURCES_DEPLOYED, True, "Dispatched",
                              f"its objects are on cluster {cluster}", since_dispatch))
    else:
        out.append(_condition(RESOURCES_DEPLOYED, False, "NotDispatched",
                              "it has no objects on any cluster", None))
    requeuing, resetting = by_type.get("Requeuing"), by_type.get("Resetting")
    if _is_true(requeuing) or _is_true(resetting):
        why = requeuing if _is_true(requeuing) else resetting
        assert why is not None
        out.append(_condition(DELETING_RESOURCES, True, str(why.get("reason") or "Deleting"),
                              str(why.get("message") or ""), why.get("lastTransitionTime")))
    elif deleting and cluster:
        out.append(_condition(DELETING_RESOURCES, True, "Deleted",
                              f"deleted: its objects on cluster {cluster} are being removed",
                              None))
    return out


def _components(status: Mapping[str, Any], components: Sequence[Mapping[str, Any]]
                ) -> list[dict[str, Any]]:
    deployed = {(str(c.get("apiVersion", "")), str(c.get("kind", "")), str(c.get("name", "")))
                for c in status.get("componentStatus") or [] if isinstance(c, Mapping)}
    since = status.get("dispatchTimestamp")
    out = []
    for component in components:
        found = component.get("template") if isinstance(component, Mapping) else None
        template: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        named = template.get("metadata")
        meta: Mapping[str, Any] = named if isinstance(named, Mapping) else {}
        ident = (str(template.get("apiVersion", "")), str(template.get("kind", "")),
                 str(meta.get("name", "")))
        here = ident in deployed
        out.append({
            "apiVersion": ident[0], "kind": ident[1], "name": ident[2],
            "podSets": list(component.get("podSets") or []),
            "conditions": [_condition(
                RESOURCES_DEPLOYED, here, "Dispatched" if here else "NotDispatched",
                "created for the current run" if here else "not part of a current run",
                since if here else None)]})
    return out


def _condition(type_: str, status: bool, reason: str, message: str,
               since: object) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type_, "status": "True" if status else "False",
                           "reason": reason, "message": message}
    if isinstance(since, str) and since:
        out["lastTransitionTime"] = since
    return out


def _is_true(condition: Mapping[str, Any] | None) -> bool:
    return condition is not None and condition.get("status") == "True"


def _true(conditions: object, type_: str) -> bool:
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == "True"
        for c in conditions)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
