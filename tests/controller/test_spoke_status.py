"""The SpokeCluster status the controller writes, over the scripted hub and spoke (whose
status writes are JSON merge patches, as the API server applies them)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest

from mcad.gateway import watch as watch_module
from tests.controller.seam import (
    GPU,
    Hub,
    SpokeJobs,
    job_appwrapper,
    run_controller,
    spoke_transport,
)

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]


@pytest.fixture(autouse=True)
def fast_watch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "BACKOFF_MIN_S", 0.01)


async def until(what: str, check: Callable[[], object], within: float = 60) -> None:
    for _ in range(int(within * 10)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not {what} after {within}s")


async def test_no_gpu_free_is_written_as_zero_not_left_at_its_last_value() -> None:
    hub, spoke = Hub(), spoke_transport(nodes=1)
    jobs = SpokeJobs(spoke)
    hub.add(job_appwrapper("train", pods=1, gpus=8))

    def free() -> str | None:
        return ((hub.spoke_cluster.get("status") or {}).get("free") or {}).get(GPU)

    async with contextlib.asynccontextmanager(run_controller)(hub, spoke):
        await until("8 GPUs free reported", lambda: free() == "8")
        await until("the Job created", lambda: "train" in jobs.jobs)
        jobs.pod("train", 0, node="n0")
        await until("no GPU free reported", lambda: free() == "0")
