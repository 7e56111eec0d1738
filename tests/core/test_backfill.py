"""Queue order (priority, then age, then uid) and the starvation threshold that ends
backfill for the head of line. The backfill rule itself is exercised through the
cycle in test_cycle.py. Reservation-based (EASY) backfill: a candidate that fits now
starts now only when it ends before the head's reservation or leaves its room whole."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcad.core.cycle.backfill import BackfillPolicy, HeadReservation, may_backfill
from mcad.core.quota.fairness import age_key, in_order, order_key, queue_key
from mcad.core.workload.resources import ResourceList
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

    @property
    def queue_key(self) -> str | None:
        return queue_key(self.priority, self.priority_slope, self.since, self.uid)


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


RESERVED = HeadReservation(
    head="default/head", start=at(1800),
    needs={"n1": ResourceList.of(gpu=8), "n2": ResourceList.of(gpu=4)},
    free_at_start={"n1": ResourceList.of(gpu=8), "n2": ResourceList.of(gpu=8),
                   "n3": ResourceList.of(gpu=8)})


@pytest.mark.parametrize(("takes", "expected_end", "want_allowed", "want_message",
                          "want_promised"), [
    ({"n1": {"gpu": 8}}, at(1200), True,
     "it is expected to end by 2024-05-01T10:20:00+00:00, before the reservation for "
     "default/head at 2024-05-01T10:30:00+00:00", True),
    ({"n1": {"gpu": 8}}, at(1800), True, "it is expected to end by", True),  # just in time
    ({"n1": {"gpu": 1}}, at(1801), False,
     "it would take room on n1 reserved for default/head from 2024-05-01T10:30:00+00:00, "
     "and it is expected to end at 2024-05-01T10:30:01+00:00", False),
    ({"n3": {"gpu": 8}}, at(9999), True,
     "it leaves the room reserved for default/head from 2024-05-01T10:30:00+00:00 untouched",
     False),
    ({"n2": {"gpu": 4}}, None, True, "untouched", False),            # the half it leaves
    ({"n2": {"gpu": 4}}, at(1200), True, "untouched", False),  # whole: no promise needed
    ({"n2": {"gpu": 5}}, None, False, "and no expected end", False),  # one GPU too many
    ({"n2": {"gpu": 4}, "n1": {"gpu": 1}}, None, False, "room on n1", False),
])
def test_easy_backfill_keeps_the_heads_reservation(
        takes: dict[str, dict[str, int]], expected_end: datetime | None,
        want_allowed: bool, want_message: str, want_promised: bool) -> None:
    """A candidate that leaves the reserved room whole starts on no promise, however
    long it runs; one that takes reserved room starts only on the promise to end by
    the reservation (and is held to it: ``test_backfill_promises``)."""
    got = may_backfill(RESERVED, takes={k: ResourceList.of(**v) for k, v in takes.items()},
                       expected_end=expected_end)
    assert got.allowed is want_allowed
    assert got.message.startswith(want_message) or want_message in got.message
    assert got.promised is want_promised


@given(st.lists(st.tuples(
    st.one_of(st.datetimes(timezones=st.just(UTC)), st.just(None)),
    st.text(min_size=0, max_size=6)), max_size=40))
def test_age_key_sorts_as_time_then_uid(items: list[tuple[datetime | None, str]]) -> None:
    """One string per entry, sorted, gives the order of (since, uid): any datetime the
    API can carry (years 1 to 9999, to the microsecond), a time too far to stamp first."""
    def since(moment: datetime | None) -> float:
        return float("-inf") if moment is None else moment.timestamp()

    by_key = sorted(items, key=lambda i: age_key(since(i[0]), i[1]))
    by_pair = sorted(items, key=lambda i: (since(i[0]), i[1]))
    assert [(since(m), u) for m, u in by_key] == [(since(m), u) for m, u in by_pair]


@given(st.lists(st.tuples(
    st.one_of(st.integers(-3, 3), st.integers(-2**53, 2**53),
              st.sampled_from([-10**20, -10**18, 10**18 - 1, 10**18, 10**20])),
    st.sampled_from([0.0, 0.0, 0.0, 0.25]),
    st.integers(0, 3600), st.text(max_size=3)), max_size=30))
def test_one_sort_of_queue_keys_gives_the_queue_order(
        items: list[tuple[int, float, int, str]]) -> None:
    """``in_order``'s one sort of ``queue_key`` strings orders as ``order_key`` does, and
    a queue where some entry has no key (a slope, a priority too large to stamp) is
    sorted the long way, to the same order."""
    now = at(7200)
    queue = [Item(f"i{n}", priority, at(t), uid, priority_slope=slope)
             for n, (priority, slope, t, uid) in enumerate(items)]
    want = [i.name for i in sorted(queue, key=lambda i: order_key(i, now))]
    assert [i.name for i in in_order(queue, now)] == want
