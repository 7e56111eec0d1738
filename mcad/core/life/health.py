"""Whether a running gang is healthy, and what to do when it is not: AppWrapper v1beta2's
fault tolerance, decided from what mcad already follows.

Why: one pod of a distributed training job that dies (an NCCL error, an OOM) leaves the
others holding their GPUs and waiting for a peer that cannot rejoin; the Job controller
replaces the pod, which does not help, and a Deployment or RayCluster never reports
Failed at all. So, as project-codeflare/appwrapper does (its names, defaults and cap),
the gang is judged as a whole and **reset** whole: everything deleted, a pause, then
everything created again, on the same cluster, keeping its quota and room (so it cannot
lose its place to what queued behind it meanwhile), up to ``retryLimit`` resets; past
that, or on a failure that will not mend, it is **Failed**.

A running AppWrapper is unhealthy, in this order of precedence:

1. a wrapped object is gone and mcad did not delete it: Failed at once (someone took
   the workload apart; recreating it would undo what they did);
2. a wrapped object reports failure (a Job, JobSet or PyTorchJob ``Failed``): reset at
   once (its own controller has given up);
3. a pod failed: a container's exit code among ``terminalExitCodes``, or (when
   ``retryableExitCodes`` are listed) one not among them, fails it at once; otherwise it
   waits ``failureGracePeriod`` from when the failure was first seen, for its own
   controller to mend it, then is reset;
4. a running pod is on a node whose GPUs are marked for eviction (``EVICT``): reset at
   once, onto other nodes (not counted as a retry: the node's doing, not the gang's);
5. its pods are not all there (Pending or later) ``admissionGracePeriod`` after its
   objects were created, or not all Running ``warmupGracePeriod`` after: reset.

Graces are None when the AppWrapper keeps MCAD's own readiness rule instead (an MCAD v1
AppWrapper that sets no grace annotation: ``schedulingSpec.requeuing``, its readiness
timeout and growth, still decides when a gang that never came up goes back to the
queue; ``mcad.core.life.requeue``).

Everything is a function of its arguments: ``now`` comes in, nothing reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Any

from mcad.core.workload.durations import parse_duration
from mcad.core.workload.podsets import rewrite_pod_templates
from mcad.core.workload.resources import GPU

PREFIX = "workload.codeflare.dev.appwrapper/"
ADMISSION_GRACE = PREFIX + "admissionGracePeriodDuration"
WARMUP_GRACE = PREFIX + "warmupGracePeriodDuration"
FAILURE_GRACE = PREFIX + "failureGracePeriodDuration"
RETRY_PAUSE = PREFIX + "retryPausePeriodDuration"
RETRY_LIMIT = PREFIX + "retryLimit"
FORCEFUL_DELETION_GRACE = PREFIX + "forcefulDeletionGracePeriodDuration"
DELETION_ON_FAILURE_GRACE = PREFIX + "deletionOnFailureGracePeriodDuration"
SUCCESS_TTL = PREFIX + "successTTLDuration"
TERMINAL_EXIT_CODES = PREFIX + "terminalExitCodes"
RETRYABLE_EXIT_CODES = PREFIX + "retryableExitCodes"
DURATIONS = (ADMISSION_GRACE, WARMUP_GRACE, FAILURE_GRACE, RETRY_PAUSE,
             FORCEFUL_DELETION_GRACE, DELETION_ON_FAILURE_GRACE, SUCCESS_TTL)
ANNOTATIONS = (*DURATIONS, RETRY_LIMIT, TERMINAL_EXIT_CODES, RETRYABLE_EXIT_CODES)
GRACE_MAXIMUM_S = 24 * 3600.0
"""v1beta2's GracePeriodMaximum: no annotation may make a grace period longer (the
success TTL excepted, as there)."""

# Reasons, as v1beta2 writes them on its Unhealthy condition.
MISSING_COMPONENT = "MissingComponent"
FAILED_COMPONENT = "FailedComponent"
FOUND_FAILED_PODS = "FoundFailedPods"
TERMINAL_EXIT_CODE = "TerminalExitCode"
NODE_EVICT = "AutopilotNoExecute"
INSUFFICIENT_PODS = "InsufficientPodsReady"
RETRY_LIMIT_REACHED = "RetryLimitExceeded"

def parse_exit_codes(text: str) -> frozenset[int]:
    codes: set[int] = set()
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        try:
            code = int(part)
        except ValueError:
            raise ValueError(f"{text!r} is not a comma-separated list of exit codes "
                             "(e.g. 42,137)") from None
        if not 0 < code < 256:
            raise ValueError(f"exit code {code} in {text!r} is not between 1 and 255")
        codes.add(code)
    return frozenset(codes)


@dataclass(frozen=True, slots=True)
class FaultPolicy:
    """The fault-tolerance settings of one AppWrapper, in seconds (v1beta2's defaults).

    ``admission_grace`` and ``warmup_grace`` are None when MCAD's readiness rule
    applies instead (see the module docstring); ``success_ttl`` None: never deleted."""

    admission_grace: float | None = 60.0
    warmup_grace: float | None = 300.0
    failure_grace: float = 60.0
    retry_pause: float = 90.0
    retry_limit: int = 3
    forceful_deletion_grace: float = 600.0
    deletion_on_failure_grace: float = 0.0
    success_ttl: float | None = 7 * 86400.0
    terminal_exit_codes: frozenset[int] = frozenset()
    retryable_exit_codes: frozenset[int] = frozenset()

    def with_annotations(self, annotations: Mapping[str, str], *,
                         cap: float = GRACE_MAXIMUM_S) -> FaultPolicy:
        """This policy with the AppWrapper's annotations applied and grace periods capped
        at ``cap``. Raises ``ValueError`` with a sentence naming the annotation."""
        changes: dict[str, object] = {}
        fields = {ADMISSION_GRACE: "admission_grace", WARMUP_GRACE: "warmup_grace",
                  FAILURE_GRACE: "failure_grace", RETRY_PAUSE: "retry_pause",
                  FORCEFUL_DELETION_GRACE: "forceful_deletion_grace",
                  DELETION_ON_FAILURE_GRACE: "deletion_on_failure_grace",
                  SUCCESS_TTL: "success_ttl"}
        for name, field in fields.items():
            if name in annotations:
                try:
                    seconds = parse_duration(str(annotations[name]))
                except ValueError as err:
                    raise ValueError(f"annotation {name}: {err}") from None
                changes[field] = seconds if name == SUCCESS_TTL else min(seconds, cap)
        if RETRY_LIMIT in annotations:
            raw = str(annotations[RETRY_LIMIT]).strip()
            if not raw.isdigit():
                raise ValueError(f"annotation {RETRY_LIMIT}: {raw!r} is not a whole number "
                                 "of zero or more")
            changes["retry_limit"] = int(raw)
        for name, field in ((TERMINAL_EXIT_CODES, "terminal_exit_codes"),
                            (RETRYABLE_EXIT_CODES, "retryable_exit_codes")):
            if name in annotations:
                try:
                    changes[field] = parse_exit_codes(str(annotations[name]))
                except ValueError as err:
                    raise ValueError(f"annotation {name}: {err}") from None
        capped = {f: min(getattr(self, f), cap) for f in (
            "failure_grace", "retry_pause", "forceful_deletion_grace",
            "deletion_on_failure_grace") if f not in changes}
        for f in ("admission_grace", "warmup_grace"):
            current = getattr(self, f)
            if f not in changes and current is not None:
                capped[f] = min(current, cap)
        return replace(self, **{**capped, **changes})

    @property
    def graces(self) -> bool:
        """Whether the admission and warm-up graces decide (else MCAD's readiness rule)."""
        return self.admission_grace is not None and self.warmup_grace is not None


def policy_problems(annotations: Mapping[str, str]) -> list[str]:
    """Sentences for every fault-tolerance annotation that does not parse (empty: all do)."""
    problems = []
    for name in ANNOTATIONS:
        if name in annotations:
            try:
                FaultPolicy().with_annotations({name: annotations[name]})
            except ValueError as err:
                problems.append(str(err))
    return problems


# -- what mcad follows of a running gang ----------------------------------------------------

@dataclass(frozen=True, slots=True)
class FailedPod:
    """A pod that failed: its name, and the first container that ended with a non-zero
    code (None when none says: evicted, deadline exceeded)."""

    name: str
    exit_code: int | None = None
    reason: str = ""
    """The container's reason (``OOMKilled``, ``Error``), else the pod's (``Evicted``)."""
    finished: datetime | None = None


@dataclass(frozen=True, slots=True)
class GangState:
    """The gang as its cluster shows it now."""

    expected: int
    """How many pods the gang makes (its demand's pods, at its admitted size)."""
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: tuple[FailedPod, ...] = ()
    on_evict_nodes: tuple[tuple[str, str], ...] = ()
    """(pod, node) for running pods on nodes whose GPUs are marked for eviction."""
    missing: tuple[str, ...] = ()
    """Wrapped objects (``Kind/name``) gone without mcad deleting them."""
    failed_objects: tuple[str, ...] = ()
    """Wrapped objects that report failure (``Kind/name``)."""


# -- the decisions -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Healthy:
    """Nothing to do; look again at ``recheck_at`` (None: when something changes)."""

    recheck_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Mending:
    """Unhealthy since ``since``, and its controller has until ``until`` to mend it."""

    reason: str
    message: str
    since: datetime
    until: datetime


@dataclass(frozen=True, slots=True)
class Reset:
    """Delete everything, pause, create again. ``counted``: a retry (the node's doing
    is not)."""

    reason: str
    message: str
    counted: bool = True


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Failed: delete its objects (after ``deletionOnFailureGracePeriod``), release."""

    reason: str
    message: str


Health = Healthy | Mending | Reset | GiveUp


def _pods(names: Sequence[str], more: int = 0) -> str:
    shown = ", ".join(names[:3])
    rest = len(names) - 3 + more
    return shown + (f" and {rest} more" if rest > 0 else "")


def _failure(pod: FailedPod) -> str:
    code = f" with exit code {pod.exit_code}" if pod.exit_code is not None else ""
    reason = f" ({pod.reason})" if pod.reason else ""
    when = f" at {pod.finished.isoformat()}" if pod.finished else ""
    return f"pod {pod.name} failed{code}{reason}{when}"


def judge(*, now: datetime, policy: FaultPolicy, gang: GangState, deployed_at: datetime,
          unhealthy_since: datetime | None, resets: int) -> Health:
    """What the gang's state means now (the module docstring gives the rules).

    ``deployed_at``: when its objects were last created (dispatch, or the end of the last
    reset); ``unhealthy_since``: when its pods' trouble was first seen (None: not seen);
    ``resets``: resets so far."""
    def reset_or_fail(reason: str, message: str, *, counted: bool = True) -> Reset | GiveUp:
        if resets >= policy.retry_limit:
            return GiveUp(RETRY_LIMIT_REACHED,
                          f"{message}; it was already reset {resets} time"
                          f"{'s' if resets != 1 else ''} (retryLimit {policy.retry_limit})")
        return Reset(reason, f"{message}; the gang is reset (reset {resets + 1} of "
                             f"{policy.retry_limit})" if counted else
                     f"{message}; the gang is reset onto other nodes", counted=counted)

    if gang.missing:
        return GiveUp(MISSING_COMPONENT, f"{_pods(list(gang.missing))} deleted by someone "
                                         "other than mcad: the workload was taken apart")
    terminal = _terminal(policy, gang.failed)
    if terminal is not None:
        return GiveUp(TERMINAL_EXIT_CODE, f"{_failure(terminal)}, a terminal exit code "
                                          "(terminalExitCodes/retryableExitCodes): it will "
                                          "not mend by retrying")
    if gang.failed_objects:
        return reset_or_fail(FAILED_COMPONENT, f"{_pods(list(gang.failed_objects))} "
                                               "reports Failed")
    if gang.failed:
        first = min(gang.failed, key=lambda p: (p.finished or now, p.name))
        message = _failure(first) + (f" (and {len(gang.failed) - 1} more)"
                                     if len(gang.failed) > 1 else "")
        since = unhealthy_since or now
        until = since + timedelta(seconds=policy.failure_grace)
        if now < until:
            return Mending(FOUND_FAILED_PODS, f"{message}; the gang is reset at "
                                              f"{until.isoformat()} unless it recovers "
                                              f"(reset {resets + 1} of {policy.retry_limit})"
                           if resets < policy.retry_limit else
                           f"{message}; it fails at {until.isoformat()} unless it recovers "
                           f"(retryLimit {policy.retry_limit} reached)", since, until)
        return reset_or_fail(FOUND_FAILED_PODS, message)
    if gang.on_evict_nodes:
        nodes = sorted({node for _, node in gang.on_evict_nodes})
        return reset_or_fail(NODE_EVICT, f"node{'s' if len(nodes) > 1 else ''} "
                                         f"{_pods(nodes)} must be evacuated (GPU health "
                                         "EVICT) and the gang runs there", counted=False)
    if not policy.graces:
        return Healthy()
    assert policy.admission_grace is not None and policy.warmup_grace is not None
    if gang.running + gang.succeeded >= gang.expected:
        return Healthy()
    there = gang.pending + gang.running + gang.succeeded
    grace, what = (policy.warmup_grace, "Running") if there >= gang.expected else \
        (policy.admission_grace, "created (Pending or later)")
    deadline = deployed_at + timedelta(seconds=grace)
    if now < deadline:
        return Healthy(recheck_at=deadline)
    ready = gang.running + gang.succeeded if what == "Running" else there
    which = WARMUP_GRACE if what == "Running" else ADMISSION_GRACE
    return reset_or_fail(INSUFFICIENT_PODS, f"{ready} of its {gang.expected} pods "
                                            f"{what} {grace:.0f}s after its objects were "
                                            f"created ({which.removeprefix(PREFIX)})")


def _terminal(policy: FaultPolicy, failed: Sequence[FailedPod]) -> FailedPod | None:
    """The first failed pod whose exit code ends the workload at once, if any."""
    for pod in failed:
        code = pod.exit_code
        if code is None or code == 0:
            continue
        if code in policy.terminal_exit_codes:
            return pod
        if policy.retryable_exit_codes and code not in policy.retryable_exit_codes:
            return pod
    return None


# -- the nodes' GPU health -------------------------------------------------------------------

AUTOPILOT_LABEL = "autopilot.ibm.com/gpuhealth"


class NodeHealth(IntEnum):
    """How healthy a node's GPUs are said to be (Autopilot's label, read by the rules of
    ``NodeHealthRules`` below): an order, the worst last."""

    OK = 0
    PREFER_NOT = 1
    """Usable, but chosen last (Autopilot's ``WARN``)."""
    NO_SCHEDULE = 2
    """No new work (``TESTING``)."""
    NO_EXECUTE = 3
    """No new work, and work running there is moved away (``EVICT``)."""


@dataclass(frozen=True, slots=True)
class NodeHealthRules:
    """Which values of a node label say what about its GPUs (Autopilot's by default):
    ``prefer_not`` (WARN: chosen last, a preferred anti-affinity), ``no_schedule``
    (TESTING: no new work, a required anti-affinity), ``no_execute`` (EVICT: no new work,
    and gangs running there are reset onto other nodes). Only pods that ask for
    ``resource`` get the anti-affinities and are moved (a CPU pod does not care)."""

    label: str = AUTOPILOT_LABEL
    prefer_not: frozenset[str] = frozenset({"WARN"})
    no_schedule: frozenset[str] = frozenset({"TESTING", "ERR"})
    no_execute: frozenset[str] = frozenset({"EVICT"})
    resource: str = GPU

    def of(self, labels: Mapping[str, str]) -> NodeHealth:
        value = labels.get(self.label)
        if value is None:
            return NodeHealth.OK
        if value in self.no_execute:
            return NodeHealth.NO_EXECUTE
        if value in self.no_schedule:
            return NodeHealth.NO_SCHEDULE
        if value in self.prefer_not:
            return NodeHealth.PREFER_NOT
        return NodeHealth.OK

    def guarded(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """``manifest`` with every pod template (a bare Pod's own spec too) that asks for
        ``resource`` kept off unhealthy nodes: a required node affinity NotIn the
        no-schedule and no-execute values (ANDed into each of its own terms) and a
        preferred one NotIn the prefer-not values (weight 50), so kube-scheduler keeps
        its pods away even from a node labelled after mcad chose the cluster. Only the
        dicts on the way to a pod spec are new (as ``mcad.core.workload.topology.pinned``)."""
        avoid = sorted(self.no_schedule | self.no_execute)
        if not avoid and not self.prefer_not:
            return manifest
        spec = manifest.get("spec")
        if manifest.get("kind") == "Pod" and isinstance(spec, Mapping):
            return {**manifest, "spec": self._avoiding(spec, avoid)} \
                if self._asks(spec) else manifest
        changed = self._walk(spec, avoid)
        return manifest if changed is spec else {**manifest, "spec": changed}

    def _asks(self, pod_spec: Mapping[str, Any]) -> bool:
        for container in [*(pod_spec.get("containers") or []),
                          *(pod_spec.get("initContainers") or [])]:
            resources = (container or {}).get("resources") or {}
            for part in ("requests", "limits"):
                value = (resources.get(part) or {}).get(self.resource)
                if value not in (None, 0, "0"):
                    return True
        return False

    def _walk(self, node: Any, avoid: list[str]) -> Any:
        def steer(template: Mapping[str, Any], spec: Any) -> Any:
            if self._asks(spec):
                return {**template, "spec": self._avoiding(spec, avoid)}
            return template if spec is template["spec"] else {**template, "spec": spec}

        return rewrite_pod_templates(node, steer)

    def _avoiding(self, pod_spec: Mapping[str, Any], avoid: list[str]) -> dict[str, Any]:
        affinity = dict(pod_spec.get("affinity") or {})
        node = dict(affinity.get("nodeAffinity") or {})
        if avoid:
            expression = {"key": self.label, "operator": "NotIn", "values": avoid}
            required = dict(node.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
            terms = required.get("nodeSelectorTerms") or [{}]
            required["nodeSelectorTerms"] = [
                {**term, "matchExpressions": [*(term.get("matchExpressions") or []),
                                              dict(expression)]} for term in terms]
            node["requiredDuringSchedulingIgnoredDuringExecution"] = required
        if self.prefer_not:
            node["preferredDuringSchedulingIgnoredDuringExecution"] = [
                *(node.get("preferredDuringSchedulingIgnoredDuringExecution") or []),
                {"weight": 50, "preference": {"matchExpressions": [
                    {"key": self.label, "operator": "NotIn",
                     "values": sorted(self.prefer_not)}]}}]
        affinity["nodeAffinity"] = node
        return {**pod_spec, "affinity": affinity}
