"""Requeue policy: reading ``schedulingSpec.requeuing``, timeout growth and cap, the
readiness decision (wait, requeue with a pause, fail once the limit is spent) and
forced deletion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from mcad.core.life.requeue import (
    Fail,
    GrowthType,
    ReadinessDecision,
    Ready,
    Requeue,
    RequeuePolicy,
    Wait,
    force_deletion_due,
    readiness_decision,
    readiness_timeout,
    requeue_deadline,
)
from tests.builders.snapshots import at


@pytest.mark.parametrize(("spec", "want"), [
    (None, RequeuePolicy(300, 0, GrowthType.EXPONENTIAL, 0, 90, 570)),
    ({}, RequeuePolicy()),
    ({"timeInSeconds": 60, "maxTimeInSeconds": 600, "growthType": "linear",
      "maxNumRequeuings": 3, "pauseTimeInSeconds": 10, "forceDeletionTimeInSeconds": 30},
     RequeuePolicy(60, 600, GrowthType.LINEAR, 3, 10, 30)),
    ({"growthType": "None"}, RequeuePolicy(growth_type=GrowthType.NONE)),
    ({"timeInSeconds": 120.0}, RequeuePolicy(time_in_seconds=120)),
], ids=["absent", "empty", "every field", "growth type is case-insensitive",
        "whole floats accepted"])
def test_from_spec(spec: dict[str, Any] | None, want: RequeuePolicy) -> None:
    assert RequeuePolicy.from_spec(spec) == want


@pytest.mark.parametrize(("spec", "want_error"), [
    ({"growthType": "quadratic"}, "schedulingSpec.requeuing.growthType is 'quadratic'; "
                                  "use exponential, linear or none"),
    ({"timeInSeconds": -1}, "schedulingSpec.requeuing.timeInSeconds must be a whole "
                            "number of zero or more, not -1"),
    ({"maxNumRequeuings": "3"}, "schedulingSpec.requeuing.maxNumRequeuings must be a "
                                "whole number of zero or more, not '3'"),
    ({"pauseTimeInSeconds": True}, "schedulingSpec.requeuing.pauseTimeInSeconds must be "
                                   "a whole number of zero or more, not True"),
], ids=["unknown growth", "negative", "string", "boolean"])
def test_from_spec_rejects(spec: dict[str, Any], want_error: str) -> None:
    with pytest.raises(ValueError) as err:
        RequeuePolicy.from_spec(spec)
    assert str(err.value) == want_error


@pytest.mark.parametrize(("policy", "count", "want_seconds"), [
    (RequeuePolicy(time_in_seconds=300), 0, 300),
    (RequeuePolicy(time_in_seconds=300), 1, 600),
    (RequeuePolicy(time_in_seconds=300), 3, 2400),
    (RequeuePolicy(time_in_seconds=300, max_time_in_seconds=1000), 3, 1000),
    (RequeuePolicy(time_in_seconds=60, growth_type=GrowthType.LINEAR), 0, 60),
    (RequeuePolicy(time_in_seconds=60, growth_type=GrowthType.LINEAR), 4, 300),
    (RequeuePolicy(time_in_seconds=60, growth_type=GrowthType.LINEAR,
                   max_time_in_seconds=200), 4, 200),
    (RequeuePolicy(time_in_seconds=60, growth_type=GrowthType.NONE), 7, 60),
    (RequeuePolicy(time_in_seconds=300), 500, 10 * 365 * 24 * 3600),
], ids=["exponential n=0", "exponential n=1", "exponential n=3", "exponential capped",
        "linear n=0", "linear n=4", "linear capped", "none", "uncapped growth stays finite"])
def test_readiness_timeout(policy: RequeuePolicy, count: int, want_seconds: int) -> None:
    assert readiness_timeout(policy, count) == want_seconds


def test_requeue_deadline_is_dispatch_plus_timeout() -> None:
    assert requeue_deadline(RequeuePolicy(time_in_seconds=100), at(50), 2) == at(450)


LIMITED = RequeuePolicy(time_in_seconds=100, max_num_requeuings=2, pause_time_in_seconds=90)


@dataclass
class DecisionCase:
    id: str
    now: float
    count: int
    ready: int
    want: ReadinessDecision
    policy: RequeuePolicy = LIMITED
    min_available: int = 4


DECISIONS = [
    DecisionCase("gang up: ready", now=50, count=0, ready=4, want=Ready()),
    DecisionCase("more than needed: ready", now=500, count=0, ready=5, want=Ready()),
    DecisionCase("not up, in time: wait until the deadline", now=50, count=0, ready=1,
                 want=Wait(at(100))),
    DecisionCase("deadline grows with the count", now=150, count=1, ready=1,
                 want=Wait(at(200))),
    DecisionCase("late: requeue with a pause", now=100, count=0, ready=3,
                 want=Requeue("InsufficientPodsReady",
                              "only 3 of the 4 pods it needs were ready 100s after "
                              "dispatch; requeued (requeue 1 of 2), may be dispatched "
                              "again after 90s", next_count=1, not_before=at(190))),
    DecisionCase("second requeue still allowed", now=200, count=1, ready=0,
                 want=Requeue("InsufficientPodsReady",
                              "only 0 of the 4 pods it needs were ready 200s after "
                              "dispatch; requeued (requeue 2 of 2), may be dispatched "
                              "again after 90s", next_count=2, not_before=at(290))),
    DecisionCase("limit spent: the next timeout fails it", now=400, count=2, ready=0,
                 want=Fail("RequeueLimitReached",
                           "only 0 of the 4 pods it needs were ready 400s after dispatch, "
                           "and it was already requeued 2 times (maxNumRequeuings 2); fix "
                           "what keeps its pods from running and create it again")),
    DecisionCase("limit spent but still in time: wait", now=399, count=2, ready=0,
                 want=Wait(at(400))),
    DecisionCase("no limit: requeue forever", now=10**6, count=50, ready=0,
                 policy=RequeuePolicy(time_in_seconds=10, growth_type=GrowthType.NONE,
                                      pause_time_in_seconds=5),
                 want=Requeue("InsufficientPodsReady",
                              "only 0 of the 4 pods it needs were ready 10s after "
                              "dispatch; requeued (requeue 51), may be dispatched again "
                              "after 5s", next_count=51, not_before=at(10**6 + 5))),
]


@pytest.mark.parametrize("case", DECISIONS, ids=lambda c: c.id)
def test_readiness_decision(case: DecisionCase) -> None:
    got = readiness_decision(now=at(case.now), policy=case.policy, dispatched_at=at(0),
                             requeue_count=case.count, ready_pods=case.ready,
                             min_available=case.min_available)
    assert got == case.want


def test_the_limit_really_fires_over_a_run_of_timeouts() -> None:
    """Feed each requeue's count back in: after maxNumRequeuings requeues, Failed."""
    policy = RequeuePolicy(time_in_seconds=10, max_num_requeuings=3)
    count, now, outcomes = 0, 0.0, []
    for _ in range(10):
        dispatched = now
        now = dispatched + readiness_timeout(policy, count)
        decision = readiness_decision(now=at(now), policy=policy, dispatched_at=at(dispatched),
                                      requeue_count=count, ready_pods=0, min_available=1)
        outcomes.append(type(decision).__name__)
        if isinstance(decision, Fail):
            break
        assert isinstance(decision, Requeue)
        count = decision.next_count
        now += policy.pause_time_in_seconds
    assert outcomes == ["Requeue", "Requeue", "Requeue", "Fail"]


@pytest.mark.parametrize(("elapsed", "want"), [(0, False), (569, False), (570, True),
                                                (10_000, True)],
                         ids=["just started", "just under", "exactly due", "long overdue"])
def test_force_deletion_due(elapsed: float, want: bool) -> None:
    assert force_deletion_due(RequeuePolicy(), at(100), at(100 + elapsed)) is want
