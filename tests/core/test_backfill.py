"""Queue order (priority, then age, then uid) and the starvation threshold that ends
backfill for the head of line. The backfill rule itself is exercised through the
cycle in test_cycle.py."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pytest

from mcad.core.backfill import BackfillPolicy
from mcad.core.fairness import in_order, order_key
from tests.builders.snapshots import at


@dataclass(frozen=True)
class Item:
    name: str
    priority: int
    created: datetime
    uid: str
    priority_slope: float = 0.0
    queued_since: datetime | None = None

    @property
    def since(self) -> float:
        return (self.queued_since or self.created).timestamp()


@dataclass
class OrderCase:
    id: str
    items: list[Item]
    want: list[str]


ORDER = [
    OrderCase("higher priority first",
              [Item("low", 1, at(0), "a"), Item("high", 9, at(10), "b")], ["high", "low"]),
    OrderCase("same priority: older first",
              [Item("young", 5, at(10), "a"), Item("old", 5, at(0), "b")], ["old", "young"]),
    OrderCase("same priority and age: uid breaks the tie",
              [Item("z", 5, at(0), "uid-2"), Item("y", 5, at(0), "uid-1")], ["y", "z"]),
    OrderCase("negative priorities sort below zero",
              [Item("neg", -1, at(0), "a"), Item("zero", 0, at(5), "b")], ["zero", "neg"]),
    OrderCase("all three keys at once",
              [Item("p1-old", 1, at(0), "c"), Item("p2-new", 2, at(9), "d"),
               Item("p2-old-b", 2, at(1), "b"), Item("p2-old-a", 2, at(1), "a")],
              ["p2-old-a", "p2-old-b", "p2-new", "p1-old"]),
]


@pytest.mark.parametrize("case", ORDER, ids=lambda c: c.id)
def test_queue_order(case: OrderCase) -> None:
    assert [i.name for i in in_order(case.items, at(0))] == case.want
    assert [i.name for i in sorted(case.items, key=lambda i: order_key(i, at(0)))] == case.want


@pytest.mark.parametrize(("waited", "threshold", "want_starving"), [
    (0, 300, False), (299.9, 300, False), (300, 300, True), (3600, 300, True),
    (0, 0, True),
], ids=["just queued", "just under", "exactly the threshold", "long past", "zero threshold"])
def test_starvation_threshold(waited: float, threshold: float, want_starving: bool) -> None:
    policy = BackfillPolicy(starvation_seconds=threshold)
    assert policy.is_starving(now=at(1000 + waited), waiting_since=at(1000)) is want_starving
