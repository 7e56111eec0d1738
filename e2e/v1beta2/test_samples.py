"""project-codeflare/appwrapper's samples, applied unchanged with kubectl, reach the phase
that project documents for them (its quick start: "You should quickly see an AppWrapper
with the Running Status", then Succeeded when its containers end), each readable as
``appwrappers.v1beta1`` and ``.v1beta2`` with the same facts; kubectl's default version
is v1beta2, with that project's columns. A v1beta2 AppWrapper written through v1beta2
waits Suspended in ``mcad queue`` while suspended and runs once resumed.

The test bed plays the samples' containers by annotating their pods (``conftest``); the
failing Job is reset by its fault-tolerance annotations (docs/user-guide.md 7b), then
Failed after its retryLimit.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.clusters import Cluster, kubectl
from e2e.controller import ControllerProcess, mcad_output
from e2e.dispatch.test_jobset import jobset_on_spoke_1  # noqa: F401  (a fixture)
from e2e.v1beta2.conftest import (
    GROUP,
    SAMPLES,
    condition,
    phase,
    playing,
    read,
    webhooks_by_url,
)
from e2e.waiting import wait_until

RUNTIME = {"mcad.test/runtime": "1s"}
MERGE_PATCH = "application/merge-patch+json"


@pytest.fixture(scope="module")
def served(mcad: ControllerProcess, kubectl_path: Path, hub_crds: Cluster,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    with webhooks_by_url(mcad, kubectl_path, hub_crds,
                         tmp_path_factory.mktemp("v1beta2")) as own:
        yield own


def apply(kubectl_bin: Path, hub: Cluster, sample: str, namespace: str) -> str:
    """``kubectl apply -f`` of the sample as published (it names no namespace)."""
    return kubectl(kubectl_bin, hub, "apply", "-n", namespace, "-f", str(SAMPLES / sample))


async def reaches(hub: Cluster, namespace: str, name: str, wanted: str,
                  within: float = 90) -> dict[str, Any]:
    async def there() -> dict[str, Any] | None:
        obj = await read(hub, "v1beta2", namespace, name)
        return obj if (obj.get("status") or {}).get("phase") == wanted else None

    return await wait_until(there, within=within, what=f"{name} in phase {wanted}")


async def both_versions_agree(hub: Cluster, namespace: str, name: str) -> None:
    stored = await read(hub, "v1beta1", namespace, name)
    shown = await read(hub, "v1beta2", namespace, name)
    assert stored["metadata"]["uid"] == shown["metadata"]["uid"]
    assert shown["status"]["state"] == stored["status"]["state"]
    assert shown["status"].get("clusterName") == stored["status"].get("clusterName")
    templates = [i["generictemplate"] for i in stored["spec"]["resources"]["GenericItems"]]
    assert [c["template"] for c in shown["spec"]["components"]] == templates
    kept = json.loads(stored["metadata"]["annotations"]["workload.codeflare.dev/v1beta2"])
    assert "status" not in kept  # v1beta2's status is derived, nothing kept aside


CASES = [
    ("wrapped-job.yaml", "sample-job", RUNTIME, "Succeeded"),
    ("wrapped-gpu-job.yaml", "sample-gpu-job", RUNTIME, "Succeeded"),
    ("wrapped-pod.yaml", "sample-pod", RUNTIME, "Succeeded"),
    ("wrapped-deployment.yaml", "sample-deployment", None, "Running"),
]


@pytest.mark.parametrize(("sample", "name", "ends", "last"), CASES,
                         ids=[c[0] for c in CASES])
async def test_a_sample_reaches_its_documented_phases(
        served: ControllerProcess, clusters: dict[str, Cluster], spokes: dict[str, Cluster],
        aw_namespace: str, kubectl_path: Path, sample: str, name: str,
        ends: dict[str, str] | None, last: str) -> None:
    hub, ns = clusters["hub"], aw_namespace
    out = apply(kubectl_path, hub, sample, ns)
    assert f"appwrapper.{GROUP}/{name} created" in out
    running = await reaches(hub, ns, name, "Running")
    for type_ in ("QuotaReserved", "ResourcesDeployed", "PodsReady"):
        assert condition(running, type_).get("status") == "True", type_
    await both_versions_agree(hub, ns, name)
    (entry,) = running["status"]["componentStatus"]
    assert entry["name"] == name and entry["podSets"]  # inferred, as the project infers
    if ends is None:
        return
    async with playing(spokes, ns, running["metadata"]["uid"], ends) as played:
        done = await reaches(hub, ns, name, last)
        assert played
    assert condition(done, "QuotaReserved").get("status") == "False"
    stored = await read(hub, "v1beta1", ns, name)
    assert stored["status"]["state"] == "Completed"


async def test_the_jobset_sample_runs_where_jobsets_are_served(
        served: ControllerProcess, jobset_on_spoke_1: Cluster,  # noqa: F811
        clusters: dict[str, Cluster], spokes: dict[str, Cluster], aw_namespace: str,
        kubectl_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    apply(kubectl_path, hub, "wrapped-jobset.yaml", ns)
    running = await reaches(hub, ns, "sample-jobset", "Running", within=120)
    assert running["status"]["clusterName"] == "spoke-1"
    (entry,) = running["status"]["componentStatus"]
    assert sorted(p["replicas"] for p in entry["podSets"]) == [1, 4]
    await both_versions_agree(hub, ns, "sample-jobset")
    async with playing(spokes, ns, running["metadata"]["uid"], RUNTIME) as played:
        await reaches(hub, ns, "sample-jobset", "Succeeded", within=120)
        assert len(played) == 5


async def test_the_failing_job_sample_is_reset_then_fails(
        served: ControllerProcess, clusters: dict[str, Cluster], spokes: dict[str, Cluster],
        aw_namespace: str, kubectl_path: Path) -> None:
    """The AppWrapper project's fault tolerance: its pods fail (the test plays ``exit
    1``), the gang is reset after failureGracePeriodDuration 10s, paused
    retryPausePeriodDuration 10s, up to retryLimit 3 times, then Failed."""
    hub, ns = clusters["hub"], aw_namespace
    apply(kubectl_path, hub, "wrapped-failing-job.yaml", ns)
    running = await reaches(hub, ns, "sample-failing-job", "Running")
    seen: set[str] = set()

    async def failed() -> dict[str, Any] | None:
        obj = await read(hub, "v1beta2", ns, "sample-failing-job")
        seen.add(str(obj["status"].get("phase")))
        return obj if obj["status"].get("phase") == "Failed" else None

    async with playing(spokes, ns, running["metadata"]["uid"], {"mcad.test/fail-after": "1s"}):
        done = await wait_until(failed, within=180, what="sample-failing-job Failed")
    assert "Resetting" in seen
    assert done["status"]["resettingCount"] == 3


async def test_a_suspended_v1beta2_appwrapper_waits_in_the_queue_until_resumed(
        served: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str) -> None:
    """Written through v1beta2 (the conversion webhook turns it into the stored form):
    Suspended in its phase, in ``mcad queue`` and ``mcad explain``; resumed through
    v1beta2, it runs."""
    hub, ns = clusters["hub"], aw_namespace
    body = yaml.safe_load((SAMPLES / "wrapped-job.yaml").read_text())
    body["metadata"]["name"] = "paused"
    body["spec"]["suspend"] = True
    await hub.custom.create_namespaced_custom_object(GROUP, "v1beta2", ns, "appwrappers", body)
    held = await reaches(hub, ns, "paused", "Suspended")
    assert condition(held, "QuotaReserved")["reason"] == "Suspended"

    async def queued() -> str | None:
        code, out, _ = await mcad_output("queue", "-n", ns, "--kubeconfig",
                                         str(served.hub_kubeconfig))
        return out if code == 0 and "Suspended" in out else None

    out = await wait_until(queued, within=30, what="mcad queue to show it Suspended")
    assert "paused" in out
    code, out, err = await mcad_output("explain", "paused", "-n", ns, "--kubeconfig",
                                       str(served.hub_kubeconfig))
    assert code == 0 and "spec.suspend is true" in out, err
    await asyncio.sleep(2)
    assert await phase(hub, ns, "paused") == "Suspended"
    await hub.custom.patch_namespaced_custom_object(
        GROUP, "v1beta2", ns, "appwrappers", "paused", {"spec": {"suspend": False}},
        _content_type=MERGE_PATCH)
    await reaches(hub, ns, "paused", "Running")


async def test_kubectl_reads_v1beta2_by_default_and_v1beta1_by_name(
        served: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        kubectl_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    apply(kubectl_path, hub, "wrapped-deployment.yaml", ns)
    await reaches(hub, ns, "sample-deployment", "Running")
    default = kubectl(kubectl_path, hub, "get", "aw", "-n", ns).splitlines()
    assert default[0].split() == ["NAME", "STATUS", "QUOTA", "RESERVED", "RESOURCES",
                                  "DEPLOYED", "UNHEALTHY", "AGE"]
    assert default[1].split()[:4] == ["sample-deployment", "Running", "True", "True"]
    stored = kubectl(kubectl_path, hub, "get", f"appwrappers.v1beta1.{GROUP}", "-n", ns)
    assert stored.splitlines()[0].split() == ["NAME", "STATE", "CLUSTER", "REQUEUES", "AGE"]
