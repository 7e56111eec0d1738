"""What a dispatched AppWrapper's pods and objects mean: counts, completion (MCAD's
rules, with completionstatus requiring True), readiness waits, requeue and failure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcad.core.life.completion import (
    Completed,
    ItemState,
    KeepRunning,
    PodCounts,
    completion_types,
    count_pods,
    progress,
)
from mcad.core.life.requeue import Fail, Requeue, RequeuePolicy

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = RequeuePolicy(time_in_seconds=60, max_num_requeuings=2, pause_time_in_seconds=5)


def pod(phase: str, *, ready: bool = False, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"deletionTimestamp": "x"} if deleting else {}
    return {"metadata": meta, "status": {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}


def test_count_pods_by_phase_and_readiness() -> None:
    counts = count_pods([pod("Pending"), pod("Running"), pod("Running", ready=True),
                         pod("Succeeded"), pod("Failed"), pod("Running", deleting=True)])
    assert counts == PodCounts(pending=1, running=2, ready=1, succeeded=1, failed=1)


def test_completion_types_are_comma_separated() -> None:
    assert completion_types(" Complete, Failed ,") == ("Complete", "Failed")


def decide(*, pods: PodCounts, items: tuple[ItemState, ...] = (), now_s: int = 10,
           count: int = 0, expected: int = 2) -> object:
    return progress(now=T0 + timedelta(seconds=now_s), policy=POLICY, dispatched_at=T0,
                    requeue_count=count, min_available=2, expected_pods=expected, pods=pods,
                    items=list(items))


@pytest.mark.parametrize(("pods", "items", "now_s", "count", "want"), [
    pytest.param(PodCounts(running=2, ready=2), (), 10, 0, KeepRunning(None, ready=True),
                 id="gang-ready"),
    pytest.param(PodCounts(pending=2), (), 10, 0,
                 KeepRunning(T0 + timedelta(seconds=60), ready=False), id="waiting-for-gang"),
    pytest.param(PodCounts(succeeded=2), (), 10, 0, Completed(hold=False),
                 id="all-pods-succeeded"),
    pytest.param(PodCounts(succeeded=1), (), 10, 0,
                 KeepRunning(T0 + timedelta(seconds=60), ready=False),
                 id="one-of-two-succeeded-is-neither-complete-nor-ready"),
    pytest.param(PodCounts(running=1, ready=1, succeeded=1),
                 (ItemState(("Complete",), {"Complete": "True"}),), 10, 0,
                 Completed(hold=True), id="item-complete-pods-running-hold"),
    pytest.param(PodCounts(succeeded=2),
                 (ItemState(("Complete",), {"Complete": "False"}),), 10, 0,
                 KeepRunning(None, ready=True), id="completionstatus-needs-True"),
])
def test_progress(pods: PodCounts, items: tuple[ItemState, ...], now_s: int, count: int,
                  want: object) -> None:
    assert decide(pods=pods, items=items, now_s=now_s, count=count) == want


def test_readiness_timeout_requeues_with_a_pause() -> None:
    got = decide(pods=PodCounts(running=2), now_s=61)
    assert isinstance(got, Requeue)
    assert got.next_count == 1
    assert got.not_before == T0 + timedelta(seconds=66)


def test_the_limit_fails_instead_of_requeuing() -> None:
    got = decide(pods=PodCounts(running=2), now_s=10_000, count=2)
    assert isinstance(got, Fail)
    assert got.reason == "RequeueLimitReached"


def test_a_failed_item_requeues_unless_failed_counts_as_completion() -> None:
    failed = ItemState(("Complete",), {"Failed": "True"})
    assert isinstance(decide(pods=PodCounts(failed=2), items=(failed,)), Requeue)
    done = ItemState(("Complete", "Failed"), {"Failed": "True"})
    assert decide(pods=PodCounts(failed=2), items=(done,)) == Completed(hold=False)


# -- readiness is latched -------------------------------------------------------------------

def test_a_gang_that_was_ready_is_not_requeued_at_once_when_a_pod_restarts() -> None:
    # Ready for an hour, then one pod restarts: long past the dispatch deadline.
    lost_at = T0 + timedelta(hours=1)
    got = progress(now=lost_at + timedelta(seconds=5), policy=POLICY, dispatched_at=T0,
                   requeue_count=0, min_available=2, expected_pods=2,
                   pods=PodCounts(running=2, ready=1), items=[], unready_since=lost_at)
    assert got == KeepRunning(lost_at + timedelta(seconds=60), ready=False)


def test_a_gang_that_stays_below_min_available_for_the_requeuing_time_is_requeued() -> None:
    lost_at = T0 + timedelta(hours=1)
    got = progress(now=lost_at + timedelta(seconds=61), policy=POLICY, dispatched_at=T0,
                   requeue_count=0, min_available=2, expected_pods=2,
                   pods=PodCounts(running=2, ready=1), items=[], unready_since=lost_at)
    assert isinstance(got, Requeue)
    assert "after the gang lost pods" in got.message


# -- completion needs the items' own word, or every pod --------------------------------------

def test_a_replaced_failed_pod_does_not_stop_completion_by_pods() -> None:
    assert decide(pods=PodCounts(succeeded=2, failed=1)) == Completed(hold=False)


def test_a_job_between_waves_is_not_complete_until_it_says_so() -> None:
    # completions 4, parallelism 2: two pods succeeded, the Job has not said Complete.
    between = ItemState(("Complete",), {})
    assert decide(pods=PodCounts(succeeded=2), items=(between,), expected=2) == \
        KeepRunning(None, ready=True)
    done = ItemState(("Complete",), {"Complete": "True"})
    assert decide(pods=PodCounts(succeeded=4, failed=1), items=(done,)) == Completed(hold=False)


# -- dispatchDuration.limit caps a run ---------------------------------------------------------

def test_a_run_past_its_limit_fails_even_when_its_gang_is_ready() -> None:
    ready = PodCounts(running=2, ready=2)
    before = progress(now=T0 + timedelta(seconds=29), policy=POLICY, dispatched_at=T0,
                      requeue_count=0, min_available=2, expected_pods=2, pods=ready, items=[],
                      run_limit_seconds=30)
    assert before == KeepRunning(T0 + timedelta(seconds=30), ready=True)
    after = progress(now=T0 + timedelta(seconds=30), policy=POLICY, dispatched_at=T0,
                     requeue_count=0, min_available=2, expected_pods=2, pods=ready, items=[],
                     run_limit_seconds=30)
    assert after == Fail("DispatchDeadlineExceeded",
                         "ran 30s without completing: its dispatchDuration.limit is 30s")


def test_a_limit_shorter_than_the_readiness_wait_is_looked_at_first() -> None:
    got = progress(now=T0 + timedelta(seconds=5), policy=POLICY, dispatched_at=T0,
                   requeue_count=0, min_available=2, expected_pods=2,
                   pods=PodCounts(pending=2), items=[], run_limit_seconds=20)
    assert got == KeepRunning(T0 + timedelta(seconds=20), ready=False)


def test_a_completed_run_is_not_failed_by_its_limit() -> None:
    got = progress(now=T0 + timedelta(seconds=500), policy=POLICY, dispatched_at=T0,
                   requeue_count=0, min_available=2, expected_pods=2,
                   pods=PodCounts(succeeded=2), items=[], run_limit_seconds=20)
    assert got == Completed(hold=False)
