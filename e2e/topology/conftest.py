"""Both spokes of the session's test bed in blocks and racks, for the topology tests.

The session's spokes have 4 nodes each; for these tests each gets 4 more, and all 8 are
labelled exactly as ``python -m e2e.cluster up --nodes 8 --topology block=2,rack=2``
labels them (``e2e.cluster.nodes``: nodes 1-2 block-1/rack-1, 3-4 block-1/rack-2, 5-6
block-2/rack-1, 7-8 block-2/rack-2), and each SpokeCluster names the levels
``mcad.test/block``, ``mcad.test/rack``, ``kubernetes.io/hostname``. Afterwards the extra
nodes, the labels and the levels go, so the tests after these see the test bed as it was.
Bringing up a second test bed for four tests would cost more than the tests.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.nodes import TOPOLOGY_PREFIX, node_manifest, node_name, topology_labels
from e2e.cluster.topology import TestbedSpec
from e2e.clusters import Cluster, kubectl
from e2e.controller import SPOKE, ControllerProcess
from e2e.waiting import wait_until
from mcad.core.workload.topology import HOSTNAME

TOPOLOGY = "block=2,rack=2"
NODES = 8
SPOKES = ("spoke-1", "spoke-2")
BLOCK, RACK = f"{TOPOLOGY_PREFIX}block", f"{TOPOLOGY_PREFIX}rack"
LEVELS = [BLOCK, RACK, HOSTNAME]
MERGE_PATCH = "application/merge-patch+json"


async def spoke_status(hub: Cluster, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = await hub.custom.get_cluster_custom_object(*SPOKE[:2], SPOKE[2], name)
    return dict(obj.get("status") or {})


@pytest.fixture(scope="module")
async def racked(mcad: ControllerProcess, clusters: dict[str, Cluster],
                 kubectl_path: Path, testbed: Any) -> AsyncIterator[None]:
    """Both spokes with 8 nodes in 2 blocks x 2 racks, and their levels registered."""
    hub = clusters["hub"]
    before = testbed.spec.nodes
    spec = TestbedSpec(nodes=NODES, gpus_per_node=testbed.spec.gpus_per_node,
                       cpu_per_node=testbed.spec.cpu_per_node,
                       memory_per_node=testbed.spec.memory_per_node, topology=TOPOLOGY)
    for spoke in SPOKES:
        cluster = clusters[spoke]
        for index in range(1, before + 1):
            labels = [f"{k}={v}" for k, v in topology_labels(index, NODES, TOPOLOGY).items()]
            kubectl(kubectl_path, cluster, "label", "node", node_name(spoke, index), *labels)
        extra = [node_manifest(spoke, index, spec) for index in range(before + 1, NODES + 1)]
        with tempfile.NamedTemporaryFile("w", suffix=".json") as document:
            json.dump({"apiVersion": "v1", "kind": "List", "items": extra}, document)
            document.flush()
            kubectl(kubectl_path, cluster, "create", "-f", document.name)
        await hub.custom.patch_cluster_custom_object(
            *SPOKE[:2], SPOKE[2], spoke, {"spec": {"topology": {"levels": LEVELS}}},
            _content_type=MERGE_PATCH)

    async def seen(nodes: int, racks: bool) -> bool:
        for spoke in SPOKES:
            status = await spoke_status(hub, spoke)
            summary = (status.get("topology") or {}).get("summary", "")
            if status.get("readyNodes") != nodes or ("per rack" in summary) != racks:
                return False
        return True

    await wait_until(lambda: seen(NODES, True), within=60,
                     what="both spokes seen with 8 nodes in racks")
    yield
    for spoke in SPOKES:
        cluster = clusters[spoke]
        await hub.custom.patch_cluster_custom_object(
            *SPOKE[:2], SPOKE[2], spoke, {"spec": {"topology": None}},
            _content_type=MERGE_PATCH)
        kubectl(kubectl_path, cluster, "delete", "node", "--wait=true",
                *(node_name(spoke, i) for i in range(before + 1, NODES + 1)))
        for index in range(1, before + 1):
            kubectl(kubectl_path, cluster, "label", "node", node_name(spoke, index),
                    f"{BLOCK}-", f"{RACK}-")
    await wait_until(lambda: seen(before, False), within=60,
                     what="both spokes back to 4 nodes without racks")
