"""The quota forest: may this AppWrapper be charged, and whom to evict so it can.

MCAD's QuotaSubtrees describe a forest. Each tree (``metadata.labels.tree``) is the
union of its QuotaSubtree objects; each object names a ``spec.parent`` node and lists
``children`` nodes with a quota and a ``hardLimit``. An AppWrapper picks one node per
tree with its label ``<tree>: <node>`` (``default`` when unlabelled) and must fit in
every tree at once. Any node may be picked, usually a leaf.

The rule, stated once (Kueue-like, and what MCAD's hardLimit means):

- Usage is charged to the picked node and every ancestor, so a node's usage is the
  usage of its whole subtree.
- A node limits only the resources it names.
- For a resource ``r`` a node names, its quota is *enforced* (subtree usage plus the
  new demand must stay within it) when the node is hard, or is a root, or no ancestor
  names ``r`` (nobody above could lend it). A soft node's quota is otherwise not a
  ceiling: the excess is borrowed from the ancestors, and their enforced quotas, which
  include every sibling's usage, are what bound the borrowing.

So ``fits`` checks a precomputed list of ``(node, quota)`` pairs per resource along the
path: a few dict lookups, no walk.

Eviction (``evictions_for``): a borrower is an AppWrapper whose path, below the node
that blocks the preemptor, runs through a node using more of the blocked resource than
its own quota. Borrowing is judged per node, as Kueue judges a borrowing ClusterQueue:
every AppWrapper charged there counts, and priority (then key) decides who goes first.
Only borrowers of lower priority than the preemptor can be evicted; usage within a
node's own quota is never taken away. Reclaim (``reclaims_for``) evicts borrowers of any
priority for an AppWrapper that is within its own quota in every tree once they are
gone; in a forest a victim goes from every tree, as MCAD's forest controller does. A
node that does not name a resource owns none of it, so its usage of that resource is not
borrowing from anyone in particular and is not evicted either: name the resource (``0``
if need be) to make it reclaimable.

Build problems (unknown parent, cycle, duplicate node, negative quota) are reported as
sentences and the rest is still built: nodes that cannot be placed in a tree, and the
nodes under them, are left out, and AppWrappers naming them stay pending with a
message that says why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcad.core.workload.quantity import QuantityError, format_quantity
from mcad.core.workload.resources import ResourceList

DEFAULT_NODE = "default"
"""The node an AppWrapper without a label for a tree is charged to."""


@dataclass(frozen=True)
class QuotaNodeSpec:
    """One node of a quota tree, as a QuotaSubtree child declares it.

    ``zero_quota`` names the resources the node declares with a quota of 0 (``gpu: 0``):
    a ``ResourceList`` drops zero entries, yet a named zero is a ceiling of nothing,
    while a resource the node does not name at all is not limited by it.
    """

    tree: str
    name: str
    parent: str | None
    quota: ResourceList
    hard_limit: bool
    zero_quota: frozenset[str] = frozenset()


@dataclass(frozen=True)
class QuotaAssignment:
    """The node an AppWrapper is charged to in each tree: ``(tree, node)``, by tree."""

    leaves: tuple[tuple[str, str], ...]
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A key of several per-cycle dicts, looked up once per queued AppWrapper: hash
        # the leaves once rather than on every lookup.
        object.__setattr__(self, "_hash", hash(self.leaves))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True)
class QuotaProblem:
    """Why an AppWrapper cannot be charged: ``QuotaNodeNotFound`` or ``QuotaExceeded``."""

    reason: str
    message: str


@dataclass(frozen=True)
class QuotaCharge:
    """An AppWrapper currently charged to the forest: an eviction candidate."""

    key: str
    priority: int
    assignment: QuotaAssignment
    amount: ResourceList


@dataclass(frozen=True, slots=True)
class _Node:
    tree: str
    name: str
    quota: Mapping[str, int]
    path: tuple[int, ...]                      # this node's index, then its ancestors'
    enforced: tuple[tuple[str, int], ...]      # (resource, quota) this node is a ceiling for


@dataclass(frozen=True, slots=True)
class _Plan:
    """What ``fits``, ``charge`` and ``release`` need for one assignment, precomputed."""

    ids: tuple[int, ...]                                   # every node charged
    checks: Mapping[str, tuple[tuple[int, int], ...]]      # resource -> (node, quota)
    paths: Mapping[str, tuple[int, ...]]                   # tree -> path, leaf first
    problem: QuotaProblem | None = None


class _Structure:
    """The immutable shape of the forest, shared by a forest and all its copies."""

    def __init__(self, nodes: list[_Node], unusable: dict[tuple[str, str], str],
                 trees: list[str]) -> None:
        self.nodes = nodes
        self.index = {(n.tree, n.name): i for i, n in enumerate(nodes)}
        self.unusable = unusable
        self.trees = trees
        self.plans: dict[QuotaAssignment, _Plan] = {}

    def plan(self, assignment: QuotaAssignment) -> _Plan:
        plan = self.plans.get(assignment)
        if plan is None:
            plan = self.plans[assignment] = self._compile(assignment)
        return plan

    def _compile(self, assignment: QuotaAssignment) -> _Plan:
        ids: list[int] = []
        checks: dict[str, list[tuple[int, int]]] = {}
        paths: dict[str, tuple[int, ...]] = {}
        for tree, name in assignment.leaves:
            leaf = self.index.get((tree, name))
            if leaf is None:
                return _Plan((), {}, {}, self.not_found(tree, name))
            path = self.nodes[leaf].path
            paths[tree] = path
            ids.extend(path)
            for node_id in path:
                for resource, quota in self.nodes[node_id].enforced:
                    checks.setdefault(resource, []).append((node_id, quota))
        return _Plan(tuple(ids), {r: tuple(c) for r, c in checks.items()}, paths)

    def not_found(self, tree: str, name: str) -> QuotaProblem:
        why = self.unusable.get((tree, name))
        if why is not None:
            message = f"quota tree {tree} node {name} is not usable: {why}"
        elif tree not in self.trees:
            message = f"there is no quota tree {tree}"
        else:
            message = (f"quota tree {tree} has no node {name}; label the AppWrapper "
                       f"{tree}: <node> with one of its nodes")
        return QuotaProblem("QuotaNodeNotFound", message)


class QuotaForest:
    """Quota trees with their current usage; ``copy()`` to simulate decisions."""

    __slots__ = ("_refusals", "_structure", "_usage", "version")

    def __init__(self, structure: _Structure, usage: list[dict[str, int]]) -> None:
        self._structure = structure
        self._usage = usage
        # Messages of refused fits since the last charge or release: a cycle asks the
        # same question for many pending AppWrappers of one shape.
        self._refusals: dict[tuple[QuotaAssignment, ResourceList], QuotaProblem] = {}
        self.version = 0
        """Grows with every charge and release (for callers that cache what usage says)."""

    @classmethod
    def build(cls, nodes: Iterable[QuotaNodeSpec]) -> tuple[QuotaForest, list[str]]:
        """The forest of ``nodes`` with no usage, and its problems as sentences."""
        structure, problems = _build_structure(nodes)
        return cls(structure, [{} for _ in structure.nodes]), problems

    def trees(self) -> list[str]:
        return list(self._structure.trees)

    def nodes(self) -> list[tuple[str, str]]:
        """Every usable ``(tree, node)``, sorted."""
        return sorted(self._structure.index)

    def resolve(self, labels: Mapping[str, str]) -> QuotaAssignment | QuotaProblem:
        """The node per tree an AppWrapper with these labels is charged to."""
        structure = self._structure
        leaves = []
        for tree in structure.trees:
            name = labels.get(tree)
            if name is None:
                if (tree, DEFAULT_NODE) not in structure.index:
                    return QuotaProblem(
                        "QuotaNodeNotFound",
                        f"the AppWrapper has no label {tree} and quota tree {tree} has no "
                        f"node {DEFAULT_NODE}; label it {tree}: <node> with one of its nodes",
                    )
                name = DEFAULT_NODE
            if (tree, name) not in structure.index:
                return structure.not_found(tree, name)
            leaves.append((tree, name))
        return QuotaAssignment(tuple(leaves))

    def fits(self, assignment: QuotaAssignment, amount: ResourceList) -> QuotaProblem | None:
        """None when ``amount`` can be charged to ``assignment`` now, else why not."""
        plan = self._structure.plan(assignment)
        if plan.problem is not None:
            return plan.problem
        usage = self._usage
        checks = plan.checks
        for resource, demand in amount.items():
            for node_id, quota in checks.get(resource, ()):
                if usage[node_id].get(resource, 0) + demand > quota:
                    refusal = self._refusals.get((assignment, amount))
                    if refusal is None:
                        refusal = self._refusals[assignment, amount] = self._exceeded(
                            plan, amount)
                    return refusal
        return None

    def charge(self, assignment: QuotaAssignment, amount: ResourceList) -> None:
        """Add ``amount`` to the usage of every node on the assignment's paths."""
        self._add(assignment, amount, 1)

    def release(self, assignment: QuotaAssignment, amount: ResourceList) -> None:
        """Undo ``charge(assignment, amount)``."""
        self._add(assignment, amount, -1)

    def _add(self, assignment: QuotaAssignment, amount: ResourceList, sign: int) -> None:
        plan = self._structure.plan(assignment)
        if plan.problem is not None:
            raise KeyError(plan.problem.message)
        self._refusals.clear()
        self.version += 1
        usage = self._usage
        items = amount.items()
        for node_id in plan.ids:
            node_usage = usage[node_id]
            for resource, value in items:
                total = node_usage.get(resource, 0) + sign * value
                if total:
                    node_usage[resource] = total
                else:
                    node_usage.pop(resource, None)

    def copy(self) -> QuotaForest:
        """An independent forest with the same shape and usage (shape is shared)."""
        return QuotaForest(self._structure, [dict(u) for u in self._usage])

    def within_own_quota(self, assignment: QuotaAssignment, amount: ResourceList) -> bool:
        """True when ``amount`` fits in the quota of the node(s) it is charged to, counting
        their usage: charging it would borrow nothing. Resources a node does not name do
        not count (it owns none of them, so using them is nobody's loan in particular)."""
        plan = self._structure.plan(assignment)
        if plan.problem is not None:
            return False
        nodes = self._structure.nodes
        for path in plan.paths.values():
            leaf = path[0]
            quota = nodes[leaf].quota
            used = self._usage[leaf]
            for resource, value in amount.items():
                if resource in quota and used.get(resource, 0) + value > quota[resource]:
                    return False
        return True

    def charged_nodes(self, assignment: QuotaAssignment) -> frozenset[tuple[str, str]]:
        """Every ``(tree, node)`` whose usage charging ``assignment`` changes: its nodes
        and all their ancestors."""
        plan = self._structure.plan(assignment)
        nodes = self._structure.nodes
        return frozenset((nodes[i].tree, nodes[i].name)
                         for path in plan.paths.values() for i in path)

    def share(self, assignment: QuotaAssignment) -> float:
        """The dominant share of the node(s) charged: the largest usage/quota over the
        resources a node names (inf when it uses a resource it declares 0 of)."""
        plan = self._structure.plan(assignment)
        if plan.problem is not None:
            return float("inf")
        nodes = self._structure.nodes
        worst = 0.0
        for path in plan.paths.values():
            leaf = path[0]
            used = self._usage[leaf]
            for resource, quota in nodes[leaf].quota.items():
                amount = used.get(resource, 0)
                if quota > 0:
                    worst = max(worst, amount / quota)
                elif amount > 0:
                    return float("inf")
        return worst

    def usage(self, tree: str, node: str) -> ResourceList:
        """What the node's subtree is charged with now."""
        return ResourceList(self._usage[self._node_id(tree, node)])

    def path(self, tree: str, node: str) -> str:
        """The node's path from its root: ``/root/org/team``."""
        nodes = self._structure.nodes
        ids = nodes[self._node_id(tree, node)].path
        return "/" + "/".join(nodes[i].name for i in reversed(ids))

    def knows(self, tree: str, node: str) -> bool:
        return (tree, node) in self._structure.index

    def limit(self, tree: str, node: str) -> ResourceList:
        """The node's own quota (only the resources it names)."""
        return ResourceList(self._structure.nodes[self._node_id(tree, node)].quota)

    def reclaims_for(self, assignment: QuotaAssignment, amount: ResourceList,
                     candidates: Sequence[QuotaCharge]) -> list[str] | None:
        """Keys of the borrowers whose eviction gives ``assignment`` back its own quota
        for ``amount``, or None when reclaiming is not the answer.

        Reclaim is for an AppWrapper that, once the borrowers are gone, is charged within
        its own node's quota in every tree (it takes back, it does not borrow). As in
        MCAD's quota forest, a victim found borrowing in one tree is evicted from all
        trees, which may be what frees the preemptor's own quota in another tree where
        the victim does not borrow (``evictions_for`` picks borrowers under the nodes
        that block it; they may be of any priority). Empty when it fits already.
        """
        if self.within_own_quota(assignment, amount):
            return self.evictions_for(assignment, amount, candidates, priority=None)
        victims = self.evictions_for(assignment, amount, candidates, priority=None)
        if not victims:
            return None
        after = self.copy()
        gone = set(victims)
        for candidate in candidates:
            if candidate.key in gone:
                after.release(candidate.assignment, candidate.amount)
        return victims if after.within_own_quota(assignment, amount) else None

    def evictions_for(self, assignment: QuotaAssignment, amount: ResourceList,
                      candidates: Sequence[QuotaCharge], *,
                      priority: int | None, borrowers_only: bool = True) -> list[str] | None:
        """Keys of a minimal set of candidates whose release makes room.

        Only candidates of lower priority than ``priority`` (None: any priority, as a
        node reclaiming what it lent). Candidates are taken lowest priority first, ties
        by key, and only while they help: each must be, at that point, charged under a
        node that still blocks the preemptor, for a resource that blocks it, and (with
        ``borrowers_only``) borrowing there: under that node, on a node using more than
        its own quota. Once ``amount`` fits, every chosen one that can be given back
        without breaking the fit is given back (so no single key can be dropped), and
        the result is checked on a fresh copy. Empty when it already fits; None when
        even all eligible evictions are not enough.
        """
        plan = self._structure.plan(assignment)
        if plan.problem is not None:
            return None
        if self.fits(assignment, amount) is None:
            return []
        simulated = self.copy()
        chosen: list[QuotaCharge] = []
        ordered = sorted((c for c in candidates if priority is None or c.priority < priority),
                         key=lambda c: (c.priority, c.key))
        fitted = False
        for candidate in ordered:
            if not simulated._helps(plan, amount, candidate, borrowers_only=borrowers_only):
                continue
            simulated.release(candidate.assignment, candidate.amount)
            chosen.append(candidate)
            if simulated.fits(assignment, amount) is None:
                fitted = True
                break
        if not fitted:
            return None
        needed = list(chosen)
        for candidate in reversed(chosen):
            simulated.charge(candidate.assignment, candidate.amount)
            if simulated.fits(assignment, amount) is None:
                needed.remove(candidate)
            else:
                simulated.release(candidate.assignment, candidate.amount)
        check = self.copy()
        for candidate in needed:
            check.release(candidate.assignment, candidate.amount)
        if check.fits(assignment, amount) is not None:
            return None
        return [c.key for c in needed]

    # -- internals --------------------------------------------------------------------

    def _node_id(self, tree: str, node: str) -> int:
        node_id = self._structure.index.get((tree, node))
        if node_id is None:
            raise KeyError(self._structure.not_found(tree, node).message)
        return node_id

    def _blocked(self, plan: _Plan, amount: ResourceList) -> list[tuple[int, str]]:
        """Every ``(node, resource)`` on the plan's paths that ``amount`` overflows."""
        usage = self._usage
        return [(node_id, resource)
                for resource, demand in amount.items()
                for node_id, quota in plan.checks.get(resource, ())
                if usage[node_id].get(resource, 0) + demand > quota]

    def _exceeded(self, plan: _Plan, amount: ResourceList) -> QuotaProblem:
        """The first node, leaf first and tree by tree, that ``amount`` overflows."""
        nodes = self._structure.nodes
        for path in plan.paths.values():
            for node_id in path:
                node = nodes[node_id]
                used = self._usage[node_id]
                parts = [
                    f"needs {format_quantity(demand, resource=r)} {r}, "
                    f"{format_quantity(max(quota - used.get(r, 0), 0), resource=r)} free"
                    for r, quota in node.enforced
                    if (demand := amount[r]) and used.get(r, 0) + demand > quota
                ]
                if parts:
                    return QuotaProblem(
                        "QuotaExceeded",
                        f"quota tree {node.tree} node {node.name}: {'; '.join(parts)}",
                    )
        raise AssertionError("_exceeded called for an amount that fits")

    def _helps(self, plan: _Plan, amount: ResourceList, candidate: QuotaCharge, *,
               borrowers_only: bool = True) -> bool:
        """True when evicting ``candidate`` frees a blocked resource under a blocking node
        (and, with ``borrowers_only``, one it borrows there)."""
        theirs = self._structure.plan(candidate.assignment)
        if theirs.problem is not None:
            return False
        nodes = self._structure.nodes
        for blocking, resource in self._blocked(plan, amount):
            if candidate.amount[resource] <= 0:
                continue
            path = theirs.paths.get(nodes[blocking].tree, ())
            if blocking not in path:
                continue
            if not borrowers_only:
                return True
            for node_id in path[:path.index(blocking)]:
                quota = nodes[node_id].quota
                if resource in quota and self._usage[node_id].get(resource, 0) > quota[resource]:
                    return True
        return False


def _build_structure(specs: Iterable[QuotaNodeSpec]) -> tuple[_Structure, list[str]]:
    problems: list[str] = []
    declared: dict[tuple[str, str], QuotaNodeSpec] = {}
    quotas: dict[tuple[str, str], dict[str, int]] = {}
    trees: set[str] = set()
    for spec in specs:
        key = (spec.tree, spec.name)
        trees.add(spec.tree)
        if key in declared:
            problems.append(
                f"quota tree {spec.tree} declares node {spec.name} more than once; "
                "the first declaration is used, remove the others"
            )
            continue
        declared[key] = spec
        quota = dict(spec.quota)
        for resource in spec.zero_quota:
            quota.setdefault(resource, 0)
        for resource, value in sorted(quota.items()):
            if value < 0:
                problems.append(
                    f"quota tree {spec.tree} node {spec.name} has a negative quota of "
                    f"{format_quantity(value, resource=resource)} {resource}; "
                    "it counts as 0 until fixed"
                )
                quota[resource] = 0
        quotas[key] = quota

    unusable: dict[tuple[str, str], str] = {}
    usable: set[tuple[str, str]] = set()
    for start in declared:
        # Walk up from ``start`` until the walk meets a root, a node already judged,
        # a missing parent or itself; everything walked shares the outcome.
        walk: list[tuple[str, str]] = []
        key = start
        culprit: tuple[str, str] | None = None
        while key not in usable:
            if key in unusable:
                culprit = key
                break
            if key in walk:
                cycle = walk[walk.index(key):]
                names = " -> ".join(name for _, name in [*cycle, key])
                problems.append(f"quota tree {key[0]} has a cycle of parents {names}; "
                                "these nodes and the nodes under them are left out")
                for member in cycle:
                    unusable[member] = f"it is in the cycle of parents {names}"
                del walk[walk.index(key):]
                culprit = key
                break
            walk.append(key)
            parent = declared[key].parent
            if parent is None:
                break
            if (key[0], parent) not in declared:
                problems.append(
                    f"quota tree {key[0]} node {key[1]} names parent {parent}, which is "
                    "not a node of that tree; it and the nodes under it are left out"
                )
                unusable[key] = f"its parent {parent} is not a node of quota tree {key[0]}"
                walk.pop()
                culprit = key
                break
            key = (key[0], parent)
        if culprit is None:
            usable.update(walk)
            continue
        why = unusable[culprit]
        if not why.startswith("it is under"):
            why = f"it is under node {culprit[1]}, which is left out: {why}"
        for member in walk:
            unusable[member] = why

    order = sorted(usable)
    index = {key: i for i, key in enumerate(order)}
    paths: dict[tuple[str, str], tuple[int, ...]] = {}

    def path_of(key: tuple[str, str]) -> tuple[int, ...]:
        known = paths.get(key)
        if known is None:
            parent = declared[key].parent
            known = (index[key],) + (() if parent is None else path_of((key[0], parent)))
            paths[key] = known
        return known

    nodes = []
    for key in order:
        path = path_of(key)
        spec = declared[key]
        hard = spec.hard_limit or spec.parent is None
        above: set[str] = set()
        for ancestor in path[1:]:
            above.update(quotas[order[ancestor]])
        enforced = tuple((r, q) for r, q in sorted(quotas[key].items())
                         if hard or r not in above)
        nodes.append(_Node(spec.tree, spec.name, quotas[key], path, enforced))
    return _Structure(nodes, unusable, sorted(trees)), problems


def nodes_from_subtree(obj: Mapping[str, Any]) -> list[QuotaNodeSpec]:
    """The quota nodes one QuotaSubtree object declares (its ``spec.children``).

    Raises ``ValueError`` with a sentence for a malformed object.
    """
    metadata = obj.get("metadata") or {}
    what = f"QuotaSubtree {metadata.get('namespace', '')}/{metadata.get('name', '')}"
    labels = metadata.get("labels") or {}
    tree = labels.get("tree") if isinstance(labels, Mapping) else None
    if not tree or not isinstance(tree, str):
        raise ValueError(f"{what} has no label tree; label it tree: <name of its quota tree>")
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise ValueError(f"{what} has a spec that is not an object")
    parent = spec.get("parent") or None
    if parent is not None and not isinstance(parent, str):
        raise ValueError(f"{what} spec.parent must be a node name, not {parent!r}")
    children = spec.get("children") or []
    if not isinstance(children, list):
        raise ValueError(f"{what} spec.children must be a list")
    out = []
    for i, child in enumerate(children):
        where = f"{what} spec.children[{i}]"
        if not isinstance(child, Mapping) or not isinstance(child.get("name"), str) \
                or not child["name"]:
            raise ValueError(f"{where} has no name; every child names a quota node")
        quotas = child.get("quotas") or {}
        if not isinstance(quotas, Mapping):
            raise ValueError(f"{where} ({child['name']}) quotas must be an object")
        hard = quotas.get("hardLimit", False)
        if not isinstance(hard, bool):
            raise ValueError(f"{where} ({child['name']}) quotas.hardLimit must be true or "
                             f"false, not {hard!r}")
        requests = quotas.get("requests") or {}
        if not isinstance(requests, Mapping):
            raise ValueError(f"{where} ({child['name']}) quotas.requests must be an object")
        try:
            quota = ResourceList.parse(requests)
        except QuantityError as err:
            raise ValueError(f"{where} ({child['name']}) quotas.requests.{err}") from err
        zero = frozenset(str(r) for r in requests if str(r) not in quota)
        out.append(QuotaNodeSpec(tree=tree, name=child["name"], parent=parent, quota=quota,
                                 hard_limit=hard, zero_quota=zero))
    return out
