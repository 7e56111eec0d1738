"""A gang that breaks is reset whole, and sick GPUs are avoided, on the real test bed
(the Job controller, the scheduler and KWOK's pods are real; pods fail when a test
annotates them, with the exit code it names: e2e/cluster/stages.py):

- a 4-pod gang whose pod 2 fails after all four ran is reset whole within the failure
  grace plus 10 s: all four pods new, ``resettingCount`` 1, and it completes on its retry;
- with ``retryLimit: "1"`` and pods that always fail: Failed after one reset, its Job
  gone, its room given back;
- with ``terminalExitCodes: "42"`` and a pod that exits 42: Failed at once, no reset;
- a gang whose pods never start (an image that never pulls) is reset after the warm-up
  grace, not after MCAD's 300 s;
- a node labelled TESTING takes no new work while free GPUs remain elsewhere; labelling
  a node EVICT under a running gang resets it onto other nodes within 30 s;
- a completed AppWrapper with ``successTTLDuration: 10s`` is gone within 20 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from e2e.cluster.stages import EXIT_CODE, FAIL_AFTER, NEVER_START
from e2e.clusters import Cluster
from e2e.controller import (
    AW,
    ControllerProcess,
    aw_gone,
    condition,
    create_aw,
    get_aw,
    job_appwrapper,
    wait_state,
)
from e2e.waiting import wait_until

PREFIX = "workload.codeflare.dev.appwrapper/"
LABEL = "autopilot.ibm.com/gpuhealth"
SPOKES = ("spoke-1", "spoke-2")


def gang(name: str, *, pods: int, gpus: int, runtime: str | None, annotations: dict[str, str],
         pod_annotations: dict[str, str] | None = None, backoff: int = 0) -> dict[str, Any]:
    """A Job AppWrapper of ``pods`` pods with fault-tolerance ``annotations``."""
    wire = job_appwrapper(name, pods=pods, gpus=gpus, runtime=runtime,
                          annotations=pod_annotations)
    wire["metadata"]["annotations"] = {PREFIX + k: v for k, v in annotations.items()}
    job = wire["spec"]["resources"]["GenericItems"][0]["generictemplate"]
    job["spec"]["backoffLimit"] = backoff
    return wire


async def pods_of(clusters: dict[str, Cluster], namespace: str, name: str
                  ) -> list[Any]:
    found = []
    for spoke in SPOKES:
        listed = await clusters[spoke].core.list_namespaced_pod(
            namespace, label_selector=f"job-name={name}")
        found += [(spoke, p) for p in listed.items]
    return found


async def running(clusters: dict[str, Cluster], namespace: str, name: str, count: int
                  ) -> list[Any]:
    async def all_running() -> list[Any] | None:
        pods = [p for _, p in await pods_of(clusters, namespace, name)
                if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
        return pods if len(pods) >= count else None

    return await wait_until(all_running, within=60, what=f"{count} pods of {name} running")


async def annotate_pod(clusters: dict[str, Cluster], namespace: str, pod: Any,
                       annotations: dict[str, str]) -> None:
    for spoke in SPOKES:
        try:
            await clusters[spoke].core.patch_namespaced_pod(
                pod.metadata.name, namespace, {"metadata": {"annotations": annotations}})
            return
        except ApiException as err:
            if err.status != 404:
                raise


def spoke_of(aw: dict[str, Any]) -> str:
    return str(aw["status"]["clusterName"])


async def test_a_gang_whose_pod_fails_is_reset_whole_and_completes_on_its_retry(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    hub, ns = clusters["hub"], aw_namespace
    await create_aw(hub, ns, gang("ddp", pods=4, gpus=2, runtime="25s", backoff=4,
                                  annotations={"failureGracePeriodDuration": "10s",
                                               "retryPausePeriodDuration": "3s"}))
    first = await running(clusters, ns, "ddp", 4)
    first_uids = {p.metadata.uid for p in first}
    two = sorted(first, key=lambda p: p.metadata.name)[2]
    failed_at = time.monotonic()
    await annotate_pod(clusters, ns, two, {FAIL_AFTER: "0s", EXIT_CODE: "137"})

    async def reset() -> dict[str, Any] | None:
        aw = await get_aw(hub, ns, "ddp")
        return aw if (aw["status"].get("resettingCount") or 0) >= 1 else None

    aw = await wait_until(reset, within=10 + 10 + 5, what="ddp reset")
    reset_after = time.monotonic() - failed_at
    unhealthy = condition(aw, "Unhealthy")
    assert unhealthy["reason"] == "FoundFailedPods", unhealthy
    assert f"pod {two.metadata.name} failed with exit code 137" in unhealthy["message"]
    assert reset_after <= 10 + 10, f"reset {reset_after:.1f}s after the failure"

    async def four_new() -> list[Any] | None:
        pods = [p for _, p in await pods_of(clusters, ns, "ddp")
                if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
        fresh = [p for p in pods if p.metadata.uid not in first_uids]
        return fresh if len(fresh) == 4 and len(pods) == 4 else None

    await wait_until(four_new, within=60, what="four new pods of ddp running")
    done = await wait_state(hub, ns, "ddp", "Completed", within=90)
    assert done["status"]["resettingCount"] == 1
    print(f"gang reset {reset_after:.1f}s after its pod failed (grace 10s)")


async def test_past_the_retry_limit_it_is_failed_and_gives_its_room_back(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    hub, ns = clusters["hub"], aw_namespace
    await create_aw(hub, ns, gang("doomed", pods=2, gpus=8, runtime=None,
                                  annotations={"retryLimit": "1",
                                               "retryPausePeriodDuration": "2s",
                                               "failureGracePeriodDuration": "2s"},
                                  pod_annotations={FAIL_AFTER: "2s"}))
    aw = await wait_state(hub, ns, "doomed", "Failed", within=120)
    assert aw["status"]["resettingCount"] == 1
    failed = condition(aw, "Failed")
    assert failed["reason"] == "RetryLimitExceeded", failed
    assert failed["message"].endswith("it was already reset 1 time (retryLimit 1)")

    async def gone() -> bool:
        deleting = condition(await get_aw(hub, ns, "doomed"), "DeletingResources")
        jobs = [j for s in SPOKES for j in
                (await clusters[s].batch.list_namespaced_job(ns)).items]
        return deleting.get("status") == "True" and not jobs

    await wait_until(gone, within=60, what="doomed's Job gone")
    # Its room is given back: a gang of the same shape is dispatched where it was.
    await create_aw(hub, ns, job_appwrapper("next", pods=2, gpus=8, runtime="1s"))
    await wait_state(hub, ns, "next", "Running", "Completed", within=60)


async def test_a_terminal_exit_code_fails_it_at_once(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    hub, ns = clusters["hub"], aw_namespace
    await create_aw(hub, ns, gang("buggy", pods=2, gpus=2, runtime=None,
                                  annotations={"terminalExitCodes": "42"},
                                  pod_annotations={FAIL_AFTER: "3s", EXIT_CODE: "42"}))
    aw = await wait_state(hub, ns, "buggy", "Failed", within=60)
    failed = condition(aw, "Failed")
    assert failed["reason"] == "TerminalExitCode", failed
    assert "with exit code 42" in failed["message"]
    assert not aw["status"].get("resettingCount")


async def test_pods_that_never_start_are_reset_after_the_warmup_grace(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    hub, ns = clusters["hub"], aw_namespace
    started = time.monotonic()
    await create_aw(hub, ns, gang("stuck", pods=2, gpus=2, runtime=None,
                                  annotations={"admissionGracePeriodDuration": "10s",
                                               "warmupGracePeriodDuration": "15s",
                                               "retryPausePeriodDuration": "60s"},
                                  pod_annotations={NEVER_START: "true"}))

    async def resetting() -> dict[str, Any] | None:
        aw = await get_aw(hub, ns, "stuck")
        return aw if condition(aw, "Resetting").get("status") == "True" else None

    aw = await wait_until(resetting, within=60, what="stuck to be reset")
    after = time.monotonic() - started
    unhealthy = condition(aw, "Unhealthy")
    assert unhealthy["reason"] == "InsufficientPodsReady", unhealthy
    assert unhealthy["message"].startswith("0 of its 2 pods Running 15s after its objects")
    assert after < 60, f"reset {after:.0f}s after creation (MCAD's rule would take 300 s)"


@pytest.fixture
async def node_labels(clusters: dict[str, Cluster]) -> AsyncIterator[list[tuple[str, str]]]:
    """Node labels a test sets (spoke, node); removed afterwards."""
    labelled: list[tuple[str, str]] = []
    yield labelled
    for spoke, node in labelled:
        await clusters[spoke].core.patch_node(node, {"metadata": {"labels": {LABEL: None}}})


async def label(clusters: dict[str, Cluster], spoke: str, node: str, value: str,
                labelled: list[tuple[str, str]]) -> None:
    await clusters[spoke].core.patch_node(node, {"metadata": {"labels": {LABEL: value}}})
    labelled.append((spoke, node))


async def test_a_testing_node_takes_no_new_work_and_an_evict_node_is_evacuated(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        node_labels: list[tuple[str, str]]) -> None:
    hub, ns = clusters["hub"], aw_namespace
    testing = ("spoke-1", "spoke-1-node-1")
    await label(clusters, *testing, "TESTING", node_labels)
    async def counted() -> bool:
        return mcad.sample("mcad_cluster_allocatable", cluster="spoke-1",
                           resource="nvidia.com/gpu") == 24

    await wait_until(counted, within=30, what="spoke-1 to count 24 usable GPUs")
    names = [f"w{i}" for i in range(7)]  # 7 nodes of 8 GPUs left
    for name in names:
        await create_aw(hub, ns, job_appwrapper(name, pods=1, gpus=8, runtime=None))
    for name in names:
        await wait_state(hub, ns, name, "Running", within=60)
    placed = [(s, p.spec.node_name) for name in names
              for s, p in await pods_of(clusters, ns, name)]
    assert testing not in placed, placed
    await create_aw(hub, ns, job_appwrapper("eighth", pods=1, gpus=8, runtime=None))
    await asyncio.sleep(5)
    assert (await get_aw(hub, ns, "eighth"))["status"].get("state") != "Running"
    for name in [*names, "eighth"]:
        await hub.custom.delete_namespaced_custom_object(*AW[:2], ns, AW[2], name)


async def test_labelling_a_node_evict_resets_its_gang_onto_other_nodes(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        node_labels: list[tuple[str, str]]) -> None:
    hub, ns = clusters["hub"], aw_namespace
    await create_aw(hub, ns, gang("mover", pods=2, gpus=8, runtime=None,
                                  annotations={"retryPausePeriodDuration": "2s"}))
    pods = await running(clusters, ns, "mover", 2)
    spoke = spoke_of(await get_aw(hub, ns, "mover"))
    evicted = pods[0].spec.node_name
    labelled_at = time.monotonic()
    await label(clusters, spoke, evicted, "EVICT", node_labels)

    async def moved() -> list[Any] | None:
        now = [p for _, p in await pods_of(clusters, ns, "mover")
               if p.status.phase == "Running" and not p.metadata.deletion_timestamp
               and p.metadata.uid not in {q.metadata.uid for q in pods}]
        return now if len(now) == 2 else None

    fresh = await wait_until(moved, within=30 + 10, what="mover running elsewhere")
    took = time.monotonic() - labelled_at
    assert evicted not in {p.spec.node_name for p in fresh}
    aw = await get_aw(hub, ns, "mover")
    assert condition(aw, "Unhealthy").get("reason") in ("AutopilotNoExecute", "Resumed")
    assert not aw["status"].get("resettingCount")  # a node's doing: not counted
    print(f"gang moved off the EVICT node {took:.1f}s after the label")


async def test_a_completed_appwrapper_goes_after_its_success_ttl(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    hub, ns = clusters["hub"], aw_namespace
    await create_aw(hub, ns, gang("brief", pods=1, gpus=1, runtime="1s",
                                  annotations={"successTTLDuration": "10s"}))
    await wait_state(hub, ns, "brief", "Completed", within=60)
    done = time.monotonic()

    async def gone() -> bool:
        return await aw_gone(hub, ns, "brief")

    await wait_until(gone, within=20, what="brief to be deleted")
    print(f"deleted {time.monotonic() - done:.1f}s after it completed (TTL 10s)")
