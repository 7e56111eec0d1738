"""Odd AppWrappers: one of about 700 kB (a large ConfigMap beside a Job, one watch event
longer than aiohttp's line limit) dispatches without harming the controller; a spec
changed after dispatch is applied through a requeue that deletes what the old spec
created (renamed items included); a kind only one spoke serves goes only there, and a
kind no spoke serves waits with a sentence that says so."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import yaml

from e2e.clusters import Cluster
from e2e.controller import (
    AW,
    ControllerProcess,
    condition,
    create_aw,
    get_aw,
    job_appwrapper,
    wait_state,
)
from e2e.faults.conftest import SPOKES
from e2e.waiting import wait_until


async def test_a_700_kb_appwrapper_dispatches_without_harming_the_controller(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    hub = clusters["hub"]
    body = job_appwrapper("big", pods=1, gpus=1, runtime="2s")
    data = {f"k{i}": "x" * 7000 for i in range(100)}  # 700 kB
    body["spec"]["resources"]["GenericItems"].append({"generictemplate": {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big-data"},
        "data": data}})
    await create_aw(hub, aw_namespace, body)
    done = await wait_state(hub, aw_namespace, "big", "Completed", within=90)
    spoke = clusters[done["status"]["clusterName"]]
    config_map = await spoke.core.read_namespaced_config_map("big-data", aw_namespace)
    assert len(config_map.data) == 100 and config_map.data["k99"] == "x" * 7000
    assert mcad.healthz() == "ok"
    assert (mcad.sample("mcad_task_restarts_total", task="watch appwrappers") or 0) == 0
    # Something small still goes through right after.
    await create_aw(hub, aw_namespace, job_appwrapper("small", pods=1, gpus=1, runtime="1s"))
    await wait_state(hub, aw_namespace, "small", "Completed", within=60)


async def test_a_spec_changed_after_dispatch_is_applied_through_a_requeue(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    hub = clusters["hub"]
    await create_aw(hub, aw_namespace, job_appwrapper("edited", pods=1, gpus=1, runtime=None))
    running = await wait_state(hub, aw_namespace, "edited", "Running", within=60)
    spoke = clusters[running["status"]["clusterName"]]
    await wait_until(lambda: _job_exists(spoke, aw_namespace, "edited"), within=30,
                     what="the first Job")
    # The user renames the Job and asks for 2 pods: the old Job must not be left behind.
    obj = await get_aw(hub, aw_namespace, "edited")
    item = obj["spec"]["resources"]["GenericItems"][0]["generictemplate"]
    item["metadata"]["name"] = "edited-v2"
    item["spec"]["parallelism"] = item["spec"]["completions"] = 2
    obj["spec"]["schedulingSpec"]["minAvailable"] = 2
    await hub.custom.replace_namespaced_custom_object(*AW[:2], aw_namespace, AW[2], "edited",
                                                      obj)

    async def reapplied() -> dict[str, Any] | None:
        # The Jobs first, then the AppWrapper: read the other way round, the whole requeue
        # and the new dispatch could fall between the two reads, and the AppWrapper read
        # would be the old run's (no Requeuing condition yet) beside the new run's Job.
        names: set[str] = set()
        for spoke_name in SPOKES:
            names |= {j.metadata.name for j in
                      (await clusters[spoke_name].batch.list_namespaced_job(aw_namespace)).items}
        current = await get_aw(hub, aw_namespace, "edited")
        ok = current["status"].get("state") == "Running" and names == {"edited-v2"}
        return current if ok else None

    current = await wait_until(reapplied, within=90, what="the new spec to run alone")
    assert condition(current, "Requeuing")["reason"] == "SpecChanged"
    assert current["status"]["numberOfRequeueings"] == 0
    assert [c["name"] for c in current["status"]["componentStatus"]] == ["edited-v2"]


async def test_a_kind_only_one_spoke_serves_goes_only_there(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        kubectl_path: Path) -> None:
    hub = clusters["hub"]
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.mcad.test"},
           "spec": {"group": "example.mcad.test", "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                        "openAPIV3Schema": {"type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True}}}]}}
    spoke2 = clusters["spoke-2"]
    await asyncio.to_thread(
        subprocess.run, [str(kubectl_path), "--kubeconfig", str(spoke2.kubeconfig), "apply",
                         "-f", "-"], input=yaml.safe_dump(crd), text=True, check=True,
        capture_output=True)
    try:
        for i in range(3):
            body = job_appwrapper(f"widget-{i}", pods=1, gpus=1, runtime="1s")
            body["spec"]["resources"]["GenericItems"].append({
                "custompodresources": [{"replicas": 0, "requests": {}}],  # makes no pods
                "generictemplate": {"apiVersion": "example.mcad.test/v1", "kind": "Widget",
                                    "metadata": {"name": f"widget-{i}"}, "spec": {"size": i}}})
            await create_aw(hub, aw_namespace, body)
        for i in range(3):
            done = await wait_state(hub, aw_namespace, f"widget-{i}", "Completed", within=120)
            assert done["status"]["clusterName"] == "spoke-2"
        nowhere = job_appwrapper("gadget", pods=1, gpus=1)
        nowhere["spec"]["resources"]["GenericItems"].append({
            "custompodresources": [{"replicas": 0, "requests": {}}],
            "generictemplate": {"apiVersion": "example.mcad.test/v1", "kind": "Gadget",
                                "metadata": {"name": "g"}}})
        await create_aw(hub, aw_namespace, nowhere)

        async def says_why() -> str:
            obj = await get_aw(hub, aw_namespace, "gadget")
            queued = condition(obj, "Queued")
            return str(queued.get("message", "")) if queued.get("reason") == \
                "NoMatchingCluster" else ""

        message = await wait_until(says_why, within=60, what="gadget to say why it waits")
        assert "serves no" in message and "Gadget" in message
    finally:
        await asyncio.to_thread(
            subprocess.run, [str(kubectl_path), "--kubeconfig", str(spoke2.kubeconfig),
                             "delete", "crd", "widgets.example.mcad.test", "--wait=false"],
            check=False, capture_output=True)


async def _job_exists(cluster: Cluster, namespace: str, name: str) -> bool:
    return name in {j.metadata.name for j in
                    (await cluster.batch.list_namespaced_job(namespace)).items}
