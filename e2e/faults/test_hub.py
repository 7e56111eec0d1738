"""The hub's API server frozen for 70 s, and restarted: the controller loses its Lease
(it stops writing), comes back, relists, and carries on: work queued before completes,
new work is dispatched, nothing is dispatched twice, and the process never exits."""

from __future__ import annotations

import asyncio
from pathlib import Path

from e2e.cluster import faults
from e2e.clusters import Cluster
from e2e.controller import ControllerProcess, create_aw, job_appwrapper, wait_state
from e2e.faults.conftest import SPOKES, paused


async def jobs_of(clusters: dict[str, Cluster], namespace: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for spoke in SPOKES:
        for job in (await clusters[spoke].batch.list_namespaced_job(namespace)).items:
            out[job.metadata.name] = out.get(job.metadata.name, 0) + 1
    return out


async def test_a_70s_hub_freeze_is_survived(mcad: ControllerProcess,
                                            clusters: dict[str, Cluster], aw_namespace: str,
                                            testbed_dir: Path) -> None:
    hub = clusters["hub"]
    await create_aw(hub, aw_namespace, job_appwrapper("before", pods=1, gpus=1, runtime="90s"))
    await wait_state(hub, aw_namespace, "before", "Running", within=60)
    starts = mcad.starts
    with paused(testbed_dir, "hub"):
        await asyncio.sleep(70)  # the fault itself is the wait: 70 s of a frozen hub
    assert mcad.proc is not None and mcad.proc.poll() is None, "mcad run exited"
    await create_aw(hub, aw_namespace, job_appwrapper("after", pods=1, gpus=1, runtime="2s"))
    await wait_state(hub, aw_namespace, "after", "Completed", within=90)
    await wait_state(hub, aw_namespace, "before", "Completed", within=120)
    assert await jobs_of(clusters, aw_namespace) == {"before": 1, "after": 1}
    assert mcad.starts == starts and mcad.proc.poll() is None
    assert mcad.sample("mcad_leader") == 1


async def test_a_hub_restart_is_survived(mcad: ControllerProcess, clusters: dict[str, Cluster],
                                         aw_namespace: str, testbed_dir: Path) -> None:
    hub = clusters["hub"]
    await create_aw(hub, aw_namespace, job_appwrapper("before", pods=2, gpus=2, runtime="20s"))
    await wait_state(hub, aw_namespace, "before", "Running", within=60)
    took = faults.restart(testbed_dir, "hub")
    assert took < 60
    await create_aw(hub, aw_namespace, job_appwrapper("after", pods=2, gpus=2, runtime="2s"))
    await wait_state(hub, aw_namespace, "after", "Completed", within=90)
    await wait_state(hub, aw_namespace, "before", "Completed", within=90)
    assert await jobs_of(clusters, aw_namespace) == {"before": 1, "after": 1}
    assert mcad.proc is not None and mcad.proc.poll() is None
