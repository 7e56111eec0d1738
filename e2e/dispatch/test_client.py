"""The Python client on the real test bed, as a notebook would use it: a plain Job is
submitted (wrapped as ``mcad wrap`` does), waited for with a progress line until it
completes, and deleted; an AppWrapper that cannot fit shows its place in the queue and
why, and is deleted while it waits."""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any

import pytest

from e2e.clusters import Cluster
from e2e.dispatch.conftest import ControllerProcess, job_appwrapper
from mcad.client import Client, McadError, QueuePosition


def plain_job(name: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {
                "metadata": {"annotations": {"mcad.test/runtime": "2s"}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "busybox",
                    "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "1"},
                                  "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}


async def test_submit_wait_and_delete_from_python(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    progress = io.StringIO()
    client = Client(mcad.hub_kubeconfig, namespace=aw_namespace, progress=progress)
    try:
        def run_it() -> tuple[str, str]:
            name = client.submit(plain_job("from-python", 4), priority=2)
            done = client.wait(name, "Completed", timeout=120, every=0.5)
            client.delete(name)
            with pytest.raises(McadError, match="there is no AppWrapper"):
                client.status(name)
            return name, done.state

        name, state = await asyncio.to_thread(run_it)
        assert (name, state) == ("from-python", "Completed")
        lines = progress.getvalue().splitlines()
        assert lines[-1].startswith(f"{aw_namespace}/from-python: Completed on spoke-")

        def queue_it() -> QueuePosition | None:
            # 16 GPUs in one pod: no node has them, so it waits with a reason.
            name = client.submit(job_appwrapper("too-big", pods=1, gpus=16))
            deadline = time.monotonic() + 30
            got = client.position(name)
            while got is None and time.monotonic() < deadline:
                time.sleep(0.5)
                got = client.position(name)
            client.delete(name)
            return got

        queued = await asyncio.to_thread(queue_it)
        assert queued is not None and queued.position >= 1
        assert queued.reason == "InsufficientCapacity"
        assert "does not fit even with nothing else running" in queued.message
    finally:
        await asyncio.to_thread(client.close)

