"""A JobSet wrapped by ``mcad wrap`` runs to completion on the test bed.

The JobSet controller (sigs.k8s.io/jobset v0.10.1, built from its Go module by
``e2e.gotools``) runs against spoke-1 only, whose API server gets JobSet's CRD; spoke-2
does not serve the kind, so mcad sends the AppWrapper to spoke-1. The controller runs
outside the cluster, with its defaulting and validating webhooks served on loopback and
registered with the spoke by URL and a throw-away certificate, no metrics and no leader
election. The JobSet's two Jobs' pods succeed 2 s after they run; JobSet marks itself
``Completed``, and mcad completes the AppWrapper by that condition.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from e2e.cluster.topology import TestbedState, free_ports
from e2e.clusters import Cluster, kubectl
from e2e.controller import REPO
from e2e.dispatch.conftest import ControllerProcess, get_aw, wait_state
from e2e.gotools import module_dir, tool
from e2e.waiting import wait_until

JOBSET = "sigs.k8s.io/jobset"


@pytest.fixture(scope="module")
def jobset_on_spoke_1(clusters: dict[str, Cluster], kubectl_path: Path, testbed: TestbedState,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    binary = tool("jobset", JOBSET, "jobset-controller")
    crd = module_dir("jobset", JOBSET) / "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
    spoke = clusters["spoke-1"]
    kubectl(kubectl_path, spoke, "apply", "--server-side", "-f", str(crd))
    kubectl(kubectl_path, spoke, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/jobsets.jobset.x-k8s.io")
    work = tmp_path_factory.mktemp("jobset")
    certs = work / "certs"
    certs.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.crt")],
                   check=True, capture_output=True)
    webhook_port, health_port = free_ports(2)
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "internalCertManagement": {"enable": False},
        "leaderElection": {"leaderElect": False},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(certs)}}))
    log = (work / "jobset-controller.log").open("wb")
    proc = subprocess.Popen([str(binary), "--kubeconfig", str(spoke.kubeconfig),
                             "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    # JobSet's defaulting and validating webhooks, served by the controller on loopback
    # (the spoke's API server runs on this machine), registered with its certificate.
    ca = base64.b64encode((certs / "tls.crt").read_bytes()).decode()
    hooks = work / "webhooks.yaml"
    hooks.write_text(yaml.safe_dump_all([
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
         "metadata": {"name": "jobset-e2e"},
         "webhooks": [{"name": f"{verb}.jobset.x-k8s.io", "admissionReviewVersions": ["v1"],
                       "sideEffects": "None", "failurePolicy": "Fail",
                       "clientConfig": {"caBundle": ca, "url": f"https://127.0.0.1:"
                                        f"{webhook_port}/{verb}-jobset-x-k8s-io-v1alpha2-jobset"},
                       "rules": [{"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"],
                                  "operations": ["CREATE", "UPDATE"],
                                  "resources": ["jobsets"]}]}]}
        for kind, verb in (("MutatingWebhookConfiguration", "mutate"),
                           ("ValidatingWebhookConfiguration", "validate"))]))
    kubectl(kubectl_path, spoke, "apply", "-f", str(hooks))
    try:
        yield spoke
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        kubectl(kubectl_path, spoke, "delete", "--wait=false", "-f", str(hooks))
        kubectl(kubectl_path, spoke, "delete", "--wait=false", "crd", "jobsets.jobset.x-k8s.io")


def jobset(name: str) -> dict[str, object]:
    """Two Jobs (a leader of 1 pod, workers of 2 pods x 4 GPUs), pods done in 2 s."""
    def job(pods: int, gpus: int) -> dict[str, object]:
        return {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": {
            "metadata": {"annotations": {"mcad.test/runtime": "2s"}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "1"},
                              "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}

    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {"replicatedJobs": [
                {"name": "leader", "replicas": 1, "template": {"spec": job(1, 1)}},
                {"name": "workers", "replicas": 1, "template": {"spec": job(2, 4)}}]}}


async def test_a_wrapped_jobset_runs_to_completion(
        jobset_on_spoke_1: Cluster, mcad: ControllerProcess, clusters: dict[str, Cluster],
        aw_namespace: str, tmp_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    manifest = tmp_path / "jobset.yaml"
    manifest.write_text(json.dumps(jobset("trainer")))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mcad.cli", "wrap", "-f", str(manifest), "-n", ns, "--apply",
        "--kubeconfig", str(mcad.hub_kubeconfig), cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()

    async def dispatched() -> str | None:
        cluster = ((await get_aw(hub, ns, "trainer")).get("status") or {}).get("clusterName")
        return str(cluster) if cluster else None

    assert await wait_until(dispatched, within=60, what="the JobSet dispatched") == "spoke-1"
    done = await wait_state(hub, ns, "trainer", "Completed", within=120)
    demand = done["spec"]["resources"]["GenericItems"][0]["custompodresources"]
    assert sorted(d["replicas"] for d in demand) == [1, 2]  # read from both Jobs' templates
