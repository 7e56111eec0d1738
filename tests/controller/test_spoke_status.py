"""The SpokeCluster status the controller writes, over the scripted hub and spoke (whose
status writes are JSON merge patches, as the API server applies them)."""

from __future__ import annotations

import contextlib

import pytest

from mcad.gateway import watch as watch_module
from tests.controller.seam import (
    GPU,
    Hub,
    SpokeJobs,
    job_appwrapper,
    run_controller,
    spoke_transport,
    until,
)

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]


@pytest.fixture(autouse=True)
def fast_watch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "BACKOFF_MIN_S", 0.01)


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
