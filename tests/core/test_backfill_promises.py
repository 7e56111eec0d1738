"""Reservation backfill keeps its promise to the head of the line.

Table: on 3 nodes x 8 GPUs, ``a`` runs on node 1 until 10:10 and ``b`` on node 2 until
10:30; ``head`` wants 3 x 8 GPUs, so it is promised all three nodes at 10:30. ``small``
(one node, 10 minutes) is backfilled onto node 3 now, on the promise to end by 10:30.
Held to it: still running at 10:30 while the head waits and cannot start without its
room, it is evicted for the head (``Preempted``, with the sentence), and the head holds
the room it frees; before then, when the head can start elsewhere, or once the head
started, was requeued since or is gone, it is left alone. A backfill
that leaves the reserved room whole starts on no promise. And ``starvationSeconds``
bounds the head's wait even while it holds a reservation: once that reservation came due
without it starting (work that started before it overran), MCAD's hold applies too.

Property: with run times misstated (each backfill runs up to ten times its estimate),
the head of the line still starts no later than its first reservation; the plan of the
future is the real cycle played forward, with evictions carried out at once.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcad.core.cycle.decide import dispatch_cycle, run_cycle
from mcad.core.cycle.snapshot import (
    PREEMPTED,
    Admitted,
    AppWrapperEntry,
    BackfillPromise,
    CycleResult,
    PendingReason,
    Snapshot,
)
from mcad.core.placement.capacity import AppWrapperKey
from tests.builders.clusters import ClusterBuilder, make_cluster
from tests.builders.snapshots import EntryBuilder, at, make_entry, make_snapshot

HEAD = AppWrapperKey("default/head")
SMALL = AppWrapperKey("default/small")
PROMISED = at(1800)
"""10:30: the head's reservation, and what ``small`` promised to end by."""


def three_nodes(*, a: bool = True, b: bool = True, small: bool = False) -> ClusterBuilder:
    cluster = make_cluster("c1").nodes(3, gpu=8, cpu=16)
    if a:
        cluster = cluster.used(0, gpu=8).held("default/a", 0, gpu=8)
    if b:
        cluster = cluster.used(1, gpu=8).held("default/b", 1, gpu=8)
    if small:
        cluster = cluster.used(2, gpu=8).held("default/small", 2, gpu=8)
    return cluster


def running_a_and_b() -> list[EntryBuilder]:
    return [make_entry("a").job(gpu=8).admitted("c1").dispatched(at(-600)).runtime(1200),
            make_entry("b").job(gpu=8).admitted("c1").dispatched(at(-600)).runtime(2400)]


def head() -> EntryBuilder:
    return make_entry("head").job(pods=3, gpu=8).created(at(-200)).priority(5)


def small_on_its_promise() -> EntryBuilder:
    """``small``, backfilled at 10:00 on the promise to end by 10:30 (declares 10 min)."""
    return (make_entry("small").job(gpu=8).created(at(-100)).admitted("c1")
            .dispatched(at(0)).runtime(600).promised("default/head", PROMISED))


def later(now: datetime, *entries: EntryBuilder, a: bool = False, b: bool = False,
          starvation_seconds: float = 3600) -> CycleResult:
    """A cycle at ``now`` with ``small`` still running on node 3 (``a``, ``b``: still
    running too)."""
    running = [e for e, still in zip(running_a_and_b(), (a, b), strict=True) if still]
    return dispatch_cycle(make_snapshot(now=now).clusters(three_nodes(a=a, b=b, small=True))
                          .policy(backfill="reservation",
                                  starvation_seconds=starvation_seconds)
                          .add(*running, small_on_its_promise(), *entries).obj())


def pending(result: CycleResult, key: AppWrapperKey) -> tuple[str, str]:
    found = next(p for p in result.pending if p.key == key)
    return str(found.reason), found.message


def test_a_backfill_into_reserved_room_starts_on_the_promise_to_end_by_the_reservation(
        ) -> None:
    snapshot = make_snapshot(now=at(0)).clusters(three_nodes()).policy(
        backfill="reservation").add(
        *running_a_and_b(), head(),
        make_entry("small").job(gpu=8).created(at(-100)).runtime(600)).obj()
    result = dispatch_cycle(snapshot)
    assert [(d.key, d.promise) for d in result.dispatches] == [
        (SMALL, BackfillPromise(HEAD, PROMISED))]


@pytest.mark.parametrize("runtime", [600, 7200, None],
                         ids=["ends in time", "runs past it", "no known end"])
def test_a_backfill_that_leaves_the_reserved_room_whole_has_no_promise(
        runtime: float | None) -> None:
    """The head needs 4 GPUs of node 2 at 10:30 (3 x 4 GPUs, node 1 busy until then):
    ``x`` (4 GPUs) leaves that whole however long it runs, so it starts on no promise
    and counts as staying; ``y`` (4 GPUs, 10 minutes) then takes reserved room, on the
    promise to end by 10:30."""
    cluster = make_cluster("c1").nodes(2, gpu=8).used(0, gpu=8).held("default/a", 0, gpu=8)
    x = make_entry("x").job(gpu=4).created(at(-100))
    snapshot = make_snapshot(now=at(0)).clusters(cluster).policy(
        backfill="reservation").add(
        make_entry("a").job(gpu=8).admitted("c1").dispatched(at(-600)).runtime(2400),
        make_entry("head").job(pods=3, gpu=4).created(at(-200)).priority(5),
        x if runtime is None else x.runtime(runtime),
        make_entry("y").job(gpu=4).created(at(-50)).runtime(600)).obj()
    result = dispatch_cycle(snapshot)
    assert [(d.key, d.promise) for d in result.dispatches] == [
        (AppWrapperKey("default/x"), None),
        (AppWrapperKey("default/y"), BackfillPromise(HEAD, PROMISED))]


def test_a_backfill_is_held_to_its_promise_not_a_second_before() -> None:
    """Running a second before 10:30 it is left alone; ended by 10:30 it leaves the head
    to start; still running at 10:30 it goes."""
    before = later(PROMISED - timedelta(seconds=1), head(), b=True)
    assert before.evictions == ()
    assert pending(before, HEAD)[0] == PendingReason.INSUFFICIENT_CAPACITY
    ended = dispatch_cycle(make_snapshot(now=PROMISED).clusters(
        three_nodes(a=False, b=False)).policy(backfill="reservation").add(head()).obj())
    assert (ended.evictions, [d.key for d in ended.dispatches]) == ((), [HEAD])
    assert [e.key for e in later(PROMISED, head()).evictions] == [SMALL]


@pytest.mark.parametrize(("now", "b_still_runs"), [
    (PROMISED, False),                          # due; b ended in time
    (PROMISED + timedelta(seconds=30), False),  # found later (a cycle came late)
    (PROMISED + timedelta(seconds=600), True),  # b overran too: the promise still holds
], ids=["at the promise", "after it", "with other work overrunning"])
def test_a_backfill_still_running_at_its_promise_is_evicted_for_the_head(
        now: datetime, b_still_runs: bool) -> None:
    result = later(now, head(), b=b_still_runs)
    assert [(e.key, e.reason, e.for_key) for e in result.evictions] == [
        (SMALL, PREEMPTED, HEAD)]
    assert result.evictions[0].message == (
        "started by reservation backfill on the promise to end by 2024-05-01T10:30:00+00:00, "
        f"before the reservation of default/head; still running at {now.isoformat()}")
    # The head holds the room small frees while it goes, as a preemptor does.
    reason, message = pending(result, HEAD)
    assert reason == PendingReason.WAITING_FOR_PREEMPTION
    assert message == "waiting for 1 evicted AppWrapper to go: default/small"


def test_a_backfill_already_being_taken_back_is_not_evicted_again() -> None:
    def at_the_promise(small: EntryBuilder) -> CycleResult:
        return dispatch_cycle(make_snapshot(now=PROMISED).clusters(
            three_nodes(a=False, b=False, small=True)).policy(backfill="reservation").add(
            small, head()).obj())

    assert [e.key for e in at_the_promise(small_on_its_promise()).evictions] == [SMALL]
    going = at_the_promise(small_on_its_promise().draining("default/head"))
    assert going.evictions == ()
    assert pending(going, HEAD)[0] == PendingReason.WAITING_FOR_PREEMPTION


def test_a_head_that_can_start_without_the_backfills_room_leaves_it_running() -> None:
    """At 10:30 a fourth node is free: the head starts on nodes 1, 2 and 4, and
    ``small`` keeps running (evicting it would only waste its work)."""
    fourth = three_nodes(a=False, b=False, small=True).nodes(1, gpu=8, cpu=16)
    result = dispatch_cycle(make_snapshot(now=PROMISED).clusters(fourth).policy(
        backfill="reservation").add(small_on_its_promise(), head()).obj())
    assert (result.evictions, [d.key for d in result.dispatches]) == ((), [HEAD])
    assert [e.key for e in later(PROMISED, head()).evictions] == [SMALL]  # 3 nodes: goes


@pytest.mark.parametrize("the_head", [
    head().admitted("c1").dispatched(at(1700)),         # it started on other room
    None,                                               # deleted
    head().queued_since(at(1750)),                      # started, then requeued since
], ids=["started", "gone", "requeued since"])
def test_no_eviction_once_the_head_no_longer_waits_in_the_same_wait(
        the_head: EntryBuilder | None) -> None:
    due = PROMISED + timedelta(seconds=5)
    assert [e.key for e in later(due, head()).evictions] == [SMALL]  # still waiting: goes
    result = later(due, *(() if the_head is None else (the_head,)))
    assert result.evictions == ()


@pytest.mark.parametrize(("now", "b_runs", "starving", "want"), [
    (at(0), True, False, "Dispatched"),               # waited 200 s, threshold 300
    (at(0), True, True, "Dispatched"),                # starving, reservation ahead
    (at(2400), True, True, "WaitingForHeadOfLine"),   # starving, b overran: held
    (at(2400), True, False, "Dispatched"),            # b overran, not starving yet
], ids=["neither", "reservation ahead", "reservation come due", "not starving yet"])
def test_starvation_bounds_the_heads_wait_even_with_a_reservation(
        now: datetime, b_runs: bool, starving: bool, want: str) -> None:
    """``b`` started before the head (on no promise) and may overrun its expected end
    (10:30): the head's reservation then comes due without it starting. Once the head
    has waited ``starvationSeconds`` too, MCAD's hold applies besides the reservation:
    its cluster is closed to those behind it, even to a CPU job that leaves the reserved
    room whole. While the reservation is ahead nothing is held (backfill goes on)."""
    threshold = 100 if starving else 3600
    running = running_a_and_b() if now < at(600) else running_a_and_b()[1:]
    snapshot = make_snapshot(now=now).clusters(three_nodes(a=now < at(600), b=b_runs)).policy(
        backfill="reservation", starvation_seconds=threshold).add(
        *running, head(), make_entry("cpu").job(gpu=0, cpu=1).created(at(-100))).obj()
    books, result = run_cycle(snapshot)
    assert books.line.promise is not None  # the head holds a reservation all along
    if want == "Dispatched":
        assert [d.key for d in result.dispatches] == [AppWrapperKey("default/cpu")]
        assert books.line.closed_cluster is None
    else:
        assert result.dispatches == ()
        assert books.line.promise.reservation.start == now  # come due: b overran
        assert pending(result, AppWrapperKey("default/cpu")) == (
            PendingReason.WAITING_FOR_HEAD_OF_LINE,
            "it would fit, but the room is held for default/head, first in line and "
            "waiting since 2024-05-01T09:56:40+00:00")


# -- the property ------------------------------------------------------------------------------

def played(snapshot: Snapshot, *, real: dict[AppWrapperKey, float],
           declared_ends: dict[AppWrapperKey, datetime], steps: int = 60
           ) -> tuple[datetime | None, datetime | None]:
    """Play ``snapshot`` forward through the real cycle: work ends after its ``real``
    run time (not what it declared), an eviction takes effect at once, a cycle runs at
    every end and at every promise's moment. Returns when the head was first promised
    its start, and when it started."""
    ends = {k: v for k, v in declared_ends.items()}
    promised: datetime | None = None
    for _ in range(steps):
        books, result = run_cycle(snapshot)
        if promised is None and books.line.promise is not None and \
                books.line.promise.reservation.head == str(HEAD):
            promised = books.line.promise.reservation.start
        now = snapshot.now
        if any(d.key == HEAD for d in result.dispatches):
            return promised, now
        by_key = {e.key: e for e in snapshot.appwrappers}
        cluster = snapshot.clusters[0]
        for eviction in result.evictions:  # gone at once: back to the queue, never seen
            by_key.pop(eviction.key)
            ends.pop(eviction.key, None)
            cluster = _release(cluster, eviction.key)
        for dispatch in result.dispatches:
            entry = by_key[dispatch.key]
            by_key[dispatch.key] = dataclasses.replace(
                entry, phase=Admitted(dispatch.cluster), dispatched=now,
                backfill_promise=dispatch.promise)
            ends[dispatch.key] = now + timedelta(seconds=real[dispatch.key])
            held = tuple(dispatch.placement.node_requests().items())
            cluster = dataclasses.replace(
                cluster, held_by={**cluster.held_by, dispatch.key: held},
                nodes=tuple(dataclasses.replace(n, requested=n.requested + dict(held)[n.name])
                            if n.name in dict(held) else n for n in cluster.nodes))
        moments = [m for m in (*ends.values(), *(e.backfill_promise.end
                                                for e in by_key.values()
                                                if e.backfill_promise is not None))
                   if m > now]
        if result.evictions:
            step = now  # the room they freed is decided on at once
        elif moments:
            step = min(moments)
        else:
            return promised, None
        for key in [k for k, end in ends.items() if end <= step]:
            by_key.pop(key, None)
            del ends[key]
            cluster = _release(cluster, key)
        snapshot = dataclasses.replace(snapshot, now=step, appwrappers=tuple(by_key.values()),
                                       clusters=(cluster,))
    return promised, None


def _release(cluster: object, key: AppWrapperKey) -> object:
    from mcad.core.placement.capacity import ClusterCapacity  # noqa: PLC0415
    assert isinstance(cluster, ClusterCapacity)
    freed = dict(cluster.held_by.get(key, ()))
    return dataclasses.replace(
        cluster, held_by={k: v for k, v in cluster.held_by.items() if k != key},
        nodes=tuple(dataclasses.replace(n, requested=(n.requested - freed[n.name]).clamp_zero())
                    if n.name in freed else n for n in cluster.nodes))


@st.composite
def misstated(draw: st.DrawFn) -> tuple[Snapshot, dict[AppWrapperKey, float],
                                        dict[AppWrapperKey, datetime]]:
    """4 x 8 GPUs, some running with exact ends; the head wants all of it; behind it
    1-2 pod jobs that declare 1-30 minutes and really run 1-10 times that."""
    cluster = make_cluster("c1").nodes(4, gpu=8)
    entries: list[EntryBuilder | AppWrapperEntry] = []
    real: dict[AppWrapperKey, float] = {}
    ends: dict[AppWrapperKey, datetime] = {}
    for i, node in enumerate(draw(st.lists(st.integers(0, 3), min_size=1, max_size=3,
                                           unique=True))):
        left = draw(st.integers(60, 3600))
        cluster = cluster.used(node, gpu=8).held(f"default/r{i}", node, gpu=8)
        entries.append(make_entry(f"r{i}").job(gpu=8).admitted("c1").dispatched(at(0))
                       .runtime(left))
        ends[AppWrapperKey(f"default/r{i}")] = at(left)
    entries.append(make_entry("head").job(pods=4, gpu=8).created(at(-60)).priority(9))
    for j in range(draw(st.integers(1, 6))):
        declared = draw(st.integers(60, 1800))
        entries.append(make_entry(f"q{j}").job(pods=draw(st.integers(1, 2)), gpu=8)
                       .created(at(-50 + j)).runtime(declared))
        real[AppWrapperKey(f"default/q{j}")] = declared * draw(st.integers(1, 10))
    snapshot = make_snapshot(now=at(0)).clusters(cluster).policy(
        backfill="reservation", starvation_seconds=10**6, fair_sharing=False).add(
        *entries).obj()
    return snapshot, real, ends


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(misstated())
def test_with_misstated_run_times_the_head_starts_by_its_first_reservation(
        case: tuple[Snapshot, dict[AppWrapperKey, float], dict[AppWrapperKey, datetime]]
        ) -> None:
    snapshot, real, ends = case
    promised, started = played(snapshot, real=real, declared_ends=ends)
    assert promised is not None
    assert started is not None, "the head never started"
    assert started <= promised
