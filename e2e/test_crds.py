"""The CRDs in crds/ on a real apiserver: accepted, explainable, defaulting and
validating as the models say, with MCAD v1 YAML accepted unchanged."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from e2e.clusters import Cluster

REPO = Path(__file__).resolve().parents[1]
AW = ("workload.codeflare.dev", "v1beta1", "appwrappers")
V1BETA1 = "workload.codeflare.dev/v1beta1"
QST = ("quota.codeflare.dev", "v1alpha1", "quotasubtrees")


def kubectl(path: Path, cluster: Cluster, *args: str) -> str:
    proc = subprocess.run([str(path), "--kubeconfig", str(cluster.kubeconfig), *args],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout

def fixture(name: str) -> list[dict[str, Any]]:
    text = (REPO / "tests/fixtures/mcad-v1" / name).read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def test_kubectl_explain_appwrapper_spec(hub_crds: Cluster, kubectl_path: Path) -> None:
    # The apiserver publishes a new CRD's OpenAPI a few seconds after it is Established.
    deadline = time.monotonic() + 60
    while True:
        proc = subprocess.run([str(kubectl_path), "--kubeconfig", str(hub_crds.kubeconfig),
                               "explain", "appwrapper.spec", f"--api-version={V1BETA1}"],
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "schedulingSpec" in out and "resources" in out
    out = kubectl(kubectl_path, hub_crds, "explain", "appwrapper.spec.schedulingSpec.requeuing",
                  f"--api-version={V1BETA1}")
    assert "timeInSeconds" in out and "growthType" in out
    # kubectl's default is the newest version: v1beta2, project-codeflare/appwrapper's
    out = kubectl(kubectl_path, hub_crds, "explain", "appwrapper.spec")
    assert "components" in out and "managedBy" in out


@pytest.mark.parametrize("name", sorted(
    p.name for p in (REPO / "tests/fixtures/mcad-v1").glob("aw-*.yaml")))
async def test_mcad_v1_appwrapper_is_accepted(hub_crds: Cluster, namespace: str, name: str) -> None:
    for doc in fixture(name):
        doc["metadata"]["namespace"] = namespace
        created = await hub_crds.custom.create_namespaced_custom_object(
            *AW[:2], namespace, AW[2], doc)
        # Kept verbatim: the wrapped template survives the round trip unpruned.
        items = created["spec"]["resources"]["GenericItems"]
        assert [i["generictemplate"] for i in items] == \
            [i["generictemplate"] for i in doc["spec"]["resources"]["GenericItems"]]


async def test_an_mcad_appwrapper_has_no_state_until_the_controller_looks(
        hub_crds: Cluster, namespace: str) -> None:
    """As under MCAD's CRD: status is a subresource, so a status sent with the object is
    dropped, and nothing defaults one; the state stays empty until a controller writes."""
    (doc,) = fixture("aw-job-quota.yaml")
    doc["metadata"]["namespace"] = namespace
    doc["status"] = {"state": "Running", "canrun": True, "numberOfRequeueings": 3}
    created = await hub_crds.custom.create_namespaced_custom_object(
        *AW[:2], namespace, AW[2], doc)
    assert "status" not in created, created.get("status")


async def test_requeuing_defaults_are_applied(hub_crds: Cluster, namespace: str) -> None:
    doc = {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
           "metadata": {"name": "defaults"},
           "spec": {"schedulingSpec": {"requeuing": {}}, "resources": {"GenericItems": [
               {"generictemplate": {"apiVersion": "v1", "kind": "Pod",
                                    "metadata": {"name": "p"},
                                    "spec": {"containers": [{"name": "c", "image": "x"}]}}}]}}}
    created = await hub_crds.custom.create_namespaced_custom_object(*AW[:2], namespace, AW[2], doc)
    requeuing = created["spec"]["schedulingSpec"]["requeuing"]
    assert requeuing["timeInSeconds"] == 300
    assert requeuing["growthType"] == "exponential"
    assert requeuing["maxNumRequeuings"] == 0


async def test_invalid_requeuing_is_rejected_by_the_apiserver(
    hub_crds: Cluster, namespace: str
) -> None:
    doc = yaml.safe_load((REPO / "tests/fixtures/invalid/bad-requeuing.yaml").read_text())
    with pytest.raises(ApiException) as err:
        await hub_crds.custom.create_namespaced_custom_object(*AW[:2], namespace, AW[2], doc)
    assert err.value.status == 422
    assert "growthType" in err.value.body


async def test_quota_tree_and_spoke_cluster_are_accepted(
    hub_crds: Cluster, namespace: str, kubectl_path: Path
) -> None:
    for doc in fixture("quota-tree.yaml"):
        doc["metadata"]["namespace"] = namespace
        version = doc["apiVersion"].split("/")[1]  # MCAD's quickstart writes v1; both served
        await hub_crds.custom.create_namespaced_custom_object(QST[0], version, namespace,
                                                              QST[2], doc)
    listed = await hub_crds.custom.list_namespaced_custom_object(*QST[:2], namespace, QST[2])
    assert len(listed["items"]) == len(fixture("quota-tree.yaml"))
    spoke = {"apiVersion": "cluster.codeflare.dev/v1alpha1", "kind": "SpokeCluster",
             "metadata": {"name": f"{namespace}-spoke"},
             "spec": {"kubeconfigSecret": {"name": "spoke-1"}}}
    await hub_crds.custom.create_cluster_custom_object(
        "cluster.codeflare.dev", "v1alpha1", "spokeclusters", spoke)
    try:
        out = kubectl(kubectl_path, hub_crds, "get", "spoke", f"{namespace}-spoke")
        assert "READY" in out.upper().split("\n")[0]
    finally:
        await hub_crds.custom.delete_cluster_custom_object(
            "cluster.codeflare.dev", "v1alpha1", "spokeclusters", f"{namespace}-spoke")


async def test_kubectl_get_aw_shows_state_cluster_requeues_age(
    hub_crds: Cluster, kubectl_path: Path, namespace: str
) -> None:
    for doc in fixture("aw-job-quota.yaml"):
        doc["metadata"]["namespace"] = namespace
        await hub_crds.custom.create_namespaced_custom_object(*AW[:2], namespace, AW[2], doc)
    # By name: kubectl's default is the newest version, v1beta2, converted by mcad's
    # webhook (e2e/v1beta2/test_samples.py reads it with its own columns).
    header = kubectl(kubectl_path, hub_crds, "get", "appwrappers.v1beta1.workload.codeflare.dev",
                     "-n", namespace).splitlines()[0]
    assert header.split() == ["NAME", "STATE", "CLUSTER", "REQUEUES", "AGE"]
