"""What the install tests share: the manifests applied to the real hub (``installed``),
``kubectl auth can-i`` as mcad's ServiceAccount, and a kubeconfig with that
ServiceAccount's token, to run ``mcad run`` as the Deployment would."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.clusters import Cluster, kubectl
from e2e.controller import REPO, ControllerProcess

SA = "system:serviceaccount:mcad-system:mcad"
SUBRESOURCES = {"status", "finalizers", "exec"}


def apply(kubectl_bin: Path, hub: Cluster, path: str) -> str:
    """``kubectl apply -k`` of a kustomization, then the manifests' webhook put aside.

    The test bed cannot route to Services (no kube-proxy): a webhook behind one would
    refuse every AppWrapper. Tests that want the webhook point it at an mcad of their own
    (e2e/security); the manifests' configuration is checked, then deleted.
    """
    out = kubectl(kubectl_bin, hub, "apply", "-k", str(REPO / path))
    webhook = yaml.safe_load(kubectl(kubectl_bin, hub, "get", "validatingwebhookconfiguration",
                                      "mcad", "-o", "yaml"))
    assert webhook["webhooks"][0]["clientConfig"]["service"]["name"] == "mcad-webhook"
    assert webhook["webhooks"][0]["failurePolicy"] == "Fail"
    mutating = yaml.safe_load(kubectl(kubectl_bin, hub, "get", "mutatingwebhookconfiguration",
                                       "mcad", "-o", "yaml"))
    assert mutating["webhooks"][0]["clientConfig"]["service"]["path"] == "/mutate-appwrapper"
    assert mutating["webhooks"][0]["failurePolicy"] == "Ignore"
    kubectl(kubectl_bin, hub, "delete", "validatingwebhookconfiguration,"
            "mutatingwebhookconfiguration", "mcad")
    service = yaml.safe_load(kubectl(kubectl_bin, hub, "get", "apiservice",
                                      "v1alpha1.visibility.codeflare.dev", "-o", "yaml"))
    assert service["spec"]["service"] == {"namespace": "mcad-system", "name": "mcad-visibility",
                                          "port": 443}
    return out


@pytest.fixture(scope="module")
def installed(hub_crds: Cluster, kubectl_path: Path, mcad: ControllerProcess
              ) -> Iterator[Cluster]:
    try:
        out = apply(kubectl_path, hub_crds, "manifests")
        assert "deployment.apps/mcad" in out
        assert "clusterrole.rbac.authorization.k8s.io/mcad" in out
        assert "validatingwebhookconfiguration.admissionregistration.k8s.io/mcad" in out
        assert "mutatingwebhookconfiguration.admissionregistration.k8s.io/mcad" in out
        yield hub_crds
    finally:
        # The manifests' APIService points at a Service nothing serves here (no
        # kube-proxy, no pods): the session's controller registers its own again when it
        # starts. Also when the apply failed half-way, or every later test that asks the
        # visibility API would fail for this one's reason.
        mcad.stop()
        mcad.start()


def can_i(kubectl_bin: Path, hub: Cluster, verb: str, resource: str,
          namespace: str | None) -> bool:
    scope = ["-n", namespace] if namespace else ["--all-namespaces"]
    resource, _, after = resource.partition("/")
    if after in SUBRESOURCES:  # "pods/exec": a subresource; "secrets/x": the one named x
        scope.append(f"--subresource={after}")
    elif after:
        resource = f"{resource}/{after}"
    proc = subprocess.run([str(kubectl_bin), "--kubeconfig", str(hub.kubeconfig), "auth", "can-i",
                           verb, resource, "--as", SA, *scope],
                          capture_output=True, text=True, check=False, timeout=30)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), proc.stderr
    return answer == "yes"


def service_account_kubeconfig(cluster: Cluster, kubectl_bin: Path, path: Path) -> Path:
    """A kubeconfig for ServiceAccount mcad-system/mcad of ``cluster``, with a fresh token."""
    token = kubectl(kubectl_bin, cluster, "create", "token", "mcad", "-n", "mcad-system",
                     "--duration=1h").strip()
    admin: dict[str, Any] = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    cluster = admin["clusters"][0]["cluster"]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "mcad",
        "clusters": [{"name": "hub", "cluster": cluster}],
        "users": [{"name": "mcad", "user": {"token": token}}],
        "contexts": [{"name": "mcad", "context": {"cluster": "hub", "user": "mcad"}}]}))
    return path


