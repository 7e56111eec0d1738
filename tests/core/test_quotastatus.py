"""A QuotaSubtree's status: MCAD's allocation shape, a summary for kubectl, Valid."""

from __future__ import annotations

from mcad.core.quota.forest import QuotaForest, nodes_from_subtree
from mcad.core.quota.status import subtree_status, valid
from mcad.core.workload.resources import ResourceList


def subtree(name: str, parent: str | None, children: dict[str, int]) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "kube-system", "labels": {"tree": "t"}},
            "spec": {**({"parent": parent} if parent else {}), "children": [
                {"name": c, "quotas": {"requests": {"nvidia.com/gpu": g}}}
                for c, g in children.items()]}}


def test_usage_per_child_and_of_the_parent_in_mcads_shape() -> None:
    objs = [subtree("root", None, {"root": 24}), subtree("teams", "root", {"gold": 8,
                                                                           "silver": 4})]
    forest, problems = QuotaForest.build([n for o in objs for n in nodes_from_subtree(o)])
    assert not problems
    assignment = forest.resolve({"t": "gold"})
    forest.charge(assignment, ResourceList.of(gpu=16))  # type: ignore[arg-type]
    status = subtree_status(objs[1], forest, problems)
    assert status["totalAllocation"] == {
        "name": "root", "namespace": "kube-system", "path": "/root",
        "allocated": {"requests": {"nvidia.com/gpu": "16"}}}
    assert status["children"][0] == {
        "name": "gold", "namespace": "kube-system", "path": "/root/gold",
        "allocated": {"requests": {"nvidia.com/gpu": "16"}}}
    assert status["children"][1]["allocated"] == {"requests": {}}
    assert status["summary"] == "gold 16/8 gpu, silver 0/4 gpu"
    assert valid(objs[1], problems) == ("True", "TreeBuilt", "part of quota tree t")


def test_a_tree_that_cannot_be_built_says_why_on_each_of_its_subtrees() -> None:
    obj = subtree("teams", "nowhere", {"gold": 8})
    _, problems = QuotaForest.build(nodes_from_subtree(obj))
    assert problems
    state, reason, message = valid(obj, problems)
    assert (state, reason) == ("False", "TreeInvalid")
    assert "nowhere" in message
