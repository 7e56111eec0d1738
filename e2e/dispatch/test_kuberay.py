"""A RayCluster and a RayJob, each wrapped in an AppWrapper, under the real KubeRay operator.

The operator (``e2e.kuberay``: ray-operator v1.5.0, built from its Go module) runs
against spoke-1 only, whose API server gets the ray.io CRDs; spoke-2 does not serve the
kinds, so mcad sends these AppWrappers to spoke-1 (and ``mcad explain`` says why not
spoke-2). The operator makes the head and worker pods (KWOK runs them), and removes
them when mcad deletes the RayCluster. A RayJob is submitted by the operator itself
(``submissionMode: HTTPMode``) to its head's Jobs API, which ``e2e.kuberay.RayHeads``
answers (KWOK runs no Ray); the operator writes the RayJob's end
(``jobDeploymentStatus``, ``jobStatus``), and mcad completes the AppWrapper by it.

The manifests are v1beta1 AppWrappers, and the RayCluster once more as a v1beta2 one (the
same object as ``spec.components[0].template``, with mcad's conversion webhook
registered by URL for it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from e2e.cluster.stages import RUNTIME
from e2e.clusters import Cluster
from e2e.controller import mcad_output
from e2e.dispatch.conftest import AW, ControllerProcess, condition, create_aw, get_aw, wait_state
from e2e.kuberay import KubeRay
from e2e.v1beta2.conftest import webhooks_by_url
from e2e.waiting import wait_until

RAY = ("ray.io", "v1")
V1BETA2 = ("workload.codeflare.dev", "v1beta2", "appwrappers")
IMAGE = "rayproject/ray:2.46.0"


@pytest.fixture(scope="module")
def kuberay(clusters: dict[str, Cluster], kubectl_path: Path, pytestconfig: pytest.Config,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeRay]:
    """The operator on spoke-1, for this module's tests only (it is built the first time,
    a couple of minutes, saying so past pytest's capture as the test bed's build does)."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def say(message: str) -> None:
        with capture.global_and_fixture_disabled():
            print(f"[kuberay] {message}", file=sys.stderr, flush=True)

    operator = KubeRay.start(clusters["spoke-1"], kubectl_path,
                             tmp_path_factory.mktemp("kuberay"), log=say)
    try:
        yield operator
    finally:
        operator.stop(kubectl_path)


def ray_cluster_spec(*, workers: int, gpus: int) -> dict[str, Any]:
    """A head (1 CPU) and one worker group of ``workers`` pods x ``gpus`` GPUs."""
    def pod(name: str, requests: dict[str, str], limits: dict[str, str]) -> dict[str, Any]:
        return {"spec": {"containers": [{
            "name": name, "image": IMAGE,
            "resources": {"requests": requests, "limits": limits}}]}}

    return {
        "rayVersion": "2.46.0",
        "headGroupSpec": {"rayStartParams": {},
                          "template": pod("ray-head", {"cpu": "1", "memory": "2Gi"},
                                          {"memory": "2Gi"})},
        "workerGroupSpecs": [{
            "groupName": "gpu", "replicas": workers, "minReplicas": workers,
            "maxReplicas": workers, "rayStartParams": {},
            "template": pod("ray-worker", {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                            {"nvidia.com/gpu": str(gpus)})}],
    }


def appwrapper(name: str, obj: dict[str, Any], *, min_available: int) -> dict[str, Any]:
    """A v1beta1 AppWrapper of one object, its demand read off the object's templates."""
    return {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": name},
            "spec": {"schedulingSpec": {"minAvailable": min_available},
                     "resources": {"GenericItems": [{"replicas": 1, "generictemplate": obj}]}}}


def raycluster_appwrapper(name: str) -> dict[str, Any]:
    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name},
               "spec": ray_cluster_spec(workers=2, gpus=4)}
    return appwrapper(name, cluster, min_available=3)


def rayjob_appwrapper(name: str, *, runtime: str) -> dict[str, Any]:
    """A RayJob the operator submits itself (HTTPMode) whose Ray job runs ``runtime``;
    its RayCluster is removed when the job ends (shutdownAfterJobFinishes)."""
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name},
           "spec": {"entrypoint": "python -c 'import ray; ray.init()'",
                    "submissionMode": "HTTPMode", "shutdownAfterJobFinishes": True,
                    "metadata": {RUNTIME: runtime},
                    "rayClusterSpec": ray_cluster_spec(workers=2, gpus=4)}}
    return appwrapper(name, job, min_available=3)


async def pods_of(spoke: Cluster, namespace: str, cluster: str) -> list[Any]:
    listed = await spoke.core.list_namespaced_pod(
        namespace, label_selector=f"ray.io/cluster={cluster}")
    return list(listed.items)


async def dispatched_to(hub: Cluster, namespace: str, name: str) -> str:
    async def cluster() -> str | None:
        status = (await get_aw(hub, namespace, name)).get("status") or {}
        return str(status["clusterName"]) if status.get("clusterName") else None

    return await wait_until(cluster, within=60, what=f"{name} dispatched")


async def explain_dry_run(mcad: ControllerProcess, namespace: str, manifest: Path
                          ) -> dict[str, dict[str, Any]]:
    """``mcad explain -f``, as a user asks it: each cluster's verdict, by name."""
    code, out, err = await mcad_output("explain", "-f", str(manifest), "-n", namespace,
                                       "-o", "json", "--kubeconfig", str(mcad.hub_kubeconfig))
    assert code == 0, err
    return {c["cluster"]: c for c in json.loads(out)["clusters"]}


async def test_a_wrapped_raycluster_runs_on_the_spoke_that_serves_it_and_goes_with_it(
        kuberay: KubeRay, mcad: ControllerProcess, clusters: dict[str, Cluster],
        aw_namespace: str, tmp_path: Path) -> None:
    hub, spoke, ns = clusters["hub"], clusters["spoke-1"], aw_namespace
    # Created at once: until mcad's discovery (every 30 s) sees the CRDs on spoke-1, no
    # cluster serves the kind and it waits.
    await create_aw(hub, ns, raycluster_appwrapper("ray"))
    assert await dispatched_to(hub, ns, "ray") == "spoke-1"
    # Another like it, asked about: spoke-1 would take it, spoke-2 cannot.
    manifest = tmp_path / "another.yaml"
    manifest.write_text(yaml.safe_dump(raycluster_appwrapper("another")))
    verdicts = await explain_dry_run(mcad, ns, manifest)
    assert verdicts["spoke-1"]["ok"], verdicts
    assert (verdicts["spoke-2"]["ok"], verdicts["spoke-2"]["detail"]) == \
        (False, "does not serve RayCluster (ray.io/v1)")

    async def running() -> list[Any] | None:
        pods = await pods_of(spoke, ns, "ray")
        return pods if len(pods) == 3 and all(p.status.phase == "Running" for p in pods) \
            else None

    try:
        pods = await wait_until(running, within=90,
                                what="the operator's head and 2 worker pods running")
    except AssertionError as err:
        raise AssertionError(f"{err}\nkuberay-operator:\n{kuberay.log_tail()}") from None
    assert sorted(p.metadata.labels["ray.io/node-type"] for p in pods) == \
        ["head", "worker", "worker"]
    assert {ref.kind for p in pods for ref in p.metadata.owner_references} == {"RayCluster"}
    workers = [p for p in pods if p.metadata.labels["ray.io/node-type"] == "worker"]
    assert all(p.spec.containers[0].resources.limits["nvidia.com/gpu"] == "4"
               for p in workers)

    async def ready() -> bool:
        return condition(await get_aw(hub, ns, "ray"), "PodsReady").get("status") == "True"

    await wait_until(ready, within=60, what="the AppWrapper's 3 pods ready")
    aw = await get_aw(hub, ns, "ray")
    assert aw["status"]["state"] == "Running", aw["status"]

    await hub.custom.delete_namespaced_custom_object(*AW[:2], ns, AW[2], "ray")

    async def gone() -> bool:
        try:
            await spoke.custom.get_namespaced_custom_object(*RAY, ns, "rayclusters", "ray")
            return False
        except ApiException as err:
            if err.status != 404:
                raise
        return not await pods_of(spoke, ns, "ray")

    await wait_until(gone, within=90, what="the RayCluster and its pods removed from spoke-1")


async def test_a_wrapped_rayjob_completes_by_its_own_status(
        kuberay: KubeRay, mcad: ControllerProcess, clusters: dict[str, Cluster],
        aw_namespace: str) -> None:
    hub, spoke, ns = clusters["hub"], clusters["spoke-1"], aw_namespace
    await create_aw(hub, ns, rayjob_appwrapper("train", runtime="4s"))
    assert await dispatched_to(hub, ns, "train") == "spoke-1"

    async def ended() -> dict[str, Any] | None:
        job = await spoke.custom.get_namespaced_custom_object(*RAY, ns, "rayjobs", "train")
        status: dict[str, Any] = job.get("status") or {}
        return status if status.get("jobDeploymentStatus") in (
            "Complete", "Failed", "ValidationFailed") else None

    try:
        status = await wait_until(ended, within=120, what="the RayJob to end")
    except AssertionError as err:
        raise AssertionError(f"{err}\nkuberay-operator:\n{kuberay.log_tail()}") from None
    assert (status["jobDeploymentStatus"], status["jobStatus"]) == ("Complete", "SUCCEEDED"), \
        status
    # The operator made the RayCluster, waited for its pods, and submitted the job to
    # that cluster's head itself.
    head = f"{status['rayClusterName']}-head-svc.{ns}.svc.cluster.local:8265"
    assert (head, status["jobId"]) in kuberay.heads.runs, kuberay.heads.requests
    assert f"POST {head} /api/jobs/" in kuberay.heads.requests

    done = await wait_state(hub, ns, "train", "Completed", within=90)
    assert condition(done, "Completed").get("status") == "True", done["status"]

    async def shut_down() -> bool:  # shutdownAfterJobFinishes: by the operator
        return not await pods_of(spoke, ns, status["rayClusterName"])

    await wait_until(shut_down, within=30, what="the RayJob's RayCluster pods removed")


def v1beta2_appwrapper(name: str, obj: dict[str, Any]) -> dict[str, Any]:
    """The same object as an AppWrapper v1beta2 would wrap it: one component, its pod
    sets inferred by mcad as the AppWrapper project does (a RayCluster's head and each
    worker group)."""
    return {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": {"name": name}, "spec": {"components": [{"template": obj}]}}


async def test_a_v1beta2_raycluster_runs_on_the_spoke_that_serves_it_and_goes_with_it(
        kuberay: KubeRay, mcad: ControllerProcess, clusters: dict[str, Cluster],
        aw_namespace: str, kubectl_path: Path, tmp_path: Path) -> None:
    """Written as today's AppWrappers are (v1beta2, converted by mcad's webhook): the
    same RayCluster goes to spoke-1 only, its head and workers run, its v1beta2 phase
    is Running, and deleting the AppWrapper removes the RayCluster and its pods."""
    hub, spoke, ns = clusters["hub"], clusters["spoke-1"], aw_namespace
    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "ray2"},
               "spec": ray_cluster_spec(workers=2, gpus=4)}
    with webhooks_by_url(mcad, kubectl_path, hub, tmp_path):
        await hub.custom.create_namespaced_custom_object(
            *V1BETA2[:2], ns, V1BETA2[2], v1beta2_appwrapper("ray2", cluster))
        assert await dispatched_to(hub, ns, "ray2") == "spoke-1"

        async def running() -> str | None:
            pods = await pods_of(spoke, ns, "ray2")
            obj = await hub.custom.get_namespaced_custom_object(*V1BETA2[:2], ns, V1BETA2[2],
                                                                "ray2")
            phase = str((obj.get("status") or {}).get("phase", ""))
            return phase if len(pods) == 3 and all(p.status.phase == "Running"
                                                   for p in pods) and phase == "Running" \
                else None

        try:
            await wait_until(running, within=90, what="ray2's 3 pods running, phase Running")
        except AssertionError as err:
            raise AssertionError(f"{err}\nkuberay-operator:\n{kuberay.log_tail()}") from None
        await hub.custom.delete_namespaced_custom_object(*V1BETA2[:2], ns, V1BETA2[2], "ray2")

        async def gone() -> bool:
            try:
                await spoke.custom.get_namespaced_custom_object(*RAY, ns, "rayclusters",
                                                                "ray2")
                return False
            except ApiException as err:
                if err.status != 404:
                    raise
            return not await pods_of(spoke, ns, "ray2")

        await wait_until(gone, within=90, what="ray2 and its pods removed from spoke-1")
