"""The admission decision about one AppWrapper, without I/O.

An AdmissionReview (``admission.k8s.io/v1``) comes in; out comes either a decision (a
problem with the spec, with one sentence per problem naming the field, as ``mcad
validate`` says it) or the access checks still to make: for each wrapped object, may
the requester (user, groups, uid, extra) *create* objects of its kind in the
AppWrapper's namespace? An AppWrapper makes mcad create its objects with mcad's own
rights, so without these checks it would be a way around RBAC. The server asks the hub
(SubjectAccessReview), once per kind (``kinds_to_review``), and ``decide`` turns the
answers into the response, naming every object whose kind was denied (``denials``).

On UPDATE, nothing is checked when the spec did not change: mcad's own writes
(finalizers) and deletions must never be refused for rights the requester never
needed, nor for problems in an object admitted before. What v1beta2 keeps fixed once an
AppWrapper exists (its podSets, ``managedBy``) is refused when changed, through either
version (``mcad.api.components.frozen_changes``).

Both versions come here: the configuration's rules name v1beta1 and v1beta2, and the
check converts a v1beta2 AppWrapper to the stored version (``mcad.validation``).

The API server is told the same rule (``MATCH_CONDITIONS``, in the configuration mcad
registers and in the manifests'), so an update that could not be refused is not sent
at all: mcad's own finalizer write on every AppWrapper was a review, and on the
controller's event loop each one waited for the dispatch cycle in hand (1,022 reviews
in a 1,000 AppWrapper drain). What it still sends: every create, and every update that
changes the spec or the annotation where a v1beta1 object keeps v1beta2's fields
(``workload.codeflare.dev/v1beta2``: its podSets and ``managedBy`` are frozen too).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcad.api.appwrapper import FINALIZER
from mcad.api.components import frozen_changes, in_v1beta2_words
from mcad.api.conversion import MCAD_CONTROLLER, V1BETA2, V1BETA2_KEPT, kept_facts
from mcad.config import RunConfig
from mcad.validation import check_appwrapper


def _kept(obj: str) -> str:
    """CEL: the kept-v1beta2 annotation of ``obj`` ('' when absent), never an error (a
    match condition that fails to evaluate refuses the request: failurePolicy Fail)."""
    return (f"(has({obj}.metadata.annotations) && '{V1BETA2_KEPT}' in "
            f"{obj}.metadata.annotations ? {obj}.metadata.annotations['{V1BETA2_KEPT}'] "
            ": '')")


MATCH_CONDITIONS = [{
    "name": "create-or-spec-changed",
    "expression": (
        "request.operation != 'UPDATE' || "
        "(has(object.spec) ? object.spec : {}) != (has(oldObject.spec) ? oldObject.spec : {})"
        f" || {_kept('object')} != {_kept('oldObject')}"),
}]
"""When the API server calls the webhook at all: ``plan_review``'s rule for updates,
said to the API server (why, in the module's docstring)."""

REVIEWS_AT_ONCE = 8
"""SubjectAccessReviews one AdmissionReview has in flight at once: a few kinds are
checked in about the time of one, and one request never opens more than this many
against the hub."""

KindKey = tuple[str, str]
"""(apiVersion, kind): what one SubjectAccessReview answers for."""


@dataclass(frozen=True)
class AccessCheck:
    """May the requester create this wrapped object?"""

    api_version: str
    kind: str
    name: str
    describe: str

    @property
    def kind_key(self) -> KindKey:
        return self.api_version, self.kind

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


@dataclass
class ReviewPlan:
    uid: str
    namespace: str
    user: Mapping[str, Any]
    problems: list[str] = field(default_factory=list)
    checks: list[AccessCheck] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """Shown by kubectl as ``Warning: ...`` (fields accepted and not acted on)."""


def plan_review(review: Mapping[str, Any], *, config: RunConfig) -> ReviewPlan:
    request = review.get("request") or {}
    plan = ReviewPlan(uid=str(request.get("uid", "")),
                      namespace=str(request.get("namespace") or ""),
                      user=request.get("userInfo") or {})
    operation = request.get("operation")
    new = request.get("object")
    if operation not in ("CREATE", "UPDATE") or not isinstance(new, Mapping):
        return plan
    if operation == "UPDATE":
        old = request.get("oldObject")
        if isinstance(old, Mapping):
            plan.problems = frozen_changes(old, new)
            if plan.problems or (old.get("spec") == new.get("spec")):
                return plan
    checked = check_appwrapper(new, config=config, namespace=plan.namespace)
    plan.problems = checked.problems
    plan.warnings = checked.notes
    if not plan.problems:
        words = in_v1beta2_words if new.get("apiVersion") == V1BETA2 else str
        plan.checks = [AccessCheck(w.api_version, w.kind, w.name, words(w.describe))
                       for w in checked.objects]
    return plan


def kinds_to_review(checks: Sequence[AccessCheck]) -> list[AccessCheck]:
    """The first check of each kind, in order: one SubjectAccessReview answers for every
    object of a kind, since it asks about the kind in the namespace and not about a name
    (as the API server asks when the requester creates one: a create is authorized before
    its object is known by name, so RBAC's ``resourceNames`` never grant one)."""
    first: dict[KindKey, AccessCheck] = {}
    for check in checks:
        first.setdefault(check.kind_key, check)
    return list(first.values())


def access_review(check: AccessCheck, plural: str, plan: ReviewPlan) -> dict[str, Any]:
    """The SubjectAccessReview asking whether the requester may create objects of
    ``check``'s kind in the AppWrapper's namespace."""
    user = plan.user
    spec: dict[str, Any] = {
        "user": user.get("username", ""), "groups": list(user.get("groups") or []),
        "resourceAttributes": {"namespace": plan.namespace, "verb": "create",
                               "group": check.group, "version": check.version,
                               "resource": plural}}
    if user.get("uid"):
        spec["uid"] = user["uid"]
    if user.get("extra"):
        spec["extra"] = {k: list(v) for k, v in dict(user["extra"]).items()}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": spec}


def denials(plan: ReviewPlan, answers: Mapping[KindKey, tuple[str, bool]]) -> list[str]:
    """A sentence for every wrapped object whose kind the requester may not create, in
    the AppWrapper's order; ``answers``: kind -> (its resource name, allowed)."""
    out = []
    for check in plan.checks:
        plural, allowed = answers[check.kind_key]
        if not allowed:
            out.append(denial(check, plural, plan))
    return out


def denial(check: AccessCheck, plural: str, plan: ReviewPlan) -> str:
    what = f"{plural}.{check.group}" if check.group else plural
    who = plan.user.get("username") or "the requester"
    return (f"{check.describe}: {who} may not create {what} in namespace {plan.namespace}, "
            "and an AppWrapper may only wrap what its author could create")


def response(uid: str, *, allowed: bool, message: str = "", code: int = 200,
             warnings: Sequence[str] = ()) -> dict[str, Any]:
    answer: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if warnings:
        answer["warnings"] = list(warnings)
    if not allowed:
        answer["status"] = {"code": code, "message": message,
                            "reason": "Forbidden" if code == 403 else "Invalid"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": answer}


def decide(plan: ReviewPlan, denials: Sequence[str]) -> dict[str, Any]:
    """The AdmissionReview response for ``plan``, given the denied access checks."""
    if plan.problems:
        return response(plan.uid, allowed=False, code=422,
                        message="the AppWrapper is not valid: " + "; ".join(plan.problems) + ".")
    if denials:
        return response(plan.uid, allowed=False, code=403, message="; ".join(denials) + ".")
    return response(plan.uid, allowed=True, warnings=plan.warnings)


def plural_of(kind: str) -> str:
    """kubectl's guess at a kind's resource name, for kinds the hub does not serve."""
    lower = kind.lower()
    if lower.endswith(("s", "x", "z", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return lower[:-1] + "ies"
    return lower + "s"


NOT_A_REVIEW = "the request is not an AdmissionReview"


def parsed(raw: bytes) -> dict[str, Any] | None:
    """The AdmissionReview a request's body holds; None when it is not a JSON object.

    Why one reader: both servers that answer the admission routes (the controller's and
    the webhooks' own process) read the body their own bounded way and parse it here,
    so they cannot come to differ on what is a review."""
    try:
        body = json.loads(raw)
    except ValueError:  # (UnicodeDecodeError is one)
        return None
    return body if isinstance(body, dict) else None


def not_a_review() -> dict[str, Any]:
    """The validating route's answer to a body that is not an AdmissionReview: refused
    (the API server never sends one; anyone else gets a sentence)."""
    return response("", allowed=False, code=400, message=NOT_A_REVIEW)


def mutation(raw: bytes) -> dict[str, Any]:
    """The mutating route's answer to a request's body: ``with_finalizer``'s, or allowed
    with no patch when the body is not an AdmissionReview. The mutating webhook never
    refuses anything: what it adds, the controller would add itself."""
    review = parsed(raw)
    return with_finalizer(review) if review is not None else response("", allowed=True)


def with_finalizer(review: Mapping[str, Any]) -> dict[str, Any]:
    """The mutating webhook's answer to a create: allowed, with mcad's finalizer added.

    Why at creation: the finalizer must be on an AppWrapper before mcad creates anything
    for it on a spoke (its deletion then waits for the cleanup). Written by the
    controller, it was a write of its own, conditional on the resourceVersion like the
    dispatch that follows it, so the two went one after the other on the dispatch's
    path: 0.15-0.24 s of a priority job's wait behind a 1,000 AppWrapper drain, and one
    write in three of what the hub stores for an AppWrapper. Put on in the create
    itself, it costs neither. The controller still puts it on an AppWrapper it sees
    without it (created while no webhook answered: the configuration's failurePolicy is
    Ignore, so a create never fails for want of this).

    Never refused, and never patched: an update; an AppWrapper another controller
    manages (``spec.managedBy``, or on a v1beta1 object the annotation that keeps it:
    mcad never runs it, so its finalizer would hold its deletion for ever); one that
    holds the finalizer already; one whose finalizers are not a list (the API server
    refuses it itself).
    """
    request = review.get("request")
    request = request if isinstance(request, Mapping) else {}
    answer = response(str(request.get("uid", "")), allowed=True)
    obj = request.get("object")
    if request.get("operation") != "CREATE" or not isinstance(obj, Mapping):
        return answer
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    finalizers = meta.get("finalizers")
    if _managed_elsewhere(obj, meta) or (finalizers is not None and (
            not isinstance(finalizers, list) or FINALIZER in finalizers)):
        return answer
    patch = [{"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}] \
        if finalizers is not None else \
        [{"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]
    answer["response"]["patchType"] = "JSONPatch"
    answer["response"]["patch"] = base64.b64encode(
        json.dumps(patch, separators=(",", ":")).encode()).decode()
    return answer


def _managed_elsewhere(obj: Mapping[str, Any], meta: Mapping[str, Any]) -> bool:
    """Whether the controller will leave ``obj`` to another controller, by the rule it
    reads the stored object with (``mcad.api.conversion.V1beta2Facts.managed_elsewhere``):
    a v1beta2 object's ``spec.managedBy`` is what its stored form keeps."""
    if obj.get("apiVersion") == V1BETA2:
        spec = obj.get("spec")
        managed_by = spec.get("managedBy") if isinstance(spec, Mapping) else None
    else:
        annotations = meta.get("annotations")
        facts = kept_facts(annotations if isinstance(annotations, Mapping) else None)
        managed_by = facts.managed_by if facts is not None else None
    return isinstance(managed_by, str) and managed_by != MCAD_CONTROLLER
