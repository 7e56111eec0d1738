"""The controller's minute line: what is queued and running, and what moved since."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from mcad import metrics
from mcad.controller import reports as reports_module
from mcad.controller.records import AppWrapperRecord
from mcad.controller.reports import REPORT_EVERY_S, REPORT_SHARE, Reports, pause_after
from mcad.controller.state import ControllerState
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.workload.resources import ResourceList
from tests.builders.quota import make_tree

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]


def record(name: str, status: dict[str, Any]) -> AppWrapperRecord:
    rec = AppWrapperRecord.of({"metadata": {"name": name, "namespace": "ns", "uid": name,
                             "resourceVersion": "1", "generation": 1},
                "spec": {"resources": {"GenericItems": []}}, "status": status})
    return rec


async def test_one_summary_line_a_minute_counts_what_moved_since_the_last(
        caplog: pytest.LogCaptureFixture) -> None:
    state = ControllerState()
    for name, status in (("a", {}), ("b", {"state": "Pending"}),
                         ("c", {"state": "Running", "clusterName": "spoke-1"})):
        state.appwrappers[AppWrapperKey(f"ns/{name}")] = record(name, status)
    reports = Reports(hub=None, state=state)  # type: ignore[arg-type]  # not written to
    caplog.set_level(logging.INFO, logger="mcad.controller.reports")
    task = asyncio.create_task(reports.summarize(every=60))
    await asyncio.sleep(30)
    metrics.count_dispatch("spoke-1")
    metrics.count_dispatch("spoke-2")
    await asyncio.sleep(31)
    metrics.count_requeue("Preempted")
    await asyncio.sleep(60)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("summary")]
    assert lines == [
        "summary: 2 queued, 1 running; 2 dispatched and 0 requeued in the last 60s; "
        "0 of 0 clusters ready",
        "summary: 2 queued, 1 running; 0 dispatched and 1 requeued in the last 60s; "
        "0 of 0 clusters ready"]


async def test_an_elastic_appwrapper_is_charged_and_reported_at_its_admitted_size() -> None:
    state = ControllerState()
    state.forest = make_tree("t").node("root", gpu=64).build()
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "e"},
           "spec": {"parallelism": 4, "template": {"spec": {"containers": [
               {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}}
    rec = AppWrapperRecord.of({"metadata": {"name": "e", "namespace": "ns", "uid": "e",
                                            "resourceVersion": "1",
                             "generation": 1, "labels": {"t": "root"},
                             "annotations": {"workload.codeflare.dev/elastic": "true"}},
                "spec": {"schedulingSpec": {"minAvailable": 1},
                         "resources": {"GenericItems": [{"generictemplate": job}]}},
                "status": {"state": "Running", "clusterName": "spoke-1", "admittedPods": 2,
                           "fullPods": 4}})
    state.appwrappers[AppWrapperKey("ns/e")] = rec
    forest = Reports(hub=None, state=state).report_metrics()  # type: ignore[arg-type]
    assert forest.usage("t", "root")["nvidia.com/gpu"] == \
        ResourceList.of(nvidia_com_gpu=16)["nvidia.com/gpu"]  # 2 of its 4 pods
    sample = metrics.REGISTRY.get_sample_value
    assert sample("mcad_appwrapper_admitted_pods",
                  {"namespace": "ns", "name": "e", "size": "admitted"}) == 2
    assert sample("mcad_appwrapper_admitted_pods",
                  {"namespace": "ns", "name": "e", "size": "full"}) == 4


async def test_reporting_takes_at_most_its_share_of_the_controllers_time() -> None:
    assert pause_after(0.001) == REPORT_EVERY_S  # small: once a second
    assert pause_after(0.065) == pytest.approx(0.065 / REPORT_SHARE)  # 10,000: ~2 s
    assert 0.065 / (0.065 + pause_after(0.065)) <= REPORT_SHARE


async def test_a_slow_round_spaces_the_next_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop itself waits ``pause_after`` the round's work: rounds of 60 ms of work,
    asked for all the time, come every 2 s (60 ms / 3%), not every second."""
    clock = [0.0]
    monkeypatch.setattr(reports_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    reports = Reports(hub=None, state=ControllerState())  # type: ignore[arg-type]
    rounds: list[float] = []

    def slow_round() -> Any:
        rounds.append(asyncio.get_running_loop().time())
        clock[0] += 0.060
        reports.dirty()  # something changed again at once
        return ControllerState().forest

    monkeypatch.setattr(reports, "report_metrics", slow_round)
    reports.dirty()
    task = asyncio.create_task(reports.run())
    await asyncio.sleep(10.5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(rounds)]
    assert gaps == [2.0] * 5
