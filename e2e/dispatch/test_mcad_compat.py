"""What MCAD's own users and tests rely on, tried as they would: MCAD's labels on
objects and pods (``resourceName``, the object's labels merged into its pod template),
a permanent creation error ending in Failed with the API server's sentence and nothing
left behind, and a queued AppWrapper that is Pending, says when the controller first saw
it, and goes at once when deleted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from e2e.clusters import Cluster, kubectl
from e2e.controller import aw_gone
from e2e.dispatch.conftest import (
    AW,
    ControllerProcess,
    condition,
    create_aw,
    get_aw,
    job_appwrapper,
    wait_state,
)
from e2e.waiting import holds_for, wait_until


def appwrapper(name: str, *templates: dict[str, Any], min_available: int = 1,
               spoke: str = "spoke-1") -> dict[str, Any]:
    return {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": name},
            "spec": {"schedulingSpec": {"minAvailable": min_available, "clusterScheduling": {
                "clusters": [{"name": spoke}]}},
                     "resources": {"GenericItems": [{"replicas": 1, "generictemplate": t}
                                                    for t in templates]}}}


CONTAINER = {"name": "main", "image": "busybox",
             "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "1"},
                           "limits": {"nvidia.com/gpu": "1"}}}


async def test_a_deployment_whose_selector_matches_only_after_mcads_label_merge_runs(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        kubectl_path: Path) -> None:
    hub, spoke = clusters["hub"], clusters["spoke-1"]
    # MCAD-style: the selector names the object's label; the pod template lacks it.
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "labels": {"app": "web"}},
                  "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                           "template": {"metadata": {"labels": {"tier": "front"}},
                                        "spec": {"containers": [CONTAINER]}}}}
    await create_aw(hub, aw_namespace, appwrapper("web", deployment, min_available=2))

    async def ready() -> bool:
        return condition(await get_aw(hub, aw_namespace, "web"),
                         "PodsReady").get("status") == "True"

    await wait_until(ready, within=60, what="the Deployment's two pods to be ready")
    names = kubectl(kubectl_path, spoke, "get", "pods", "-n", aw_namespace,
                     "-l", "resourceName=web,appwrapper.mcad.ibm.com=web,app=web",
                     "-o", "name").split()
    assert len(names) == 2, names


async def test_the_objects_label_wins_over_the_templates_so_the_selector_matches(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        kubectl_path: Path) -> None:
    """The shape MCAD's users wrote: object labels and selector say app=trainer, the pod
    template says app=echo. MCAD's merge writes the object's labels over the template's,
    so the spoke accepts it; a merge that kept the template's value would get a 422
    ("selector does not match template labels") and a Failed AppWrapper."""
    hub, spoke = clusters["hub"], clusters["spoke-1"]
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "trainer", "labels": {"app": "trainer"}},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "trainer"}},
                           "template": {"metadata": {"labels": {"app": "echo"}},
                                        "spec": {"containers": [CONTAINER]}}}}
    await create_aw(hub, aw_namespace, appwrapper("trainer", deployment))

    async def ready() -> dict[str, Any] | None:
        aw = await get_aw(hub, aw_namespace, "trainer")
        assert (aw.get("status") or {}).get("state") != "Failed", aw["status"]
        return aw if condition(aw, "PodsReady").get("status") == "True" else None

    running = await wait_until(ready, within=60, what="the Deployment's replica to be ready")
    assert running["status"]["state"] == "Running"
    names = kubectl(kubectl_path, spoke, "get", "pods", "-n", aw_namespace,
                     "-l", "app=trainer", "-o", "name").split()
    assert len(names) == 1, names


async def test_kubectl_finds_a_wrapped_jobs_pods_by_resource_name(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        kubectl_path: Path) -> None:
    hub = clusters["hub"]
    await create_aw(hub, aw_namespace, job_appwrapper("train", pods=3, gpus=1, runtime=None))
    running = await wait_state(hub, aw_namespace, "train", "Running")
    spoke = clusters[running["status"]["clusterName"]]

    async def three_pods() -> list[str] | None:
        out = kubectl(kubectl_path, spoke, "get", "pods", "-n", aw_namespace,
                       "-l", "resourceName=train", "-o", "name").split()
        return out if len(out) == 3 else None

    pods = await wait_until(three_pods, within=30, what="the Job's three pods")
    assert all(p.startswith("pod/train-") for p in pods)
    job = await spoke.batch.read_namespaced_job("train", aw_namespace)
    assert job.metadata.labels["resourceName"] == "train"
    assert job.metadata.labels["appwrapper.mcad.ibm.com"] == "train"


async def test_an_object_the_api_server_rejects_fails_the_appwrapper_and_leaves_nothing(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    hub, spoke = clusters["hub"], clusters["spoke-1"]
    settings = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                "data": {"lr": "0.1"}}
    bad_job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bad"},
               "spec": {"template": {"spec": {"restartPolicy": "Always",  # Jobs may not
                                              "containers": [CONTAINER]}}}}
    await create_aw(hub, aw_namespace, appwrapper("bad", settings, bad_job))
    failed = await wait_state(hub, aw_namespace, "bad", "Failed", within=15)
    reason = condition(failed, "Failed")
    assert reason["reason"] == "CreationRefused"
    assert "GenericItems[1] Job/bad was refused by cluster spoke-1" in reason["message"]
    assert "restartPolicy" in reason["message"]  # the API server's own sentence
    events = await hub.core.list_namespaced_event(
        aw_namespace, field_selector="involvedObject.name=bad")
    assert [e.reason for e in events.items if e.type == "Warning"] == ["CreationRefused"]

    async def nothing_left() -> bool:
        maps = (await spoke.core.list_namespaced_config_map(
            aw_namespace, label_selector="appwrapper.mcad.ibm.com=bad")).items
        jobs = (await spoke.batch.list_namespaced_job(aw_namespace)).items
        return not maps and not jobs

    await wait_until(nothing_left, within=15, what="the ConfigMap created first to be removed")
    await holds_for(nothing_left, seconds=3, what="nothing to be created again")


async def test_a_queued_mcad_appwrapper_is_pending_and_deleted_at_once(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    """A gang no node can hold (9 GPUs a pod, 8 a node) waits: state Pending and
    controllerfirsttimestamp, as MCAD writes them; deleted while queued, it is gone at
    once, as under MCAD: mcad's finalizer (put on when it is first seen, so the dispatch
    itself needs one write fewer) is removed in the same breath, nothing was created."""
    hub = clusters["hub"]
    await create_aw(hub, aw_namespace, job_appwrapper("too-big", pods=1, gpus=9, runtime=None))
    pending = await wait_state(hub, aw_namespace, "too-big", "Pending", within=30)
    first_seen = datetime.fromisoformat(pending["status"]["controllerfirsttimestamp"])
    created = datetime.fromisoformat(pending["metadata"]["creationTimestamp"])
    assert created - timedelta(seconds=1) <= first_seen <= datetime.now(UTC)
    assert condition(pending, "Queued")["status"] == "True"
    await hub.custom.delete_namespaced_custom_object(*AW[:2], aw_namespace, AW[2], "too-big")

    async def gone() -> bool:
        return await aw_gone(hub, aw_namespace, "too-big")

    await wait_until(gone, within=3, what="the queued AppWrapper to be gone")
