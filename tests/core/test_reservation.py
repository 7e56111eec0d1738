"""Reservation-based (EASY) backfill in the cycle.

Table: on 3 nodes x 8 GPUs, ``a`` runs on n0 until 10:10 and ``b`` on n1 until 10:30;
the head wants 3 x 8 GPUs, so it is promised n0, n1 and n2 at 10:30. Behind it, a job
of one node that ends by 10:30 starts now on n2, one that would still run then, or
whose run time is unknown, waits (``WaitingForHeadOfLine``, with the sentence that says
whose room it would take); under MCAD's rule, before the head starves, all of them go.
Two backfills that each leave the head's room whole cannot together take it.

Property: with exact run times, the head of the line starts no later than the first
reservation it was given, whatever the queue behind it; the plan of the future is the
real cycle played forward (``mcad.core.views.estimates.forecast``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcad.core.cycle.decide import dispatch_cycle, run_cycle
from mcad.core.cycle.snapshot import AppWrapperEntry, PendingReason, Snapshot
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.views.estimates import forecast
from tests.builders.clusters import make_cluster
from tests.builders.snapshots import EntryBuilder, at, make_entry, make_snapshot

NOW = at(0)


def bed(*behind: EntryBuilder, backfill: str = "reservation") -> Snapshot:
    cluster = (make_cluster("c1").nodes(3, gpu=8).used(0, gpu=8).used(1, gpu=8)
               .held("default/a", 0, gpu=8).held("default/b", 1, gpu=8))
    return make_snapshot(now=NOW).clusters(cluster).policy(backfill=backfill).add(
        make_entry("a").job(gpu=8).admitted("c1").dispatched(at(-600)).runtime(1200),
        make_entry("b").job(gpu=8).admitted("c1").dispatched(at(-600)).runtime(2400),
        make_entry("head").job(pods=3, gpu=8).created(at(-200)).priority(5),
        *behind).obj()


def outcome(snapshot: Snapshot, name: str) -> tuple[str, str]:
    result = dispatch_cycle(snapshot)
    key = AppWrapperKey(f"default/{name}")
    if any(d.key == key for d in result.dispatches):
        return "Dispatched", ""
    pending = next(p for p in result.pending if p.key == key)
    return str(pending.reason), pending.message


def test_the_head_is_promised_the_nodes_it_will_take_when_running_work_ends() -> None:
    books, _ = run_cycle(bed())
    held = books.line.promise
    assert held is not None
    assert (held.cluster, held.reservation.start) == ("c1", at(1800))
    assert sorted(held.reservation.needs) == ["c1/c1-node-1", "c1/c1-node-2", "c1/c1-node-3"]


@pytest.mark.parametrize(("runtime", "backfill", "want"), [
    (600, "reservation", "Dispatched"),             # ends at 10:10, before 10:30
    (3600, "reservation", "WaitingForHeadOfLine"),  # would hold n2 past 10:30
    (None, "reservation", "WaitingForHeadOfLine"),  # no known end: must not touch it
    (3600, "mcad", "Dispatched"),                   # MCAD's rule: the head is not starving
])
def test_a_job_behind_the_head_starts_only_if_it_cannot_delay_it(
        runtime: float | None, backfill: str, want: str) -> None:
    small = make_entry("small").job(gpu=8).created(at(-100))
    if runtime is not None:
        small = small.runtime(runtime)
    got, message = outcome(bed(small, backfill=backfill), "small")
    assert got == want
    if want == PendingReason.WAITING_FOR_HEAD_OF_LINE:
        assert message.startswith("it fits now, but it would take room on c1/c1-node-3 "
                                  "reserved for default/head from 2024-05-01T10:30:00")


def test_two_backfills_cannot_together_take_what_each_would_leave() -> None:
    """The head needs 4 GPUs of n2 at 10:30; two 4-GPU jobs that run past it each
    leave 4, but not together."""
    cluster = (make_cluster("c1").nodes(2, gpu=8).used(0, gpu=8)
               .held("default/a", 0, gpu=8))
    snapshot = make_snapshot(now=NOW).clusters(cluster).policy(
        backfill="reservation", starvation_seconds=3600).add(
        make_entry("a").job(gpu=8).admitted("c1").dispatched(at(-600)).runtime(2400),
        make_entry("head").job(pods=3, gpu=4).created(at(-300)).priority(5),
        make_entry("x").job(gpu=4).created(at(-200)).runtime(7200),
        make_entry("y").job(gpu=4).created(at(-100)).runtime(7200)).obj()
    result = dispatch_cycle(snapshot)
    assert [d.key for d in result.dispatches] == [AppWrapperKey("default/x")]
    waiting = {p.key: p.reason for p in result.pending}
    assert waiting[AppWrapperKey("default/y")] == PendingReason.WAITING_FOR_HEAD_OF_LINE


# -- the property ------------------------------------------------------------------------------

@st.composite
def queues(draw: st.DrawFn) -> Snapshot:
    """One cluster of 4 x 8 GPUs, some of it running (exact ends), a queue of 1-4 pod
    jobs of 2-8 GPUs with exact run times, the largest first in line."""
    running = draw(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8),
                                      st.integers(60, 7200)), max_size=4,
                            unique_by=lambda r: r[0]))
    cluster = make_cluster("c1").nodes(4, gpu=8)
    entries: list[EntryBuilder | AppWrapperEntry] = []
    for i, (node, gpus, left) in enumerate(running):
        cluster = cluster.used(node, gpu=gpus).held(f"default/r{i}", node, gpu=gpus)
        entries.append(make_entry(f"r{i}").job(gpu=gpus).admitted("c1")
                       .dispatched(at(-60)).runtime(60 + left))
    entries.append(make_entry("head").job(pods=4, gpu=8).created(at(-3600)).priority(9)
                   .runtime(draw(st.integers(60, 3600))))
    for j in range(draw(st.integers(0, 8))):
        entries.append(make_entry(f"q{j}").job(pods=draw(st.integers(1, 4)),
                                               gpu=draw(st.sampled_from([2, 4, 8])))
                       .created(at(-3000 + j)).runtime(draw(st.integers(60, 7200))))
    return make_snapshot(now=NOW).clusters(cluster).policy(
        backfill="reservation", fair_sharing=False).add(*entries).obj()


def exact(entry: AppWrapperEntry) -> timedelta:
    assert entry.expected_runtime is not None
    return timedelta(seconds=entry.expected_runtime)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queues())
def test_with_exact_run_times_the_head_starts_by_its_first_reservation(
        snapshot: Snapshot) -> None:
    head = AppWrapperKey("default/head")
    ends = {e.key: e.dispatched + exact(e) for e in snapshot.appwrappers
            if e.dispatched is not None}
    promised: datetime | None = None
    started: datetime | None = None
    for step in forecast(snapshot, expected_end=ends, runtime_of=exact,
                         horizon=timedelta(days=2), max_steps=200):
        if promised is None:
            books, _ = run_cycle(step.snapshot)
            if books.line.head is not None and books.line.head.key == head and \
                    books.line.promise is not None:
                promised = books.line.promise.reservation.start
        if any(d.key == head for d in step.result.dispatches):
            started = step.now
            break
    assert started is not None, "the head never started"
    if promised is not None:
        assert started <= promised
