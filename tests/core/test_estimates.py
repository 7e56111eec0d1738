"""Estimated starts from a plan made by the real cycle: a gang waits for the end that
frees its room, an AppWrapper behind a held head of line starts no earlier than the
head, an over-quota one waits for the quota holder; what is not placed says why. On
generated snapshots: no estimate precedes now, each one is a moment the cycle really
dispatches it in the plan (which never over-commits a node or a hard quota), and with
one job shape the estimates keep the cycle's own order."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcad.core.cycle.decide import dispatch_cycle
from mcad.core.cycle.snapshot import Admitted, AppWrapperEntry, BackfillPromise, Snapshot
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.quota.forest import QuotaAssignment
from mcad.core.views.estimates import Estimate, estimate_starts, forecast
from tests.builders.clusters import make_cluster
from tests.builders.quota import make_tree
from tests.builders.snapshots import EntryBuilder, SnapshotBuilder, at, make_entry, make_snapshot

HOUR = timedelta(hours=1)
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def key(name: str) -> AppWrapperKey:
    return AppWrapperKey(f"default/{name}")


def an_hour(_: AppWrapperEntry) -> timedelta:
    return HOUR


def estimates(snapshot: Snapshot, ends: dict[str, datetime], *,
              horizon: timedelta = 24 * HOUR, max_steps: int = 50
              ) -> dict[AppWrapperKey, Estimate]:
    return dict(estimate_starts(snapshot, expected_end={key(k): v for k, v in ends.items()},
                                runtime_of=an_hour, horizon=horizon,
                                max_steps=max_steps).starts)


def two_running(*queued: EntryBuilder, starvation_seconds: float = 300.0) -> SnapshotBuilder:
    """2 nodes x 8 GPUs, each full with one running job ("a" on the first, "b" on the
    second); now is 09:50."""
    cluster = (make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=8).used(1, gpu=8)
               .held("default/a", 0, gpu=8).held("default/b", 1, gpu=8))
    return make_snapshot(now=at(-600)).clusters(cluster).policy(
        starvation_seconds=starvation_seconds).add(
        make_entry("a").job(gpu=8).admitted("spoke-1").dispatched(at(-3600)),
        make_entry("b").job(gpu=8).admitted("spoke-1").dispatched(at(-3600)),
        *queued)


@pytest.mark.parametrize(("pods", "want_start", "want_after"), [
    (2, at(1800), ("default/b",)),   # needs both nodes: 10:30
    (1, at(0), ("default/a",)),      # one node is enough: 10:00
])
def test_a_gang_waits_for_the_end_that_frees_its_room(
        pods: int, want_start: datetime, want_after: tuple[str, ...]) -> None:
    snapshot = two_running(make_entry("gang").job(pods=pods, gpu=8)).obj()
    got = estimates(snapshot, {"a": at(0), "b": at(1800)})[key("gang")]
    assert (got.start, got.after) == (want_start, want_after)
    assert got.basis.startswith(f"estimate: after {want_after[0]} ends")


@pytest.mark.parametrize(("starvation_seconds", "want_head", "want_small"), [
    (0.0, at(1800), at(1800 + 3600)),   # head held: the small one waits for the head
    # No hold yet: the small one backfills at 10:00, and the head waits for it too.
    (1e6, at(3600), at(0)),
])
def test_behind_a_held_head_of_line_no_one_starts_before_the_head(
        starvation_seconds: float, want_head: datetime, want_small: datetime) -> None:
    snapshot = two_running(
        make_entry("head").job(pods=2, gpu=8).priority(10).created(at(-1200)),
        make_entry("small").job(gpu=8).created(at(-1100)),
        starvation_seconds=starvation_seconds).obj()
    got = estimates(snapshot, {"a": at(0), "b": at(1800)})
    assert (got[key("head")].start, got[key("small")].start) == (want_head, want_small)


def test_an_over_quota_appwrapper_waits_for_the_quota_holders_end() -> None:
    cluster = (make_cluster("spoke-1").nodes(4, gpu=8).used(0, gpu=8)
               .held("default/holder", 0, gpu=8))
    snapshot = make_snapshot(now=at(0)).clusters(cluster).quota(
        make_tree("quota_context").node("root", gpu=8).build()).add(
        make_entry("holder").job(gpu=8).labels(quota_context="root").admitted("spoke-1"),
        make_entry("waiting").job(gpu=8).labels(quota_context="root")).obj()
    got = estimates(snapshot, {"holder": at(600)})[key("waiting")]
    assert (got.start, got.after) == (at(600), (key("holder"),))


def test_what_fits_now_starts_now() -> None:
    snapshot = make_snapshot(now=at(0)).clusters(make_cluster("spoke-1").nodes(1, gpu=8)).add(
        make_entry("now").job(gpu=8)).obj()
    assert estimates(snapshot, {})[key("now")] == Estimate(at(0), (), "dispatched in this cycle")


def test_a_requeue_pause_ending_is_a_moment_of_its_own() -> None:
    snapshot = make_snapshot(now=at(0)).clusters(make_cluster("spoke-1").nodes(1, gpu=8)).add(
        make_entry("paused").job(gpu=8).not_before(at(300))).obj()
    got = estimates(snapshot, {})[key("paused")]
    assert (got.start, got.after) == (at(300), ())
    assert "requeue pause" in got.basis


def test_a_job_past_its_expected_end_is_assumed_to_end_at_once() -> None:
    snapshot = two_running(make_entry("gang").job(pods=1, gpu=8)).obj()
    got = estimates(snapshot, {"a": at(-3000), "b": at(1800)})[key("gang")]
    assert got.start == at(-600)


def test_a_backfill_is_planned_to_go_when_its_promise_to_the_head_comes_due() -> None:
    """``b`` was backfilled on the promise to end by 10:30, the head's reservation, but
    is now expected to run until 12:00 (its family's history grew): the plan evicts it
    at 10:30, as the controller will, and the head starts then."""
    snapshot = two_running(make_entry("head").job(pods=2, gpu=8).created(at(-900)))
    promised = [dataclasses.replace(e, backfill_promise=BackfillPromise(key("head"), at(1800)))
                if e.key == key("b") else e for e in snapshot.obj().appwrappers]
    got = estimates(dataclasses.replace(snapshot.obj(), appwrappers=tuple(promised)),
                    {"a": at(600), "b": at(7200)})
    assert got[key("head")].start == at(1800)


@pytest.mark.parametrize(("ends", "horizon", "max_steps", "want_basis"), [
    ({"a": at(0)}, 24 * HOUR, 50,
     "no estimate: the running work it may wait for has no expected end (default/b)"),
    ({"a": at(0), "b": at(1800)}, timedelta(minutes=20), 50,
     "no estimate: not started within the horizon (until 2024-05-01T10:10:00+00:00)"),
    ({"a": at(0), "b": at(1800)}, 24 * HOUR, 2,
     "no estimate: not started within the plan's budget of 2 cycles "
     "(it reached 2024-05-01T10:00:00+00:00)"),
])
def test_what_is_not_placed_says_why(ends: dict[str, datetime], horizon: timedelta,
                                     max_steps: int, want_basis: str) -> None:
    snapshot = two_running(make_entry("gang").job(pods=2, gpu=8)).obj()
    got = estimates(snapshot, ends, horizon=horizon, max_steps=max_steps)[key("gang")]
    assert got.start is None
    assert got.basis.startswith(want_basis)
    assert "in the plan it last waited:" in got.basis


def test_a_gang_too_big_for_any_cluster_is_never_estimated() -> None:
    snapshot = two_running(make_entry("huge").job(pods=3, gpu=8)).obj()
    got = estimates(snapshot, {"a": at(0), "b": at(1800)})[key("huge")]
    assert got.start is None
    assert got.basis.startswith("no estimate: it does not start even once all running work")


def test_a_budget_below_one_cycle_is_refused() -> None:
    snapshot = make_snapshot().obj()
    with pytest.raises(ValueError, match="at least one cycle"):
        estimate_starts(snapshot, expected_end={}, runtime_of=an_hour, horizon=HOUR,
                        max_steps=0)


# -- properties ----------------------------------------------------------------------------

GPUS = (1, 2, 4, 8)


@st.composite
def futures(draw: st.DrawFn, *, one_shape: bool = False
            ) -> tuple[Snapshot, dict[AppWrapperKey, datetime], dict[AppWrapperKey, timedelta]]:
    """A small snapshot (1-2 clusters of 1-3 8-GPU nodes, running jobs on them, up to 6
    queued, sometimes a hard quota), the running jobs' ends (some missing, some past)
    and every queued job's run time. ``one_shape``: every queued job is one 4-GPU pod."""
    builder = make_snapshot(now=at(0)).policy(
        starvation_seconds=draw(st.sampled_from([0.0, 300.0, 1e6])))
    quota = None if one_shape else draw(st.sampled_from([None, 8, 16, 24]))
    labels = {} if quota is None else {"quota_context": "root"}
    if quota is not None:
        builder.quota(make_tree("quota_context").node("root", gpu=quota).build())
    ends: dict[AppWrapperKey, datetime] = {}
    runtimes: dict[AppWrapperKey, timedelta] = {}
    charged = 0
    for c in range(draw(st.integers(1, 2))):
        cluster = make_cluster(f"c{c}").nodes(draw(st.integers(1, 3)), gpu=8)
        for n in range(len(cluster.obj().nodes)):
            used = 0
            for r in range(draw(st.integers(0, 2))):
                gpu = draw(st.sampled_from(GPUS))
                if used + gpu > 8 or (quota is not None and charged + gpu > quota):
                    break
                name = f"run-c{c}-n{n}-{r}"
                used, charged = used + gpu, charged + gpu
                cluster.held(f"default/{name}", n, gpu=gpu)
                builder.add(make_entry(name).job(gpu=gpu).labels(**labels)
                            .admitted(f"c{c}").dispatched(at(-600)))
                if draw(st.integers(0, 4)):
                    ends[key(name)] = at(draw(st.integers(-120, 7200)))
            if used:
                cluster.used(n, gpu=used)
        builder.clusters(cluster)
    for q in range(draw(st.integers(0, 6))):
        name = f"q{q}"
        entry = make_entry(name).priority(draw(st.integers(0, 2))).created(
            at(-draw(st.integers(0, 900)))).labels(**labels)
        if one_shape:
            entry.job(gpu=4)
        else:
            entry.job(pods=draw(st.integers(1, 3)), gpu=draw(st.sampled_from(GPUS)))
            if draw(st.integers(0, 5)) == 0:
                entry.not_before(at(draw(st.integers(1, 3600))))
        builder.add(entry)
        runtimes[key(name)] = timedelta(seconds=draw(st.integers(0, 7200)))
    return builder.obj(), ends, runtimes


def run(future: tuple[Snapshot, dict[AppWrapperKey, datetime],
                      dict[AppWrapperKey, timedelta]]) -> dict[AppWrapperKey, Estimate]:
    snapshot, ends, runtimes = future
    return dict(estimate_starts(snapshot, expected_end=ends,
                                runtime_of=lambda e: runtimes[e.key], horizon=24 * HOUR,
                                max_steps=40).starts)


@SETTINGS
@given(futures())
def test_no_estimate_precedes_now(
        future: tuple[Snapshot, dict[AppWrapperKey, datetime],
                      dict[AppWrapperKey, timedelta]]) -> None:
    snapshot = future[0]
    got = run(future)
    assert set(got) == {e.key for e in snapshot.appwrappers
                        if not isinstance(e.phase, Admitted)}
    assert all(e.start is None or e.start >= snapshot.now for e in got.values())


@SETTINGS
@given(futures())
def test_each_estimate_is_a_moment_the_cycle_dispatches_it_in_a_plan_that_never_overcommits(
        future: tuple[Snapshot, dict[AppWrapperKey, datetime],
                      dict[AppWrapperKey, timedelta]]) -> None:
    snapshot, ends, runtimes = future
    got = run(future)
    seen: set[AppWrapperKey] = set()
    for step in forecast(snapshot, expected_end=ends, runtime_of=lambda e: runtimes[e.key],
                         horizon=24 * HOUR, max_steps=40):
        # Rebuilt by the plan, the snapshot's books add up: every node's requests are
        # the pods of the AppWrappers running there, each running one holds its whole
        # demand, nothing that ended holds anything, and no node or quota overflows.
        running = {e.key: e for e in step.snapshot.appwrappers
                   if isinstance(e.phase, Admitted)}
        for cluster in step.snapshot.clusters:
            assert set(cluster.held_by) <= set(running)
            assert not cluster.unbound
            for node in cluster.nodes:
                held = sum(r.get("nvidia.com/gpu", 0) for pods in cluster.held_by.values()
                           for name, r in pods if name == node.name)
                assert node.requested.get("nvidia.com/gpu", 0) == held
                assert node.requested.fits_in(node.allocatable)
        for entry in running.values():
            assert isinstance(entry.phase, Admitted) and entry.demand is not None
            (cluster,) = (c for c in step.snapshot.clusters if c.name == entry.phase.cluster)
            assert sum(r.get("nvidia.com/gpu", 0) for _, r in cluster.held_by[entry.key]) == \
                entry.demand.total.get("nvidia.com/gpu", 0)
        quota = step.snapshot.quota.copy()
        for entry in step.snapshot.appwrappers:
            if isinstance(entry.phase, Admitted) and entry.quota_labels:
                assert entry.demand is not None
                assignment = quota.resolve(entry.quota_labels)
                assert isinstance(assignment, QuotaAssignment)
                assert quota.fits(assignment, entry.demand.total) is None
                quota.charge(assignment, entry.demand.total)
        # The cycle, run afresh on that moment's snapshot, dispatches the ones estimated
        # to start then, and none estimated later.
        dispatched = {d.key for d in dispatch_cycle(step.snapshot).dispatches}
        starting = {k for k, e in got.items() if e.start == step.now and k not in seen
                    and e.after == step.ended}
        assert starting <= dispatched
        assert not {k for k, e in got.items() if e.start is not None
                    and e.start > step.now} & dispatched
        seen |= dispatched


@SETTINGS
@given(futures(one_shape=True))
def test_with_one_job_shape_estimates_keep_the_cycles_order(
        future: tuple[Snapshot, dict[AppWrapperKey, datetime],
                      dict[AppWrapperKey, timedelta]]) -> None:
    snapshot = future[0]
    got = run(future)
    roomy = dataclasses.replace(snapshot, clusters=(
        make_cluster("roomy").nodes(10, gpu=8).obj(),), appwrappers=tuple(
        e for e in snapshot.appwrappers if not isinstance(e.phase, Admitted)))
    order = [d.key for d in dispatch_cycle(roomy).dispatches]
    assert set(order) == set(got)
    starts = [got[k].start for k in order]
    placed = [s for s in starts if s is not None]
    assert starts == [*placed, *[None] * (len(starts) - len(placed))]
    assert placed == sorted(placed)
