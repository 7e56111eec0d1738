"""Fake node manifests for KWOK.

Nodes carry the annotation KWOK selects on, report the capacity asked for, and are
schedulable for ordinary pods: no taint unless the test bed was started with
``--taint`` (then the usual KWOK taint ``kwok.x-k8s.io/node=fake:NoSchedule``). With
``--topology block=2,rack=2`` each spoke's nodes are split evenly, in name order, into
blocks of racks, labelled ``mcad.test/block`` and ``mcad.test/rack`` (rack values repeat
across blocks, as Kueue allows: a domain is the path of values from the top).
"""

from __future__ import annotations

import json
from typing import Any

from e2e.cluster.topology import TestbedSpec

GPU = "nvidia.com/gpu"
TOPOLOGY_PREFIX = "mcad.test/"
"""Topology level labels are ``mcad.test/<level>`` (``mcad.test/block``, ...)."""


class TopologyError(ValueError):
    """A ``--topology`` that cannot label the nodes; the message says why."""


def topology_levels(topology: str) -> list[tuple[str, int]]:
    """``block=2,rack=2`` as (level, domains per parent), broadest first."""
    out = []
    for part in (p.strip() for p in topology.split(",") if p.strip()):
        name, _, count = part.partition("=")
        if not name.isidentifier() or not count.isdigit() or int(count) < 1:
            raise TopologyError(f"--topology {topology!r}: {part!r} is not level=count "
                                "(e.g. block=2,rack=2)")
        out.append((name, int(count)))
    return out


def topology_labels(index: int, nodes: int, topology: str) -> dict[str, str]:
    """The level labels of node ``index`` (1-based) of ``nodes`` under ``topology``."""
    levels = topology_levels(topology)
    if not levels:
        return {}
    leaves = 1
    for _, count in levels:
        leaves *= count
    if nodes % leaves:
        raise TopologyError(f"--topology {topology}: {nodes} nodes do not split evenly into "
                            f"{leaves} domains of the last level; use a multiple of {leaves}")
    leaf = (index - 1) // (nodes // leaves)
    values = []
    for name, count in reversed(levels):
        values.append((f"{TOPOLOGY_PREFIX}{name}", f"{name}-{leaf % count + 1}"))
        leaf //= count
    return dict(reversed(values))


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
                       "mcad.test/cluster": cluster,
                       **(topology_labels(index, spec.nodes_of(cluster), spec.topology)
                          if cluster != "hub" else {})},
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
