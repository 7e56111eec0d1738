"""The plans the parts of a dispatch cycle return, for the cycle to apply.

Why values: Kueue's scheduler asks its flavor assigner and its preemptor for plans and
applies them itself, so every decision is made in one visible place and each part can
be tested alone. Here the parts (``mcad.core.cycle.preemptor``, ``mcad.core.cycle.elastic``) read
the cycle's books (``mcad.core.cycle.books``) and answer with one of these; only
``mcad.core.cycle.decide.dispatch_cycle`` writes the books, through ``CycleBooks.apply``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcad.core.placement.capacity import AppWrapperKey, NodeName
from mcad.core.placement.nodefit import Placement
from mcad.core.placement.victims import Holder
from mcad.core.workload.resources import ResourceList
from mcad.core.workload.topology import TopologyPin


@dataclass(frozen=True, slots=True)
class ShrinkOrder:
    """An admitted elastic AppWrapper goes down to ``pods`` to make room."""

    key: AppWrapperKey
    pods: int
    gives_back: ResourceList
    """The quota it returns (its per-pod requests times the pods it loses)."""
    message: str
    """The ``Resize`` order's sentence."""


@dataclass(frozen=True, slots=True)
class HoldRoom:
    """Room kept for a preemptor while its victims go: its gang placed on cluster
    ``cluster`` (the board's index) with the ``leaving`` pods counted as gone, while
    they still count for everyone else, so nothing behind it takes that room."""

    cluster: int
    leaving: tuple[Holder, ...]


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """What the cycle does to make room for ``for_key``; it then waits with ``waiting``."""

    for_key: AppWrapperKey
    waiting: str
    """The preemptor's pending message (reason ``WaitingForPreemption``)."""
    evict: tuple[AppWrapperKey, ...] = ()
    eviction_message: str = ""
    shrink: tuple[ShrinkOrder, ...] = ()
    settling: tuple[AppWrapperKey, ...] = ()
    """Elastic AppWrappers still shrinking from an earlier order: the room they free is
    held for the preemptor, so they must not grow back into it."""
    hold: tuple[HoldRoom, ...] = ()
    """Tried in order: the first whose gang fits is held."""
    placement: Placement | None = None
    """Nodes where its gang fits already (it waits for quota only): held as they are."""
    charge_quota: bool = True
    """Its quota is charged, so nothing behind it takes what it waits for."""


@dataclass(frozen=True, slots=True)
class Refused:
    """Preemption is not the answer; ``message`` says why (empty: not applicable).

    ``took_turn``: the attempt used its quota assignment's (or the cycle's capacity)
    preemption turn, so the next ones decide on fresh facts next cycle.
    """

    message: str = ""
    took_turn: bool = False


@dataclass(frozen=True, slots=True)
class Grow:
    """An admitted elastic AppWrapper grows by ``extra`` pods into what is left."""

    key: AppWrapperKey
    cluster: int
    pods: int
    """Its size once grown."""
    extra: int
    message: str
    pin: TopologyPin | None = None
    """The topology domains it is pinned to: it grows inside them."""


LeavingPods = tuple[tuple[NodeName, ResourceList], ...]
"""Pods assumed to go: (node, requests) each."""
