"""The controller as end-to-end tests use it: ``mcad run`` as a subprocess, and helpers
to make, read and wait for AppWrappers.

The controller runs exactly as a user runs it, so tests see its metrics endpoint and
can kill and restart it. The session fixtures that start it (``mcad``) and give each
test a namespace (``aw_namespace``) live in ``e2e/conftest.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from e2e.cluster.topology import free_ports
from e2e.clusters import Cluster
from e2e.waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
AW = ("workload.codeflare.dev", "v1beta1", "appwrappers")
QST = ("quota.codeflare.dev", "v1alpha1", "quotasubtrees")
SPOKE = ("cluster.codeflare.dev", "v1alpha1", "spokeclusters")
NAMESPACE = "mcad-system"


@dataclass
class ControllerProcess:
    """``mcad run`` as a subprocess: start, kill, restart, scrape.

    It serves its metrics on loopback without a token (``--metrics-auth=false``, so
    tests can scrape them) and, unless its arguments say otherwise, the visibility API
    on a TLS port of its own, registered with the hub (``--visibility-url``): ``mcad
    queue`` and ``mcad explain`` reach it through the hub's API server, as a user's do.
    """

    hub_kubeconfig: Path
    log_dir: Path
    extra_args: tuple[str, ...] = ()
    name: str = "mcad-run"
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0
    tls_port: int = 0
    """Where it serves the visibility API (0: not served)."""
    starts: int = 0

    def start(self, *, wait_ready: bool = True) -> None:
        self.port, tls = free_ports(2)
        self.starts += 1
        log = (self.log_dir / f"{self.name}-{self.starts}.log").open("wb")
        own: list[str] = []
        if "--metrics-auth" not in " ".join(self.extra_args):
            own.append("--metrics-auth=false")
        self.tls_port = 0
        if "--webhook-address" not in self.extra_args:
            self.tls_port = tls
            own += ["--webhook-address", f"127.0.0.1:{tls}",
                    "--visibility-url", f"https://127.0.0.1:{tls}"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mcad.cli", "run", "--kubeconfig", str(self.hub_kubeconfig),
             "--metrics-address", f"127.0.0.1:{self.port}", "--log-level", "INFO",
             *own, *self.extra_args],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"mcad run exited with {self.proc.returncode}; see {log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as r:
                    if r.status == 200 and (not wait_ready or r.read() == b"ready"):
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("mcad run did not become ready in 60s")

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}-{self.starts}.log"

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

    def healthz(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as r:
            return str(r.read().decode())

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def sample(self, name: str, /, **labels: str) -> float | None:
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


@contextlib.contextmanager
def controller_with(mcad: ControllerProcess, tmp_path: Path, *, name: str = "mcad-own",
                    **settings: object) -> Iterator[ControllerProcess]:
    """Run a controller with ``settings`` in its config file instead of the session's
    (stopped meanwhile: two controllers would fight over the same AppWrappers)."""
    config = tmp_path / "mcad-config.yaml"
    config.write_text(yaml.safe_dump(settings))
    own = ControllerProcess(mcad.hub_kubeconfig, tmp_path, name=name,
                            extra_args=("--config", str(config)))
    mcad.stop()
    try:
        own.start()
        yield own
    finally:
        own.stop()
        mcad.start()


async def mcad_output(*args: str) -> tuple[int, str, str]:
    """Run the ``mcad`` command line in a subprocess, as a user would: exit code, stdout,
    stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mcad.cli", *args, cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def mcad_cli(*args: str) -> int:
    """``mcad_output``'s exit code (what it printed is shown when it fails)."""
    code, out, err = await mcad_output(*args)
    if code:
        print(out, err)
    return code


async def fill_spokes(hub: Cluster, namespace: str, count: int = 8) -> list[str]:
    """``count`` AppWrappers of one 8-GPU pod that run until deleted (8 fill both spokes
    of the session's test bed), once all their pods are ready; their names."""
    names = [f"fill-{i}" for i in range(count)]
    for name in names:
        await create_aw(hub, namespace, job_appwrapper(name, pods=1, gpus=8, runtime=None))

    async def all_running() -> bool:
        for name in names:
            if condition(await get_aw(hub, namespace, name), "PodsReady").get("status") \
                    != "True":
                return False
        return True

    await wait_until(all_running, within=90, what=f"{count} fillers to run")
    return names


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


def subtree(tree: str, name: str, *, parent: str | None,
            children: list[tuple[str, int, bool]]) -> dict[str, Any]:
    """A QuotaSubtree of ``tree`` in kube-system: children as (name, GPUs, hardLimit)."""
    return {
        "apiVersion": "quota.codeflare.dev/v1alpha1", "kind": "QuotaSubtree",
        "metadata": {"name": name, "namespace": "kube-system", "labels": {"tree": tree}},
        "spec": {**({"parent": parent} if parent else {}), "children": [
            {"name": child, "quotas": {"hardLimit": hard,
                                       "requests": {"nvidia.com/gpu": gpus}}}
            for child, gpus, hard in children]},
    }


async def create_aw(hub: Cluster, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = await hub.custom.create_namespaced_custom_object(
        *AW[:2], namespace, AW[2], body)
    return result


async def get_aw(hub: Cluster, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = await hub.custom.get_namespaced_custom_object(
        *AW[:2], namespace, AW[2], name)
    return result


async def aw_gone(hub: Cluster, namespace: str, name: str) -> bool:
    """True once the AppWrapper is gone from the hub."""
    try:
        await get_aw(hub, namespace, name)
    except ApiException as err:
        if err.status != 404:
            raise
        return True
    return False


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


