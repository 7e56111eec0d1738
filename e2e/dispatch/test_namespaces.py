"""Which spoke namespaces mcad writes into, on the real hub and two spokes.

By default a namespace is the same team's on every cluster (SIG Multicluster's namespace
sameness, which MultiKueue follows): an AppWrapper in ``default``, or in a team namespace
the platform made beforehand on every spoke (with its ResourceQuota), runs there as it
is. The system namespaces (``kube-*``, mcad's own) are refused before anything is
written, so no ``Dispatched=True`` is left behind. ``spokeNamespaces: managed`` keeps
mcad out of spoke namespaces it did not make, for spokes shared with strangers.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from e2e.clusters import Cluster
from e2e.controller import controller_with
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

SPOKES = ("spoke-1", "spoke-2")


@contextlib.asynccontextmanager
async def deleted_afterwards(hub: Cluster, namespace: str, name: str) -> AsyncIterator[None]:
    """Delete the AppWrapper ``name`` at the end and wait until mcad let it go (its
    finalizer gone): it lives outside the per-test ``aw_namespace``."""
    try:
        yield
    finally:
        with contextlib.suppress(ApiException):
            await hub.custom.delete_namespaced_custom_object(*AW[:2], namespace, AW[2], name)

        async def gone() -> bool:
            try:
                await get_aw(hub, namespace, name)
            except ApiException as err:
                return err.status == 404
            return False

        await wait_until(gone, within=60, what=f"{namespace}/{name} to be cleaned up")


async def test_an_appwrapper_in_default_completes(
        mcad: ControllerProcess, clusters: dict[str, Cluster]) -> None:
    hub = clusters["hub"]
    name = f"in-default-{uuid.uuid4().hex[:6]}"
    async with deleted_afterwards(hub, "default", name):
        await create_aw(hub, "default", job_appwrapper(name, pods=1, gpus=1, runtime="1s"))
        done = await wait_state(hub, "default", name, "Completed", "Failed", within=60)
        assert done["status"]["state"] == "Completed", done["status"]
        spoke = clusters[done["status"]["clusterName"]]
        namespace = await spoke.core.read_namespace("default")
        assert "workload.codeflare.dev/managed" not in (namespace.metadata.labels or {})


@pytest.fixture
async def team_namespace(clusters: dict[str, Cluster]) -> AsyncIterator[str]:
    """A team namespace the platform made beforehand on the hub and on every spoke, with
    a ResourceQuota on the spokes, as most platforms do."""
    name = f"team-{uuid.uuid4().hex[:6]}"
    for cluster in clusters.values():
        await cluster.core.create_namespace(client.V1Namespace(
            metadata=client.V1ObjectMeta(name=name, labels={"team": "vision"})))
    for spoke in SPOKES:
        await clusters[spoke].core.create_namespaced_resource_quota(name, client.V1ResourceQuota(
            metadata=client.V1ObjectMeta(name="gpus"),
            spec=client.V1ResourceQuotaSpec(hard={"requests.nvidia.com/gpu": "16",
                                                  "pods": "20"})))
    yield name
    for cluster in clusters.values():
        with contextlib.suppress(ApiException):
            await cluster.core.delete_namespace(name)


async def test_a_team_namespace_made_beforehand_with_a_resource_quota_is_used(
        mcad: ControllerProcess, clusters: dict[str, Cluster], team_namespace: str) -> None:
    hub = clusters["hub"]
    async with deleted_afterwards(hub, team_namespace, "train"):
        await create_aw(hub, team_namespace, job_appwrapper("train", pods=2, gpus=4,
                                                            runtime="1s"))
        done = await wait_state(hub, team_namespace, "train", "Completed", "Failed", within=60)
        assert done["status"]["state"] == "Completed", done["status"]
        spoke = clusters[done["status"]["clusterName"]]
        namespace = await spoke.core.read_namespace(team_namespace)
        assert namespace.metadata.labels.get("team") == "vision"  # the platform's, as it was
        assert "workload.codeflare.dev/managed" not in namespace.metadata.labels
        quota = await spoke.core.read_namespaced_resource_quota("gpus", team_namespace)
        assert quota.status.hard["requests.nvidia.com/gpu"] == "16"


async def test_kube_system_is_refused_with_a_sentence_and_no_dispatched_true(
        mcad: ControllerProcess, clusters: dict[str, Cluster]) -> None:
    hub = clusters["hub"]
    name = f"sneaky-{uuid.uuid4().hex[:6]}"
    async with deleted_afterwards(hub, "kube-system", name):
        await create_aw(hub, "kube-system", job_appwrapper(name, pods=1, gpus=1))
        failed = await wait_state(hub, "kube-system", name, "Failed", within=30)
        refused = condition(failed, "Failed")
        assert refused["reason"] == "SystemNamespace"
        assert "namespace kube-system is a system namespace" in refused["message"]
        assert condition(failed, "Dispatched").get("status") != "True"
        for spoke in SPOKES:
            jobs = (await clusters[spoke].batch.list_namespaced_job("kube-system")).items
            assert [j.metadata.name for j in jobs if j.metadata.name == name] == []


async def test_with_managed_namespaces_a_spoke_namespace_mcad_did_not_create_is_not_used(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    hub, spoke = clusters["hub"], clusters["spoke-2"]
    await spoke.core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=aw_namespace)))
    try:
        with controller_with(mcad, tmp_path, spokeNamespaces="managed"):
            await create_aw(hub, aw_namespace, job_appwrapper(
                "squat", pods=1, gpus=1, runtime="1s",
                scheduling={"clusterScheduling": {"clusters": [{"name": "spoke-2"}]}}))
            failed = await wait_state(hub, aw_namespace, "squat", "Failed", within=60)
            refused = condition(failed, "Failed")
            assert refused["reason"] == "NamespaceNotManaged"
            assert "with spokeNamespaces: managed" in refused["message"]
            assert condition(failed, "Dispatched").get("status") == "False"

            async def no_job() -> bool:
                return not (await spoke.batch.list_namespaced_job(aw_namespace)).items

            await holds_for(no_job, seconds=2, what="no Job on spoke-2")
    finally:
        await spoke.core.delete_namespace(aw_namespace)
