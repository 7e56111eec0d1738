"""Estimated starts in the controller: the runtime book at the gateway seam, the
estimator's plan and its error metric, and what ``mcad queue`` shows.

The book reads the stored history once, keeps completions that come before it is read,
writes the ConfigMap conditionally, takes a Conflict as "read again and write next
round", and starts anew from a history it cannot read. What it writes is never over the
history's budget (the issue's 1.4 MiB history is trimmed first), and a write the hub
refuses is said once and not sent again. The estimator plans from the
dispatcher's last cycle with run times from the book: a running AppWrapper with three
past runs of its family is expected to end after their median, and the queued gang
that waits for it is estimated to start then, with a sentence naming both.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcad import metrics
from mcad.cli.queue import estimated, queue_table
from mcad.config import RunConfig
from mcad.controller.estimator import Estimator, expected_ends
from mcad.controller.records import AppWrapperRecord
from mcad.controller.runtimes import KEY, NAME, RuntimeBook
from mcad.controller.state import ControllerState
from mcad.core.cycle.decide import dispatch_cycle
from mcad.core.cycle.snapshot import Snapshot
from mcad.core.life.runhistory import (
    HISTORY_BUDGET_BYTES,
    RuntimeBasis,
    RuntimeHistory,
    RuntimePolicy,
)
from mcad.core.placement.capacity import AppWrapperKey
from tests.builders.clusters import make_cluster
from tests.builders.snapshots import make_entry, make_snapshot
from tests.controller.seam import job_appwrapper
from tests.core.test_runtime_budget import documented_bounds
from tests.gateway.scripted import Request, ScriptedTransport, reply, status

CM = f"/api/v1/namespaces/mcad-system/configmaps/{NAME}"
CMS = "/api/v1/namespaces/mcad-system/configmaps"
T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def record(name: str, *, dispatched: datetime | None = None,
           labels: dict[str, str] | None = None, expected: int | None = None
           ) -> AppWrapperRecord:
    obj = job_appwrapper(name, namespace="team-a")
    obj["metadata"].update(uid=f"uid-{name}", labels=labels or {})
    if expected is not None:
        obj["spec"]["schedulingSpec"]["dispatchDuration"] = {"expected": expected}
    if dispatched is not None:
        obj["status"] = {"state": "Running", "clusterName": "c1",
                         "dispatchTimestamp": dispatched.isoformat()}
    return AppWrapperRecord.of(obj)


def stored(history: RuntimeHistory, version: str = "7") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": "mcad-system",
                         "resourceVersion": version},
            "data": {KEY: json.dumps(history.to_dict())}}


def book_on(hub: ScriptedTransport) -> RuntimeBook:
    return RuntimeBook(hub=hub.connection("hub"), namespace="mcad-system",
                       policy=RuntimePolicy(default=timedelta(hours=1)))


# -- the book ---------------------------------------------------------------------------------

async def test_a_completion_before_the_history_is_read_is_kept_and_written() -> None:
    hub = ScriptedTransport()
    old = RuntimeHistory().record("team-a", "train", 100, T0)
    hub.on("GET", CM, reply(200, stored(old)))
    written: list[dict[str, Any]] = []

    def put(request: Request) -> Any:
        written.append(request.body)
        return reply(200, {**request.body, "metadata": {**request.body["metadata"],
                                                        "resourceVersion": "8"}})

    hub.on("PUT", CM, put)
    book = book_on(hub)
    book.completed(record("train-7", dispatched=T0), T0 + timedelta(seconds=300))
    await book.load()
    runs = book.history.runs["team-a"]["train"]
    assert [r.seconds for r in runs] == [100.0, 300.0]
    await book.save()
    assert written[0]["metadata"]["resourceVersion"] == "7"  # conditional
    back = RuntimeHistory.from_dict(json.loads(written[0]["data"][KEY]))
    assert [r.seconds for r in back.runs["team-a"]["train"]] == [100.0, 300.0]


async def test_a_missing_configmap_is_created_and_a_conflict_is_read_again() -> None:
    hub = ScriptedTransport()
    hub.on("GET", CM, status(404, "NotFound"))
    hub.on("POST", CMS, status(409, "AlreadyExists"))
    book = book_on(hub)
    await book.load()
    book.completed(record("train-1", dispatched=T0), T0 + timedelta(seconds=60))
    hub.only("GET", CM, reply(200, stored(RuntimeHistory(), version="3")))
    await book.save()  # created meanwhile by someone else: read it, write next round
    assert book._dirty
    hub.on("PUT", CM, lambda r: reply(200, r.body))
    await book.save()
    (put,) = hub.sent("PUT", CM)
    assert put.body["metadata"]["resourceVersion"] == "3"
    assert not book._dirty


async def test_an_unreadable_history_is_started_anew(caplog: pytest.LogCaptureFixture) -> None:
    hub = ScriptedTransport()
    hub.on("GET", CM, reply(200, {"metadata": {"name": NAME, "resourceVersion": "2"},
                                  "data": {KEY: '{"version": 99}'}}))
    book = book_on(hub)
    await book.load()
    assert book.history.runs == {} and book.loaded
    assert "cannot be read" in caplog.text and "version 99" in caplog.text


async def test_the_save_path_never_sends_a_body_over_the_budget() -> None:
    # The documented bounds with long names: about 1.4 MiB, which a ConfigMap refuses.
    big = documented_bounds()
    assert len(big.encode()) > 1024 * 1024
    hub = ScriptedTransport()
    hub.on("GET", CM, reply(200, stored(big)))
    hub.on("PUT", CM, lambda r: reply(200, r.body))
    book = book_on(hub)
    await book.load()
    version = book.version
    book.completed(record("train-1", dispatched=T0), T0 + timedelta(seconds=60))
    await book.save()
    (put,) = hub.sent("PUT", CM)
    text = put.body["data"][KEY]
    assert len(text.encode()) <= HISTORY_BUDGET_BYTES
    # What is kept in memory is what was written, the new run with it.
    assert RuntimeHistory.from_dict(json.loads(text)) == book.history
    assert book.history.runs["team-a"]["train"][-1].seconds == 60.0
    assert book.version > version + 1  # the trim moved expected run times: say so
    assert metrics.REGISTRY.get_sample_value("mcad_runtime_history_bytes") == len(text)


async def test_a_refused_write_is_said_once_and_the_same_body_never_sent_again(
        caplog: pytest.LogCaptureFixture) -> None:
    hub = ScriptedTransport()
    hub.on("GET", CM, reply(200, stored(RuntimeHistory())))
    hub.on("PUT", CM, status(422, "Invalid", "ConfigMap \"mcad-runtimes\" is invalid: "
                                             "[]: Too long: must have at most 1048576 bytes"))
    book = book_on(hub)
    await book.load()
    refused = metrics.REGISTRY.get_sample_value("mcad_runtime_history_refused_total") or 0
    book.completed(record("train-1", dispatched=T0), T0 + timedelta(seconds=60))
    for _ in range(3):  # rounds of the save loop, with nothing new
        if book._dirty:
            await book.save()
    book._dirty = True  # as a late report of a run already dropped would
    await book.save()   # the same body: not sent
    assert len(hub.sent("PUT", CM)) == 1
    # A changed history is sent, and a second refusal is not said again.
    book.completed(record("train-2", dispatched=T0), T0 + timedelta(seconds=90))
    await book.save()
    assert len(hub.sent("PUT", CM)) == 2
    warnings = [r for r in caplog.records if "refused the runtime history" in r.getMessage()
                and r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "Too long" in warnings[0].getMessage()
    assert metrics.REGISTRY.get_sample_value(
        "mcad_runtime_history_refused_total") == refused + 2
    assert not book._dirty


def test_what_a_run_is_expected_to_take() -> None:
    book = RuntimeBook(hub=ScriptedTransport().connection(), namespace="mcad-system",
                       policy=RuntimePolicy(default=timedelta(minutes=45)))
    book.loaded = True
    for seconds in (100, 200, 900):
        book.completed(record("train-x7k2p", dispatched=T0),
                       T0 + timedelta(seconds=seconds))
    family = book.expected(record("train-b9zzq"))
    assert (family.seconds, family.basis, family.runs) == (200.0, RuntimeBasis.FAMILY, 3)
    assert book.expected(record("eval")).basis == RuntimeBasis.NAMESPACE
    assert book.expected(record("train-1", expected=50)).basis == RuntimeBasis.DECLARED
    labelled = book.expected(record("other", labels={"workload.codeflare.dev/family":
                                                     "train"}))
    assert labelled.basis == RuntimeBasis.FAMILY


# -- the estimator ----------------------------------------------------------------------------

def gang_world() -> tuple[Estimator, Snapshot]:
    """One cluster of 2 x 8 GPUs: ``team-a/train-1`` (2 x 8 GPUs) runs on all of it
    since T0; the gang ``team-a/train-2`` (2 x 8 GPUs) waits for it. Their family ran
    3 times before: 10, 20 and 90 minutes."""
    state = ControllerState()
    for rec in (record("train-1", dispatched=T0), record("train-2")):
        state.appwrappers[rec.key] = rec
    book = RuntimeBook(hub=ScriptedTransport().connection(), namespace="mcad-system",
                       policy=RuntimePolicy())
    book.loaded = True
    yesterday = T0 - timedelta(days=1)
    for minutes in (10, 20, 90):
        book.completed(record("train-0", dispatched=yesterday),
                       yesterday + timedelta(minutes=minutes))
    cluster = (make_cluster("c1").nodes(2, gpu=8).used(0, gpu=8).used(1, gpu=8)
               .held("team-a/train-1", 0, gpu=8).held("team-a/train-1", 1, gpu=8))
    snapshot = make_snapshot(now=T0 + timedelta(minutes=5)).clusters(cluster).add(
        make_entry("train-1", "team-a").job(pods=2, gpu=8).admitted("c1").dispatched(T0),
        make_entry("train-2", "team-a").job(pods=2, gpu=8).created(T0)).obj()
    estimator = Estimator(state=state, config=RunConfig(), book=book,
                          last_cycle=lambda: None)
    return estimator, snapshot


async def test_the_plan_starts_the_gang_when_its_predecessor_is_expected_to_end() -> None:
    estimator, snapshot = gang_world()
    plan = await estimator.refresh(snapshot, dispatch_cycle(snapshot))
    start, basis = plan.describe(AppWrapperKey("team-a/train-2"))
    assert start == T0 + timedelta(minutes=20)  # the median of 10, 20, 90
    assert "after team-a/train-1 ends" in basis
    assert "team-a/train-1 runs 20m (from 3 past runs of its family, 10m to 90m)" in basis
    assert "give or take 4200s, as their past runs went" in basis  # 90m - 20m
    assert "it is expected to run 20m" in basis


async def test_the_error_of_the_first_estimate_is_observed_at_dispatch() -> None:
    estimator, snapshot = gang_world()
    await estimator.refresh(snapshot, dispatch_cycle(snapshot))
    before = metrics.REGISTRY.get_sample_value("mcad_start_estimate_error_seconds_count") or 0
    # It started 5 minutes late: its predecessor ran 25 minutes.
    late = T0 + timedelta(minutes=25)
    later = make_snapshot(now=late).clusters(make_cluster("c1").nodes(2, gpu=8)).add(
        make_entry("train-2", "team-a").job(pods=2, gpu=8).created(T0).admitted("c1")
        .dispatched(late)).obj()
    await estimator.refresh(later, dispatch_cycle(later))
    after = metrics.REGISTRY.get_sample_value("mcad_start_estimate_error_seconds_count")
    total = metrics.REGISTRY.get_sample_value("mcad_start_estimate_error_seconds_sum")
    assert after == before + 1
    assert total is not None and total >= 300.0


async def test_a_dry_run_is_planned_behind_the_queue() -> None:
    estimator, snapshot = gang_world()
    await estimator.refresh(snapshot, dispatch_cycle(snapshot))
    candidate = record("train-3")
    trial = make_snapshot(now=snapshot.now).clusters(*snapshot.clusters).add(
        *snapshot.appwrappers,
        make_entry("train-3", "team-a").job(pods=2, gpu=8).created(T0 + timedelta(
            minutes=5))).obj()
    start, basis = await estimator.dry_run(trial, dispatch_cycle(trial), candidate)
    assert start == T0 + timedelta(minutes=40)  # after train-2, which starts at 20 min
    assert "after team-a/train-2 ends" in basis


def test_expected_ends_prefer_the_declared_end() -> None:
    declared = make_snapshot(now=T0).add(
        make_entry("x", "team-a").job(gpu=1).admitted("c1").dispatched(T0)
        .expected_end(T0 + timedelta(minutes=3)),
        make_entry("y", "team-a").job(gpu=1).admitted("c1").dispatched(T0)).obj()
    ends = expected_ends(declared, {})  # y: no run time known, no end
    assert ends == {AppWrapperKey("team-a/x"): T0 + timedelta(minutes=3)}


# -- mcad queue ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("start", "shown"), [
    (None, "-"),
    ("2026-11-26T11:59:00Z", "now"),
    ("2026-11-26T12:00:45Z", "in 45s (12:00)"),
    ("2026-11-26T12:14:00Z", "in 14m (12:14)"),
    ("2026-11-26T17:30:00Z", "in 5h (17:30)"),
    ("2026-11-29T12:00:00Z", "in 3d (12:00)"),
    ("not a time", "-"),
])
def test_the_estimated_start_column(start: str | None, shown: str) -> None:
    assert estimated(start, now=T0) == shown


def test_the_queue_table_has_an_estimated_start() -> None:
    table = queue_table([{"position": 1, "namespace": "team-a", "name": "train-2",
                          "priority": 0, "quota": [], "demand": "4x8 GPU",
                          "waitingSince": "2026-11-26T11:59:00Z",
                          "reason": "InsufficientCapacity",
                          "estimatedStart": "2026-11-26T12:20:00Z"}], wide=False, now=T0)
    head, row = table.splitlines()
    assert "ESTIMATED START" in head and "in 20m (12:20)" in row
