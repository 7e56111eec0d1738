"""Fixtures for the dispatcher's end-to-end tests: a real ``mcad run`` process on the
hub of the session's test bed, with spoke-1 and spoke-2 registered.

The controller runs as a subprocess, exactly as a user runs it, so tests see its
metrics endpoint and can kill and restart it. Each test gets a namespace; at the end
its AppWrappers are deleted and the test waits until the controller has removed
them (and so cleaned the spokes) before the next test starts.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from e2e.cluster.topology import free_ports
from e2e.conftest import Cluster
from e2e.waiting import wait_until
from mcad.cli.main import main as mcad_main

REPO = Path(__file__).resolve().parents[2]
AW = ("workload.codeflare.dev", "v1beta1", "appwrappers")
QST = ("quota.codeflare.dev", "v1alpha1", "quotasubtrees")
SPOKE = ("cluster.codeflare.dev", "v1alpha1", "spokeclusters")
NAMESPACE = "mcad-system"


@dataclass
class ControllerProcess:
    """``mcad run`` as a subprocess: start, kill, restart, scrape."""

    hub_kubeconfig: Path
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0
    starts: int = 0

    def start(self) -> None:
        self.port = free_ports(1)[0]
        self.starts += 1
        log = (self.log_dir / f"mcad-run-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mcad.cli", "run", "--kubeconfig", str(self.hub_kubeconfig),
             "--metrics-address", f"127.0.0.1:{self.port}", "--log-level", "INFO"],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"mcad run exited with {self.proc.returncode}; see {log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("mcad run did not become ready in 60s")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def sample(self, name: str, **labels: str) -> float | None:
        """One sample's value from /metrics (None when absent)."""
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            metric, _, rest = series.partition("{")
            got = ",".join(sorted(rest.rstrip("}").split(","))) if rest else ""
            if metric == name and got == want:
                return float(value)
        return None


@pytest.fixture(scope="session")
def mcad(hub_crds: Cluster, clusters: dict[str, Cluster], testbed: Any,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    by_name = {c.name: c for c in testbed.clusters}
    for spoke, zone in (("spoke-1", "east"), ("spoke-2", "west")):
        code = mcad_main(["cluster", "register", spoke, "--kubeconfig",
                          by_name[spoke].kubeconfig, "--label", f"zone={zone}",
                          "--hub-kubeconfig", by_name["hub"].kubeconfig])
        assert code == 0
    controller = ControllerProcess(Path(by_name["hub"].kubeconfig),
                                   tmp_path_factory.mktemp("mcad-run"))
    controller.start()
    yield controller
    controller.stop()


@pytest.fixture
async def aw_namespace(mcad: ControllerProcess, clusters: dict[str, Cluster]
                       ) -> AsyncIterator[str]:
    """A namespace for AppWrappers; afterwards they are deleted and the controller must
    have cleaned them up (finalizers gone) before the next test runs."""
    hub = clusters["hub"]
    name = f"aw-{uuid.uuid4().hex[:8]}"
    await hub.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    await hub.custom.delete_collection_namespaced_custom_object(*AW[:2], name, AW[2])

    async def gone() -> bool:
        listed = await hub.custom.list_namespaced_custom_object(*AW[:2], name, AW[2])
        return not listed["items"]

    await wait_until(gone, within=120, what=f"the AppWrappers of {name} to be cleaned up")
    await hub.core.delete_namespace(name)


async def mcad_cli(*args: str) -> int:
    """Run the ``mcad`` command line in a subprocess, as a user would."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mcad.cli", *args, cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode is not None
    if proc.returncode:
        print(out.decode(), err.decode())
    return proc.returncode


def job_appwrapper(name: str, *, pods: int, gpus: int, runtime: str | None = "2s",
                   min_available: int | None = None, priority: int = 0,
                   labels: dict[str, str] | None = None,
                   requeuing: dict[str, Any] | None = None,
                   annotations: dict[str, str] | None = None,
                   scheduling: dict[str, Any] | None = None) -> dict[str, Any]:
    """An MCAD v1 AppWrapper wrapping a batch/v1 Job of ``pods`` pods x ``gpus`` GPUs."""
    pod_annotations = dict(annotations or {})
    if runtime:
        pod_annotations["mcad.test/runtime"] = runtime
    spec: dict[str, Any] = {
        "priority": priority,
        "schedulingSpec": {"minAvailable": min_available if min_available is not None
                           else pods, **(scheduling or {})},
        "resources": {"GenericItems": [{
            "replicas": 1, "completionstatus": "Complete",
            "generictemplate": {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                         "template": {
                             "metadata": {"annotations": pod_annotations},
                             "spec": {"restartPolicy": "Never", "containers": [{
                                 "name": "main", "image": "busybox",
                                 "resources": {"requests": {"nvidia.com/gpu": str(gpus),
                                                            "cpu": "1"},
                                               "limits": {"nvidia.com/gpu": str(gpus)}}}]}}},
            }}]},
    }
    if requeuing:
        spec["schedulingSpec"]["requeuing"] = requeuing
    return {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


async def create_aw(hub: Cluster, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = await hub.custom.create_namespaced_custom_object(
        *AW[:2], namespace, AW[2], body)
    return result


async def get_aw(hub: Cluster, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = await hub.custom.get_namespaced_custom_object(
        *AW[:2], namespace, AW[2], name)
    return result


async def wait_state(hub: Cluster, namespace: str, name: str, *states: str,
                     within: float = 60) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        obj = await get_aw(hub, namespace, name)
        return obj if (obj.get("status") or {}).get("state") in states else None

    return await wait_until(reached, within=within, what=f"AppWrapper {name} in {states}")


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


