"""Fluent builders for quota trees, as specs, forests or wire QuotaSubtree objects.

    forest = (make_tree("quota_context")
              .node("root", gpu=16, hard=True)
              .child("gold", parent="root", gpu=8)
              .child("silver", parent="root", gpu=8)
              .build())

Resource keywords follow ``ResourceList.of`` (``gpu`` is ``nvidia.com/gpu``); pass
``requests={...}`` for any other name. ``make_forest(*trees)`` joins several trees;
``charge_appwrapper`` puts a running AppWrapper's usage on a forest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcad.core.quota.forest import QuotaAssignment, QuotaCharge, QuotaForest, QuotaNodeSpec
from mcad.core.workload.resources import ResourceList


class QuotaTreeBuilder:
    """One quota tree, node by node; parents may be declared after their children."""

    def __init__(self, tree: str) -> None:
        self.tree = tree
        self._nodes: list[QuotaNodeSpec] = []

    def node(self, name: str, *, parent: str | None = None, hard: bool = False,
             requests: Mapping[str, str | int] | None = None,
             **resources: int | str) -> QuotaTreeBuilder:
        """Add a node; without ``parent`` it is a root (always hard)."""
        quota = ResourceList.parse(dict(requests or {})) + ResourceList.of(**resources)
        named = {*(requests or {}), *(_resource_name(k) for k in resources)}
        self._nodes.append(QuotaNodeSpec(tree=self.tree, name=name, parent=parent,
                                         quota=quota, hard_limit=hard,
                                         zero_quota=frozenset(named - set(quota))))
        return self

    def child(self, name: str, *, parent: str, hard: bool = False,
              requests: Mapping[str, str | int] | None = None,
              **resources: int | str) -> QuotaTreeBuilder:
        """Add a node under ``parent`` (soft unless ``hard=True``, MCAD's default)."""
        return self.node(name, parent=parent, hard=hard, requests=requests, **resources)

    def specs(self) -> list[QuotaNodeSpec]:
        return list(self._nodes)

    def build(self, *, strict: bool = True) -> QuotaForest:
        """The forest of this tree alone; ``strict`` fails on any build problem."""
        return make_forest(self, strict=strict)

    def subtrees(self, *, namespace: str = "kube-system") -> list[dict[str, Any]]:
        """Wire QuotaSubtree objects, one per parent (roots in one with no parent)."""
        by_parent: dict[str | None, list[QuotaNodeSpec]] = {}
        for node in self._nodes:
            by_parent.setdefault(node.parent, []).append(node)
        out = []
        for parent, children in by_parent.items():
            name = f"{self.tree}-{parent}-children" if parent else f"{self.tree}-root"
            body: dict[str, Any] = {"children": [
                {"name": c.name,
                 "quotas": {"hardLimit": c.hard_limit,
                            "requests": {**dict.fromkeys(sorted(c.zero_quota), "0"),
                                         **c.quota.to_strings()}}}
                for c in children
            ]}
            if parent is not None:
                body["parent"] = parent
            out.append({
                "apiVersion": "quota.codeflare.dev/v1alpha1",
                "kind": "QuotaSubtree",
                "metadata": {"name": name.replace("_", "-"), "namespace": namespace,
                             "labels": {"tree": self.tree}},
                "spec": body,
            })
        return out


def _resource_name(keyword: str) -> str:
    """``gpu`` -> ``nvidia.com/gpu``, as ``ResourceList.of`` spells keywords."""
    return next(iter(ResourceList.of(**{keyword: 1})))


def make_tree(tree: str) -> QuotaTreeBuilder:
    return QuotaTreeBuilder(tree)


def make_forest(*trees: QuotaTreeBuilder, strict: bool = True) -> QuotaForest:
    """One forest of several trees; ``strict`` raises on any build problem."""
    forest, problems = QuotaForest.build(spec for tree in trees for spec in tree.specs())
    if strict and problems:
        raise ValueError("; ".join(problems))
    return forest


def charge_appwrapper(forest: QuotaForest, key: str, *, priority: int = 0,
                      labels: Mapping[str, str] | None = None,
                      amount: ResourceList, force: bool = False) -> QuotaCharge:
    """Charge ``amount`` for the AppWrapper ``key`` and return it as a candidate.

    Raises unless it fits, or ``force`` (to set up a forest already over quota).
    """
    assignment = forest.resolve(labels or {})
    if not isinstance(assignment, QuotaAssignment):
        raise ValueError(assignment.message)
    problem = forest.fits(assignment, amount)
    if problem is not None and not force:
        raise ValueError(f"{key} does not fit: {problem.message}")
    forest.charge(assignment, amount)
    return QuotaCharge(key=key, priority=priority, assignment=assignment, amount=amount)
