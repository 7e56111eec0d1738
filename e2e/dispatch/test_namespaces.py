"""Which spoke namespaces mcad writes into, on the real hub and two spokes.

By default a namespace is the same team's on every cluster (SIG Multicluster's namespace
sameness, which MultiKueue follows): an AppWrapper in ``default``, or in a team namespace
the platform made beforehand on every spoke (with its ResourceQuota), runs there as it
is. The namespaces the admin refuses (``refusedNamespaces``: ``kube-*``,
``openshift-*``; and mcad's own) are refused by the webhook where it runs, and otherwise
before anything is written, so no ``Dispatched=True`` is ever written; a spoke namespace
its admin labels ``cluster.codeflare.dev/closed=true`` keeps the AppWrapper off that
spoke (waiting, with the sentence, when every spoke closes it). ``spokeNamespaces:
managed`` keeps mcad out of spoke namespaces it did not make, for spokes shared with
strangers.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
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
from e2e.security.test_security import webhook_controller
from e2e.waiting import holds_for, wait_until

SPOKES = ("spoke-1", "spoke-2")
CLOSED_LABEL = "cluster.codeflare.dev/closed"
ADVICE = "submit it in the namespace of the team that runs it"


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
        assert refused["message"].startswith("namespace kube-system is refused by the pattern "
                                             "kube-* (refusedNamespaces)")
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


@contextlib.asynccontextmanager
async def every_version(hub: Cluster, namespace: str, name: str
                        ) -> AsyncIterator[list[dict[str, Any]]]:
    """Every version of AppWrapper ``name`` the hub's watch shows, from before it is
    created to the end of the block: what was ever written, not just the last state."""
    seen: list[dict[str, Any]] = []
    started = asyncio.Event()

    async def follow() -> None:
        listed = await hub.custom.list_namespaced_custom_object(*AW[:2], namespace, AW[2])
        stream = watch.Watch()
        started.set()
        async for event in stream.stream(
                hub.custom.list_namespaced_custom_object, *AW[:2], namespace, AW[2],
                field_selector=f"metadata.name={name}",
                resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=300):
            seen.append(event["object"])

    task = asyncio.create_task(follow())
    await asyncio.wait_for(started.wait(), timeout=30)
    try:
        yield seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def dispatched_true_ever(versions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The versions that carried Dispatched=True or a run (what a persisted dispatch
    writes)."""
    return [v for v in versions if condition(v, "Dispatched").get("status") == "True"
            or (v.get("status") or {}).get("runId")]


@contextlib.asynccontextmanager
async def hub_namespace(hub: Cluster, name: str) -> AsyncIterator[str]:
    """Namespace ``name`` on the hub (made when missing), its AppWrappers cleaned up
    afterwards (the namespace stays: a platform namespace is not the test's to delete)."""
    with contextlib.suppress(ApiException):
        await hub.core.create_namespace(client.V1Namespace(
            metadata=client.V1ObjectMeta(name=name)))
    yield name


async def test_openshift_monitoring_is_refused_by_the_webhook_and_at_dispatch(
        mcad: ControllerProcess, clusters: dict[str, Cluster], kubectl_path: Path,
        tmp_path: Path) -> None:
    """A hub namespace named like an OpenShift platform namespace matches the default
    pattern openshift-*: where the webhook runs it refuses the AppWrapper with the
    sentence; where none runs, the controller fails it before any dispatch is written.
    Either way nothing reaches a spoke and Dispatched=True is never written."""
    hub = clusters["hub"]
    name = f"scrape-{uuid.uuid4().hex[:6]}"
    said = ("namespace openshift-monitoring is refused by the pattern openshift-* "
            "(refusedNamespaces); mcad does not create AppWrappers' objects there on any "
            f"cluster: {ADVICE}")
    async with hub_namespace(hub, "openshift-monitoring") as namespace:
        with webhook_controller(mcad, kubectl_path, hub, tmp_path):
            async def refused() -> str:
                """The webhook's refusal (before it serves, the API server refuses on its
                own: failurePolicy Fail)."""
                try:
                    await create_aw(hub, namespace, job_appwrapper(name, pods=1, gpus=1))
                except ApiException as err:
                    return str(err.body) if "refusedNamespaces" in str(err.body) else ""
                raise AssertionError("the webhook admitted an AppWrapper in "
                                     "openshift-monitoring")

            message = await wait_until(refused, within=60, what="the webhook to refuse it")
            assert f"metadata.namespace: {said}" in message
            with pytest.raises(ApiException) as gone:
                await get_aw(hub, namespace, name)
            assert gone.value.status == 404
        # The session's mcad runs no webhook: the AppWrapper is created, and fails.
        async with deleted_afterwards(hub, namespace, name), \
                every_version(hub, namespace, name) as versions:
            await create_aw(hub, namespace, job_appwrapper(name, pods=1, gpus=1))
            failed = await wait_state(hub, namespace, name, "Failed", within=60)
            refusal = condition(failed, "Failed")
            assert (refusal["reason"], refusal["message"]) == ("SystemNamespace", said)
            assert condition(failed, "Dispatched").get("status") != "True"
            await asyncio.sleep(2)  # any later write would show in the watch
            assert versions, "the watch saw no version of the AppWrapper"
            assert dispatched_true_ever(versions) == []
            for spoke in SPOKES:
                with pytest.raises(ApiException) as missing:
                    await clusters[spoke].core.read_namespace(namespace)
                assert missing.value.status == 404, f"{namespace} was made on {spoke}"


@pytest.fixture
async def closed_cert_manager(clusters: dict[str, Cluster]) -> AsyncIterator[str]:
    """cert-manager on the hub, and on every spoke labelled closed by the spoke's admin."""
    name = "cert-manager"
    labels = {CLOSED_LABEL: "true"}
    for spoke in SPOKES:
        core = clusters[spoke].core
        try:
            await core.create_namespace(client.V1Namespace(
                metadata=client.V1ObjectMeta(name=name, labels=labels)))
        except ApiException as err:
            assert err.status == 409, err
            await core.patch_namespace(name, {"metadata": {"labels": labels}})
    async with hub_namespace(clusters["hub"], name):
        yield name
    for spoke in SPOKES:
        with contextlib.suppress(ApiException):
            await clusters[spoke].core.delete_namespace(name)


async def test_a_namespace_labelled_closed_on_the_spokes_waits_and_nothing_is_created(
        mcad: ControllerProcess, clusters: dict[str, Cluster], closed_cert_manager: str
        ) -> None:
    """cert-manager exists on both spokes, labelled closed by their admins: an AppWrapper
    in the hub's cert-manager is refused at dispatch (both spokes are out of its
    candidates), waits NoMatchingCluster with the sentence naming the namespace, the
    spokes and the label; no Job, no Dispatched=True, ever."""
    hub, namespace = clusters["hub"], closed_cert_manager
    name = f"issuer-{uuid.uuid4().hex[:6]}"
    said = (f"namespace cert-manager is labelled {CLOSED_LABEL}=true on clusters spoke-1, "
            "spoke-2; mcad does not create AppWrappers' objects there, and it may use no "
            f"other cluster: {ADVICE}")
    async with deleted_afterwards(hub, namespace, name), \
            every_version(hub, namespace, name) as versions:
        await create_aw(hub, namespace, job_appwrapper(name, pods=1, gpus=1))

        async def waiting() -> dict[str, Any] | None:
            queued = condition(await get_aw(hub, namespace, name), "Queued")
            return queued if queued.get("reason") == "NoMatchingCluster" else None

        queued = await wait_until(waiting, within=60, what="NoMatchingCluster written")
        assert queued is not None and queued["message"] == said

        async def nothing_made() -> bool:
            for spoke in SPOKES:
                if (await clusters[spoke].batch.list_namespaced_job(namespace)).items:
                    return False
            aw = await get_aw(hub, namespace, name)
            return (aw.get("status") or {}).get("state") != "Running"

        await holds_for(nothing_made, seconds=5, what="no Job on any spoke, not Running")
        assert versions and dispatched_true_ever(versions) == []
