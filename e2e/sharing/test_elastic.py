"""Elastic AppWrappers on the real test bed: start with the GPUs there are, grow when
more free up, shrink (not evict) for a higher-priority gang."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e.clusters import Cluster
from e2e.controller import (
    AW,
    ControllerProcess,
    condition,
    controller_with,
    create_aw,
    get_aw,
    job_appwrapper,
)
from e2e.sharing.conftest import events_for
from e2e.waiting import wait_until

ON_SPOKE_1 = {"clusterScheduling": {"clusters": [{"name": "spoke-1"}]}}


def elastic(name: str) -> dict[str, Any]:
    body = job_appwrapper(name, pods=4, gpus=8, runtime=None, min_available=1, priority=1,
                          scheduling=ON_SPOKE_1)
    body["metadata"]["annotations"] = {"workload.codeflare.dev/elastic": "true"}
    return body


async def running_pods(spoke: Cluster, namespace: str, job: str) -> int:
    pods = (await spoke.core.list_namespaced_pod(namespace, label_selector=f"job-name={job}"))
    return sum(1 for p in pods.items if p.status.phase == "Running"
               and not p.metadata.deletion_timestamp)


async def test_an_elastic_appwrapper_starts_small_grows_and_shrinks_instead_of_eviction(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    hub, spoke, ns = clusters["hub"], clusters["spoke-1"], aw_namespace
    fillers = [f"fill-{i}" for i in range(3)]
    with controller_with(mcad, tmp_path, preemption={"priority": True, "reclaim": True}) \
            as controller:
        for name in fillers:  # 24 of spoke-1's 32 GPUs
            await create_aw(hub, ns, job_appwrapper(name, pods=1, gpus=8, runtime=None,
                                                    scheduling=ON_SPOKE_1))

        async def fillers_ready() -> bool:
            for name in fillers:
                if condition(await get_aw(hub, ns, name), "PodsReady").get("status") != "True":
                    return False
            return True

        await wait_until(fillers_ready, within=60, what="the fillers to run")
        await create_aw(hub, ns, elastic("elastic"))

        async def size(pods: int) -> dict[str, Any] | None:
            obj = await get_aw(hub, ns, "elastic")
            status = obj.get("status") or {}
            if status.get("admittedPods") != pods or status.get("state") != "Running":
                return None
            job = await spoke.batch.read_namespaced_job("elastic", ns)
            if job.spec.parallelism != pods or await running_pods(spoke, ns, "elastic") != pods:
                return None
            return obj

        started = await wait_until(lambda: size(1), within=60, what="the elastic one at 1 pod")
        assert started["status"]["fullPods"] == 4

        async def gauge_says_one() -> bool:
            return controller.sample("mcad_appwrapper_admitted_pods", namespace=ns,
                                     name="elastic", size="admitted") == 1

        # The gauge is written by the periodic report, a few seconds after the status.
        await wait_until(gauge_says_one, within=15, what="the admitted-pods gauge to say 1")

        # Room appears: it grows to its full size.
        for name in fillers:
            await hub.custom.delete_namespaced_custom_object(*AW[:2], ns, AW[2], name)
        await wait_until(lambda: size(4), within=30, what="the elastic one to grow to 4")
        assert "Grown" in [r for r, _ in await events_for(hub, ns, "elastic")]

        # A higher-priority gang needs 16 GPUs: the elastic one shrinks, is not evicted.
        await create_aw(hub, ns, job_appwrapper("urgent", pods=2, gpus=8, runtime=None,
                                                priority=100, scheduling=ON_SPOKE_1))
        # From here until the urgent gang runs, the elastic one's admitted size only goes
        # down: growing back into the room it gives up was issue 19's race.
        sizes: list[int] = []

        async def urgent_ready() -> bool:
            elastic_now = (await get_aw(hub, ns, "elastic")).get("status") or {}
            if not sizes or sizes[-1] != elastic_now.get("admittedPods"):
                sizes.append(int(elastic_now.get("admittedPods") or 0))
            return condition(await get_aw(hub, ns, "urgent"), "PodsReady").get("status") \
                == "True"

        await wait_until(urgent_ready, within=60, what="the urgent gang to run",
                         interval=0.1)
        assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 2, sizes
        shrunk = await wait_until(lambda: size(2), within=10, what="the elastic one at 2")
        assert shrunk["status"].get("numberOfRequeueings", 0) == 0
        shrinks = [m for r, m in await events_for(hub, ns, "elastic") if r == "Shrunk"]
        assert shrinks and f"{ns}/urgent" in shrinks[0]
        # One shrink (an Event's count says how often it happened).
        listed = (await hub.core.list_namespaced_event(
            ns, field_selector="involvedObject.name=elastic")).items
        shrunk_events = [e for e in listed if e.reason == "Shrunk"]
        assert sum(e.count or 1 for e in shrunk_events) == 1, shrunk_events
