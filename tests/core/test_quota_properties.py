"""Quota forest invariants under random trees and random workloads (hypothesis).

- A hard node (and every root) never holds more than its quota when every charge was
  guarded by ``fits``.
- ``release`` exactly undoes ``charge``.
- ``evictions_for`` is sound (only lower priorities; the preemptor fits afterwards),
  minimal (no single key can be spared), leaves the forest untouched, ignores the
  order candidates come in, and is empty when the preemptor already fits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import event, given, settings
from hypothesis import strategies as st

from mcad.core.quota.forest import QuotaAssignment, QuotaCharge, QuotaForest, QuotaNodeSpec
from mcad.core.workload.resources import ResourceList

RESOURCES = ("cpu", "nvidia.com/gpu")
TREES = ("t0", "t1")
NANO = 10**9


@dataclass(frozen=True)
class Shape:
    """A random forest: per tree, nodes whose parent index is always smaller."""

    specs: tuple[QuotaNodeSpec, ...]
    charge_roots: bool = True

    def forest(self) -> QuotaForest:
        forest, problems = QuotaForest.build(self.specs)
        assert problems == []
        return forest

    def names(self, tree: str) -> list[str]:
        return [s.name for s in self.specs
                if s.tree == tree and (self.charge_roots or s.parent is not None)]


@st.composite
def shapes(draw: st.DrawFn) -> Shape:
    specs = []
    for tree in TREES[: draw(st.integers(1, len(TREES)))]:
        for i in range(draw(st.integers(1, 6))):
            quota = {r: draw(st.integers(0, 12)) * NANO for r in RESOURCES
                     if draw(st.booleans())}
            parent = None if i == 0 else f"n{draw(st.integers(0, i - 1))}"
            zero = frozenset(r for r, v in quota.items() if v == 0)
            specs.append(QuotaNodeSpec(tree, f"n{i}", parent, ResourceList(quota),
                                       draw(st.booleans()), zero_quota=zero))
    return Shape(tuple(specs))


@st.composite
def lending_shapes(draw: st.DrawFn) -> Shape:
    """One tree that lends a lot: a root with room, mostly soft children with little."""
    specs = [QuotaNodeSpec("t0", "n0", None,
                           ResourceList({"nvidia.com/gpu": draw(st.integers(6, 16)) * NANO}),
                           True)]
    for i in range(1, draw(st.integers(2, 6))):
        gpu = draw(st.integers(0, 4)) * NANO
        zero = frozenset() if gpu else frozenset({"nvidia.com/gpu"})
        specs.append(QuotaNodeSpec("t0", f"n{i}", f"n{draw(st.integers(0, i - 1))}",
                                   ResourceList({"nvidia.com/gpu": gpu}),
                                   draw(st.integers(0, 3)) == 0, zero_quota=zero))
    return Shape(tuple(specs), charge_roots=False)


amounts = st.builds(
    lambda cpu, gpu: ResourceList({"cpu": cpu * NANO, "nvidia.com/gpu": gpu * NANO}),
    st.integers(0, 3), st.integers(0, 6))


@st.composite
def assignments(draw: st.DrawFn, shape: Shape) -> QuotaAssignment:
    trees = sorted({s.tree for s in shape.specs})
    return QuotaAssignment(tuple((t, draw(st.sampled_from(shape.names(t)))) for t in trees))


Scenario = tuple[Shape, list[tuple[QuotaAssignment, ResourceList, int]]]


@st.composite
def scenarios(draw: st.DrawFn, *, lending: bool = False) -> Scenario:
    shape = draw(lending_shapes() if lending else shapes())
    workloads = draw(st.lists(st.tuples(assignments(shape), amounts, st.integers(0, 4)),
                              max_size=12))
    return shape, workloads


def hard_nodes_within_quota(shape: Shape, forest: QuotaForest) -> None:
    for spec in shape.specs:
        if spec.hard_limit or spec.parent is None:
            usage = forest.usage(spec.tree, spec.name)
            for resource in {*spec.quota, *spec.zero_quota}:
                assert usage[resource] <= spec.quota[resource], (spec, usage)


def admit(forest: QuotaForest,
          workloads: list[tuple[QuotaAssignment, ResourceList, int]]) -> list[QuotaCharge]:
    charged = []
    for i, (assignment, amount, priority) in enumerate(workloads):
        if forest.fits(assignment, amount) is None:
            forest.charge(assignment, amount)
            charged.append(QuotaCharge(f"aw-{i:02d}", priority, assignment, amount))
    return charged


def usage_of(shape: Shape, forest: QuotaForest) -> dict[tuple[str, str], ResourceList]:
    return {(s.tree, s.name): forest.usage(s.tree, s.name) for s in shape.specs}


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.lists(st.integers(0, 11), max_size=6))
def test_hard_quota_is_never_exceeded(
        scenario: Scenario,
        releases: list[int]) -> None:
    shape, workloads = scenario
    forest = shape.forest()
    charged = admit(forest, workloads)
    hard_nodes_within_quota(shape, forest)
    # Interleave releases and a second round of admissions.
    for index in releases:
        if charged:
            gone = charged.pop(index % len(charged))
            forest.release(gone.assignment, gone.amount)
    admit(forest, workloads)
    hard_nodes_within_quota(shape, forest)


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.data())
def test_release_undoes_charge(
        scenario: Scenario,
        data: st.DataObject) -> None:
    shape, workloads = scenario
    forest = shape.forest()
    admit(forest, workloads)
    before = usage_of(shape, forest)
    assignment = data.draw(assignments(shape))
    amount = data.draw(amounts)
    forest.charge(assignment, amount)
    forest.release(assignment, amount)
    assert usage_of(shape, forest) == before


@settings(max_examples=200, deadline=None)
@given(scenarios(lending=True), st.data())
def test_evictions_are_sound_minimal_and_deterministic(
        scenario: Scenario,
        data: st.DataObject) -> None:
    shape, workloads = scenario
    forest = shape.forest()
    charged = admit(forest, workloads)
    before = usage_of(shape, forest)
    assignment = data.draw(assignments(shape))
    amount = data.draw(amounts)
    priority = data.draw(st.integers(0, 6))

    got = forest.evictions_for(assignment, amount, charged, priority=priority)

    assert usage_of(shape, forest) == before, "evictions_for must not mutate the forest"
    shuffled = list(charged)
    random.Random(data.draw(st.integers(0, 2**16))).shuffle(shuffled)
    assert forest.evictions_for(assignment, amount, shuffled, priority=priority) == got
    if forest.fits(assignment, amount) is None:
        assert got == []
        return
    if got is None:
        event('no eviction set')
        return
    event(f'{len(got)} evictions')
    by_key = {c.key: c for c in charged}
    assert got, "a preemptor that does not fit needs at least one eviction"
    assert len(set(got)) == len(got)
    assert all(by_key[k].priority < priority for k in got)

    def fits_without(keys: list[str]) -> bool:
        simulated = forest.copy()
        for key in keys:
            simulated.release(by_key[key].assignment, by_key[key].amount)
        return simulated.fits(assignment, amount) is None

    assert fits_without(got)
    for key in got:
        assert not fits_without([k for k in got if k != key]), f"{key} was not needed"
