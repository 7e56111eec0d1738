"""What a test bed is made of, and where its state lives on disk.

``TestbedSpec`` is what the user asked for (``up`` flags); ``TestbedState`` is what
the supervisor started (ports, pids), persisted as ``DIR/state.json`` so that
``status`` and ``down`` work from any process.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TestbedSpec:
    """The shape of the test bed: how many spokes, nodes and GPUs."""

    __test__ = False  # not a pytest test class, despite the name

    spokes: int = 2
    nodes: int = 4
    gpus_per_node: int = 8
    cpu_per_node: str = "32"
    memory_per_node: str = "256Gi"
    pods_per_node: int = 110
    hub_nodes: int = 0
    taint: bool = False
    topology: str = ""
    """``block=2,rack=2``: each spoke's nodes labelled ``mcad.test/block`` (``block-1``,
    ``block-2``) and ``mcad.test/rack`` (``rack-1``... within each block), in node order
    (``e2e.cluster.nodes.topology_labels``); empty: no such labels."""

    def cluster_names(self) -> list[str]:
        return ["hub", *(f"spoke-{i}" for i in range(1, self.spokes + 1))]

    def nodes_of(self, cluster: str) -> int:
        return self.hub_nodes if cluster == "hub" else self.nodes


@dataclass
class ClusterState:
    """One control plane: its apiserver port and its kubeconfig."""

    name: str
    port: int
    etcd_prefix: str
    kubeconfig: str


@dataclass
class TestbedState:
    """What the supervisor started; written to DIR/state.json."""

    __test__ = False

    spec: TestbedSpec
    etcd_port: int
    clusters: list[ClusterState]
    supervisor_pid: int = 0
    pids: dict[str, int] = field(default_factory=dict)
    phase: str = "starting"  # starting | ready | failed | stopped
    message: str = ""
    up_seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TestbedState:
        raw: dict[str, Any] = json.loads(text)
        raw["spec"] = TestbedSpec(**raw["spec"])
        raw["clusters"] = [ClusterState(**c) for c in raw["clusters"]]
        return cls(**raw)


def state_path(directory: Path) -> Path:
    return directory / "state.json"


def requests_dir(directory: Path) -> Path:
    """Where ``restart`` leaves requests for the supervisor (the owner of every process)."""
    path = directory / "requests"
    path.mkdir(exist_ok=True)
    return path


def read_state(directory: Path) -> TestbedState | None:
    path = state_path(directory)
    if not path.is_file():
        return None
    try:
        return TestbedState.from_json(path.read_text())
    except (ValueError, TypeError, KeyError):
        return None


def write_state(directory: Path, state: TestbedState) -> None:
    path = state_path(directory)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state.to_json())
    os.replace(tmp, path)


def free_ports(count: int) -> list[int]:
    """Distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); read its state to tell.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
