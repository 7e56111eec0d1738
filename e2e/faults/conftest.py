"""Fault tests share a controller with a short ``spokeLostSeconds`` and a sampler of where
each gang's pods run, and always thaw what they froze."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from e2e.cluster import faults
from e2e.clusters import Cluster
from e2e.controller import ControllerProcess, controller_with  # noqa: F401
from mcad.core.life.wrapping import UID_LABEL

SPOKES = ("spoke-1", "spoke-2")
SPOKE_LOST_SECONDS = 15


@contextlib.contextmanager
def paused(testbed_dir: Path, cluster: str) -> Iterator[None]:
    faults.pause(testbed_dir, cluster)
    try:
        yield
    finally:
        faults.resume(testbed_dir, cluster)


@dataclass
class Copies:
    """Where one AppWrapper's pods run, sampled every half second on every spoke.

    A sample of a spoke that does not answer within 2 s is None (unknown)."""

    clusters: dict[str, Cluster]
    namespace: str
    uid: str = ""
    samples: list[tuple[float, dict[str, int | None]]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def start(self, uid: str) -> None:
        self.uid = uid
        self.task = asyncio.create_task(self.run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def sample_once(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for spoke in SPOKES:
            try:
                pods = await asyncio.wait_for(self.clusters[spoke].core.list_namespaced_pod(
                    self.namespace, label_selector=f"{UID_LABEL}={self.uid}"), 2)
            except Exception:
                out[spoke] = None
                continue
            out[spoke] = sum(1 for p in pods.items if p.status.phase == "Running"
                             and not p.metadata.deletion_timestamp)
        return out

    async def run(self) -> None:
        while True:
            sample = await self.sample_once()
            self.samples.append((time.monotonic(), sample))  # when the answers were in
            await asyncio.sleep(0.5)

    def both_running(self) -> list[tuple[float, dict[str, int | None]]]:
        """Samples where two spokes answered and both ran pods of the gang."""
        return [(t, s) for t, s in self.samples
                if sum(1 for n in s.values() if n) > 1]


@pytest.fixture
async def copies(clusters: dict[str, Cluster], aw_namespace: str) -> AsyncIterator[Copies]:
    sampler = Copies(clusters, aw_namespace)
    yield sampler
    await sampler.stop()
