"""How a dispatched AppWrapper is doing: pod counts, completion, readiness.

Pure reading of what the spoke reports (pods and the wrapped objects' conditions)
into the decision the controller applies: keep running (and until when to wait for
the gang), completed, running-hold-completion, requeue, or fail. MCAD v1's rules,
with its bugs fixed: a completionstatus condition must be True, not merely present,
and the requeue limit really fires (``mcad.core.life.requeue``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from mcad.core.life.requeue import (
    WRAPPED_OBJECT_FAILED,
    Fail,
    Ready,
    Requeue,
    RequeuePolicy,
    Wait,
    readiness_decision,
)

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class PodCounts:
    """The AppWrapper's pods by phase; ``ready`` counts Running pods whose Ready is True."""

    pending: int = 0
    running: int = 0
    ready: int = 0
    succeeded: int = 0
    failed: int = 0

    @property
    def active(self) -> int:
        return self.pending + self.running


def count_pods(pods: Iterable[Mapping[str, Any]]) -> PodCounts:
    pending = running = ready = succeeded = failed = 0
    for pod in pods:
        status = pod.get("status") or {}
        phase = status.get("phase", "Pending")
        if (pod.get("metadata") or {}).get("deletionTimestamp") and phase not in TERMINAL_PHASES:
            continue  # on its way out: neither running nor pending any more
        if phase == "Succeeded":
            succeeded += 1
        elif phase == "Failed":
            failed += 1
        elif phase == "Running":
            running += 1
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in status.get("conditions") or []):
                ready += 1
        else:
            pending += 1
    return PodCounts(pending, running, ready, succeeded, failed)


@dataclass(frozen=True, slots=True)
class ItemState:
    """One wrapped object: the condition types it wants for completion, and its
    conditions (type -> status) as last seen."""

    completion_types: tuple[str, ...]
    conditions: Mapping[str, str]

    @property
    def complete(self) -> bool:
        return any(self.conditions.get(t) == "True" for t in self.completion_types)

    @property
    def failed(self) -> bool:
        return self.conditions.get("Failed") == "True" and "Failed" not in self.completion_types


def completion_types(value: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in value.split(",") if t.strip())


@dataclass(frozen=True, slots=True)
class KeepRunning:
    """Nothing to do now; look again at ``recheck_at`` (None: when something changes)."""

    recheck_at: datetime | None
    ready: bool


@dataclass(frozen=True, slots=True)
class Completed:
    hold: bool  # True: RunningHoldCompletion (items complete, pods still running)


Progress = KeepRunning | Completed | Requeue | Fail


DEADLINE_EXCEEDED = "DispatchDeadlineExceeded"


def progress(*, now: datetime, policy: RequeuePolicy, dispatched_at: datetime,
             requeue_count: int, min_available: int, expected_pods: int, pods: PodCounts,
             items: Sequence[ItemState], unready_since: datetime | None = None,
             run_limit_seconds: int | None = None) -> Progress:
    """Decide what a dispatched AppWrapper's pods and objects mean now.

    Completion: every item with completion types (its ``completionstatus``, or its kind's
    own: a Job's Complete) reports one of them True; an AppWrapper with no such item is
    complete when as many pods succeeded as it makes and none is left running (a pod that
    failed and was replaced does not stand in the way).

    Readiness is latched: ``unready_since`` is when a gang that *was* ready dropped below
    ``minAvailable`` (None if it never was ready, or is ready now). Such a gang gets the
    requeuing time again from that moment, so one pod restarting in a long run is not
    a reason to take the whole gang back; a gang that never came up is measured from
    dispatch.

    ``run_limit_seconds`` (``dispatchDuration.limit``, when above 0) caps each run: once
    that long has passed since dispatch without completion, it fails with reason
    ``DispatchDeadlineExceeded``, like a Job's activeDeadlineSeconds. (MCAD wrote Failed
    and then, by accident of its cleanup, queued it again, to run past its limit once
    more; a limit that ends in a loop is not a limit.)
    """
    tracked = [i for i in items if i.completion_types]
    if tracked and all(i.complete for i in tracked):
        return Completed(hold=pods.active > 0)
    if not tracked and pods.succeeded and pods.active == 0 \
            and pods.succeeded >= max(expected_pods, 1):
        return Completed(hold=False)
    deadline = dispatched_at + timedelta(seconds=run_limit_seconds) \
        if run_limit_seconds else None
    if deadline is not None and now >= deadline:
        return Fail(DEADLINE_EXCEEDED,
                    f"ran {run_limit_seconds}s without completing: its "
                    f"dispatchDuration.limit is {run_limit_seconds}s")
    failed_items = [i for i in items if i.failed]
    if failed_items:
        return _requeue_or_fail(policy, requeue_count, now, WRAPPED_OBJECT_FAILED,
                                "a wrapped object reports Failed")
    decision = readiness_decision(now=now, policy=policy,
                                  dispatched_at=unready_since or dispatched_at,
                                  requeue_count=requeue_count,
                                  ready_pods=pods.ready + pods.succeeded,
                                  min_available=min_available,
                                  since_ready=unready_since is not None)
    if isinstance(decision, Ready):
        return KeepRunning(deadline, ready=True)
    if isinstance(decision, Wait):
        return KeepRunning(decision.until if deadline is None else min(decision.until, deadline),
                           ready=False)
    return decision


def _requeue_or_fail(policy: RequeuePolicy, count: int, now: datetime, reason: str,
                     what: str) -> Requeue | Fail:
    limit = policy.max_num_requeuings
    if limit and count >= limit:
        return Fail(reason, f"{what}, and it was already requeued {count} times "
                            f"(maxNumRequeuings {limit})")
    return Requeue(reason, f"{what}; requeued (requeue {count + 1}"
                           f"{f' of {limit}' if limit else ''})",
                   next_count=count + 1,
                   not_before=now + timedelta(seconds=policy.pause_time_in_seconds))
