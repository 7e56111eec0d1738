"""One control plane of the test bed as tests use it, and kubectl against it.

Why a module of its own: the session fixtures (``e2e/conftest.py``) and the helpers that
drive ``mcad run`` (``e2e/controller.py``) both need it; here neither imports the other.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes_asyncio import client


@dataclass
class Cluster:
    """One control plane of the test bed, as tests use it."""

    name: str
    kubeconfig: Path
    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)


def kubectl(path: Path, cluster: Cluster, *args: str, within: float = 60) -> str:
    """kubectl, retried until it succeeds or ``within`` seconds pass: right after
    ``up`` an apiserver that answers /readyz may still be finishing post-start work."""
    deadline = time.monotonic() + within
    while True:
        proc = subprocess.run([str(path), "--kubeconfig", str(cluster.kubeconfig), *args],
                              capture_output=True, text=True, check=False, timeout=60)
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout
