"""Tenant boundaries on the real hub, installed with ``kubectl apply -k manifests/``.

Users ``team-a`` and ``team-b`` (client certificates from the hub's CA, each with the
``edit`` ClusterRole bound in their own namespace only) and the hub's administrator ask
the visibility API through the hub's API server, as the manifests install it: ``mcad
queue`` as team-b lists team-b's waiting AppWrappers and none of team-a's; ``mcad
explain`` of team-a's AppWrapper as team-b is refused with a sentence; the
administrator sees both; the web view (headless Chromium through ``kubectl proxy`` as
team-b) shows only team-b's rows. On the metrics port, ``/queue`` and ``/ui/`` are not
served, and ``/metrics`` answers 401 without a token, 403 with a token lacking the
right, 200 with Prometheus' ServiceAccount token (the manifests' ``mcad-metrics-reader``).

mcad runs as the manifests' ServiceAccount with the Deployment's arguments, out of
cluster (no image can be built here); the manifests' visibility Service is turned into an
``ExternalName`` of 127.0.0.1 on its port, as the test bed has no kube-proxy and no pod.
"""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.browser import browser
from e2e.cluster.pki import user_certificate, user_kubeconfig
from e2e.cluster.topology import free_ports
from e2e.clusters import Cluster, kubectl, kubectl_proxy
from e2e.controller import AW, REPO, ControllerProcess, job_appwrapper, mcad_output
from e2e.install.conftest import service_account_kubeconfig
from e2e.waiting import wait_until

TEAMS = ("team-a", "team-b")
API_SERVICE = "v1alpha1.visibility.codeflare.dev"
PAGE = "/apis/visibility.codeflare.dev/v1alpha1/views/page"


@dataclass
class Tenancy:
    hub: Cluster
    kubectl: Path
    kubeconfigs: dict[str, Path]
    """team-a, team-b, and admin."""
    mcad: ControllerProcess


def run_kubectl(kubectl_bin: Path, kubeconfig: Path, *args: str, stdin: str = ""
                ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(kubectl_bin), "--kubeconfig", str(kubeconfig), *args],
                          input=stdin, capture_output=True, text=True, check=False, timeout=60)


def apply_as(kubectl_bin: Path, kubeconfig: Path, obj: dict[str, Any]) -> None:
    done = run_kubectl(kubectl_bin, kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(obj))
    assert done.returncode == 0, done.stderr


async def available(kubectl_bin: Path, hub: Cluster) -> bool:
    service = json.loads(kubectl(kubectl_bin, hub, "get", "apiservice", API_SERVICE,
                                 "-o", "json"))
    return any(c["type"] == "Available" and c["status"] == "True"
               for c in (service.get("status") or {}).get("conditions") or [])


def cluster_of(kubeconfig: Path) -> dict[str, Any]:
    cluster: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    return cluster


@pytest.fixture(scope="module")
async def tenancy(installed: Cluster, kubectl_path: Path, mcad: ControllerProcess,
                  testbed_dir: Path, tmp_path_factory: pytest.TempPathFactory
                  ) -> AsyncIterator[Tenancy]:
    hub, work = installed, tmp_path_factory.mktemp("tenancy")
    admin = Path(hub.kubeconfig)
    server = cluster_of(admin)
    kubeconfigs = {"admin": admin}
    for team in TEAMS:
        apply_as(kubectl_path, admin, {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": team}})
        apply_as(kubectl_path, admin, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{team}-edit", "namespace": team},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": team}]})
        cert, key = user_certificate(testbed_dir / "pki", user=team)
        path = work / f"{team}.kubeconfig"
        path.write_text(user_kubeconfig(
            server=server["server"], ca=base64.b64decode(server["certificate-authority-data"]),
            user=team, cert=cert, key=key))
        kubeconfigs[team] = path

    # mcad as the manifests' ServiceAccount, with the Deployment's arguments.
    (tls_port,) = free_ports(1)
    as_deployed = ControllerProcess(
        service_account_kubeconfig(hub, kubectl_path, work / "sa.kubeconfig"), work,
        name="mcad-tenancy", extra_args=(
            "--config", str(REPO / "manifests/base/mcad-config.yaml"),
            "--metrics-auth=true", "--webhook-address", f"127.0.0.1:{tls_port}",
            "--visibility-service", "mcad-system/mcad-visibility"))
    mcad.stop()  # the session's controller would answer, and dispatch, instead
    as_deployed.start()
    kubectl(kubectl_path, hub, "delete", "service", "mcad-visibility", "-n", "mcad-system")
    apply_as(kubectl_path, admin, {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "mcad-visibility", "namespace": "mcad-system"},
        "spec": {"type": "ExternalName", "externalName": "127.0.0.1",
                 "ports": [{"name": "https", "port": tls_port}]}})
    kubectl(kubectl_path, hub, "patch", "apiservice", API_SERVICE, "--type=merge", "-p",
            json.dumps({"spec": {"service": {"port": tls_port}}}))
    await wait_until(lambda: available(kubectl_path, hub), within=60,
                     what=f"APIService {API_SERVICE} to be Available")
    # (kubectl knows the resource once the API is served)
    async def roles_aggregated() -> bool:  # the ClusterRole aggregation controller's work
        done = run_kubectl(kubectl_path, kubeconfigs["team-b"], "auth", "can-i", "list",
                           "pendingappwrappers.visibility.codeflare.dev", "-n", "team-b")
        return done.stdout.strip() == "yes"

    await wait_until(roles_aggregated, within=60, what="edit to include the visibility API")

    try:
        yield Tenancy(hub, kubectl_path, kubeconfigs, as_deployed)
    finally:
        for team in TEAMS:  # the AppWrappers go while a controller can let them
            await hub.custom.delete_collection_namespaced_custom_object(*AW[:2], team, AW[2])

        async def gone() -> bool:
            return not any([(await hub.custom.list_namespaced_custom_object(
                *AW[:2], team, AW[2]))["items"] for team in TEAMS])

        await wait_until(gone, within=60, what="the teams' AppWrappers to go")
        as_deployed.stop()
        for team in TEAMS:
            kubectl(kubectl_path, hub, "delete", "namespace", team, "--wait=false")


async def waiting_pair(t: Tenancy) -> None:
    """team-a's and team-b's AppWrappers, each too big to ever fit (16 GPUs in one pod),
    created by the teams themselves; once the leader's queue lists both."""
    for team in TEAMS:
        name = f"{team[-1]}-wait"
        wire = job_appwrapper(name, pods=1, gpus=16, runtime=None)
        wire["metadata"]["namespace"] = team
        apply_as(t.kubectl, t.kubeconfigs[team], wire)

    async def both() -> list[str] | None:
        code, out, _ = await mcad_output("queue", "-A", "-o", "json", "--kubeconfig",
                                         str(t.kubeconfigs["admin"]))
        if code:
            return None
        names = sorted(i["metadata"]["name"] for i in json.loads(out)["items"])
        return names if names == ["a-wait", "b-wait"] else None

    await wait_until(both, within=60, what="both teams' AppWrappers in the queue")


async def test_each_team_sees_its_own_queue_and_the_administrator_sees_all(
        tenancy: Tenancy) -> None:
    t = tenancy
    await waiting_pair(t)
    team_b = ("--kubeconfig", str(t.kubeconfigs["team-b"]))
    code, out, err = await mcad_output("queue", "-n", "team-b", "-o", "json", *team_b)
    assert code == 0, err
    assert [(i["metadata"]["namespace"], i["metadata"]["name"])
            for i in json.loads(out)["items"]] == [("team-b", "b-wait")]
    code, _, err = await mcad_output("queue", "-n", "team-a", *team_b)
    assert code == 1
    assert err.startswith("mcad queue: you may not list the queue of namespace team-a: "), err
    code, _, err = await mcad_output("queue", "-A", *team_b)
    assert code == 1 and "you may not list the queue of every namespace" in err, err

    code, text, err = await mcad_output("explain", "a-wait", "-n", "team-a", *team_b)
    assert code == 1
    assert err.startswith("mcad explain: you may not see AppWrapper a-wait of namespace "
                          "team-a: "), err
    code, text, err = await mcad_output("explain", "b-wait", "-n", "team-b", *team_b)
    assert code == 0, err
    assert text.startswith("AppWrapper team-b/b-wait: InsufficientCapacity")
    assert "team-a" not in text

    code, out, err = await mcad_output("queue", "-A", "-o", "json", "--kubeconfig",
                                       str(t.kubeconfigs["admin"]))
    assert code == 0, err
    assert sorted(f"{i['metadata']['namespace']}/{i['metadata']['name']}"
                  for i in json.loads(out)["items"]) == ["team-a/a-wait", "team-b/b-wait"]


async def test_the_web_view_shows_a_tenant_only_their_rows(tenancy: Tenancy) -> None:
    t = tenancy
    await waiting_pair(t)
    with kubectl_proxy(t.kubectl, t.kubeconfigs["team-b"]) as proxy:
        async with browser() as page:
            await page.goto(proxy + PAGE)

            async def shown() -> list[str] | None:
                keys: list[str] = await page.eval(
                    "[...document.querySelectorAll('#queue tr.row')].map(r => r.dataset.key)")
                return keys or None

            assert await wait_until(shown, within=30, what="team-b's row") == ["team-b/b-wait"]
            text: str = await page.eval("document.body.textContent")
            assert "team-a" not in text
            assert await page.eval("document.querySelector('#scope').textContent") == \
                "showing namespaces team-b"
            await page.screenshot(REPO / "docs" / "img" / "ui-tenant.png")


def get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_metrics_port_asks_who_is_calling(tenancy: Tenancy) -> None:
    t = tenancy
    admin = t.kubeconfigs["admin"]
    base = f"http://127.0.0.1:{t.mcad.port}"
    for path in ("/queue", "/ui/", "/ui/state", "/explain"):
        assert get(base + path)[0] == 404, path
    for namespace, name in (("monitoring", "prometheus-k8s"), ("team-a", "nosy")):
        apply_as(t.kubectl, admin, {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": namespace}})
        apply_as(t.kubectl, admin, {"apiVersion": "v1", "kind": "ServiceAccount",
                                    "metadata": {"name": name, "namespace": namespace}})
    done = run_kubectl(t.kubectl, admin, "apply", "-f",
                       str(REPO / "manifests/overlays/prometheus/metrics-reader.yaml"))
    assert done.returncode == 0, done.stderr

    def token(namespace: str, name: str) -> str:
        return kubectl(t.kubectl, t.hub, "create", "token", name, "-n", namespace).strip()

    code, body = get(base + "/metrics")
    assert code == 401 and "needs a bearer token" in body
    code, body = get(base + "/metrics", token("team-a", "nosy"))
    assert code == 403 and "system:serviceaccount:team-a:nosy may not get /metrics" in body
    code, body = get(base + "/metrics", token("monitoring", "prometheus-k8s"))
    assert code == 200 and "mcad_leader 1.0" in body
    assert get(base + "/healthz")[0] == 200  # the kubelet's probe needs no token
    kubectl(t.kubectl, t.hub, "delete", "clusterrolebinding", "mcad-metrics-reader")
