"""Fair sharing by ordering alone: a team that queued a long backlog first does not keep
a team that arrives later, within its own quota, waiting; nothing is evicted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.clusters import Cluster
from e2e.controller import ControllerProcess, controller_with, create_aw, job_appwrapper
from e2e.sharing.conftest import TREE, events_for, status_of
from e2e.waiting import wait_until


async def test_a_late_team_within_its_quota_goes_before_a_backlog_that_borrows(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path, two_teams: Callable[[ControllerProcess], Any]) -> None:
    hub, ns = clusters["hub"], aw_namespace

    def job(name: str, team: str, runtime: str) -> dict[str, Any]:
        return job_appwrapper(name, pods=1, gpus=4, runtime=runtime, labels={TREE: team})

    backlog = [f"a-{i}" for i in range(8)]
    late = ["b-0", "b-1"]
    with controller_with(mcad, tmp_path, preemption={"priority": False, "reclaim": False},
                         fairSharing=True) as controller:
        await two_teams(controller)
        for name in backlog:  # 32 GPUs of team-a work; the root holds 16 at a time
            await create_aw(hub, ns, job(name, "team-a", "15s"))

        async def first_four_running() -> bool:
            status = await status_of(hub, ns, backlog)
            return sum(1 for s in status.values() if s.get("state") == "Running") == 4

        await wait_until(first_four_running, within=60, what="team-a to fill the root")
        waiting = [n for n, s in (await status_of(hub, ns, backlog)).items()
                   if s.get("state") != "Running"]
        for name in late:  # team-b's own 8 GPUs, lent to team-a for now
            await create_aw(hub, ns, job(name, "team-b", "5s"))

        async def all_done() -> bool:
            status = await status_of(hub, ns, backlog + late)
            return all(s.get("state") == "Completed" for s in status.values())

        await wait_until(all_done, within=240, what="every job to complete")
        status = await status_of(hub, ns, backlog + late)
        requeues = {n: [r for r, _ in await events_for(hub, ns, n) if r == "Requeuing"]
                    for n in backlog + late}
        assert not any(requeues.values()), f"fair sharing by ordering took back {requeues}"
        dispatched = {n: s["dispatchTimestamp"] for n, s in status.items()}
        first_wave = sorted(dispatched[n] for n in backlog)[:4]
        # Team b came after team a's first wave, and went before team a's borrowing
        # backlog: as the first wave ended, b's two (within team-b's quota) and two of
        # a's (within team-a's) filled the root, in whatever order the first wave's jobs
        # ended; a's last two, which borrow, waited for b's to end. Ordered by age alone,
        # a's four would have gone first and b's after all of them.
        assert all(dispatched[b] > max(first_wave) for b in late), dispatched
        b_last = max(dispatched[b] for b in late)
        borrowers = sorted(waiting, key=lambda n: dispatched[n])[-2:]
        assert all(dispatched[n] > b_last for n in borrowers), (waiting, dispatched)
