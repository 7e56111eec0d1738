"""Reservation backfill (``backfill: reservation``) on the real test bed, spoke-1 only.

``a`` (3 x 8 GPUs, declares 25 s, its pods end after 20 s) runs; ``head`` (4 x 8 GPUs,
priority 9) waits for it and is promised all four nodes when ``a`` is expected to end.
Behind it two jobs of one 8-GPU pod fit now on the free node: ``short`` declares 5 s
and starts at once (it ends before the promise); ``long`` declares 10 minutes and waits
with ``WaitingForHeadOfLine``, its sentence naming the node and the head. Under MCAD's
rule (the default, 300 s before the head holds) ``long`` would have started and held
the head back for ten minutes. ``head`` starts when ``a`` ends, then ``long``.

A promise is kept: ``liar`` declares 5 s but runs ten minutes. It is backfilled ahead of
the waiting ``head`` on the promise to end by the head's reservation (recorded in its
status), and when that comes due it is preempted for the head (``Preempted``, the
sentence naming the head); the head starts within 10 s of its reservation.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from e2e.clusters import Cluster
from e2e.controller import (
    ControllerProcess,
    condition,
    controller_with,
    create_aw,
    get_aw,
    job_appwrapper,
    wait_state,
)
from e2e.waiting import wait_until


def on_spoke_1(name: str, *, pods: int, runtime: str | None, expected: int,
               priority: int = 0) -> dict[str, Any]:
    return job_appwrapper(name, pods=pods, gpus=8, runtime=runtime, priority=priority,
                          scheduling={"clusterScheduling": {"clusters": [{"name": "spoke-1"}]},
                                      "dispatchDuration": {"expected": expected}})


def moment(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_a_job_that_would_delay_the_heads_reservation_waits(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    with controller_with(mcad, tmp_path, backfill="reservation"):
        await create_aw(hub, ns, on_spoke_1("a", pods=3, runtime="20s", expected=25))

        async def a_runs() -> bool:
            return condition(await get_aw(hub, ns, "a"), "PodsReady").get("status") == "True"

        await wait_until(a_runs, within=60, what="a to run")
        a_ends = moment((await get_aw(hub, ns, "a"))["status"]["expectedEnd"])
        await create_aw(hub, ns, on_spoke_1("head", pods=4, runtime="2s", expected=10,
                                            priority=9))
        await wait_state(hub, ns, "head", "Pending", within=30)
        await create_aw(hub, ns, on_spoke_1("long", pods=1, runtime=None, expected=600))
        await create_aw(hub, ns, on_spoke_1("short", pods=1, runtime="2s", expected=5))

        async def long_waits_for_the_head() -> dict[str, Any] | None:
            queued = condition(await get_aw(hub, ns, "long"), "Queued")
            return queued if queued.get("reason") == "WaitingForHeadOfLine" else None

        queued = await wait_until(long_waits_for_the_head, within=30,
                                  what="long waiting for the head's reservation")
        assert queued["message"].startswith("it fits now, but it would take room on spoke-1/")
        assert f"reserved for {ns}/head from " in queued["message"]
        short = await wait_state(hub, ns, "short", "Completed", within=30)
        head = await get_aw(hub, ns, "head")
        assert head["status"].get("state") == "Pending"  # short went first, and ended
        assert moment(short["status"]["dispatchTimestamp"]) < a_ends

        head = await wait_state(hub, ns, "head", "Running", "Completed", within=60)
        late = (moment(head["status"]["dispatchTimestamp"]) - a_ends).total_seconds()
        assert late <= 5, f"the head started {late:.0f}s after its reservation"
        await wait_state(hub, ns, "long", "Running", within=60)


async def test_a_backfill_that_overruns_its_promise_is_preempted_for_the_head(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    with controller_with(mcad, tmp_path, backfill="reservation"):
        await create_aw(hub, ns, on_spoke_1("a", pods=3, runtime="25s", expected=30))

        async def a_runs() -> bool:
            return condition(await get_aw(hub, ns, "a"), "PodsReady").get("status") == "True"

        await wait_until(a_runs, within=60, what="a to run")
        reservation = moment((await get_aw(hub, ns, "a"))["status"]["expectedEnd"])
        await create_aw(hub, ns, on_spoke_1("head", pods=4, runtime="2s", expected=10,
                                            priority=9))
        await wait_state(hub, ns, "head", "Pending", within=30)
        await create_aw(hub, ns, on_spoke_1("liar", pods=1, runtime="600s", expected=5))
        liar = await wait_state(hub, ns, "liar", "Running", within=30)
        assert liar["status"]["backfillPromise"] == {
            "head": f"{ns}/head", "endBy": reservation.strftime("%Y-%m-%dT%H:%M:%SZ")}
        assert moment(liar["status"]["dispatchTimestamp"]) < reservation

        async def liar_preempted() -> dict[str, Any] | None:
            requeuing = condition(await get_aw(hub, ns, "liar"), "Requeuing")
            return requeuing if requeuing.get("reason") == "Preempted" else None

        requeuing = await wait_until(liar_preempted, within=60,
                                     what="liar preempted at the head's reservation")
        assert "started by reservation backfill on the promise to end by " in \
            requeuing["message"]
        assert f"before the reservation of {ns}/head; still running at " in \
            requeuing["message"]
        preempted = moment(requeuing["lastTransitionTime"])
        assert preempted >= reservation, "preempted before its promise came due"

        head = await wait_state(hub, ns, "head", "Running", "Completed", within=60)
        late = (moment(head["status"]["dispatchTimestamp"]) - reservation).total_seconds()
        print(f"liar preempted {(preempted - reservation).total_seconds():.0f}s and the head "
              f"started {late:.0f}s after the head's reservation")
        assert late <= 10, f"the head started {late:.0f}s after its reservation"
