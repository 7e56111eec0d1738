"""The quota part of the cycle alone: fits, held for the head of the line, or short
(with whether it could ever fit), and the sentence it finishes once preemption spoke."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from mcad.core.cycle.quotagate import QuotaAnswer, QuotaShort, check_quota
from mcad.core.cycle.snapshot import PendingReason
from mcad.core.quota.forest import QuotaAssignment, QuotaForest
from mcad.core.workload.resources import ResourceList
from tests.builders.quota import make_tree


def forest() -> QuotaForest:
    return (make_tree("t").node("root", gpu=16)
            .child("gold", parent="root", gpu=8).child("silver", parent="root", gpu=8,
                                                          hard=True).build())


def gold(f: QuotaForest, node: str = "gold") -> QuotaAssignment:
    got = f.resolve({"t": node})
    assert isinstance(got, QuotaAssignment)
    return got


@dataclass
class Case:
    id: str
    used: int            # GPUs already charged to gold
    held: int | None     # GPUs the head of line holds on gold (None: no head)
    asks: int
    node: str = "gold"
    want: QuotaAnswer | tuple[str, bool] = QuotaAnswer.FITS  # or (message part, never)


CASES = [
    Case("fits", used=0, held=None, asks=8),
    Case("borrows from the root within its limit", used=8, held=None, asks=8),
    Case("short at the root", used=12, held=None, asks=8,
         want=("quota tree t node root: needs 8 nvidia.com/gpu, 4 free", False)),
    Case("fits but for the head's held quota", used=8, held=8, asks=4,
         want=QuotaAnswer.HELD_FOR_HEAD),
    Case("never fits: more than the root", used=0, held=None, asks=24,
         want=("needs 24 nvidia.com/gpu, 16 free", True)),
    Case("a hard node is a ceiling", used=0, held=None, asks=12, node="silver",
         want=("quota tree t node silver: needs 12 nvidia.com/gpu, 8 free", True)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_check_quota(case: Case) -> None:
    unused = forest()
    quota = unused.copy()
    quota.charge(gold(quota), ResourceList.of(gpu=case.used))
    held = None
    if case.held is not None:
        held = quota.copy()
        held.charge(gold(held), ResourceList.of(gpu=case.held))
    got = check_quota(quota=quota, held=held, unused=unused, assignment=gold(quota, case.node),
                      total=ResourceList.of(gpu=case.asks))
    if isinstance(case.want, QuotaAnswer):
        assert got is case.want
    else:
        assert isinstance(got, QuotaShort)
        part, never = case.want
        assert part in got.message
        assert got.never is never
        assert got.reason == PendingReason.QUOTA_EXCEEDED


def test_the_sentence_is_finished_with_why_preemption_did_not_help() -> None:
    short = QuotaShort(PendingReason.QUOTA_EXCEEDED, "quota tree t node root: needs 8", True)
    blocked = short.blocked("no borrower of its quota can be evicted to make room")
    assert blocked.message == ("quota tree t node root: needs 8; no borrower of its quota "
                               "can be evicted to make room; it asks for more than the quota "
                               "allows even with nothing else running")
    assert blocked.could_run is False
    assert short.blocked().message.count(";") == 1
