"""What a QuotaSubtree's status says: usage per node it declares, and whether its tree
could be built.

MCAD's shape (``status.totalAllocation`` for ``spec.parent``, ``status.children[]`` for
each child, each with ``allocated.requests``), so tools written for MCAD read it, plus a
one-line ``summary`` that ``kubectl get quotasubtrees`` shows as a column, and a
``Valid`` condition that says why a tree is not used when it cannot be built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mcad.core.quota.forest import QuotaForest
from mcad.core.workload.quantity import format_quantity
from mcad.core.workload.resources import GPU, ResourceList


def subtree_status(obj: Mapping[str, Any], forest: QuotaForest,
                   problems: Sequence[str]) -> dict[str, Any]:
    """The status (without conditions' timestamps: see ``valid``) for one QuotaSubtree,
    ``forest`` charged with what runs."""
    meta = obj.get("metadata") or {}
    tree = str((meta.get("labels") or {}).get("tree", ""))
    spec = obj.get("spec") or {}
    namespace = str(meta.get("namespace", ""))
    children = [str(c.get("name")) for c in spec.get("children") or []
                if isinstance(c, Mapping) and c.get("name")]
    out: dict[str, Any] = {"children": [
        _allocation(forest, tree, name, namespace) for name in children
        if forest.knows(tree, name)]}
    parent = spec.get("parent")
    if isinstance(parent, str) and parent and forest.knows(tree, parent):
        out["totalAllocation"] = _allocation(forest, tree, parent, namespace)
    out["summary"] = ", ".join(_summary(forest, tree, name) for name in children
                               if forest.knows(tree, name)) or "-"
    return out


def valid(obj: Mapping[str, Any], problems: Sequence[str]) -> tuple[str, str, str]:
    """(status, reason, message) of the Valid condition."""
    meta = obj.get("metadata") or {}
    ident = f"QuotaSubtree {meta.get('namespace', '')}/{meta.get('name', '')}"
    tree = str((meta.get("labels") or {}).get("tree", ""))
    mine = [p for p in problems if ident in p or (tree and f"quota tree {tree} " in p)]
    if mine:
        return "False", "TreeInvalid", "; ".join(mine)
    return "True", "TreeBuilt", f"part of quota tree {tree}"


def _allocation(forest: QuotaForest, tree: str, node: str, namespace: str) -> dict[str, Any]:
    return {"name": node, "namespace": namespace, "path": forest.path(tree, node),
            "allocated": {"requests": forest.usage(tree, node).to_strings()}}


def _summary(forest: QuotaForest, tree: str, node: str) -> str:
    """``gold 16/8 gpu``: the dominant named resource (GPUs when named)."""
    limit, usage = forest.limit(tree, node), forest.usage(tree, node)
    resource = GPU if GPU in limit else next(iter(sorted(limit.keys())), GPU)
    short = "gpu" if resource == GPU else resource
    return (f"{node} {_q(usage, resource)}/{_q(limit, resource)} {short}")


def _q(values: ResourceList, resource: str) -> str:
    return format_quantity(values.get(resource, 0), resource=resource)
