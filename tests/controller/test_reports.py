"""The controller's minute line: what is queued and running, and what moved since."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import pytest

from mcad import metrics
from mcad.controller.records import AppWrapperRecord
from mcad.controller.reports import Reports
from mcad.controller.state import ControllerState
from mcad.core.capacity import AppWrapperKey

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]


def record(name: str, status: dict[str, Any]) -> AppWrapperRecord:
    rec = AppWrapperRecord(obj={})
    rec.update({"metadata": {"name": name, "namespace": "ns", "uid": name,
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
