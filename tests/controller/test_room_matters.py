"""When nothing waits, room changing on a cluster does not ask for a cycle.

``Dispatcher.room_matters`` is what the runner reads before a pod or node change asks
for a cycle: a drained backlog's every pod made and bound asked for a cycle over every
record. The promise it rests on: once a cycle leaves nothing pending, no eviction, no
resize and no elastic AppWrapper below its size, no change of room alone can make a
cycle decide anything. A property test plays random histories, and after a cycle that
says room does not matter, binds, finishes and removes pods at random: the next cycle
decides nothing. Table cases name what makes room matter.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcad.controller.dispatcher import waits_on_room
from mcad.core.cycle.decide import Admitted, AppWrapperEntry, CycleResult, Pending, Snapshot
from mcad.core.placement.capacity import AppWrapperKey, ClusterName
from mcad.core.quota.forest import QuotaForest
from mcad.core.workload.demand import Demand, PodSet
from mcad.core.workload.resources import ResourceList
from tests.controller.test_carried_snapshot import OPS, World

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
ROOM_OPS = ("bind", "finish-pod", "unbind")


def running(world: World, count: int) -> None:
    """``count`` AppWrappers of three 4-GPU pods, dispatched, persisted and their pods
    bound (the two clusters hold four of them)."""
    for _ in range(count):
        world.add(3)
    world.dispatcher.cycle()
    for rec in world.records():
        world.persist(rec)
        for index in range(3):
            world.bind(rec, index, "Running")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 6),
       st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 50)), max_size=30),
       st.lists(st.tuples(st.sampled_from(ROOM_OPS), st.integers(0, 50)), min_size=1,
                max_size=12))
def test_when_room_does_not_matter_room_changes_decide_nothing(
        filled: int, history: list[tuple[str, int]], room: list[tuple[str, int]]) -> None:
    world = World()
    running(world, filled)
    for op, index in history:
        world.step(op, index)
    world.dispatcher.cycle()
    if world.dispatcher.room_matters:
        return
    for op, index in room:
        if world.pick(index) is not None:  # (on no record, ``step`` adds one: an arrival)
            world.step(op, index)
    result = world.dispatcher.cycle()
    assert (result.dispatches, result.pending, result.evictions, result.resizes) == \
        ((), (), (), ())
    assert not world.dispatcher.room_matters


def test_a_drained_backlog_stops_asking_and_a_new_arrival_asks_again() -> None:
    world = World()
    for _ in range(3):
        world.add(1)
    assert world.dispatcher.room_matters  # before any cycle
    world.dispatcher.cycle()  # all three fit: ordered
    assert not world.dispatcher.room_matters
    for _ in range(20):  # more than the clusters hold: some wait
        world.add(3)
    world.dispatcher.cycle()
    assert world.dispatcher.room_matters


def entry(name: str, *, pods: int = 1, full: int | None = None,
          draining: bool = False) -> AppWrapperEntry:
    pod_set = PodSet(count=pods, requests=ResourceList.parse({"nvidia.com/gpu": "1"}))
    demand = Demand(pod_sets=(pod_set,), min_available=pods,
                    total=pod_set.requests.scale(pods), pods=pods)
    return AppWrapperEntry(key=AppWrapperKey(f"ns/{name}"), uid=name, priority=0,
                           created=NOW, demand=demand,
                           phase=Admitted(ClusterName("spoke-1")), draining=draining,
                           elastic_min=1 if full else None, full_pods=full)


NOTHING = CycleResult(dispatches=(), pending=(), evictions=())


def test_what_makes_room_matter() -> None:
    def snap(*entries: AppWrapperEntry) -> Snapshot:
        return Snapshot(now=NOW, appwrappers=entries, clusters=(), quota=QuotaForest.build(())[0])

    assert not waits_on_room(snap(entry("a"), entry("b", pods=2, full=2)), NOTHING)
    assert waits_on_room(snap(entry("a", pods=2, full=4)), NOTHING)  # may grow
    assert waits_on_room(snap(entry("a", draining=True)), NOTHING)  # being taken back
    waiting = CycleResult(dispatches=(), evictions=(), pending=(
        Pending(AppWrapperKey("ns/q"), "InsufficientCapacity", "does not fit"),))  # type: ignore[arg-type]
    assert waits_on_room(snap(entry("a")), waiting)
