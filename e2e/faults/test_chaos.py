"""Chaos on the real test bed: two replicas of ``mcad run``, the leader killed with
``kill -9`` again and again while a burst of gangs runs on both spokes.

The promises under test are the two central ones: nothing is run twice and nothing is
lost. Every AppWrapper completes; a watch of the Jobs on both spokes, running through
the whole test, sees each AppWrapper's Job created at most 1 + its counted requeues
times, and never two of its Jobs alive at once (on one spoke or across both).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes_asyncio import watch

from e2e.clusters import Cluster
from e2e.controller import (
    ControllerProcess,
    create_aw,
    get_aw,
    job_appwrapper,
)
from e2e.waiting import wait_until

SPOKES = ("spoke-1", "spoke-2")
GANGS = 24
KILLS = 3


@dataclass
class JobLedger:
    """Every Job the spokes reported in one namespace: created how often, alive when."""

    created: dict[str, int] = field(default_factory=dict)
    alive: dict[str, set[str]] = field(default_factory=dict)
    """AppWrapper name -> uids of its Jobs not yet deleted (on any spoke)."""
    overlaps: list[str] = field(default_factory=list)

    def added(self, name: str, uid: str, spoke: str) -> None:
        alive = self.alive.setdefault(name, set())
        if uid in alive:
            return  # a relisted watch repeats an ADDED
        self.created[name] = self.created.get(name, 0) + 1
        if alive:
            self.overlaps.append(f"{name}: a Job on {spoke} while {sorted(alive)} alive")
        alive.add(uid)

    def deleted(self, name: str, uid: str) -> None:
        self.alive.get(name, set()).discard(uid)


async def follow_jobs(spoke: Cluster, namespace: str, ledger: JobLedger) -> None:
    """Feed ``ledger`` from a watch of the spoke's Jobs in ``namespace`` (forever)."""
    while True:
        stream = watch.Watch()
        try:
            async for event in stream.stream(spoke.batch.list_namespaced_job, namespace,
                                             timeout_seconds=300):
                job = event["object"]
                if event["type"] == "DELETED":
                    ledger.deleted(job.metadata.name, job.metadata.uid)
                elif event["type"] == "ADDED":
                    ledger.added(job.metadata.name, job.metadata.uid, spoke.name)
        finally:
            stream.stop()


def leader_of(replicas: list[ControllerProcess]) -> ControllerProcess | None:
    for replica in replicas:
        with contextlib.suppress(OSError):
            if replica.proc is not None and replica.proc.poll() is None and \
                    replica.sample("mcad_leader") == 1:
                return replica
    return None


async def test_killing_the_leader_again_and_again_runs_every_gang_once(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    second = ControllerProcess(mcad.hub_kubeconfig, tmp_path, name="replica-b")
    second.start(wait_ready=False)
    replicas = [mcad, second]
    ledger = JobLedger()
    watchers = [asyncio.create_task(follow_jobs(clusters[s], ns, ledger)) for s in SPOKES]
    names = [f"gang-{i}" for i in range(GANGS)]
    kills: list[float] = []
    try:
        for name in names:  # 24 gangs of 2 x 8 GPUs on 64 GPUs: six waves
            await create_aw(hub, ns, job_appwrapper(name, pods=2, gpus=8, runtime="8s"))
        started = time.monotonic()
        for _ in range(KILLS):
            leader = await wait_until(lambda: asyncio.to_thread(leader_of, replicas),
                                      within=60, what="a leader")
            await asyncio.sleep(4)  # let it dispatch and create for a while, then kill it
            leader.kill()
            kills.append(time.monotonic() - started)
            leader.start(wait_ready=False)  # back as a standby; the other takes over

        async def all_done() -> dict[str, dict[str, object]] | None:
            statuses = {n: (await get_aw(hub, ns, n)).get("status") or {} for n in names}
            states = {s.get("state") for s in statuses.values()}
            return statuses if states == {"Completed"} else None

        statuses = await wait_until(all_done, within=300, what="every gang to complete")
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        second.stop()
        if mcad.proc is None or mcad.proc.poll() is not None:
            mcad.start()
    assert ledger.overlaps == []
    for name in names:
        requeues = int(statuses[name].get("numberOfRequeueings", 0) or 0)
        assert 1 <= ledger.created.get(name, 0) <= 1 + requeues, (name, ledger.created,
                                                                  statuses[name])
    assert len(kills) == KILLS
