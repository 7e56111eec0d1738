"""Whom to evict so that a more entitled AppWrapper can run, and only as many as needed.

The policy (``PreemptionPolicy``), stated once:

- ``reclaim``: an AppWrapper that fits within its own quota node's quota, but is blocked
  above it because others borrowed, takes back what was borrowed: borrowers under the
  blocking node are evicted, of any priority, lowest priority first.
- ``priority``: an AppWrapper blocked by quota evicts lower-priority AppWrappers charged
  under the node that blocks it, borrowing or not (MCAD's quota manager does so within a
  node); and one that fits on no cluster evicts lower-priority AppWrappers on one cluster
  when, with their pods gone, its whole gang fits there node by node.

Victims are whole AppWrappers, never more than needed: the one that frees the least
(fewest GPUs, then lowest priority, then most recently dispatched) when one is enough,
else as few as greedily needed in that order with every one that is not needed dropped.
Among clusters, the one where the victims free the fewest GPUs (then fewest victims).
Nobody is evicted twice: AppWrappers already draining are never candidates, and a
preemptor whose victims are draining waits for them instead of evicting more. Evicting
does not cascade: a victim waits out its requeue pause before it may preempt in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from mcad.core.placement.capacity import AppWrapperKey, NodeName, NodePool
from mcad.core.placement.nodefit import fit_pods
from mcad.core.workload.demand import Demand
from mcad.core.workload.resources import GPU, ResourceList


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    """When running AppWrappers are evicted for others (see the module's rule)."""

    priority: bool = False
    reclaim: bool = True

    @property
    def any(self) -> bool:
        return self.priority or self.reclaim


@dataclass(frozen=True, slots=True)
class Holder:
    """A dispatched AppWrapper as an eviction candidate on one cluster."""

    key: AppWrapperKey
    priority: int
    cluster: str
    total: ResourceList
    dispatched: datetime | None
    pods_on: tuple[tuple[NodeName, ResourceList], ...]


def freeing_order(holder: Holder) -> tuple[int, int, float, str]:
    """Frees the least first: fewest GPUs, lowest priority, most recently dispatched."""
    when = -holder.dispatched.timestamp() if holder.dispatched else 0.0
    return (holder.total[GPU], holder.priority, when, holder.key)


def minimal(candidates: Sequence[Holder], enough: Callable[[Sequence[Holder]], bool]
            ) -> list[Holder] | None:
    """The smallest set of ``candidates`` that is ``enough``, by ``freeing_order``."""
    ordered = sorted(candidates, key=freeing_order)
    for holder in ordered:
        if enough([holder]):
            return [holder]
    chosen: list[Holder] = []
    for holder in ordered:
        chosen.append(holder)
        if enough(chosen):
            break
    else:
        return None
    for holder in reversed(chosen[:-1]):
        trial = [h for h in chosen if h is not holder]
        if enough(trial):
            chosen = trial
    return chosen


def gang_fits_without(pool: NodePool, demand: Demand, victims: Sequence[Holder]) -> bool:
    """Would ``demand``'s whole gang fit on ``pool`` once ``victims``' pods are gone?
    (Topology aside: a gang that asks for one is fitted a domain at a time, by
    ``mcad.core.placement.domainfit.domain_victims``, which asks this of each.)"""
    trial = pool.copy()
    for victim in victims:
        for node, requests in victim.pods_on:
            trial.release(node, requests)
    return not isinstance(fit_pods(trial, demand, explain=False), str)


def capacity_victims(demand: Demand, pool: NodePool,
                     holders: Sequence[Holder]) -> list[Holder] | None:
    """The fewest lower-priority AppWrappers on one cluster whose eviction makes room;
    None when eviction is not the answer: the gang fits already, or would not fit even
    with every holder gone."""
    if (not holders or gang_fits_without(pool, demand, ())
            or not gang_fits_without(pool, demand, holders)):
        return None
    return minimal(holders, lambda victims: gang_fits_without(pool, demand, victims))


def gpus(victims: Sequence[Holder]) -> int:
    return sum(v.total[GPU] for v in victims)
