"""When a dispatched gang that never came up is taken back, and when it is given up.

MCAD's ``schedulingSpec.requeuing``: if fewer than ``minAvailable`` pods are ready
(running or succeeded) ``timeInSeconds`` after dispatch, the wrapped objects are
deleted, a requeue is counted and the AppWrapper queues again, with a timeout that
grows (exponential: t * 2^n, linear: t * (n + 1), none: t) up to
``maxTimeInSeconds`` (0: no cap). After ``maxNumRequeuings`` requeues (0: no limit)
the next timeout fails the AppWrapper. MCAD v1 never incremented its counter, so its
limit never fired; here the count is an argument and the limit is a plain comparison.

A requeued AppWrapper pauses ``pauseTimeInSeconds`` before it may be dispatched
again (time for its pods to go); deletion that is stuck past
``forceDeletionTimeInSeconds`` is forced.

Everything here takes ``now``; nothing reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

INSUFFICIENT_PODS_READY = "InsufficientPodsReady"
"""The gang did not have minAvailable pods ready within the requeuing time."""
WRAPPED_OBJECT_FAILED = "WrappedObjectFailed"
"""A wrapped object reported one of its failure conditions."""
SPOKE_LOST = "SpokeLost"
SPEC_CHANGED = "SpecChanged"
KIND_NOT_SERVED = "KindNotServed"

SUSPENDED = "Suspended"
"""Taken back because its v1beta2 ``spec.suspend`` became true (Kueue's doing, or its
owner's): not the gang's fault."""

UNCOUNTED_REASONS = frozenset({SPOKE_LOST, SPEC_CHANGED, KIND_NOT_SERVED, SUSPENDED})
"""Requeues that are not the gang's doing: its cluster stopped answering, its spec was
changed after dispatch, the cluster chosen turned out not to serve a wrapped kind, or it
was suspended.
They do not count against maxNumRequeuings, and the AppWrapper may be dispatched again
at once (no pause: nothing of it is left to drain where it goes next)."""

MAX_TIMEOUT_SECONDS = 10 * 365 * 24 * 3600
"""Uncapped growth stops here: ten years, far past any real wait, short of overflow."""


class GrowthType(StrEnum):
    EXPONENTIAL = "exponential"
    LINEAR = "linear"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class RequeuePolicy:
    """``schedulingSpec.requeuing`` with MCAD's defaults, in seconds."""

    time_in_seconds: int = 300
    max_time_in_seconds: int = 0
    growth_type: GrowthType = GrowthType.EXPONENTIAL
    max_num_requeuings: int = 0
    pause_time_in_seconds: int = 90
    force_deletion_time_in_seconds: int = 570

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> RequeuePolicy:
        """Read ``schedulingSpec.requeuing`` as on the wire; absent fields take defaults.

        Raises ``ValueError`` with a sentence naming the field for a bad value.
        """
        if not spec:
            return cls()
        if not isinstance(spec, Mapping):
            raise ValueError("schedulingSpec.requeuing must be an object")
        default = cls()
        growth = spec.get("growthType")
        if growth is None or growth == "":
            growth_type = default.growth_type
        else:
            try:
                growth_type = GrowthType(str(growth).lower())
            except ValueError:
                raise ValueError(
                    f"schedulingSpec.requeuing.growthType is {growth!r}; use exponential, "
                    "linear or none") from None
        return cls(
            time_in_seconds=_seconds(spec, "timeInSeconds", default.time_in_seconds),
            max_time_in_seconds=_seconds(spec, "maxTimeInSeconds",
                                         default.max_time_in_seconds),
            growth_type=growth_type,
            max_num_requeuings=_seconds(spec, "maxNumRequeuings",
                                        default.max_num_requeuings),
            pause_time_in_seconds=_seconds(spec, "pauseTimeInSeconds",
                                           default.pause_time_in_seconds),
            force_deletion_time_in_seconds=_seconds(
                spec, "forceDeletionTimeInSeconds", default.force_deletion_time_in_seconds),
        )


def _seconds(spec: Mapping[str, Any], field: str, default: int) -> int:
    value = spec.get(field)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"schedulingSpec.requeuing.{field} must be a whole number of zero "
                         f"or more, not {value!r}")
    return value


def readiness_timeout(policy: RequeuePolicy, requeue_count: int) -> int:
    """Seconds the gang gets to come up after its ``requeue_count``-th requeue."""
    base = policy.time_in_seconds
    n = max(requeue_count, 0)
    if policy.growth_type is GrowthType.EXPONENTIAL:
        timeout = base << min(n, 64)
    elif policy.growth_type is GrowthType.LINEAR:
        timeout = base * (n + 1)
    else:
        timeout = base
    if policy.max_time_in_seconds:
        timeout = min(timeout, policy.max_time_in_seconds)
    return min(timeout, MAX_TIMEOUT_SECONDS)


def requeue_deadline(policy: RequeuePolicy, dispatched_at: datetime,
                     requeue_count: int) -> datetime:
    """When a gang dispatched at ``dispatched_at`` must be ready."""
    return dispatched_at + timedelta(seconds=readiness_timeout(policy, requeue_count))


@dataclass(frozen=True, slots=True)
class Ready:
    """Enough pods are ready: nothing to wait for."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Not ready yet, still in time: look again at ``until``."""

    until: datetime


@dataclass(frozen=True, slots=True)
class Requeue:
    """Take the gang back and queue it again, not before ``not_before``."""

    reason: str
    message: str
    next_count: int
    not_before: datetime


@dataclass(frozen=True, slots=True)
class Fail:
    """Give up: the requeue limit is spent."""

    reason: str
    message: str


ReadinessDecision = Ready | Wait | Requeue | Fail


def readiness_decision(*, now: datetime, policy: RequeuePolicy, dispatched_at: datetime,
                       requeue_count: int, ready_pods: int, min_available: int,
                       since_ready: bool = False) -> ReadinessDecision:
    """What to do with a dispatched AppWrapper whose gang may not be up yet.

    ``dispatched_at`` is when the clock started: the dispatch, or (``since_ready``) the
    moment a gang that had been ready dropped below ``min_available``.
    """
    if ready_pods >= min_available:
        return Ready()
    timeout = readiness_timeout(policy, requeue_count)
    deadline = dispatched_at + timedelta(seconds=timeout)
    if now < deadline:
        return Wait(deadline)
    short = (f"only {ready_pods} of the {min_available} pods it needs were ready "
             + (f"for {timeout}s after the gang lost pods" if since_ready
                else f"{timeout}s after dispatch"))
    limit = policy.max_num_requeuings
    if limit and requeue_count >= limit:
        return Fail("RequeueLimitReached",
                    f"{short}, and it was already requeued {requeue_count} times "
                    f"(maxNumRequeuings {limit}); fix what keeps its pods from running "
                    "and create it again")
    return Requeue(INSUFFICIENT_PODS_READY,
                   f"{short}; requeued (requeue {requeue_count + 1}"
                   f"{f' of {limit}' if limit else ''}), may be dispatched again after "
                   f"{policy.pause_time_in_seconds}s",
                   next_count=requeue_count + 1,
                   not_before=now + timedelta(seconds=policy.pause_time_in_seconds))


def force_deletion_due(policy: RequeuePolicy, deleting_since: datetime,
                       now: datetime) -> bool:
    """True once deleting the wrapped objects has taken ``forceDeletionTimeInSeconds``."""
    return now - deleting_since >= timedelta(seconds=policy.force_deletion_time_in_seconds)
