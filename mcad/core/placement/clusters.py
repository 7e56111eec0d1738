"""Choosing the cluster: which clusters an AppWrapper may use, and the one it goes to.

Choosing among clusters: only clusters that are ready and schedulable, named in the
AppWrapper's ``clusters`` (when any) and matched by its ``clusterSelector``. Among
those where the gang fits, the policy decides from the free room left after it:

- ``best-fit`` (default, bin packing): the cluster whose scarcest requested resource
  would have the smallest share of its allocatable left free;
- ``spread``: the largest share left free.

Ties go to the cluster name. ``avoid`` (the cluster of a failed attempt) moves that
cluster to the end: another cluster that fits wins, but it is still used when no
other fits.

``ClusterBoard`` is the per-cycle, mutable view the dispatch cycle charges as it
decides; ``place`` and ``choose_cluster`` are the same logic for one question.


Whether the gang fits on one cluster is asked of ``mcad.core.placement.gangfit``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mcad.core.placement.capacity import ClusterCapacity, NodePool
from mcad.core.placement.domainfit import fit_in_domains, place_ranked
from mcad.core.placement.gangfit import fit_gang
from mcad.core.placement.namespaces import closed_anywhere
from mcad.core.placement.nodefit import NoFit, Placement, placement_of, resource_weight_order
from mcad.core.workload.demand import Demand
from mcad.core.workload.quantity import format_quantity
from mcad.core.workload.resources import ResourceList


class PlacementPolicy(StrEnum):
    """How to choose among clusters where an AppWrapper fits."""

    BEST_FIT = "best-fit"
    SPREAD = "spread"


# -- cluster selection -------------------------------------------------------------------

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One ``matchExpressions`` entry: ``key`` ``operator`` ``values``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels  # DoesNotExist

    def __str__(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        return f"{self.key} {self.operator} [{', '.join(self.values)}]"


@dataclass(frozen=True, slots=True)
class ClusterSelector:
    """A Kubernetes label selector over cluster labels; empty matches every cluster."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[LabelRequirement, ...] = ()

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> ClusterSelector:
        """Read ``{matchLabels: {...}, matchExpressions: [{key, operator, values}]}``.

        Raises ``ValueError`` with a sentence for an unknown operator or a malformed entry.
        """
        if not spec:
            return EVERY_CLUSTER
        labels = spec.get("matchLabels") or {}
        if not isinstance(labels, Mapping):
            raise ValueError("clusterSelector.matchLabels must be an object of label: value")
        expressions = []
        for i, raw in enumerate(spec.get("matchExpressions") or ()):
            where = f"clusterSelector.matchExpressions[{i}]"
            if not isinstance(raw, Mapping) or not raw.get("key"):
                raise ValueError(f"{where} must be an object with a key")
            operator = str(raw.get("operator", ""))
            if operator not in _OPERATORS:
                raise ValueError(f"{where}.operator is {operator!r}; use one of "
                                 f"{', '.join(_OPERATORS)}")
            values = tuple(sorted(str(v) for v in raw.get("values") or ()))
            if operator in ("In", "NotIn") and not values:
                raise ValueError(f"{where} uses {operator} and needs values")
            expressions.append(LabelRequirement(str(raw["key"]), operator, values))
        return cls(tuple(sorted((str(k), str(v)) for k, v in labels.items())),
                   tuple(expressions))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return (all(labels.get(k) == v for k, v in self.match_labels)
                and all(e.matches(labels) for e in self.match_expressions))

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels]
        parts += [str(e) for e in self.match_expressions]
        return ", ".join(parts) or "everything"


EVERY_CLUSTER = ClusterSelector()


# -- the per-cycle board --------------------------------------------------------------------

class ClusterBoard:
    """Every cluster's free room for one cycle, charged as AppWrappers are placed."""

    def __init__(self, clusters: Iterable[ClusterCapacity]) -> None:
        self.clusters: tuple[ClusterCapacity, ...] = tuple(sorted(clusters,
                                                                  key=lambda c: c.name))
        self.pools: tuple[NodePool, ...] = tuple(NodePool.of(c) for c in self.clusters)
        self._index: dict[str, int] = {c.name: i for i, c in enumerate(self.clusters)}
        self._allocatable = [ResourceList(pool.allocatable) for pool in self.pools]
        self._empty: dict[int, NodePool] = {}
        self._eligible: dict[tuple[object, ...], tuple[int, ...] | str] = {}
        self.kinds_differ = any(c.kinds is not None for c in self.clusters)
        """True when some cluster says which kinds it serves (so kinds can rule it out)."""
        self.closed_namespaces = closed_anywhere(self.clusters)
        """Every namespace closed on some cluster (``mcad.core.placement.namespaces``)."""

    def index(self, name: str) -> int | None:
        return self._index.get(name)

    def renew(self, cluster: ClusterCapacity) -> None:
        """Take ``cluster``'s room anew: the same cluster (name, nodes, labels, every fact
        but room) whose nodes' requests, unbound pods or held pods changed. Its pool is
        built again from it; what was derived from its nodes alone (their topology
        domains, the empty pool) is kept."""
        i = self._index[cluster.name]
        pool = NodePool.of(cluster)
        pool.memo = self.pools[i].memo
        self.clusters = (*self.clusters[:i], cluster, *self.clusters[i + 1:])
        self.pools = (*self.pools[:i], pool, *self.pools[i + 1:])

    def eligible(self, names: Sequence[str] = (), selector: ClusterSelector = EVERY_CLUSTER,
                 kinds: Sequence[tuple[str, str]] = ()) -> tuple[int, ...] | str:
        """Indices of the usable clusters an AppWrapper may go to, or why there are none.

        ``kinds`` are the (apiVersion, kind) it wraps: a cluster that does not serve one
        of them (per its discovery) is ruled out, so an AppWrapper is never sent where its
        objects cannot be created.
        """
        key = (tuple(names), selector, tuple(kinds))
        found = self._eligible.get(key)
        if found is None:
            found = self._eligible[key] = self._find_eligible(names, selector, kinds)
        return found

    def _find_eligible(self, names: Sequence[str], selector: ClusterSelector,
                       kinds: Sequence[tuple[str, str]]) -> tuple[int, ...] | str:
        wanted = set(names)
        named = [i for i, c in enumerate(self.clusters) if not wanted or c.name in wanted]
        if not named:
            return f"none of the clusters it names ({', '.join(sorted(wanted))}) is known"
        matched = [i for i in named if selector.matches(self.clusters[i].labels)]
        if not matched:
            among = f" among {', '.join(sorted(wanted))}" if wanted else ""
            return f"no cluster{among} matches its clusterSelector ({selector})"
        serving = [i for i in matched if self.clusters[i].serves(kinds)]
        if not serving:
            missing = "; ".join(
                f"{self.clusters[i].name} serves no "
                f"{', '.join(f'{k} ({v})' for v, k in self.clusters[i].unserved(kinds))}"
                for i in matched)
            return f"no matching cluster serves every kind it wraps: {missing}"
        matched = serving
        usable = tuple(i for i in matched if self.clusters[i].usable)
        if not usable:
            states = ", ".join(
                f"{self.clusters[i].name} is "
                f"{'not ready' if not self.clusters[i].ready else 'not schedulable'}"
                for i in matched)
            return f"no matching cluster takes work now: {states}"
        return usable

    def ranked(self, demand: Demand, candidates: Iterable[int], *,
               policy: PlacementPolicy = PlacementPolicy.BEST_FIT,
               avoid: str | None = None) -> list[int]:
        """Candidates whose total free room holds ``demand.total``, best first."""
        need = tuple(demand.total.items())  # (read once: asked of every candidate)
        scored: list[tuple[bool, float, str, int]] = []
        for i in candidates:
            total = self.pools[i].total
            allocatable = self._allocatable[i]
            score = 1.0
            for name, amount in need:
                left = total.get(name, 0) - amount
                if left < 0:
                    break
                share = left / allocatable[name]
                score = min(score, share)
            else:
                if policy is PlacementPolicy.SPREAD:
                    score = -score
                name = self.clusters[i].name
                scored.append((name == avoid, score, name, i))
        scored.sort()
        return [i for *_, i in scored]

    def place(self, demand: Demand, candidates: Sequence[int], *,
              policy: PlacementPolicy = PlacementPolicy.BEST_FIT,
              avoid: str | None = None) -> Placement | NoFit:
        """Place ``demand`` on the best candidate where it fits and charge it there."""
        if not candidates:
            return NoFit("every cluster it may go to is held for the head of the line")
        ranked = self.ranked(demand, candidates, policy=policy, avoid=avoid)
        if not ranked:
            return NoFit(self._why_no_cluster_total(demand, candidates))
        if demand.topology is not None:  # the cluster and the domain are chosen together
            return place_ranked(self, demand, ranked, avoid=avoid)
        for i in ranked:
            takes = fit_gang(self.pools[i], demand, explain=False)
            if not isinstance(takes, str):
                return placement_of(self.clusters[i].name, self.pools[i], takes)
        first = ranked[0]
        why = fit_gang(self.pools[first], demand)
        assert isinstance(why, str)
        others = len(ranked) - 1
        more = (f"; {others} more cluster{'s' if others > 1 else ''} with enough free in "
                "total do not fit it either") if others else ""
        return NoFit(f"{self.clusters[first].name}: {why}{more}")

    def unplace(self, placement: Placement) -> None:
        """Give back what ``place`` charged for ``placement``."""
        i = self._index[placement.cluster]
        for pod_set, takes in placement.takes:
            self.pools[i].give_back(pod_set, takes)

    def replace(self, placement: Placement) -> None:
        """Charge ``placement`` again after ``unplace``."""
        i = self._index[placement.cluster]
        for pod_set, takes in placement.takes:
            self.pools[i].take(pod_set, takes)

    def allocatable(self, index: int) -> ResourceList:
        """Allocatable resources of the usable nodes of cluster ``index``."""
        return self._allocatable[index]

    def fits_when_empty(self, demand: Demand, candidates: Iterable[int]) -> bool:
        """True when ``demand`` fits some candidate with no pod running or reserved.

        An AppWrapper for which this is false can never run where it may go.
        """
        for i in candidates:
            pool = self._empty.get(i)
            if pool is None:
                pool = self._empty[i] = NodePool.empty(self.clusters[i].nodes,
                                                       self.clusters[i].topology)
            takes = fit_gang(pool, demand, explain=False)
            if not isinstance(takes, str):
                for pod_set, set_takes in takes:
                    pool.give_back(pod_set, set_takes)
                return True
        return False

    def _why_no_cluster_total(self, demand: Demand, candidates: Iterable[int]) -> str:
        candidates = list(candidates)
        for name in resource_weight_order(demand.total):
            amount = demand.total[name]
            best = max(candidates, key=lambda i: (self.pools[i].total.get(name, 0), -i))
            most = max(self.pools[best].total.get(name, 0), 0)
            if most < amount:
                return (f"needs {format_quantity(amount, resource=name)} {name} in all; "
                        f"the most free in one cluster is "
                        f"{format_quantity(most, resource=name)} "
                        f"(on {self.clusters[best].name})")
        return (f"no single cluster has {demand.total.describe()} free at once")


# -- one question at a time -------------------------------------------------------------------


def place(demand: Demand, cluster: ClusterCapacity) -> Placement | NoFit:
    """Where ``demand``'s pods would go on ``cluster`` (unbound pods placed first)."""
    if not cluster.usable:
        return NoFit(f"cluster {cluster.name} is "
                     f"{'not ready' if not cluster.ready else 'not schedulable'}")
    pool = NodePool.of(cluster)
    if demand.topology is not None:
        fit = fit_in_domains(pool, demand, cluster=cluster.name)
        if isinstance(fit, str):
            return NoFit(fit)
        return placement_of(cluster.name, pool, fit.takes, pin=fit.pin)
    takes = fit_gang(pool, demand)
    if isinstance(takes, str):
        return NoFit(takes)
    return placement_of(cluster.name, pool, takes)


def choose_cluster(demand: Demand, clusters: Iterable[ClusterCapacity], *,
                   policy: PlacementPolicy = PlacementPolicy.BEST_FIT,
                   names: Sequence[str] = (), selector: ClusterSelector = EVERY_CLUSTER,
                   avoid: str | None = None) -> Placement | NoFit:
    """The cluster (and nodes) ``demand`` would go to, or why it fits nowhere."""
    board = ClusterBoard(clusters)
    candidates = board.eligible(names, selector)
    if isinstance(candidates, str):
        return NoFit(candidates)
    return board.place(demand, candidates, policy=policy, avoid=avoid)
