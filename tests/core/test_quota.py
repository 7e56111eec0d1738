"""Quota forest: resolving labels to nodes, fitting with borrowing, charging, evictions,
build problems and reading QuotaSubtree objects.

Trees used below (gpu only unless said):

    STANDARD: root 16 (hard) > gold 8 (soft), silver 8 (soft), bronze 4 (hard)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import yaml

from mcad.core.quota.forest import (
    QuotaAssignment,
    QuotaCharge,
    QuotaForest,
    QuotaNodeSpec,
    QuotaProblem,
    nodes_from_subtree,
)
from mcad.core.workload.resources import ResourceList
from tests.builders.quota import QuotaTreeBuilder, charge_appwrapper, make_forest, make_tree

R = ResourceList.of
TREE = "quota_context"


def standard() -> QuotaTreeBuilder:
    return (make_tree(TREE).node("root", gpu=16, hard=True)
            .child("gold", parent="root", gpu=8)
            .child("silver", parent="root", gpu=8)
            .child("bronze", parent="root", gpu=4, hard=True))


def nested() -> QuotaTreeBuilder:
    """root 16 > team-a 8 (hard) > a1 4, a2 4 (soft); team-b 8 (soft) > b1 2 (soft)."""
    return (make_tree(TREE).node("root", gpu=16)
            .child("team-a", parent="root", gpu=8, hard=True)
            .child("a1", parent="team-a", gpu=4).child("a2", parent="team-a", gpu=4)
            .child("team-b", parent="root", gpu=8).child("b1", parent="team-b", gpu=2))


def on(node: str) -> dict[str, str]:
    return {TREE: node}


# -- fits -------------------------------------------------------------------------------

@dataclass
class FitCase:
    id: str
    forest: Callable[[], QuotaForest]
    running: list[tuple[dict[str, str], ResourceList]]
    labels: dict[str, str]
    amount: ResourceList
    want: str | None     # the QuotaExceeded message, None when it fits


FIT_CASES = [
    FitCase("within the leaf's quota", standard().build, [], on("gold"), R(gpu=8), None),
    FitCase("soft leaf borrows what the root has free", standard().build,
            [(on("silver"), R(gpu=2))], on("gold"), R(gpu=14), None),
    FitCase("soft leaf stops at the root", standard().build,
            [(on("silver"), R(gpu=12))], on("gold"), R(gpu=8),
            "quota tree quota_context node root: needs 8 nvidia.com/gpu, 4 free"),
    FitCase("hard leaf never exceeds its own quota", standard().build,
            [], on("bronze"), R(gpu=5),
            "quota tree quota_context node bronze: needs 5 nvidia.com/gpu, 4 free"),
    FitCase("the contract's example: a hard gold with 4 used",
            make_tree(TREE).node("root", gpu=16).child("gold", parent="root", gpu=8,
                                                       hard=True).build,
            [(on("gold"), R(gpu=4))], on("gold"), R(gpu=8),
            "quota tree quota_context node gold: needs 8 nvidia.com/gpu, 4 free"),
    FitCase("a hard middle node bounds its soft children's borrowing", nested().build,
            [(on("a2"), R(gpu=4))], on("a1"), R(gpu=5),
            "quota tree quota_context node team-a: needs 5 nvidia.com/gpu, 4 free"),
    FitCase("a soft middle node lets its children borrow from the root", nested().build,
            [], on("b1"), R(gpu=16), None),
    FitCase("resources no node names are not limited", standard().build,
            [], on("gold"), R(cpu=1000, memory="1Ti"), None),
    FitCase("a soft node is a ceiling for what no ancestor names",
            make_tree(TREE).node("root", gpu=16).child("gold", parent="root", gpu=8, cpu=4)
            .build, [], on("gold"), R(cpu=5),
            "quota tree quota_context node gold: needs 5 cpu, 4 free"),
    FitCase("every short resource of the blocking node is named",
            make_tree(TREE).node("root", cpu=4, memory="8Gi").build,
            [(on("root"), R(memory="6Gi"))], on("root"), R(cpu=5, memory="4Gi"),
            "quota tree quota_context node root: needs 5 cpu, 4 free; "
            "needs 4Gi memory, 2Gi free"),
    FitCase("the node nearest the leaf is reported first",
            make_tree(TREE).node("root", gpu=4).child("gold", parent="root", gpu=2, hard=True)
            .build, [], on("gold"), R(gpu=6),
            "quota tree quota_context node gold: needs 6 nvidia.com/gpu, 2 free"),
    FitCase("a hard node declaring 0 of a resource admits none of it",
            make_tree(TREE).node("root", gpu=16)
            .child("cpu-only", parent="root", gpu=0, cpu=8, hard=True).build,
            [], on("cpu-only"), R(gpu=1),
            "quota tree quota_context node cpu-only: needs 1 nvidia.com/gpu, 0 free"),
    FitCase("a soft node declaring 0 of a resource borrows all of it",
            make_tree(TREE).node("root", gpu=16).child("guest", parent="root", gpu=0).build,
            [], on("guest"), R(gpu=16), None),
    FitCase("it must fit in every tree",
            lambda: make_forest(standard(), make_tree("org").node("all", cpu=8)),
            [({TREE: "gold", "org": "all"}, R(cpu=6))], {TREE: "gold", "org": "all"},
            R(cpu=4, gpu=1), "quota tree org node all: needs 4 cpu, 2 free"),
    FitCase("an over-committed node has nothing free, not less than nothing",
            make_tree(TREE).node("root", gpu=4).build,
            [(on("root"), R(gpu=6))], on("root"), R(gpu=1),
            "quota tree quota_context node root: needs 1 nvidia.com/gpu, 0 free"),
]


@pytest.mark.parametrize("case", FIT_CASES, ids=[c.id for c in FIT_CASES])
def test_fits(case: FitCase) -> None:
    forest = case.forest()
    for i, (labels, amount) in enumerate(case.running):
        charge_appwrapper(forest, f"ns/running-{i}", labels=labels, amount=amount, force=True)
    assignment = forest.resolve(case.labels)
    assert isinstance(assignment, QuotaAssignment)
    got = forest.fits(assignment, case.amount)
    if case.want is None:
        assert got is None
    else:
        assert got == QuotaProblem("QuotaExceeded", case.want)


# -- resolve ----------------------------------------------------------------------------

@dataclass
class ResolveCase:
    id: str
    forest: Callable[[], QuotaForest]
    labels: dict[str, str]
    want_leaves: tuple[tuple[str, str], ...] = ()
    want_problem: str = ""


def with_default() -> QuotaForest:
    return make_forest(standard().child("default", parent="root", gpu=1),
                       make_tree("org").node("all", cpu=8).child("default", parent="all"))


RESOLVE_CASES = [
    ResolveCase("label picks the node", standard().build, on("gold"),
                want_leaves=((TREE, "gold"),)),
    ResolveCase("an inner node may be picked", standard().build, on("root"),
                want_leaves=((TREE, "root"),)),
    ResolveCase("one leaf per tree, sorted by tree", with_default,
                {TREE: "gold", "org": "all"}, want_leaves=(("org", "all"), (TREE, "gold"))),
    ResolveCase("missing label means node default", with_default, {"org": "all"},
                want_leaves=(("org", "all"), (TREE, "default"))),
    ResolveCase("missing label and no default", standard().build, {},
                want_problem="the AppWrapper has no label quota_context and quota tree "
                             "quota_context has no node default; label it "
                             "quota_context: <node> with one of its nodes"),
    ResolveCase("unknown node", standard().build, on("platinum"),
                want_problem="quota tree quota_context has no node platinum; label the "
                             "AppWrapper quota_context: <node> with one of its nodes"),
    ResolveCase("node left out of a broken tree says why",
                lambda: make_tree(TREE).node("root", gpu=1)
                .child("orphan", parent="nowhere").build(strict=False),
                on("orphan"),
                want_problem="quota tree quota_context node orphan is not usable: its "
                             "parent nowhere is not a node of quota tree quota_context"),
    ResolveCase("no trees, nothing to charge", make_forest, {"x": "y"},
                want_leaves=()),
]


@pytest.mark.parametrize("case", RESOLVE_CASES, ids=[c.id for c in RESOLVE_CASES])
def test_resolve(case: ResolveCase) -> None:
    got = case.forest().resolve(case.labels)
    if case.want_problem:
        assert got == QuotaProblem("QuotaNodeNotFound", case.want_problem)
    else:
        assert got == QuotaAssignment(case.want_leaves)


def test_fits_reports_an_assignment_to_an_unknown_node() -> None:
    forest = standard().build()
    problem = forest.fits(QuotaAssignment(((TREE, "platinum"),)), R(gpu=1))
    assert problem is not None
    assert problem.reason == "QuotaNodeNotFound"
    with pytest.raises(KeyError, match="no node platinum"):
        forest.charge(QuotaAssignment(((TREE, "platinum"),)), R(gpu=1))


# -- charge, release, copy --------------------------------------------------------------

def test_charge_reaches_every_ancestor_and_release_undoes_it() -> None:
    forest = nested().build()
    a1 = forest.resolve(on("a1"))
    assert isinstance(a1, QuotaAssignment)
    forest.charge(a1, R(gpu=3, cpu=2))
    assert [forest.usage(TREE, n) for n in ("a1", "team-a", "root", "a2", "team-b")] == [
        R(gpu=3, cpu=2), R(gpu=3, cpu=2), R(gpu=3, cpu=2), R(), R()]
    forest.release(a1, R(gpu=3, cpu=2))
    assert all(forest.usage(t, n) == R() for t, n in forest.nodes())


def test_copy_is_independent() -> None:
    forest = standard().build()
    gold = forest.resolve(on("gold"))
    assert isinstance(gold, QuotaAssignment)
    simulated = forest.copy()
    simulated.charge(gold, R(gpu=8))
    assert forest.usage(TREE, "root") == R()
    assert simulated.usage(TREE, "root") == R(gpu=8)


def test_inventory() -> None:
    forest = make_forest(standard(), make_tree("org").node("all", cpu=8))
    assert forest.trees() == ["org", TREE]
    assert forest.nodes() == [("org", "all"), (TREE, "bronze"), (TREE, "gold"),
                              (TREE, "root"), (TREE, "silver")]
    assert forest.limit(TREE, "gold") == R(gpu=8)
    with pytest.raises(KeyError):
        forest.usage(TREE, "platinum")


# -- evictions --------------------------------------------------------------------------

@dataclass
class EvictionCase:
    id: str
    forest: Callable[[], QuotaForest]
    running: list[tuple[str, int, str, ResourceList]]      # key, priority, node, amount
    node: str
    amount: ResourceList
    priority: int
    want: list[str] | None
    candidates: list[str] | None = field(default=None)     # default: every running one


EVICTION_CASES = [
    EvictionCase("already fits: nobody", standard().build,
                 [("silver-1", 0, "silver", R(gpu=8))], "gold", R(gpu=8), 5, []),
    EvictionCase("a borrower makes room for the lender", standard().build,
                 [("silver-1", 0, "silver", R(gpu=12))], "gold", R(gpu=8), 5, ["silver-1"]),
    EvictionCase("a borrower of higher priority stays", standard().build,
                 [("silver-1", 9, "silver", R(gpu=12))], "gold", R(gpu=8), 5, None),
    EvictionCase("a borrower of equal priority stays", standard().build,
                 [("silver-1", 5, "silver", R(gpu=12))], "gold", R(gpu=8), 5, None),
    EvictionCase("usage within its own quota is never evicted", standard().build,
                 [("silver-1", 0, "silver", R(gpu=8)), ("gold-1", 0, "gold", R(gpu=4)),
                  ("bronze-1", 0, "bronze", R(gpu=4))], "gold", R(gpu=8), 5, None),
    EvictionCase("lowest priority first, and only as many as needed", standard().build,
                 [("silver-1", 3, "silver", R(gpu=6)), ("silver-2", 1, "silver", R(gpu=6))],
                 "gold", R(gpu=8), 5, ["silver-2"]),
    EvictionCase("ties go to the smaller key", standard().build,
                 [("silver-b", 1, "silver", R(gpu=6)), ("silver-a", 1, "silver", R(gpu=6))],
                 "gold", R(gpu=8), 5, ["silver-a"]),
    EvictionCase("a chosen one that is not needed is given back", standard().build,
                 [("small", 1, "silver", R(gpu=2)), ("big", 2, "silver", R(gpu=10))],
                 "gold", R(gpu=12), 5, ["big"]),
    EvictionCase("borrowing stops counting once the node is back within quota",
                 standard().build,
                 [("silver-1", 1, "silver", R(gpu=6)), ("silver-2", 2, "silver", R(gpu=6)),
                  ("gold-1", 0, "gold", R(gpu=4))],
                 "gold", R(gpu=12), 5, None),
    EvictionCase("a borrower outside the blocking hard node is not enough", nested().build,
                 [("a2-1", 1, "a2", R(gpu=8)), ("b1-1", 0, "b1", R(gpu=6))],
                 "a1", R(gpu=4), 5, ["a2-1"]),
    EvictionCase("only borrowers of the blocked resource",
                 make_tree(TREE).node("root", gpu=16, cpu=16)
                 .child("gold", parent="root", gpu=8, cpu=8)
                 .child("silver", parent="root", gpu=8, cpu=8).build,
                 [("cpu-borrower", 0, "silver", R(cpu=12)),
                  ("gpu-borrower", 1, "silver", R(gpu=12))],
                 "gold", R(gpu=8), 5, ["gpu-borrower"]),
    EvictionCase("not enough even with every eligible one gone", standard().build,
                 [("silver-1", 0, "silver", R(gpu=10)), ("gold-1", 0, "gold", R(gpu=6))],
                 "gold", R(gpu=12), 5, None),
    EvictionCase("only the candidates given are considered", standard().build,
                 [("silver-1", 0, "silver", R(gpu=12))], "gold", R(gpu=8), 5, None,
                 candidates=[]),
]


@pytest.mark.parametrize("case", EVICTION_CASES, ids=[c.id for c in EVICTION_CASES])
def test_evictions_for(case: EvictionCase) -> None:
    forest = case.forest()
    charges = [charge_appwrapper(forest, key, priority=priority, labels=on(node),
                                 amount=amount, force=True)
               for key, priority, node, amount in case.running]
    if case.candidates is not None:
        charges = [c for c in charges if c.key in case.candidates]
    before = {n: forest.usage(*n) for n in forest.nodes()}
    assignment = forest.resolve(on(case.node))
    assert isinstance(assignment, QuotaAssignment)

    got = forest.evictions_for(assignment, case.amount, charges, priority=case.priority)

    assert got == case.want
    assert {n: forest.usage(*n) for n in forest.nodes()} == before, "must not mutate"
    if got:
        for charge in charges:
            if charge.key in got:
                forest.release(charge.assignment, charge.amount)
        assert forest.fits(assignment, case.amount) is None


def test_evictions_only_for_the_tree_that_blocks() -> None:
    forest = make_forest(standard(), make_tree("org").node("all", cpu=64)
                         .child("research", parent="all", cpu=4)
                         .child("prod", parent="all", cpu=60))
    # Borrows cpu in org (12 > 4) but stays within bronze's gpu quota: evicting it would
    # free enough gpus, yet it lends nothing gold is owed in the tree that blocks.
    cpu_borrower = charge_appwrapper(forest, "cpu", priority=0, amount=R(cpu=12, gpu=4),
                                     labels={TREE: "bronze", "org": "research"})
    gpu_borrower = charge_appwrapper(forest, "gpu", priority=1, amount=R(cpu=1, gpu=10),
                                     labels={TREE: "silver", "org": "prod"})
    gold = forest.resolve({TREE: "gold", "org": "prod"})
    assert isinstance(gold, QuotaAssignment)
    assert forest.fits(gold, R(gpu=6)) is not None
    assert forest.evictions_for(gold, R(gpu=6), [cpu_borrower, gpu_borrower],
                                priority=5) == ["gpu"]


def test_evictions_for_an_unknown_node_is_none() -> None:
    forest = standard().build()
    candidate = QuotaCharge("x", 0, QuotaAssignment(((TREE, "gold"),)), R(gpu=1))
    assert forest.evictions_for(QuotaAssignment(((TREE, "nope"),)), R(gpu=1), [candidate],
                                priority=9) is None


# -- build problems ---------------------------------------------------------------------

def spec(name: str, parent: str | None, hard: bool = False, **quota: int) -> QuotaNodeSpec:
    return QuotaNodeSpec(TREE, name, parent, R(**quota), hard)


@dataclass
class BuildCase:
    id: str
    specs: list[QuotaNodeSpec]
    want_problems: list[str]
    want_nodes: list[str]


BUILD_CASES = [
    BuildCase("a sound tree has no problems",
              [spec("gold", "root", gpu=8), spec("root", None, gpu=16)], [],
              ["gold", "root"]),
    BuildCase("unknown parent leaves the node and its subtree out",
              [spec("root", None, gpu=4), spec("gold", "platinum"), spec("gold-a", "gold")],
              ["quota tree quota_context node gold names parent platinum, which is not a node "
               "of that tree; it and the nodes under it are left out"], ["root"]),
    BuildCase("a cycle is reported once and left out",
              [spec("root", None), spec("a", "b"), spec("b", "a"), spec("c", "a")],
              ["quota tree quota_context has a cycle of parents a -> b -> a; these nodes and "
               "the nodes under them are left out"], ["root"]),
    BuildCase("a node that is its own parent is a cycle",
              [spec("loop", "loop")],
              ["quota tree quota_context has a cycle of parents loop -> loop; these nodes and "
               "the nodes under them are left out"], []),
    BuildCase("a duplicate node keeps its first declaration",
              [spec("root", None, gpu=4), spec("root", None, gpu=99)],
              ["quota tree quota_context declares node root more than once; the first "
               "declaration is used, remove the others"], ["root"]),
    BuildCase("a negative quota counts as zero",
              [QuotaNodeSpec(TREE, "root", None, ResourceList({"cpu": -2 * 10**9}), True)],
              ["quota tree quota_context node root has a negative quota of -2 cpu; it counts "
               "as 0 until fixed"], ["root"]),
]


@pytest.mark.parametrize("case", BUILD_CASES, ids=[c.id for c in BUILD_CASES])
def test_build_problems(case: BuildCase) -> None:
    forest, problems = QuotaForest.build(case.specs)
    assert problems == case.want_problems
    assert [name for _, name in forest.nodes()] == case.want_nodes
    assert forest.trees() == [TREE]


def test_duplicate_keeps_first_quota_and_negative_is_zero() -> None:
    forest, _ = QuotaForest.build([spec("root", None, gpu=4), spec("root", None, gpu=99)])
    assert forest.limit(TREE, "root") == R(gpu=4)
    forest, _ = QuotaForest.build(
        [QuotaNodeSpec(TREE, "root", None, ResourceList({"cpu": -1}), True)])
    root = forest.resolve(on("root"))
    assert isinstance(root, QuotaAssignment)
    assert forest.fits(root, R(cpu="1m")) is not None


# -- QuotaSubtree objects ---------------------------------------------------------------

# MCAD's quota quickstart, reconstructed: a root subtree and one listing its children.
MCAD_QUICKSTART = """
apiVersion: quota.codeflare.dev/v1alpha1
kind: QuotaSubtree
metadata:
  name: context-root
  namespace: kube-system
  labels:
    tree: quota_context
spec:
  children:
    - name: context-root
      quotas:
        hardLimit: true
        requests:
          cpu: 2000m
          memory: 8000Mi
---
apiVersion: quota.codeflare.dev/v1alpha1
kind: QuotaSubtree
metadata:
  name: context-root-children
  namespace: kube-system
  labels:
    tree: quota_context
spec:
  parent: context-root
  children:
    - name: alpha
      quotas:
        hardLimit: false
        requests:
          cpu: 1000m
          memory: 4000Mi
    - name: beta
      quotas:
        hardLimit: true
        requests:
          cpu: 2000m
          memory: 4000Mi
"""


def test_mcad_quickstart_subtrees() -> None:
    specs = [s for obj in yaml.safe_load_all(MCAD_QUICKSTART) for s in nodes_from_subtree(obj)]
    assert specs == [
        QuotaNodeSpec(TREE, "context-root", None, R(cpu=2, memory="8000Mi"), True),
        QuotaNodeSpec(TREE, "alpha", "context-root", R(cpu=1, memory="4000Mi"), False),
        QuotaNodeSpec(TREE, "beta", "context-root", R(cpu=2, memory="4000Mi"), True),
    ]
    forest, problems = QuotaForest.build(specs)
    assert problems == []
    alpha = forest.resolve(on("alpha"))
    beta = forest.resolve(on("beta"))
    assert isinstance(alpha, QuotaAssignment)
    assert isinstance(beta, QuotaAssignment)
    # "even though beta has 2000m, alpha will only be able to borrow 1000m due to the
    # limit imposed by context-root"
    assert forest.fits(alpha, R(cpu=2)) is None
    assert forest.fits(alpha, R(cpu="2001m")) is not None
    forest.charge(beta, R(cpu=1))
    assert forest.fits(alpha, R(cpu="1500m")) == QuotaProblem(
        "QuotaExceeded", "quota tree quota_context node context-root: needs 1500m cpu, 1 free")


def test_builder_subtrees_round_trip() -> None:
    builder = nested()
    specs = [s for obj in builder.subtrees() for s in nodes_from_subtree(obj)]
    assert sorted(specs, key=lambda s: s.name) == sorted(builder.specs(), key=lambda s: s.name)


def subtree(**spec_fields: object) -> dict[str, object]:
    return {"metadata": {"name": "s", "namespace": "kube-system",
                         "labels": {"tree": TREE}}, "spec": spec_fields}


@pytest.mark.parametrize(("obj", "want_message"), [
    pytest.param({"metadata": {"name": "s", "namespace": "kube-system"}, "spec": {}},
                 "QuotaSubtree kube-system/s has no label tree", id="no tree label"),
    pytest.param(subtree(children=[{"quotas": {}}]),
                 r"spec.children\[0\] has no name", id="child without a name"),
    pytest.param(subtree(children=[{"name": "a", "quotas": {"hardLimit": "yes"}}]),
                 r"\(a\) quotas.hardLimit must be true or false", id="hardLimit not a bool"),
    pytest.param(subtree(children=[{"name": "a", "quotas": {"requests": {"cpu": "many"}}}]),
                 r"spec.children\[0\] \(a\) quotas.requests.cpu: 'many' is not a quantity",
                 id="malformed quantity"),
    pytest.param(subtree(children={"name": "a"}), "spec.children must be a list",
                 id="children not a list"),
    pytest.param(subtree(parent=3, children=[]), "spec.parent must be a node name",
                 id="parent not a name"),
])
def test_nodes_from_subtree_errors(obj: dict[str, object], want_message: str) -> None:
    with pytest.raises(ValueError, match=want_message):
        nodes_from_subtree(obj)


def test_nodes_from_subtree_defaults_to_soft() -> None:
    (node,) = nodes_from_subtree(subtree(parent="root", children=[{"name": "a"}]))
    assert node == QuotaNodeSpec(TREE, "a", "root", R(), False)
