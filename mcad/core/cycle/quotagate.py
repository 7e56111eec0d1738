"""Quota, one part of the dispatch cycle: may this AppWrapper be charged now?

The answer comes from the cycle's quota views (``mcad.core.cycle.books``): ``FITS``;
``HELD_FOR_HEAD`` when it would fit but for what the head of the line holds (the
backfill rule, ``mcad.core.cycle.backfill``); or ``QuotaShort`` with the forest's sentence and
whether it could fit at all with nothing else charged. What to do about a shortfall
(start an elastic one smaller, preempt, wait) is the cycle's call, so the sentence is
finished only then (``QuotaShort.blocked``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from mcad.core.cycle.snapshot import Blocked, PendingReason
from mcad.core.quota.forest import QuotaAssignment, QuotaForest
from mcad.core.workload.resources import ResourceList

NEVER_FITS_QUOTA = "it asks for more than the quota allows even with nothing else running"


class QuotaAnswer(Enum):
    FITS = "fits"
    HELD_FOR_HEAD = "held for the head of the line"


@dataclass(frozen=True, slots=True)
class QuotaShort:
    """Not charged: the forest's reason (``QuotaExceeded``, or ``QuotaNodeNotFound`` for
    an assignment the forest cannot place) and sentence, and ``never`` when even an
    empty forest could not hold it."""

    reason: PendingReason
    message: str
    never: bool

    def blocked(self, refusal: str = "") -> Blocked:
        """Why it waits, with why preemption did not help (``refusal``) when tried."""
        message = self.message
        if refusal:
            message += f"; {refusal}"
        if self.never:
            message += f"; {NEVER_FITS_QUOTA}"
        return Blocked(self.reason, message, could_run=not self.never)


def check_quota(*, quota: QuotaForest, held: QuotaForest | None, unused: QuotaForest,
                assignment: QuotaAssignment, total: ResourceList
                ) -> QuotaAnswer | QuotaShort:
    """May ``total`` be charged to ``assignment``? ``quota``: as charged so far this
    cycle; ``held``: the same with the head of line's reservation (None: no head holds
    any); ``unused``: with nothing charged."""
    problem = (held or quota).fits(assignment, total)
    if problem is None:
        return QuotaAnswer.FITS
    if held is not None and quota.fits(assignment, total) is None:
        return QuotaAnswer.HELD_FOR_HEAD
    return QuotaShort(PendingReason(problem.reason), problem.message,
                      never=unused.fits(assignment, total) is not None)
