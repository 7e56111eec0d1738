"""Nobody gets through mcad what they could not do themselves, on the real test bed:
the admission webhook refuses an AppWrapper wrapping a ConfigMap from a user who may
create AppWrappers and Jobs but not ConfigMaps, and admits that user's Job; a wrapped
RoleBinding is refused by default; a SpokeCluster whose kubeconfig runs an exec plugin is
Ready=False and the plugin never runs; a privileged pod is refused by the spoke's Pod
Security admission, with the reason on the AppWrapper; a QuotaSubtree outside the quota
namespaces grants nothing. (Which spoke namespaces mcad writes into:
``e2e/dispatch/test_namespaces.py``.)"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from e2e.cluster.topology import free_ports
from e2e.clusters import Cluster, kubectl
from e2e.controller import (
    AW,
    QST,
    SPOKE,
    ControllerProcess,
    condition,
    create_aw,
    get_aw,
    job_appwrapper,
    mcad_cli,
    wait_state,
)
from e2e.waiting import holds_for, wait_until
from mcad.api.appwrapper import FINALIZER
from mcad.api.conversion import V1BETA2, convert


@contextlib.contextmanager
def webhook_controller(mcad: ControllerProcess, kubectl_bin: Path, hub: Cluster,
                       tmp_path: Path) -> Iterator[ControllerProcess]:
    """mcad with its webhook registered at a loopback URL, instead of the session's; its
    reviews answered by the webhooks' own process, as the manifests install it."""
    port, process_port = free_ports(2)
    own = ControllerProcess(mcad.hub_kubeconfig, tmp_path, name="mcad-webhook", extra_args=(
        "--webhook-address", f"127.0.0.1:{port}",
        # No path: mcad adds its own (registered as given, every create would fail).
        "--webhook-url", f"https://127.0.0.1:{port}",
        "--conversion-address", f"127.0.0.1:{process_port}"))
    mcad.stop()
    try:
        own.start()
        deadline = time.monotonic() + 60
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            while f"127.0.0.1:{process_port}" not in kubectl(
                    kubectl_bin, hub, "get", kind, "-o", "yaml"):
                assert time.monotonic() < deadline, f"mcad did not register its {kind}"
                time.sleep(0.2)
        yield own
    finally:
        own.stop()
        kubectl(kubectl_bin, hub, "delete", "validatingwebhookconfiguration,"
                "mutatingwebhookconfiguration", "mcad", "--ignore-not-found")
        mcad.start()


def webhook_calls(kubectl_bin: Path, hub: Cluster) -> float:
    """How many times the hub's API server has called mcad's admission webhook (its
    own counter, every operation and outcome)."""
    metrics = kubectl(kubectl_bin, hub, "get", "--raw", "/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("apiserver_admission_webhook_admission_duration_seconds_count")
               and 'name="appwrappers.workload.codeflare.dev"' in line)


@pytest.fixture
async def alice(clusters: dict[str, Cluster], aw_namespace: str,
                kubectl_path: Path) -> AsyncIterator[client.CustomObjectsApi]:
    """User alice, who may create AppWrappers and Jobs in the namespace, not ConfigMaps."""
    hub = clusters["hub"]
    rules = yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "submitter", "namespace": aw_namespace},
         "rules": [{"apiGroups": ["workload.codeflare.dev"], "resources": ["appwrappers"],
                    "verbs": ["create", "get", "list"]},
                   {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "alice-submits", "namespace": aw_namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "submitter"},
         "subjects": [{"kind": "User", "name": "alice"}]}])
    await asyncio.to_thread(
        subprocess.run, [str(kubectl_path), "--kubeconfig", str(hub.kubeconfig), "apply",
                         "-f", "-"], input=rules, text=True, check=True, capture_output=True)
    api = client.ApiClient(hub.api.configuration)
    api.default_headers["Impersonate-User"] = "alice"
    yield client.CustomObjectsApi(api)
    await api.close()


async def test_the_webhook_lets_a_user_wrap_only_what_they_may_create(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        kubectl_path: Path, tmp_path: Path, alice: client.CustomObjectsApi) -> None:
    hub = clusters["hub"]
    with webhook_controller(mcad, kubectl_path, hub, tmp_path):
        body = job_appwrapper("sneaky", pods=1, gpus=1, runtime="1s")
        body["spec"]["resources"]["GenericItems"].append({"generictemplate": {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
            "data": {"a": "b"}}})

        async def refused() -> str:
            """The webhook's refusal (before it serves, the API server refuses on its own:
            failurePolicy Fail; an AppWrapper is never admitted unchecked)."""
            try:
                await alice.create_namespaced_custom_object(*AW[:2], aw_namespace, AW[2],
                                                            body)
            except ApiException as err:
                assert "failed calling webhook" in str(err.body) or \
                    "may not create" in str(err.body), err.body
                return str(err.body) if "may not create" in str(err.body) else ""
            raise AssertionError("alice's ConfigMap was admitted")

        message = await wait_until(refused, within=60, what="the webhook to refuse alice")
        assert "GenericItems[1] ConfigMap/settings: alice may not create configmaps in " \
               f"namespace {aw_namespace}" in message
        ok = job_appwrapper("honest", pods=1, gpus=1, runtime="1s")
        created = await alice.create_namespaced_custom_object(*AW[:2], aw_namespace, AW[2],
                                                              ok)
        # mcad's finalizer is on from the create itself (the mutating webhook, answered
        # by the same process): the controller no longer writes it before the dispatch.
        assert created["metadata"]["finalizers"] == [FINALIZER]
        await wait_state(hub, aw_namespace, "honest", "Completed", within=60)
        # Not on one another controller manages: mcad would never take it off.
        elsewhere = convert(job_appwrapper("elsewhere", pods=1, gpus=1), V1BETA2)
        elsewhere["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
        created = await alice.create_namespaced_custom_object(
            AW[0], "v1beta2", aw_namespace, AW[2], elsewhere)
        assert "finalizers" not in created["metadata"], created["metadata"]
        await hub.custom.delete_namespaced_custom_object(*AW[:2], aw_namespace, AW[2],
                                                         "elsewhere")
        # A RoleBinding is refused to anyone, with the sentence mcad validate gives.
        grab = job_appwrapper("grab", pods=1, gpus=1)
        grab["spec"]["resources"]["GenericItems"].append({"generictemplate": {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "grab"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "cluster-admin"},
            "subjects": [{"kind": "User", "name": "alice"}]}})
        with pytest.raises(ApiException) as err:
            await create_aw(hub, aw_namespace, grab)
        assert "GenericItems[1] is a RoleBinding (rbac.authorization.k8s.io/v1), which the " \
               "mcad configuration does not allow to wrap" in str(err.value.body)
        # Only what the webhook could refuse is sent to it (its matchConditions, checked
        # here by the real API server's CEL): not a label, nor mcad's finalizer write; a
        # frozen field changed through the annotation v1beta1 keeps it in still is.
        before = webhook_calls(kubectl_path, hub)
        kubectl(kubectl_path, hub, "label", "appwrapper", "honest", "-n", aw_namespace,
                "seen=yes")
        assert webhook_calls(kubectl_path, hub) == before
        frozen = await asyncio.to_thread(
            subprocess.run, [str(kubectl_path), "--kubeconfig", str(hub.kubeconfig),
                             # (as v1beta1: on v1beta2 that annotation is mcad's to write)
                             "annotate", "appwrappers.v1beta1.workload.codeflare.dev",
                             "honest", "-n", aw_namespace,
                             'workload.codeflare.dev/v1beta2={"managedBy": "someone-else"}'],
            capture_output=True, text=True, check=False, timeout=60)
        assert frozen.returncode != 0 and "spec.managedBy: cannot change" in frozen.stderr, \
            frozen.stderr
        assert webhook_calls(kubectl_path, hub) == before + 1
        # mcad's own writes (finalizer, status) and the deletion still go through.
        await hub.custom.delete_namespaced_custom_object(*AW[:2], aw_namespace, AW[2],
                                                         "honest")

        async def gone() -> bool:
            listed = await hub.custom.list_namespaced_custom_object(*AW[:2], aw_namespace,
                                                                    AW[2])
            return not listed["items"]

        await wait_until(gone, within=60, what="the deletion to finish through the webhook")


async def test_without_the_webhook_a_wrapped_role_binding_fails_at_dispatch(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    hub = clusters["hub"]
    body = job_appwrapper("grab", pods=1, gpus=1)
    body["spec"]["resources"]["GenericItems"].append({"generictemplate": {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "grab"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "User", "name": "alice"}]}})
    await create_aw(hub, aw_namespace, body)
    failed = await wait_state(hub, aw_namespace, "grab", "Failed", within=60)
    assert condition(failed, "Failed")["reason"] == "KindNotAllowed"
    for spoke in ("spoke-1", "spoke-2"):
        bindings = await client.RbacAuthorizationV1Api(
            clusters[spoke].api).list_namespaced_role_binding(aw_namespace)
        assert bindings.items == []


async def test_an_exec_plugin_in_a_spoke_kubeconfig_never_runs(
        mcad: ControllerProcess, clusters: dict[str, Cluster], tmp_path: Path,
        testbed: Any) -> None:
    hub = clusters["hub"]
    marker = tmp_path / "the-plugin-ran"
    spoke = yaml.safe_load(await asyncio.to_thread(Path(clusters["spoke-1"].kubeconfig)
                                                   .read_text))
    user = spoke["users"][0]
    user["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                             "command": "sh", "args": ["-c", f"touch {marker}; exit 1"],
                             "interactiveMode": "Never"}}
    kubeconfig = tmp_path / "exec.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(spoke))
    assert await mcad_cli("cluster", "register", "exec-spoke", "--kubeconfig", str(kubeconfig),
                          "--hub-kubeconfig", str(hub.kubeconfig)) == 0
    try:
        async def refused() -> dict[str, Any] | None:
            obj = await hub.custom.get_cluster_custom_object(*SPOKE[:2], SPOKE[2],
                                                             "exec-spoke")
            for cond in (obj.get("status") or {}).get("conditions") or []:
                if cond["type"] == "Ready" and cond["reason"] == "BadKubeconfig":
                    return dict(cond)
            return None

        ready = await wait_until(refused, within=60, what="exec-spoke to be refused")
        assert ready["status"] == "False"
        assert "exec credential plugin" in ready["message"]
        assert "allowExecCredentials" in ready["message"]
        assert "touch" not in ready["message"] and str(marker) not in ready["message"]

        async def never_ran() -> bool:
            return not marker.exists()

        await holds_for(never_ran, seconds=5, what="the plugin never to run")
    finally:
        assert await mcad_cli("cluster", "unregister", "exec-spoke", "--hub-kubeconfig",
                              str(hub.kubeconfig)) == 0


async def test_a_privileged_pod_is_refused_by_the_spokes_pod_security(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    hub = clusters["hub"]
    body = {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": "root"},
            "spec": {"resources": {"GenericItems": [{"generictemplate": {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"},
                "spec": {"containers": [{
                    "name": "c", "image": "busybox",
                    "securityContext": {"privileged": True},
                    "resources": {"requests": {"cpu": "1"}}}]}}}]}}}
    await create_aw(hub, aw_namespace, body)
    failed = await wait_state(hub, aw_namespace, "root", "Failed", within=60)
    reason = condition(failed, "Failed")
    assert reason["reason"] == "CreationRefused"
    assert "violates PodSecurity \"baseline:latest\": privileged" in reason["message"]
    spoke = clusters[failed["status"].get("clusterName") or "spoke-1"]
    namespace = await spoke.core.read_namespace(aw_namespace)
    assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert namespace.metadata.labels["workload.codeflare.dev/managed"] == "true"


async def test_a_quota_subtree_outside_the_quota_namespaces_grants_nothing(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    hub = clusters["hub"]
    tree = "forge-tree"
    legit = {"apiVersion": "quota.codeflare.dev/v1alpha1", "kind": "QuotaSubtree",
             "metadata": {"name": "forge-root", "namespace": "kube-system",
                          "labels": {"tree": tree}},
             "spec": {"children": [{"name": "root", "quotas": {
                 "hardLimit": True, "requests": {"nvidia.com/gpu": "4"}}}]}}
    forged = {"apiVersion": "quota.codeflare.dev/v1alpha1", "kind": "QuotaSubtree",
              "metadata": {"name": "mine", "namespace": aw_namespace,
                           "labels": {"tree": tree}},
              "spec": {"parent": "root", "children": [{"name": "mine", "quotas": {
                  "hardLimit": True, "requests": {"nvidia.com/gpu": "64"}}}]}}
    await hub.custom.create_namespaced_custom_object(*QST[:2], "kube-system", QST[2], legit)
    await hub.custom.create_namespaced_custom_object(*QST[:2], aw_namespace, QST[2], forged)
    try:
        body = job_appwrapper("greedy", pods=1, gpus=8, labels={tree: "mine"})
        await create_aw(hub, aw_namespace, body)

        async def not_found() -> str:
            obj = await get_aw(hub, aw_namespace, "greedy")
            queued = condition(obj, "Queued")
            return str(queued.get("message", "")) if queued.get("reason") == \
                "QuotaNodeNotFound" else ""

        message = await wait_until(not_found, within=60, what="greedy to find no node mine")
        assert "has no node mine" in message
    finally:
        await hub.custom.delete_namespaced_custom_object(*QST[:2], "kube-system", QST[2],
                                                         "forge-root")
        with contextlib.suppress(ApiException):
            await hub.custom.delete_namespaced_custom_object(*QST[:2], aw_namespace, QST[2],
                                                             "mine")
