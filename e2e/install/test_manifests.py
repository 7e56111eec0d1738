"""``kubectl apply -k manifests/`` on the real hub: it installs; the ServiceAccount may do
exactly what the controller needs (a table of ``kubectl auth can-i`` answers, allowed and
denied); and ``mcad run`` with that ServiceAccount's token and the Deployment's own
command line takes a multi-cluster AppWrapper to Completed. No image can be built on
these machines, so the Deployment's command is run out of cluster with its identity."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster.topology import free_ports
from e2e.clusters import Cluster, kubectl
from e2e.controller import REPO
from e2e.dispatch.conftest import (
    AW,
    ControllerProcess,
    create_aw,
    job_appwrapper,
    mcad_cli,
    wait_state,
)
from e2e.install.conftest import apply, can_i, service_account_kubeconfig
from e2e.waiting import wait_until

# (verb, resource, namespace or None for cluster-wide, allowed?)
CAN_I = [
    ("watch", "appwrappers.workload.codeflare.dev", None, True),
    ("patch", "appwrappers.workload.codeflare.dev/status", "team-a", True),
    ("update", "appwrappers.workload.codeflare.dev/finalizers", "team-a", True),
    ("create", "appwrappers.workload.codeflare.dev", "team-a", False),
    ("delete", "appwrappers.workload.codeflare.dev", "team-a", True),  # after successTTL
    ("list", "quotasubtrees.quota.codeflare.dev", None, True),
    ("patch", "quotasubtrees.quota.codeflare.dev/status", "kube-system", True),
    ("create", "quotasubtrees.quota.codeflare.dev", "kube-system", False),
    ("update", "quotasubtrees.quota.codeflare.dev", "kube-system", False),
    ("watch", "spokeclusters.cluster.codeflare.dev", None, True),
    ("patch", "spokeclusters.cluster.codeflare.dev/status", None, True),
    ("create", "spokeclusters.cluster.codeflare.dev", None, False),
    ("create", "events", "team-a", True),
    # (Kueue's workloadpriorityclasses too: kubectl auth can-i cannot ask about a
    # resource the hub does not serve, and the test bed has no Kueue.)
    ("watch", "priorityclasses.scheduling.k8s.io", None, True),
    ("create", "priorityclasses.scheduling.k8s.io", None, False),
    ("list", "secrets", "mcad-system", True),
    ("watch", "secrets", "mcad-system", True),
    ("create", "secrets", "mcad-system", False),
    ("update", "secrets", "mcad-system", False),
    ("get", "secrets", "kube-system", False),
    ("list", "secrets", None, False),
    ("get", "leases.coordination.k8s.io", "mcad-system", True),
    ("update", "leases.coordination.k8s.io", "mcad-system", True),
    ("create", "leases.coordination.k8s.io", "mcad-system", True),
    ("update", "leases.coordination.k8s.io", "kube-system", False),
    ("create", "pods/exec", "team-a", False),
    ("create", "pods", "team-a", False),
    ("create", "jobs.batch", "team-a", False),
    ("create", "roles.rbac.authorization.k8s.io", "team-a", False),
    ("create", "rolebindings.rbac.authorization.k8s.io", "team-a", False),
    ("bind", "clusterroles.rbac.authorization.k8s.io", None, False),
    ("escalate", "clusterroles.rbac.authorization.k8s.io", None, False),
    ("impersonate", "users", None, False),
    ("*", "*", None, False),
    ("create", "subjectaccessreviews.authorization.k8s.io", None, True),
    ("update", "validatingwebhookconfigurations.admissionregistration.k8s.io/mcad", None, True),
    ("update", "validatingwebhookconfigurations.admissionregistration.k8s.io/other", None,
     False),
    ("create", "validatingwebhookconfigurations.admissionregistration.k8s.io", None, False),
    ("update", "mutatingwebhookconfigurations.admissionregistration.k8s.io/mcad", None, True),
    ("update", "mutatingwebhookconfigurations.admissionregistration.k8s.io/other", None,
     False),
    ("update", "customresourcedefinitions.apiextensions.k8s.io/"
               "appwrappers.workload.codeflare.dev", None, True),
    ("update", "customresourcedefinitions.apiextensions.k8s.io/"
               "quotasubtrees.quota.codeflare.dev", None, False),
    ("create", "customresourcedefinitions.apiextensions.k8s.io", None, False),
    ("update", "secrets/mcad-webhook-tls", "mcad-system", True),
    ("update", "configmaps/mcad-runtimes", "mcad-system", True),
    ("update", "configmaps/mcad-config", "mcad-system", False),
    ("create", "configmaps", "mcad-system", False),
    ("update", "secrets/spoke-1-kubeconfig", "mcad-system", False),
    # The visibility API and /metrics: who is calling, and where the leader answers.
    ("create", "tokenreviews.authentication.k8s.io", None, True),
    ("update", "apiservices.apiregistration.k8s.io/v1alpha1.visibility.codeflare.dev", None,
     True),
    ("update", "apiservices.apiregistration.k8s.io/v1beta1.metrics.k8s.io", None, False),
    ("create", "apiservices.apiregistration.k8s.io", None, False),
    ("get", "configmaps/extension-apiserver-authentication", "kube-system", True),
    ("get", "configmaps/kubeadm-config", "kube-system", False),
    ("create", "endpointslices.discovery.k8s.io", "mcad-system", True),
    ("update", "endpointslices.discovery.k8s.io/mcad-visibility", "mcad-system", True),
    ("update", "endpointslices.discovery.k8s.io/other", "mcad-system", False),
    ("create", "endpointslices.discovery.k8s.io", "team-a", False),
    ("create", "services", "mcad-system", False),
]


def test_the_manifests_install_what_the_issue_lists(installed: Cluster,
                                                    kubectl_path: Path) -> None:
    deployment = yaml.safe_load(kubectl(kubectl_path, installed, "get", "deployment", "mcad",
                                         "-n", "mcad-system", "-o", "yaml"))
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert deployment["spec"]["replicas"] == 2
    assert container["args"][:1] == ["run"]
    assert "--metrics-address=:8080" in container["args"]
    assert "--health-address=:8081" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"]
    assert security["capabilities"]["drop"] == ["ALL"]
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    for kind, name in (("service", "mcad-metrics"), ("pdb", "mcad"), ("serviceaccount", "mcad"),
                       ("role", "mcad"), ("rolebinding", "mcad")):
        kubectl(kubectl_path, installed, "get", kind, name, "-n", "mcad-system")
    config_maps = kubectl(kubectl_path, installed, "get", "configmaps", "-n", "mcad-system",
                           "-o", "name")
    assert "configmap/mcad-config-" in config_maps


async def test_the_pods_pass_the_restricted_pod_security_profile(
        installed: Cluster, kubectl_path: Path) -> None:
    labels = yaml.safe_load(kubectl(kubectl_path, installed, "get", "namespace",
                                     "mcad-system", "-o", "yaml"))["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"

    async def two_pods() -> str:
        out = kubectl(kubectl_path, installed, "get", "pods", "-n", "mcad-system", "-l",
                       "app.kubernetes.io/name=mcad", "-o", "name")
        return out if len(out.split()) == 2 else ""

    await wait_until(two_pods, within=60, what="the Deployment's 2 pods to be admitted")


@pytest.mark.parametrize(("verb", "resource", "namespace", "allowed"), CAN_I,
                         ids=[f"{v} {r} {n or 'all'}" for v, r, n, _ in CAN_I])
def test_the_service_account_may_do_exactly_what_mcad_needs(
        installed: Cluster, kubectl_path: Path, verb: str, resource: str,
        namespace: str | None, allowed: bool) -> None:
    assert can_i(kubectl_path, installed, verb, resource, namespace) is allowed


def deployment_tls() -> tuple[str, ...]:
    """The Deployment's TLS arguments on a loopback port: the webhook and the visibility
    API as the manifests register them (mcad keeps only their caBundles)."""
    return ("--webhook-address", f"127.0.0.1:{free_ports(1)[0]}",
            "--visibility-service", "mcad-system/mcad-visibility")


async def test_mcad_running_as_the_service_account_dispatches_to_a_spoke(
        installed: Cluster, kubectl_path: Path, mcad: ControllerProcess,
        clusters: dict[str, Cluster], aw_namespace: str, tmp_path: Path) -> None:
    kubeconfig = service_account_kubeconfig(installed, kubectl_path, tmp_path / "sa.kubeconfig")
    # The Deployment's arguments, with the ConfigMap's file, on loopback ports.
    as_deployed = ControllerProcess(kubeconfig, tmp_path, name="mcad-as-sa", extra_args=(
        "--config", str(REPO / "manifests/base/mcad-config.yaml"),
        "--health-address", "127.0.0.1:0", *deployment_tls()))
    mcad.stop()  # the session's controller (admin rights) must not be the one dispatching
    try:
        as_deployed.start()
        hub = clusters["hub"]
        await create_aw(hub, aw_namespace, job_appwrapper("as-sa", pods=2, gpus=4, runtime="2s"))
        done = await wait_state(hub, aw_namespace, "as-sa", "Completed", within=90)
        assert done["status"]["clusterName"] in ("spoke-1", "spoke-2")
        log = as_deployed.log_path.read_text()
        assert "forbidden" not in log.lower(), log[-3000:]
        assert as_deployed.sample("mcad_leader") == 1
    finally:
        as_deployed.stop()
        mcad.start()


async def test_the_local_overlay_lets_mcad_dispatch_to_the_hub_itself(
        installed: Cluster, kubectl_path: Path, mcad: ControllerProcess,
        clusters: dict[str, Cluster], aw_namespace: str, tmp_path: Path) -> None:
    out = apply(kubectl_path, installed, "manifests/overlays/local")
    assert "clusterrolebinding.rbac.authorization.k8s.io/mcad-local" in out
    args = yaml.safe_load(kubectl(kubectl_path, installed, "get", "deployment", "mcad", "-n",
                                   "mcad-system", "-o", "yaml"))["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--local" in args
    kubeconfig = service_account_kubeconfig(installed, kubectl_path, tmp_path / "sa.kubeconfig")
    local = ControllerProcess(kubeconfig, tmp_path, name="mcad-local", extra_args=(
        "--config", str(REPO / "manifests/base/mcad-config.yaml"), "--local",
        *deployment_tls()))
    mcad.stop()
    try:
        local.start()
        hub = clusters["hub"]
        await create_aw(hub, aw_namespace, job_appwrapper(
            "on-hub", pods=2, gpus=1, runtime="2s",
            scheduling={"clusterScheduling": {"clusters": [{"name": "local"}]}}))
        done = await wait_state(hub, aw_namespace, "on-hub", "Completed", within=90)
        assert done["status"]["clusterName"] == "local"
        job = await hub.batch.read_namespaced_job("on-hub", aw_namespace)
        assert job.status.succeeded == 2
        # Deleted while the controller that can reach "local" still runs.
        await hub.custom.delete_namespaced_custom_object(*AW[:2], aw_namespace, AW[2], "on-hub")

        async def cleaned() -> bool:
            listed = await hub.custom.list_namespaced_custom_object(*AW[:2], aw_namespace,
                                                                    AW[2])
            jobs = (await hub.batch.list_namespaced_job(aw_namespace)).items
            return not listed["items"] and not jobs

        await wait_until(cleaned, within=60, what="the AppWrapper and its Job to be gone")
        assert "forbidden" not in local.log_path.read_text().lower()
    finally:
        local.stop()
        # Back to the base's rights, for the tests that check them.
        kubectl(kubectl_path, installed, "delete", "clusterrolebinding", "mcad-local")
        apply(kubectl_path, installed, "manifests")
        mcad.start()


def test_the_prometheus_overlay_adds_a_service_monitor(kubectl_path: Path) -> None:
    built = list(yaml.safe_load_all(subprocess.run(
        [str(kubectl_path), "kustomize", str(REPO / "manifests/overlays/prometheus")],
        capture_output=True, text=True, check=True).stdout))
    (monitor,) = [d for d in built if d["kind"] == "ServiceMonitor"]
    (service,) = [d for d in built if d["kind"] == "Service" and
                  d["metadata"]["name"] == "mcad-metrics"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]


async def test_a_spoke_registered_with_the_spoke_manifests_identity_runs_work(
        mcad: ControllerProcess, clusters: dict[str, Cluster], kubectl_path: Path,
        aw_namespace: str, tmp_path: Path, testbed: Any) -> None:
    spoke = clusters["spoke-2"]
    kubectl(kubectl_path, spoke, "apply", "-k", str(REPO / "manifests/spoke"))
    kubeconfig = service_account_kubeconfig(spoke, kubectl_path, tmp_path / "spoke.kubeconfig")
    admin = next(c.kubeconfig for c in testbed.clusters if c.name == "spoke-2")
    hub = clusters["hub"]
    try:
        assert await mcad_cli("cluster", "register", "spoke-2", "--kubeconfig", str(kubeconfig),
                              "--label", "zone=west", "--hub-kubeconfig",
                              str(hub.kubeconfig)) == 0
        await create_aw(hub, aw_namespace, job_appwrapper(
            "least", pods=2, gpus=2, runtime="2s",
            scheduling={"clusterScheduling": {"clusters": [{"name": "spoke-2"}]}}))
        done = await wait_state(hub, aw_namespace, "least", "Completed", within=90)
        assert done["status"]["clusterName"] == "spoke-2"
        await hub.custom.delete_namespaced_custom_object(*AW[:2], aw_namespace, AW[2], "least")

        async def cleaned() -> bool:
            jobs = (await spoke.batch.list_namespaced_job(aw_namespace)).items
            listed = await hub.custom.list_namespaced_custom_object(*AW[:2], aw_namespace,
                                                                    AW[2])
            return not jobs and not listed["items"]

        await wait_until(cleaned, within=60, what="the Job to be deleted through the identity")
        assert "forbidden" not in mcad.log_path.read_text().lower()
    finally:
        assert await mcad_cli("cluster", "register", "spoke-2", "--kubeconfig", str(admin),
                              "--label", "zone=west", "--hub-kubeconfig",
                              str(hub.kubeconfig)) == 0
