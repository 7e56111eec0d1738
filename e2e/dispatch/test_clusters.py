"""Clusters at runtime: registration and removal without restart, broken
kubeconfigs, and single-cluster mode (the hub itself as the only cluster)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from e2e.clusters import Cluster
from e2e.dispatch.conftest import (
    NAMESPACE,
    SPOKE,
    ControllerProcess,
    create_aw,
    get_aw,
    job_appwrapper,
    mcad_cli,
    wait_state,
)
from e2e.waiting import wait_until


async def spoke_ready(hub: Cluster, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = await hub.custom.get_cluster_custom_object(*SPOKE[:2], SPOKE[2], name)
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return dict(cond)
    return {}


async def test_a_spoke_removed_and_registered_at_runtime_is_followed_without_restart(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str, testbed: Any
) -> None:
    hub = clusters["hub"]
    starts = mcad.starts
    kubeconfigs = {c.name: c.kubeconfig for c in testbed.clusters}
    assert await mcad_cli(*["cluster", "unregister", "spoke-2", "--hub-kubeconfig",
                      kubeconfigs["hub"]]) == 0
    try:
        body = job_appwrapper("pinned", pods=1, gpus=1, runtime="1s", scheduling={
            "clusterScheduling": {"clusters": [{"name": "spoke-2"}]}})
        await create_aw(hub, aw_namespace, body)

        async def no_cluster() -> bool:
            obj = await get_aw(hub, aw_namespace, "pinned")
            return any(c["type"] == "Queued" and c["reason"] == "NoMatchingCluster"
                       for c in obj.get("status", {}).get("conditions", []))

        await wait_until(no_cluster, within=30, what="pinned to wait for spoke-2")
    finally:
        assert await mcad_cli(*["cluster", "register", "spoke-2", "--kubeconfig",
                          kubeconfigs["spoke-2"], "--label", "zone=west",
                          "--hub-kubeconfig", kubeconfigs["hub"]]) == 0
    done = await wait_state(hub, aw_namespace, "pinned", "Completed", within=60)
    assert done["status"]["clusterName"] == "spoke-2"
    assert mcad.starts == starts


async def test_a_broken_or_unreachable_kubeconfig_makes_only_that_spoke_not_ready(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
    tmp_path: Path, testbed: Any
) -> None:
    hub = clusters["hub"]
    hub_kubeconfig = next(c.kubeconfig for c in testbed.clusters if c.name == "hub")
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(Path(hub_kubeconfig).read_text().replace(  # noqa: ASYNC240 - tiny file
        f"127.0.0.1:{next(c.port for c in testbed.clusters if c.name == 'hub')}",
        "127.0.0.1:1"))
    assert await mcad_cli(*["cluster", "register", "dead", "--kubeconfig", str(dead),
                      "--hub-kubeconfig", hub_kubeconfig]) == 0
    # A Secret whose kubeconfig is not YAML at all, registered by hand.
    await hub.core.create_namespaced_secret(NAMESPACE, client.V1Secret(
        metadata=client.V1ObjectMeta(name="garbage-kubeconfig"),
        data={"kubeconfig": base64.b64encode(b"{not: [yaml").decode()}))
    await hub.custom.create_cluster_custom_object(*SPOKE[:2], SPOKE[2], {
        "apiVersion": "cluster.codeflare.dev/v1alpha1", "kind": "SpokeCluster",
        "metadata": {"name": "garbage"},
        "spec": {"kubeconfigSecret": {"name": "garbage-kubeconfig"}}})
    try:
        async def not_ready(name: str, reason: str) -> dict[str, Any] | None:
            cond = await spoke_ready(hub, name)
            return cond if cond.get("status") == "False" and cond.get("reason") == reason \
                else None

        dead_cond = await wait_until(lambda: not_ready("dead", "Unreachable"), within=60,
                                     what="spoke dead to be Ready=False Unreachable")
        assert "127.0.0.1:1" in dead_cond["message"]
        await wait_until(lambda: not_ready("garbage", "BadKubeconfig"), within=30,
                         what="spoke garbage to be Ready=False BadKubeconfig")
        assert (await spoke_ready(hub, "spoke-1"))["status"] == "True"
        await create_aw(hub, aw_namespace, job_appwrapper("still-works", pods=1, gpus=1,
                                                          runtime="1s"))
        done = await wait_state(hub, aw_namespace, "still-works", "Completed")
        assert done["status"]["clusterName"] in ("spoke-1", "spoke-2")
    finally:
        for name in ("dead", "garbage"):
            await hub.custom.delete_cluster_custom_object(*SPOKE[:2], SPOKE[2], name)
        await hub.core.delete_namespaced_secret("garbage-kubeconfig", NAMESPACE)
        await hub.core.delete_namespaced_secret("dead-kubeconfig", NAMESPACE)


async def test_single_cluster_mode_runs_appwrappers_on_the_hub(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str, testbed: Any
) -> None:
    hub = clusters["hub"]
    hub_kubeconfig = next(c.kubeconfig for c in testbed.clusters if c.name == "hub")
    assert await mcad_cli(*["cluster", "register", "local", "--local",
                      "--hub-kubeconfig", hub_kubeconfig]) == 0
    try:
        body = job_appwrapper("on-hub", pods=2, gpus=4, runtime="1s", scheduling={
            "clusterScheduling": {"clusters": [{"name": "local"}]}})
        await create_aw(hub, aw_namespace, body)
        done = await wait_state(hub, aw_namespace, "on-hub", "Completed", within=60)
        assert done["status"]["clusterName"] == "local"
        jobs = (await hub.batch.list_namespaced_job(aw_namespace)).items
        assert [j.metadata.name for j in jobs] == ["on-hub"]
        assert jobs[0].status.succeeded == 2
        # As MCAD in single-cluster mode: the garbage collector knows who owns it.
        (owner,) = jobs[0].metadata.owner_references
        assert (owner.kind, owner.name, owner.uid, owner.controller,
                owner.block_owner_deletion) == ("AppWrapper", "on-hub",
                                                done["metadata"]["uid"], True, True)
    finally:
        await hub.custom.delete_namespaced_custom_object(
            "workload.codeflare.dev", "v1beta1", aw_namespace, "appwrappers", "on-hub")

        async def gone() -> bool:
            listed = await hub.custom.list_namespaced_custom_object(
                "workload.codeflare.dev", "v1beta1", aw_namespace, "appwrappers")
            return not listed["items"]

        await wait_until(gone, within=60, what="on-hub to be cleaned up")
        assert await mcad_cli(*["cluster", "unregister", "local",
                          "--hub-kubeconfig", hub_kubeconfig]) == 0


async def test_a_rotated_kubeconfig_rebuilds_the_link_and_running_work_still_completes(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str, testbed: Any,
    tmp_path: Path
) -> None:
    """The Secret of a spoke with work running on it is replaced (a rotated kubeconfig,
    here the same credentials in a new file): the controller builds a new link to the
    spoke, which must follow the Job already running there, so the AppWrapper completes
    and gives its quota back instead of staying Running forever (issue 19)."""
    hub = clusters["hub"]
    kubeconfigs = {c.name: c.kubeconfig for c in testbed.clusters}
    body = job_appwrapper("long", pods=1, gpus=1, runtime="8s", scheduling={
        "clusterScheduling": {"clusters": [{"name": "spoke-1"}]}})
    await create_aw(hub, aw_namespace, body)
    await wait_state(hub, aw_namespace, "long", "Running", within=30)
    rotated = tmp_path / "spoke-1-rotated.kubeconfig"
    original = await asyncio.to_thread(Path(kubeconfigs["spoke-1"]).read_text)
    await asyncio.to_thread(rotated.write_text, original + "\n# rotated\n")
    secret_before = await hub.core.read_namespaced_secret("spoke-1-kubeconfig", NAMESPACE)
    assert await mcad_cli("cluster", "register", "spoke-1", "--kubeconfig", str(rotated),
                          "--label", "zone=east", "--hub-kubeconfig", kubeconfigs["hub"]) == 0
    secret_after = await hub.core.read_namespaced_secret("spoke-1-kubeconfig", NAMESPACE)
    assert secret_after.data != secret_before.data  # a new Secret: the link is rebuilt
    done = await wait_state(hub, aw_namespace, "long", "Completed", "Failed", within=60)
    assert done["status"]["state"] == "Completed", done["status"]
    assert done["status"].get("numberOfRequeueings", 0) == 0
