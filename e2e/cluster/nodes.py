"""Fake node manifests for KWOK.

Nodes carry the annotation KWOK selects on, report the capacity asked for, and are
schedulable for ordinary pods: no taint unless the test bed was started with
``--taint`` (then the usual KWOK taint ``kwok.x-k8s.io/node=fake:NoSchedule``).
"""

from __future__ import annotations

import json
from typing import Any

from e2e.cluster.topology import TestbedSpec

GPU = "nvidia.com/gpu"


def node_name(cluster: str, index: int) -> str:
    return f"{cluster}-node-{index}"


def node_manifest(cluster: str, index: int, spec: TestbedSpec) -> dict[str, Any]:
    name = node_name(cluster, index)
    capacity = {"cpu": spec.cpu_per_node, "memory": spec.memory_per_node,
                "pods": str(spec.pods_per_node)}
    if spec.gpus_per_node:
        capacity[GPU] = str(spec.gpus_per_node)
    node: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "type": "kwok",
                       "mcad.test/cluster": cluster},
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }
    if spec.taint:
        node["spec"]["taints"] = [{"key": "kwok.x-k8s.io/node", "value": "fake",
                                   "effect": "NoSchedule"}]
    return node


def nodes_document(cluster: str, spec: TestbedSpec) -> str:
    """All of one cluster's nodes as a JSON List (what ``kubectl create -f`` takes)."""
    items = [node_manifest(cluster, i, spec) for i in range(1, spec.nodes_of(cluster) + 1)]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
