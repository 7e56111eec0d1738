"""A running gang's health (``mcad.core.life.health``), transition by transition: a failed pod
waits the failure grace, recovered within it nothing happens, past it the gang is
reset, past the retry limit it fails; a terminal exit code fails it at once, and so does
any code outside a listed set of retryable ones; a failed wrapped object resets at once;
a wrapped object deleted by someone else fails it; a pod on an EVICT node resets it
without counting; pods not created within the admission grace or not running within the
warm-up grace reset it; an MCAD v1 AppWrapper without grace annotations leaves readiness
to MCAD's rule. Annotations parse as v1beta2's, capped at 24 h, or are refused."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mcad.core.life import health
from mcad.core.life.health import (
    AUTOPILOT_LABEL,
    FailedPod,
    FaultPolicy,
    GangState,
    GiveUp,
    Healthy,
    Mending,
    NodeHealthRules,
    Reset,
    judge,
)
from mcad.core.workload.durations import parse_duration
from tests.builders.snapshots import at

POLICY = FaultPolicy()
FOUR = GangState(expected=4, running=4)


def judged(gang: GangState, *, now: float = 600, policy: FaultPolicy = POLICY,
           unhealthy_since: float | None = None, resets: int = 0) -> health.Health:
    return judge(now=at(now), policy=policy, gang=gang, deployed_at=at(0),
                 unhealthy_since=None if unhealthy_since is None else at(unhealthy_since),
                 resets=resets)


def failed(name: str = "trainer-2", code: int | None = 137, reason: str = "OOMKilled"
           ) -> FailedPod:
    return FailedPod(name, code, reason, at(590))


def test_a_running_gang_is_healthy() -> None:
    assert judged(FOUR) == Healthy()


def test_a_failed_pod_waits_the_failure_grace_with_a_sentence() -> None:
    gang = GangState(expected=4, running=3, failed=(failed(),))
    got = judged(gang, now=600, unhealthy_since=595)
    assert isinstance(got, Mending)
    assert got.until == at(655)
    assert got.message == ("pod trainer-2 failed with exit code 137 (OOMKilled) at "
                           "2024-05-01T10:09:50+00:00; the gang is reset at "
                           "2024-05-01T10:10:55+00:00 unless it recovers (reset 1 of 3)")


def test_recovered_within_the_grace_nothing_happens() -> None:
    assert judged(FOUR, unhealthy_since=595) == Healthy()


def test_past_the_failure_grace_the_gang_is_reset_whole() -> None:
    gang = GangState(expected=4, running=3, failed=(failed(),))
    got = judged(gang, now=656, unhealthy_since=595)
    assert got == Reset(health.FOUND_FAILED_PODS,
                        "pod trainer-2 failed with exit code 137 (OOMKilled) at "
                        "2024-05-01T10:09:50+00:00; the gang is reset (reset 1 of 3)")


def test_past_the_retry_limit_it_fails() -> None:
    gang = GangState(expected=4, running=3, failed=(failed(),))
    got = judged(gang, now=656, unhealthy_since=595, resets=3)
    assert isinstance(got, GiveUp) and got.reason == health.RETRY_LIMIT_REACHED
    assert got.message.endswith("it was already reset 3 times (retryLimit 3)")


def test_a_terminal_exit_code_fails_it_at_once() -> None:
    policy = POLICY.with_annotations({health.TERMINAL_EXIT_CODES: "42"})
    gang = GangState(expected=4, running=3, failed=(failed(code=42, reason="Error"),))
    got = judged(gang, policy=policy, unhealthy_since=None)
    assert isinstance(got, GiveUp) and got.reason == health.TERMINAL_EXIT_CODE
    assert got.message.startswith("pod trainer-2 failed with exit code 42 (Error)")


def test_with_retryable_codes_listed_any_other_code_fails_it_at_once() -> None:
    policy = POLICY.with_annotations({health.RETRYABLE_EXIT_CODES: "137, 143"})
    retryable = GangState(expected=4, running=3, failed=(failed(code=137),))
    other = GangState(expected=4, running=3, failed=(failed(code=1, reason="Error"),))
    assert isinstance(judged(retryable, policy=policy, unhealthy_since=599), Mending)
    assert isinstance(judged(other, policy=policy, unhealthy_since=599), GiveUp)


def test_a_failed_wrapped_object_resets_at_once() -> None:
    got = judged(GangState(expected=4, running=4, failed_objects=("Job/train",)))
    assert got == Reset(health.FAILED_COMPONENT,
                        "Job/train reports Failed; the gang is reset (reset 1 of 3)")


def test_a_wrapped_object_deleted_by_someone_else_fails_it() -> None:
    got = judged(GangState(expected=4, running=4, missing=("Job/train",)))
    assert isinstance(got, GiveUp) and got.reason == health.MISSING_COMPONENT


def test_a_pod_on_an_evict_node_resets_without_counting() -> None:
    got = judged(GangState(expected=4, running=4, on_evict_nodes=(("trainer-0", "n-3"),)))
    assert got == Reset(health.NODE_EVICT, "node n-3 must be evacuated (GPU health EVICT) "
                                           "and the gang runs there; the gang is reset onto "
                                           "other nodes", counted=False)


@pytest.mark.parametrize(("gang", "now", "want"), [
    (GangState(expected=4, pending=2), 59, Healthy(recheck_at=at(60))),
    (GangState(expected=4, pending=2), 61, Reset),
    (GangState(expected=4, pending=4), 61, Healthy(recheck_at=at(300))),
    (GangState(expected=4, pending=1, running=3), 301, Reset),
    (GangState(expected=4, running=2, succeeded=2), 5000, Healthy()),
])
def test_the_admission_and_warmup_graces(gang: GangState, now: float, want: object) -> None:
    got = judged(gang, now=now)
    if isinstance(want, type):
        assert isinstance(got, want) and got.reason == health.INSUFFICIENT_PODS
    else:
        assert got == want


def test_without_graces_readiness_is_left_to_mcads_rule() -> None:
    policy = FaultPolicy(admission_grace=None, warmup_grace=None)
    assert judged(GangState(expected=4, pending=1), now=10_000, policy=policy) == Healthy()


def test_annotations_are_read_and_grace_periods_capped() -> None:
    policy = POLICY.with_annotations({health.ADMISSION_GRACE: "10s",
                                      health.WARMUP_GRACE: "1m30s",
                                      health.FAILURE_GRACE: "48h",
                                      health.RETRY_LIMIT: "1",
                                      health.SUCCESS_TTL: "10d"})
    assert (policy.admission_grace, policy.warmup_grace, policy.failure_grace,
            policy.retry_limit, policy.success_ttl) == (10, 90, 24 * 3600, 1, 10 * 86400)


@pytest.mark.parametrize(("name", "value", "says"), [
    (health.FAILURE_GRACE, "soon", "is not a duration"),
    (health.RETRY_PAUSE, "-5s", "of zero or more"),
    (health.RETRY_LIMIT, "three", "is not a whole number"),
    (health.TERMINAL_EXIT_CODES, "42,x", "comma-separated list of exit codes"),
    (health.RETRYABLE_EXIT_CODES, "0", "not between 1 and 255"),
])
def test_a_value_that_does_not_parse_is_a_sentence_naming_the_annotation(
        name: str, value: str, says: str) -> None:
    (problem,) = health.policy_problems({name: value})
    assert problem.startswith(f"annotation {name}: ") and says in problem


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("1m", 60), ("1h30m", 5400), ("1.5h", 5400), ("300ms", 0.3), ("0", 0),
    ("7d", 7 * 86400),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_the_grace_counts_from_when_the_failure_was_first_seen() -> None:
    gang = GangState(expected=4, running=3, failed=(failed(),))
    first_seen = judged(gang, now=600, unhealthy_since=None)
    assert isinstance(first_seen, Mending) and first_seen.since == at(600)
    assert first_seen.until - first_seen.since == timedelta(seconds=60)


def _pod(gpus: int) -> dict[str, object]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


def test_every_pod_template_that_asks_for_gpus_is_kept_off_sick_nodes() -> None:
    """A LeaderWorkerSet's ``leaderTemplate`` and ``workerTemplate`` are pod templates as
    a Job's ``template`` is: each that asks for GPUs gets the required NotIn and the
    preferred one; a CPU template is left as it is, and the input is not changed."""
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "spec": {"leaderWorkerTemplate": {"leaderTemplate": _pod(8),
                                             "workerTemplate": _pod(8)},
                    "sidecar": {"template": _pod(0)}}}
    guarded = NodeHealthRules().guarded(lws)
    inner = guarded["spec"]["leaderWorkerTemplate"]
    for template in (inner["leaderTemplate"], inner["workerTemplate"]):
        node = template["spec"]["affinity"]["nodeAffinity"]
        required = node["requiredDuringSchedulingIgnoredDuringExecution"]
        assert required["nodeSelectorTerms"][0]["matchExpressions"] == [
            {"key": AUTOPILOT_LABEL, "operator": "NotIn", "values": ["ERR", "EVICT", "TESTING"]}]
        assert node["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"] == {
            "matchExpressions": [{"key": AUTOPILOT_LABEL, "operator": "NotIn",
                                  "values": ["WARN"]}]}
    assert guarded["spec"]["sidecar"] is lws["spec"]["sidecar"]  # no GPUs: shared, as it was
    assert "affinity" not in lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
