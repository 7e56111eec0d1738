"""Priority preemption on the real test bed: a high-priority gang that fits nowhere
evicts the fewest lower-priority AppWrappers on one cluster, each exactly once, runs,
and the evicted ones come back; a team under its quota reclaims what another borrowed,
also across a forest of two trees as MCAD does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.clusters import Cluster
from e2e.controller import (
    QST,
    ControllerProcess,
    condition,
    controller_with,
    create_aw,
    get_aw,
    job_appwrapper,
    subtree,
    wait_state,
)
from e2e.sharing.conftest import TREE, events_for, status_of
from e2e.waiting import wait_until

PAUSE = {"pauseTimeInSeconds": 2}
"""Victims may come back two seconds after they are gone (the default is 90)."""


async def wait_ready(hub: Cluster, namespace: str, *names: str, within: float = 60) -> None:
    """Every one of ``names`` runs with its gang's pods ready (bound to nodes)."""
    async def ready() -> bool:
        for name in names:
            if condition(await get_aw(hub, namespace, name), "PodsReady").get("status") != "True":
                return False
        return True

    await wait_until(ready, within=within, what=f"{names} to have their pods ready")


def filler(name: str, *, spoke: str | None = None, priority: int = 1) -> dict[str, Any]:
    """A 1 x 8-GPU job that runs until it is evicted or deleted."""
    scheduling: dict[str, Any] = {"clusterScheduling": {"clusters": [{"name": spoke}]}} \
        if spoke else {}
    return job_appwrapper(name, pods=1, gpus=8, runtime=None, priority=priority,
                          requeuing=PAUSE, scheduling=scheduling)


async def test_a_high_priority_gang_evicts_exactly_two_of_four_and_they_come_back(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    fillers = [f"low-{i}" for i in range(4)]
    with controller_with(mcad, tmp_path, preemption={"priority": True, "reclaim": True}):
        for name in fillers:  # spoke-1's four 8-GPU nodes, full
            await create_aw(hub, ns, filler(name, spoke="spoke-1"))
        await wait_ready(hub, ns, *fillers)
        first = {n: s["dispatchTimestamp"] for n, s in (await status_of(hub, ns, fillers)).items()}
        urgent = job_appwrapper("urgent", pods=2, gpus=8, runtime="4s", priority=100,
                                scheduling={"clusterScheduling": {
                                    "clusters": [{"name": "spoke-1"}]}})
        await create_aw(hub, ns, urgent)
        await wait_state(hub, ns, "urgent", "Completed", within=90)

        status = await status_of(hub, ns, fillers)
        evicted = sorted(n for n, s in status.items() if s.get("numberOfRequeueings"))
        assert len(evicted) == 2, {n: s.get("numberOfRequeueings") for n, s in status.items()}
        for name in evicted:
            assert status[name]["numberOfRequeueings"] == 1
            requeued = condition(await get_aw(hub, ns, name), "Requeuing")
            assert requeued["reason"] == "Preempted"
            assert f"{ns}/urgent" in requeued["message"]
            reasons = [r for r, _ in await events_for(hub, ns, name)]
            assert reasons.count("Preempted") == 1, reasons
        # The most recently dispatched went (equal GPUs and priority; the timestamps
        # have seconds, so equals are ordered by name).
        kept = [n for n in fillers if n not in evicted]
        assert max(first[n] for n in kept) <= min(first[n] for n in evicted), first
        preempting = [m for r, m in await events_for(hub, ns, "urgent") if r == "Preempting"]
        assert len(preempting) == 1
        assert all(f"{ns}/{n}" in preempting[0] for n in evicted), preempting

        # Once the urgent gang is done, the evicted come back and all four run again.
        await wait_ready(hub, ns, *fillers, within=60)
        again = await status_of(hub, ns, fillers)
        assert {n: s.get("numberOfRequeueings", 0) for n, s in again.items()} == \
            {n: int(n in evicted) for n in fillers}
        assert all(not s.get("preemptedBy") for s in again.values())


async def test_preemption_across_two_spokes_evicts_on_one_of_them(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    fillers = [f"low-{i}" for i in range(8)]
    with controller_with(mcad, tmp_path, preemption={"priority": True, "reclaim": True}):
        for name in fillers:  # both spokes' 4 x 8 GPUs, full
            await create_aw(hub, ns, filler(name))
        await wait_ready(hub, ns, *fillers)
        placed = {n: s["clusterName"] for n, s in (await status_of(hub, ns, fillers)).items()}
        assert sorted(placed.values()) == ["spoke-1"] * 4 + ["spoke-2"] * 4
        await create_aw(hub, ns, job_appwrapper("urgent", pods=2, gpus=8, runtime=None,
                                                priority=100))
        await wait_ready(hub, ns, "urgent", within=90)
        urgent = (await get_aw(hub, ns, "urgent"))["status"]
        status = await status_of(hub, ns, fillers)
        evicted = [n for n, s in status.items() if s.get("numberOfRequeueings")]
        assert len(evicted) == 2
        assert {placed[n] for n in evicted} == {urgent["clusterName"]}
        # Nothing else moved: the other spoke's four never noticed.
        assert all(s["clusterName"] == placed[n] for n, s in status.items()
                   if n not in evicted and s.get("clusterName"))


async def test_a_team_under_its_quota_reclaims_what_another_borrowed(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path, two_teams: Callable[[ControllerProcess], Any]) -> None:
    hub, ns = clusters["hub"], aw_namespace

    def team_job(name: str, team: str, priority: int) -> dict[str, Any]:
        return job_appwrapper(name, pods=1, gpus=8, runtime=None, priority=priority,
                              labels={TREE: team}, requeuing=PAUSE)

    # Reclaim only (the default): priority plays no part, team-a's jobs even rank higher.
    with controller_with(mcad, tmp_path, preemption={"priority": False, "reclaim": True}) \
            as controller:
        await two_teams(controller)
        await create_aw(hub, ns, team_job("a-own", "team-a", 5))
        await wait_ready(hub, ns, "a-own")
        await create_aw(hub, ns, team_job("a-borrowed", "team-a", 5))  # team-b's 8
        await wait_ready(hub, ns, "a-borrowed")
        await create_aw(hub, ns, team_job("b-own", "team-b", 0))
        await wait_ready(hub, ns, "b-own", within=90)
        status = await status_of(hub, ns, ["a-own", "a-borrowed", "b-own"])
        assert status["a-own"].get("numberOfRequeueings", 0) == 0
        assert status["a-borrowed"]["numberOfRequeueings"] == 1
        requeued = condition(await get_aw(hub, ns, "a-borrowed"), "Requeuing")
        assert requeued["reason"] == "Preempted" and f"{ns}/b-own" in requeued["message"]

        # The borrower waits for room again: root (16) is full with a-own and b-own.
        async def waits_for_quota() -> bool:
            obj = await get_aw(hub, ns, "a-borrowed")
            return condition(obj, "Queued").get("reason") == "QuotaExceeded"

        await wait_until(waits_for_quota, within=30, what="a-borrowed to wait for quota")
        assert controller.sample("mcad_quota_used", tree=TREE, node="team-b",
                                 resource="nvidia.com/gpu") == 8


async def test_reclaim_across_a_two_tree_forest_as_under_mcad(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    """MCAD's users charge every AppWrapper in two trees. context: root 16 over gold 8 and
    silver 8 (soft); service: root 16 over gold 16. silver/gold (2 x 8) runs, borrowing 8
    in the context tree and within its quota in the service tree; gold/gold (1 x 8, same
    priority) then reclaims: the borrower is requeued (Preempted) and gold/gold runs."""
    hub, ns = clusters["hub"], aw_namespace
    context, service = f"ctx_{ns[-6:]}", f"svc_{ns[-6:]}"
    trees = [subtree(context, f"{context}-root".replace("_", "-"), parent=None,
                     children=[("root", 16, True)]),
             subtree(context, f"{context}-teams".replace("_", "-"), parent="root",
                     children=[("gold", 8, False), ("silver", 8, False)]),
             subtree(service, f"{service}-root".replace("_", "-"), parent=None,
                     children=[("root", 16, True)]),
             subtree(service, f"{service}-teams".replace("_", "-"), parent="root",
                     children=[("gold", 16, False)])]
    for tree in trees:
        await hub.custom.create_namespaced_custom_object(*QST[:2], "kube-system", QST[2], tree)
    try:
        with controller_with(mcad, tmp_path, preemption=True) as controller:
            async def known() -> bool:
                return controller.sample("mcad_quota_limit", tree=service, node="gold",
                                         resource="nvidia.com/gpu") == 16

            await wait_until(known, within=30, what="the controller to load both trees")
            await create_aw(hub, ns, job_appwrapper(
                "silver-gold", pods=2, gpus=8, runtime=None, requeuing=PAUSE,
                labels={context: "silver", service: "gold"}))
            await wait_ready(hub, ns, "silver-gold")
            await create_aw(hub, ns, job_appwrapper(
                "gold-gold", pods=1, gpus=8, runtime=None,
                labels={context: "gold", service: "gold"}))
            await wait_ready(hub, ns, "gold-gold", within=90)
            borrower = await get_aw(hub, ns, "silver-gold")
            requeued = condition(borrower, "Requeuing")
            assert requeued["reason"] == "Preempted", requeued
            assert f"{ns}/gold-gold" in requeued["message"]
            assert borrower["status"]["numberOfRequeueings"] == 1
    finally:
        for tree in trees:
            await hub.custom.delete_namespaced_custom_object(*QST[:2], "kube-system", QST[2],
                                                             tree["metadata"]["name"])
