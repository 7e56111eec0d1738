"""One control plane of the test bed as tests use it, and kubectl against it.

Why a module of its own: the session fixtures (``e2e/conftest.py``) and the helpers that
drive ``mcad run`` (``e2e/controller.py``) both need it; here neither imports the other.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Iterator
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


@contextlib.contextmanager
def kubectl_proxy(path: Path, kubeconfig: Path) -> Iterator[str]:
    """``kubectl proxy`` as the user of ``kubeconfig``, on a free loopback port: the way a
    person opens the web view (``/apis/visibility.codeflare.dev/v1alpha1/views/page``)
    without handing a token to the browser. Yields its base URL."""
    proc = subprocess.Popen([str(path), "--kubeconfig", str(kubeconfig), "proxy",
                             "--port=0", "--address=127.0.0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert match, f"kubectl proxy said {line!r}"
        yield f"http://127.0.0.1:{match.group(1)}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
