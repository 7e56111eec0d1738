"""Refused and closed namespaces: the admin's patterns (``refusedNamespaces``) and
mcad's own namespace, refused everywhere with a sentence naming what refused them; a
ServiceAccount's namespace read from its username; and, in the cycle, a cluster that
closes an AppWrapper's namespace (its admin's label, or mcad's identity there) taken out
of its candidates before anything is decided: it goes to another cluster, or waits with
NoMatchingCluster and the sentence naming the namespace, the cluster and the label, and
``mcad explain`` says it per cluster. A change of a cluster's closed namespaces is a
changed cluster to the carried cycle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from mcad.core.cycle.carried import CarriedCycle
from mcad.core.cycle.decide import Snapshot, dispatch_cycle
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.placement.namespaces import (
    DEFAULT_PATTERNS,
    identity_namespace,
    pattern_problem,
    refused_namespace,
)
from mcad.core.views.explain import explain
from tests.builders.clusters import make_cluster
from tests.builders.snapshots import at, make_entry, make_snapshot

LABEL = "cluster.codeflare.dev/closed=true"
ADVICE = "submit it in the namespace of the team that runs it"


@pytest.mark.parametrize(("namespace", "want"), [
    ("default", None),
    ("team-a", None),
    ("cert-manager", None),
    ("kubeflow", None),
    ("kube-system", "namespace kube-system is refused by the pattern kube-* "
                    "(refusedNamespaces)"),
    ("kube-public", "namespace kube-public is refused by the pattern kube-*"),
    ("openshift-monitoring", "namespace openshift-monitoring is refused by the pattern "
                             "openshift-* (refusedNamespaces)"),
    ("openshift", None),
    ("mcad-system", "namespace mcad-system is mcad's own namespace"),
])
def test_the_default_patterns_and_mcad_s_own_namespace_are_refused_everywhere(
        namespace: str, want: str | None) -> None:
    refusal = refused_namespace(namespace, patterns=DEFAULT_PATTERNS,
                                controller_namespace="mcad-system")
    if want is None:
        assert refusal is None
        return
    assert refusal is not None
    assert refusal.reason == "SystemNamespace"
    assert refusal.message.startswith(want)
    assert refusal.message.endswith("mcad does not create AppWrappers' objects there on "
                                    f"any cluster: {ADVICE}")


@pytest.mark.parametrize(("namespace", "want"), [
    ("monitoring", "monitoring"), ("gpu-operator", "gpu-*"), ("gpu-feature", "gpu-*"),
    ("team-a", None), ("cert-manager", "cert-manage?"), ("kube-system", "kube-*"),
])
def test_an_admin_s_patterns_are_globs(namespace: str, want: str | None) -> None:
    patterns = ["kube-*", "monitoring", "gpu-*", "cert-manage?"]
    refusal = refused_namespace(namespace, patterns=patterns, controller_namespace="mcad")
    assert (refusal is None) == (want is None)
    if refusal is not None:
        assert f"is refused by the pattern {want} (refusedNamespaces)" in refusal.message


def test_mcad_s_own_namespace_is_refused_whatever_the_patterns() -> None:
    refusal = refused_namespace("batch-control", patterns=[], controller_namespace="batch-control")
    assert refusal is not None and "mcad's own namespace" in refusal.message


@pytest.mark.parametrize(("pattern", "problem"), [
    ("kube-*", None), ("openshift-*", None), ("monitoring", None), ("gpu-?", None),
    ("*-system", None),
    ("Kube-*", "a pattern is a namespace name"),
    ("kube_*", "a pattern is a namespace name"),
    ("kube-[a-z]", "a pattern is a namespace name"),
    ("", "a pattern is a namespace name"),
    ("-kube", "a pattern is a namespace name"),
    ("x" * 64, "at most 63 characters"),
    ("*", "refuses every namespace"),
    ("**", "refuses every namespace"),
])
def test_patterns_are_checked_with_a_sentence(pattern: str, problem: str | None) -> None:
    found = pattern_problem(pattern)
    assert (found is None) == (problem is None), found
    if problem is not None:
        assert found is not None and problem in found


@pytest.mark.parametrize(("username", "want"), [
    ("system:serviceaccount:mcad-system:mcad", "mcad-system"),
    ("system:serviceaccount:spoke-agents:mcad-east", "spoke-agents"),
    ("kubernetes-admin", None),
    ("system:admin", None),
    ("system:serviceaccount:", None),
    ("system:serviceaccount:ns", None),
    ("system:serviceaccount:ns:", None),
    ("", None),
])
def test_the_identity_s_namespace_is_a_service_account_s_only(username: str,
                                                                want: str | None) -> None:
    assert identity_namespace(username) == want


# -- the cycle --------------------------------------------------------------------------

def two_spokes(*, closed1: tuple[str, ...] = (), closed2: tuple[str, ...] = (),
               identity1: str | None = None) -> Callable[..., Snapshot]:
    """spoke-1 fuller than spoke-2 (best-fit prefers it), each closing what it is told."""
    def build(*entries: object) -> Snapshot:
        one = make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=4).closes(*closed1)
        if identity1 is not None:
            one = one.identity(identity1)
        two = make_cluster("spoke-2").nodes(2, gpu=8).closes(*closed2)
        return make_snapshot(now=at(100)).clusters(one, two).add(*entries).obj()
    return build


@dataclass
class ClosedCase:
    id: str
    snapshot: Callable[[], Snapshot]
    want_dispatched: dict[str, str] = field(default_factory=dict)
    want_pending: dict[str, str] = field(default_factory=dict)
    want_messages: dict[str, str] = field(default_factory=dict)


CASES = [
    ClosedCase(
        id="nothing closed: best-fit picks the fuller spoke-1",
        snapshot=lambda: two_spokes()(make_entry("a", "cert-manager").job(gpu=2)),
        want_dispatched={"cert-manager/a": "spoke-1"},
    ),
    ClosedCase(
        id="a cluster that closes its namespace is out: it goes to the other",
        snapshot=lambda: two_spokes(closed1=("cert-manager",))(
            make_entry("a", "cert-manager").job(gpu=2)),
        want_dispatched={"cert-manager/a": "spoke-2"},
    ),
    ClosedCase(
        id="the namespace of mcad's identity on a cluster is out there",
        snapshot=lambda: two_spokes(identity1="mcad-agent")(
            make_entry("a", "mcad-agent").job(gpu=2)),
        want_dispatched={"mcad-agent/a": "spoke-2"},
    ),
    ClosedCase(
        id="another namespace is not touched by a cluster's closed ones",
        snapshot=lambda: two_spokes(closed1=("cert-manager",), identity1="mcad-agent")(
            make_entry("a", "team-a").job(gpu=2)),
        want_dispatched={"team-a/a": "spoke-1"},
    ),
    ClosedCase(
        id="closed on every cluster it may use: NoMatchingCluster naming cluster and label",
        snapshot=lambda: two_spokes(closed1=("cert-manager",))(
            make_entry("a", "cert-manager").job(gpu=2).clusters("spoke-1")),
        want_pending={"cert-manager/a": "NoMatchingCluster"},
        want_messages={"cert-manager/a": (
            f"namespace cert-manager is labelled {LABEL} on cluster spoke-1; mcad does not "
            f"create AppWrappers' objects there, and it may use no other cluster: {ADVICE}")},
    ),
    ClosedCase(
        id="closed everywhere, for two reasons: both named, with their clusters",
        snapshot=lambda: two_spokes(closed2=("mcad-agent",), identity1="mcad-agent")(
            make_entry("a", "mcad-agent").job(gpu=2)),
        want_pending={"mcad-agent/a": "NoMatchingCluster"},
        want_messages={"mcad-agent/a": (
            "namespace mcad-agent is the namespace of mcad's identity on cluster spoke-1 "
            f"and labelled {LABEL} on cluster spoke-2; mcad does not create AppWrappers' "
            f"objects there, and it may use no other cluster: {ADVICE}")},
    ),
    ClosedCase(
        id="labelled on both: one phrase names both clusters",
        snapshot=lambda: two_spokes(closed1=("gpu-operator",), closed2=("gpu-operator",))(
            make_entry("a", "gpu-operator").job(gpu=2)),
        want_pending={"gpu-operator/a": "NoMatchingCluster"},
        want_messages={"gpu-operator/a": (
            f"namespace gpu-operator is labelled {LABEL} on clusters spoke-1, spoke-2; "
            "mcad does not create AppWrappers' objects there, and it may use no other "
            f"cluster: {ADVICE}")},
    ),
    ClosedCase(
        id="one closed everywhere holds no room: the smaller one behind it still starts",
        snapshot=lambda: two_spokes(closed1=("monitoring",), closed2=("monitoring",))(
            make_entry("big", "monitoring").priority(9).job(pods=2, gpu=8),
            make_entry("small", "team-a").job(gpu=1)),
        want_dispatched={"team-a/small": "spoke-1"},
        want_pending={"monitoring/big": "NoMatchingCluster"},
    ),
    ClosedCase(
        id="a cluster it names that is unknown keeps its own sentence",
        snapshot=lambda: two_spokes(closed1=("cert-manager",))(
            make_entry("a", "cert-manager").job(gpu=2).clusters("spoke-9")),
        want_pending={"cert-manager/a": "NoMatchingCluster"},
        want_messages={"cert-manager/a": "none of the clusters it names (spoke-9) is known"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_cluster_that_closes_the_namespace_is_not_a_candidate(case: ClosedCase) -> None:
    result = dispatch_cycle(case.snapshot())
    assert {d.key: d.cluster for d in result.dispatches} == case.want_dispatched
    assert {p.key: p.reason for p in result.pending} == case.want_pending
    messages = {p.key: p.message for p in result.pending}
    for key, message in case.want_messages.items():
        assert messages[key] == message


def test_explain_says_per_cluster_which_one_closes_the_namespace() -> None:
    snapshot = two_spokes(closed1=("cert-manager",))(
        make_entry("a", "cert-manager").job(gpu=2))
    why = explain(snapshot, dispatch_cycle(snapshot), AppWrapperKey("cert-manager/a"))
    assert why is not None
    verdicts = {v.cluster: v for v in why.clusters}
    assert not verdicts["spoke-1"].ok
    assert verdicts["spoke-1"].detail.startswith(
        f"namespace cert-manager is labelled {LABEL} on cluster spoke-1")
    assert verdicts["spoke-2"].ok


def test_a_cluster_closing_a_namespace_is_a_changed_cluster_to_the_carried_cycle() -> None:
    """Nothing else changes between the two cycles: carried, the waiting AppWrapper would
    keep its old reason; decided in full, it goes to spoke-1 once the label is gone."""
    closed = two_spokes(closed1=("cert-manager",))(
        make_entry("a", "cert-manager").job(gpu=2).clusters("spoke-1"))
    carried = CarriedCycle()
    first = carried.decide(closed)
    assert [p.reason for p in first.pending] == ["NoMatchingCluster"]
    again = carried.decide(replace(closed, now=at(101)))
    assert carried.carried and again.pending == first.pending
    opened = replace(closed, now=at(102), clusters=tuple(
        replace(c, closed_namespaces=frozenset()) for c in closed.clusters))
    decided = carried.decide(opened)
    assert not carried.carried and carried.why_full == "a cluster changed"
    assert [(d.key, d.cluster) for d in decided.dispatches] == [("cert-manager/a", "spoke-1")]
