"""The dispatcher's carried snapshot is the snapshot it would build from nothing.

``Dispatcher.snapshot`` keeps each record's share of the snapshot across cycles and
works it out again only when something it rests on changed (the observed object, the
orders, the progress that voids them, the record's pods on its cluster, the link). A
property test drives random histories through one dispatcher (cycles ordering
dispatches, persists that land or fail, holds, pods bound, deleted or finished, objects
replaced by the hub, evictions, a link rebuilt, AppWrappers deleted) and after every step
compares its snapshot with a new dispatcher's over the same records and links: equal,
every time. Table cases name the changes a stale share would miss.
"""

from __future__ import annotations

import copy
import gc
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcad.config import RunConfig
from mcad.controller.dispatcher import Dispatcher
from mcad.controller.records import AppWrapperRecord, EvictionOrder, key_of
from mcad.controller.spoke_link import SpokeLink
from mcad.controller.state import ControllerState
from mcad.controller.workqueue import WorkQueue
from mcad.core.placement.capacity import AppWrapperKey
from tests.controller.seam import job_appwrapper

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
UID_LABEL = "workload.codeflare.dev/appwrapper-uid"
CLUSTERS = ("spoke-1", "spoke-2")


def node(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"n{i}", "labels": {"kubernetes.io/hostname": f"n{i}"}},
            "spec": {},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110",
                                       "nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(owner: str, index: int, *, node_name: str = "", phase: str = "Running",
        gpus: int = 4) -> dict[str, Any]:
    return {"metadata": {"uid": f"{owner}-p{index}", "name": f"{owner}-p{index}",
                         "namespace": "ns", "labels": {UID_LABEL: owner}},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "m", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


def new_link(name: str) -> SpokeLink:
    link = SpokeLink(name=name, on_change=lambda *_: None, on_health=lambda *_: None)
    for i in range(3):
        link._on_node("ADDED", node(i))
    link.health.ready = True
    return link


class World:
    """Records and links as the controller keeps them, and one dispatcher over them."""

    def __init__(self) -> None:
        self.state = ControllerState()
        for name in CLUSTERS:
            self.state.links[name] = new_link(name)
        self.dispatcher = self.new_dispatcher()
        self.version = 1
        self.made = 0

    def new_dispatcher(self) -> Dispatcher:
        return Dispatcher(state=self.state, config=RunConfig(),
                          queue=WorkQueue[AppWrapperKey]("appwrappers"))

    def take(self, rec: AppWrapperRecord, obj: dict[str, Any]) -> None:
        """The hub's next version of ``obj`` arrives (a new object, as from a watch)."""
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        rec.observed.take(obj)

    def add(self, pods: int) -> None:
        self.made += 1
        obj = job_appwrapper(f"aw{self.made}", pods=pods, gpus=4)
        obj["metadata"].update(uid=f"uid{self.made}",
                               creationTimestamp=f"2026-11-26T10:{self.made % 60:02d}:00Z")
        rec = AppWrapperRecord()
        self.take(rec, obj)
        self.state.appwrappers[key_of(obj)] = rec

    def records(self) -> list[AppWrapperRecord]:
        return list(self.state.appwrappers.values())

    def pick(self, index: int) -> AppWrapperRecord | None:
        records = self.records()
        return records[index % len(records)] if records else None

    def persist(self, rec: AppWrapperRecord) -> None:
        order = rec.live_dispatch()
        if order is None:
            return
        obj = copy.deepcopy(rec.obj)
        obj["status"] = {"state": "Running", "clusterName": order.cluster,
                         "runId": order.run, "dispatchTimestamp": "2026-11-26T11:59:00Z",
                         "conditions": [{"type": "Dispatched", "status": "True"}]}
        self.take(rec, obj)
        rec.progress.persisted = order.run

    def fail(self, rec: AppWrapperRecord, hold_s: int) -> None:
        order = rec.live_dispatch()
        if order is not None:
            rec.progress.failed = order.run
            rec.progress.hold_until = NOW + timedelta(seconds=hold_s)

    def bind(self, rec: AppWrapperRecord, index: int, phase: str) -> None:
        link = self.state.links.get(rec.cluster)
        if link is not None and rec.admitted:
            link._on_pod("MODIFIED", pod(rec.uid, index % 3, node_name=f"n{index % 3}",
                                         phase=phase))

    def unbind(self, rec: AppWrapperRecord, index: int) -> None:
        link = self.state.links.get(rec.cluster)
        if link is not None:
            link._on_pod("DELETED", pod(rec.uid, index % 3))

    def finish(self, rec: AppWrapperRecord) -> None:
        if rec.observed.dispatched:
            obj = copy.deepcopy(rec.obj)
            obj["status"]["state"] = "Completed"
            self.take(rec, obj)

    def evict(self, rec: AppWrapperRecord) -> None:
        run = rec.run
        if run is not None:  # (the test plays the dispatcher, the orders' owner)
            rec.orders.eviction = EvictionOrder(run, "Preempted", "for a test",
                                                AppWrapperKey("ns/other"))

    def evicted(self, rec: AppWrapperRecord) -> None:
        order = rec.orders.eviction
        if order is not None:
            rec.progress.evicted = order.run

    def rebuild_link(self, index: int) -> None:
        name = CLUSTERS[index % len(CLUSTERS)]
        old = self.state.links[name]
        link = new_link(name)
        for p in old.pods.values():
            link._on_pod("ADDED", pod(p.owner_uid, int(p.uid.rsplit("-p", 1)[1]),
                                      node_name=p.node,
                                      phase="Succeeded" if p.terminal else "Running"))
        self.state.links[name] = link

    def delete(self, rec: AppWrapperRecord) -> None:
        del self.state.appwrappers[rec.key]

    def step(self, op: str, index: int) -> None:
        rec = self.pick(index)
        if op == "add" or rec is None:
            self.add(1 + index % 3)
        elif op == "cycle":
            self.dispatcher.cycle()
        elif op == "persist":
            self.persist(rec)
        elif op == "fail":
            self.fail(rec, hold_s=10 if index % 2 else -1)
        elif op == "bind":
            self.bind(rec, index, "Running")
        elif op == "finish-pod":
            self.bind(rec, index, "Succeeded")
        elif op == "unbind":
            self.unbind(rec, index)
        elif op == "finish":
            self.finish(rec)
        elif op == "evict":
            self.evict(rec)
        elif op == "evicted":
            self.evicted(rec)
        elif op == "link":
            self.rebuild_link(index)
        elif op == "delete":
            self.delete(rec)

    def check(self) -> None:
        """The carried snapshot equals a fresh one, and it dropped every order that was
        done or void, as a fresh one does (its tidying changes nothing after)."""
        carried = self.dispatcher.snapshot(NOW)
        orders = {key: copy.copy(rec.orders) for key, rec in self.state.appwrappers.items()}
        fresh = self.new_dispatcher().snapshot(NOW)
        assert carried.appwrappers == fresh.appwrappers
        assert carried.clusters == fresh.clusters
        assert orders == {key: rec.orders for key, rec in self.state.appwrappers.items()}


OPS = ("add", "cycle", "persist", "fail", "bind", "finish-pod", "unbind", "finish",
       "evict", "evicted", "link", "delete")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 50)), max_size=40))
def test_carried_snapshot_is_the_fresh_snapshot(steps: list[tuple[str, int]]) -> None:
    world = World()
    for _ in range(3):
        world.add(2)
    for op, index in steps:
        world.step(op, index)
        world.check()


def dispatched_world() -> tuple[World, AppWrapperRecord]:
    world = World()
    world.add(2)
    world.dispatcher.cycle()
    (rec,) = world.records()
    world.persist(rec)
    world.check()
    return world, rec


def test_a_pod_bound_ends_its_reservation() -> None:
    world, rec = dispatched_world()
    before = world.dispatcher.snapshot(NOW)
    world.bind(rec, 0, "Running")
    after = world.dispatcher.snapshot(NOW)
    assert before.clusters != after.clusters
    world.check()


def test_a_rebuilt_link_is_followed() -> None:
    world, rec = dispatched_world()
    world.bind(rec, 0, "Running")
    world.dispatcher.snapshot(NOW)
    world.state.links[rec.cluster] = new_link(rec.cluster)  # its pods not listed yet
    world.check()


def test_a_failed_persist_voids_the_assumed_dispatch() -> None:
    world = World()
    world.add(1)
    world.dispatcher.cycle()
    (rec,) = world.records()
    assert rec.admitted  # assumed
    world.fail(rec, hold_s=-1)
    snapshot = world.dispatcher.snapshot(NOW)
    assert not rec.admitted and rec.orders.dispatch is None
    assert [e.phase for e in snapshot.appwrappers] == [e.phase for e in
                                                      world.new_dispatcher().snapshot(
                                                          NOW).appwrappers]


def test_a_hold_is_read_at_every_cycle() -> None:
    world = World()
    world.add(1)
    world.dispatcher.cycle()
    (rec,) = world.records()
    world.fail(rec, hold_s=30)
    assert world.dispatcher.snapshot(NOW).appwrappers == ()
    later = NOW + timedelta(seconds=31)
    assert [e.key for e in world.dispatcher.snapshot(later).appwrappers] == [rec.key]


class Book:
    """Expected run times as the runtime book gives them: a version that moves."""

    def __init__(self) -> None:
        self.version = 0
        self.each = 600.0

    def seconds(self, rec: AppWrapperRecord) -> float:
        return self.each


def test_reservation_backfill_sees_expected_run_times_as_of_the_history() -> None:
    world = World()
    world.add(1)
    book = Book()
    dispatcher = Dispatcher(state=world.state, config=RunConfig(backfill="reservation"),
                            queue=WorkQueue[AppWrapperKey]("appwrappers"), runtimes=book)
    assert [e.expected_runtime for e in dispatcher.snapshot(NOW).appwrappers] == [600.0]
    book.each = 900.0  # a completion moved the family's median, and the version
    assert [e.expected_runtime for e in dispatcher.snapshot(NOW).appwrappers] == [600.0]
    book.version += 1
    (timed,) = dispatcher.snapshot(NOW).appwrappers
    assert timed.expected_runtime == 900.0
    book.version += 1  # another family's completion: this one's run time did not move
    assert dispatcher.snapshot(NOW).appwrappers[0] is timed  # the same entry, not remade
    plain = Dispatcher(state=world.state, config=RunConfig(),
                       queue=WorkQueue[AppWrapperKey]("appwrappers"), runtimes=book)
    assert [e.expected_runtime for e in plain.snapshot(NOW).appwrappers] == [None]


def test_a_share_does_not_keep_the_object_it_was_worked_out_from() -> None:
    """A share notices a new version by ``Observed.taken``, not by holding the object:
    held, every dispatched AppWrapper's queued version stayed alive beside its current
    one (no cycle comes to replace a share while nothing waits)."""
    world = World()
    world.add(1)
    world.dispatcher.cycle()
    (rec,) = world.records()
    queued_version = rec.obj
    world.persist(rec)  # the hub's next version replaces it in the record
    assert [type(r).__name__ for r in gc.get_referrers(queued_version)
            if type(r).__name__ != "frame"] == []
    world.check()  # and the carried share still sees the change
