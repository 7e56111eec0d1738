"""What the v1beta2 tests share: mcad with its webhooks registered by URL (the admission
webhook and the AppWrapper CRD's conversion webhook), reading AppWrappers in either
version, the samples of project-codeflare/appwrapper, and the test bed playing the
samples' containers.

The test bed runs no containers (KWOK): a pod runs until deleted. A sample's command
(``sleep 600``, ``sleep 15; exit 1``) is played by annotating its pods on the spoke as
the container would end (``mcad.test/runtime`` or ``mcad.test/fail-after``:
``e2e/cluster/stages.py``); the samples themselves are applied unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from e2e.cluster.topology import free_ports
from e2e.clusters import Cluster, kubectl
from e2e.controller import REPO, ControllerProcess
from mcad.api.conversion import CONVERSION_SERVICE_PORT

SAMPLES = REPO / "tests" / "fixtures" / "appwrapper-v1beta2"
GROUP = "workload.codeflare.dev"
CRD = "appwrappers.workload.codeflare.dev"
UID_LABEL = "workload.codeflare.dev/appwrapper-uid"


def webhook_args(port: int, url_port: int | None = None,
                 conversion_port: int | None = None) -> tuple[str, ...]:
    """Serve the webhooks on ``port``; register them at ``url_port`` (a proxy in front of
    several replicas) or ``port``; with ``conversion_port``, convert in a process of its
    own there, as the manifests do (``--conversion-address``)."""
    return ("--webhook-address", f"127.0.0.1:{port}",
            "--webhook-url", f"https://127.0.0.1:{url_port or port}",
            *(("--conversion-address", f"127.0.0.1:{conversion_port}")
              if conversion_port else ()))


def converting(kubectl_bin: Path, hub: Cluster) -> bool:
    """The CRD converts through a URL mcad registered, with its CA."""
    crd = json.loads(kubectl(kubectl_bin, hub, "get", "crd", CRD, "-o", "json"))
    client = crd["spec"]["conversion"]["webhook"]["clientConfig"]
    return bool(client.get("url") and client.get("caBundle"))


def restore(kubectl_bin: Path, hub: Cluster) -> None:
    """Put the webhooks back as the manifests have them: the URL-registered admission
    webhooks deleted (the validating one would refuse every AppWrapper once nothing
    serves it), the CRD converting through the Service again (as crds/ says, so applying
    it stays valid)."""
    kubectl(kubectl_bin, hub, "delete", "validatingwebhookconfiguration,"
            "mutatingwebhookconfiguration", "mcad", "--ignore-not-found")
    kubectl(kubectl_bin, hub, "patch", "crd", CRD, "--type=merge", "-p", json.dumps(
        {"spec": {"conversion": {"webhook": {"clientConfig": {
            "url": None, "caBundle": None, "service": {
                "namespace": "mcad-system", "name": "mcad-webhook", "path": "/convert",
                "port": CONVERSION_SERVICE_PORT}}}}}}))


@contextlib.contextmanager
def webhooks_by_url(mcad: ControllerProcess, kubectl_bin: Path, hub: Cluster,
                    log_dir: Path) -> Iterator[ControllerProcess]:
    """mcad with its webhooks registered at a loopback URL, instead of the session's, and
    its conversion in a process of its own, as the manifests run it (the failover test
    keeps it in the controller's server, behind its proxy)."""
    port, conversion_port = free_ports(2)
    own = ControllerProcess(mcad.hub_kubeconfig, log_dir, name="mcad-v1beta2",
                            extra_args=webhook_args(port, conversion_port=conversion_port))
    mcad.stop()
    try:
        own.start()
        deadline = time.monotonic() + 60
        while not converting(kubectl_bin, hub):
            assert time.monotonic() < deadline, "mcad did not register its conversion webhook"
            time.sleep(0.2)
        yield own
    finally:
        own.stop()
        restore(kubectl_bin, hub)
        mcad.start()


async def read(hub: Cluster, version: str, namespace: str, name: str) -> dict[str, Any]:
    """An AppWrapper as ``version`` (v1beta1 is stored; v1beta2 is converted by mcad)."""
    obj: dict[str, Any] = await hub.custom.get_namespaced_custom_object(
        GROUP, version, namespace, "appwrappers", name)
    return obj


async def phase(hub: Cluster, namespace: str, name: str) -> str:
    return str(((await read(hub, "v1beta2", namespace, name)).get("status") or {})
               .get("phase", ""))


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


@contextlib.asynccontextmanager
async def playing(spokes: dict[str, Cluster], namespace: str, uid: str,
                  annotation: dict[str, str]) -> AsyncIterator[list[str]]:
    """Until the block ends, annotate every pod of the AppWrapper ``uid`` on any spoke
    with ``annotation`` as it appears (the way its container would end); yields the
    names of the pods annotated so far."""
    done: list[str] = []

    async def play() -> None:
        while True:
            for spoke in spokes.values():
                try:
                    pods = await spoke.core.list_namespaced_pod(
                        namespace, label_selector=f"{UID_LABEL}={uid}")
                except ApiException:
                    continue
                for pod in pods.items:
                    if pod.metadata.name in done or pod.status.phase != "Running":
                        continue
                    await spoke.core.patch_namespaced_pod(
                        pod.metadata.name, namespace,
                        {"metadata": {"annotations": annotation}})
                    done.append(pod.metadata.name)
            await asyncio.sleep(0.5)

    task = asyncio.create_task(play())
    try:
        yield done
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
def spokes(clusters: dict[str, Cluster]) -> dict[str, Cluster]:
    return {name: c for name, c in clusters.items() if name != "hub"}
