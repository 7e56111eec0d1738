"""Topology-aware gangs on the test bed: two spokes of 8 nodes x 8 GPUs, each in 2
blocks x 2 racks (``conftest.py``), the session's ``mcad run`` choosing the cluster and
the rack together, and the spokes' kube-scheduler (with coscheduling) keeping each gang
inside what mcad chose, through the node affinity mcad injects.

Each test first fills GPUs with plain pods bound to chosen nodes (``fill``), so that the
free room is where the test needs it, then submits one AppWrapper and looks at where its
pods really run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client

from e2e.cluster.nodes import node_name
from e2e.clusters import Cluster
from e2e.controller import ControllerProcess, create_aw, get_aw, job_appwrapper, wait_state
from e2e.topology.conftest import BLOCK, RACK, spoke_status
from e2e.waiting import holds_for, wait_until
from mcad.core.life.wrapping import WORKLOAD_LABEL
from mcad.core.workload.topology import PREFERRED_ANNOTATION, REQUIRED_ANNOTATION

pytestmark = pytest.mark.usefixtures("racked")
GPU = "nvidia.com/gpu"
Fill = Callable[[str, dict[int, int]], Awaitable[None]]
LOAD = {"spoke-1": {2: 8, 4: 8, 6: 8, 8: 8}, "spoke-2": {2: 8, 4: 8, 6: 8}}
"""Whole free nodes: spoke-1 1, 3, 5, 7 (one per rack); spoke-2 1, 3, 5 and 7, 8."""


@pytest.fixture
async def fill(clusters: dict[str, Cluster], namespace: str) -> AsyncIterator[Fill]:
    """``await fill(spoke, {node index: GPUs})``: plain pods bound to those nodes, taking
    those GPUs until the test ends (then deleted, and waited for)."""
    made: list[tuple[str, str]] = []

    async def take(spoke: str, gpus: dict[int, int]) -> None:
        core = clusters[spoke].core
        for index, count in gpus.items():
            name = f"filler-{index}"
            await core.create_namespaced_pod(namespace, client.V1Pod(
                metadata=client.V1ObjectMeta(name=name),
                spec=client.V1PodSpec(node_name=node_name(spoke, index),
                                      restart_policy="Never",
                                      containers=[client.V1Container(
                                          name="main", image="busybox",
                                          resources=client.V1ResourceRequirements(
                                              requests={GPU: str(count)},
                                              limits={GPU: str(count)}))])))
            made.append((spoke, name))
        wanted = sum(gpus.values())

        async def counted() -> bool:
            status = await spoke_status(clusters["hub"], spoke)
            return int((status.get("free") or {}).get(GPU, "0")) <= 64 - wanted

        try:
            await wait_until(counted, within=30, what=f"mcad to count the fillers on {spoke}")
        except AssertionError as err:
            pods = await core.list_pod_for_all_namespaces()
            seen = [(p.metadata.namespace, p.metadata.name, p.spec.node_name, p.status.phase)
                    for p in pods.items]
            status = await spoke_status(clusters["hub"], spoke)
            raise AssertionError(f"{err}; SpokeCluster status: {status}; pods: {seen}") from None

    yield take
    for spoke, name in made:
        await clusters[spoke].core.delete_namespaced_pod(name, namespace,
                                                          grace_period_seconds=0)
    for spoke in {s for s, _ in made}:
        async def gone(spoke: str = spoke) -> bool:
            pods = await clusters[spoke].core.list_namespaced_pod(namespace)
            return not pods.items
        await wait_until(gone, within=60, what=f"the fillers on {spoke} to go")


async def pods_of(cluster: Cluster, namespace: str, name: str) -> list[client.V1Pod]:
    listed = await cluster.core.list_namespaced_pod(
        namespace, label_selector=f"{WORKLOAD_LABEL}={name}")
    return list(listed.items)


async def running_domains(clusters: dict[str, Cluster], namespace: str, name: str,
                          spoke: str, pods: int) -> list[tuple[str, str]]:
    """(block, rack) of each of the gang's pods once all of them run on ``spoke``."""
    cluster = clusters[spoke]

    async def running() -> list[client.V1Pod]:
        found = await pods_of(cluster, namespace, name)
        return found if len(found) == pods and all(
            p.status.phase == "Running" for p in found) else []

    found = await wait_until(running, within=60, what=f"{name}'s {pods} pods running")
    out = []
    for pod in found:
        node = await cluster.core.read_node(pod.spec.node_name)
        out.append((node.metadata.labels[BLOCK], node.metadata.labels[RACK]))
    return sorted(out)


def rack_gang(name: str, *, pods: int, gpus: int = 8, asked: dict[str, str] | None = None,
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return job_appwrapper(name, pods=pods, gpus=gpus, runtime="60s", annotations=annotations,
                          scheduling={"topology": asked} if asked else None)


async def test_a_required_rack_gang_runs_where_a_rack_is_free_only_on_spoke_2(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        fill: Fill) -> None:
    """spoke-1 has one whole free node in each rack (32 GPUs: best-fit alone would choose
    it, the tighter fit); spoke-2 one in each of three racks and all of block-2/rack-2
    (40 GPUs): the gang goes to that rack, whole."""
    await fill("spoke-1", LOAD["spoke-1"])
    await fill("spoke-2", LOAD["spoke-2"])
    await create_aw(clusters["hub"], aw_namespace,
                    rack_gang("train", pods=2, asked={"required": RACK}))
    obj = await wait_state(clusters["hub"], aw_namespace, "train", "Running")
    assert obj["status"]["clusterName"] == "spoke-2"
    assert obj["status"]["topology"]["domains"] == [
        ["block-2", "rack-2", node_name("spoke-2", 7)],
        ["block-2", "rack-2", node_name("spoke-2", 8)]]
    assert await running_domains(clusters, aw_namespace, "train", "spoke-2", 2) == [
        ("block-2", "rack-2"), ("block-2", "rack-2")]


async def test_a_required_rack_gang_that_fits_in_no_rack_waits_with_the_sentence(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        fill: Fill) -> None:
    """Every node of both spokes has 4 GPUs free: 64 in all, scattered, and no rack (nor
    node) has room for a pod of 8."""
    for spoke in ("spoke-1", "spoke-2"):
        await fill(spoke, dict.fromkeys(range(1, 9), 4))
    hub = clusters["hub"]
    await create_aw(hub, aw_namespace, rack_gang("train", pods=2, asked={"required": RACK}))

    async def waiting() -> str:
        obj = await get_aw(hub, aw_namespace, "train")
        return str((obj.get("status") or {}).get("message", ""))

    message = await wait_until(waiting, within=30, what="train to say why it waits")
    assert "no rack holds the whole gang (16 nvidia.com/gpu), as its required rack " \
           "(mcad.test/rack) asks: the closest, rack block-1/rack-1, has 8 nvidia.com/gpu " \
           "free: no node has 8 free nvidia.com/gpu" in message
    free = [int((await spoke_status(hub, s))["free"][GPU]) for s in ("spoke-1", "spoke-2")]
    assert free == [32, 32]

    async def still_pending() -> bool:
        obj = await get_aw(hub, aw_namespace, "train")
        pods = [p for s in ("spoke-1", "spoke-2")
                for p in await pods_of(clusters[s], aw_namespace, "train")]
        return obj["status"].get("state") == "Pending" and not pods

    await holds_for(still_pending, seconds=5, what="train to stay pending with no pods")


async def test_a_preferred_block_gang_spans_as_few_racks_as_the_free_nodes_allow(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        fill: Fill) -> None:
    """spoke-1's whole free nodes: 1 (block-1/rack-1), 3 (block-1/rack-2), 5, 6
    (block-2/rack-1) and 7 (block-2/rack-2); spoke-2 is full. A 3 x 8 gang fits in no
    rack; block-2 holds it in two racks (block-1 holds only two of its pods)."""
    await fill("spoke-1", {2: 8, 4: 8, 8: 8})
    await fill("spoke-2", dict.fromkeys(range(1, 9), 8))
    await create_aw(clusters["hub"], aw_namespace,
                    rack_gang("train", pods=3, asked={"preferred": BLOCK}))
    await wait_state(clusters["hub"], aw_namespace, "train", "Running")
    assert await running_domains(clusters, aw_namespace, "train", "spoke-1", 3) == [
        ("block-2", "rack-1"), ("block-2", "rack-1"), ("block-2", "rack-2")]


async def test_a_kueue_annotated_pod_template_gets_the_same_result(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        fill: Fill) -> None:
    """The first test's load, the gang asking with Kueue's annotation instead; a
    preferred annotation on it too is outranked by the required one."""
    await fill("spoke-1", LOAD["spoke-1"])
    await fill("spoke-2", LOAD["spoke-2"])
    await create_aw(clusters["hub"], aw_namespace, rack_gang(
        "kueue", pods=2, annotations={REQUIRED_ANNOTATION: RACK, PREFERRED_ANNOTATION: BLOCK}))
    obj = await wait_state(clusters["hub"], aw_namespace, "kueue", "Running")
    assert obj["status"]["clusterName"] == "spoke-2"
    assert await running_domains(clusters, aw_namespace, "kueue", "spoke-2", 2) == [
        ("block-2", "rack-2"), ("block-2", "rack-2")]
