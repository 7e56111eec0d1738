"""Smoke tests of the test bed itself: nodes, Jobs, gang scheduling, unschedulable pods,
the KWOK pod stages, and a launcher that leaves no process behind.

These guard every other end-to-end test: if one fails here, the test bed (not mcad)
is what broke.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.components import PERMIT_WAITING_SECONDS
from e2e.cluster.launcher import down, up
from e2e.cluster.supervisor import HOLD_BEFORE_READY_ENV
from e2e.cluster.topology import TestbedSpec, pid_alive, read_state
from e2e.clusters import Cluster
from e2e.waiting import holds_for, wait_until

GPU = "nvidia.com/gpu"
PG_GROUP, PG_VERSION, PG_PLURAL = "scheduling.x-k8s.io", "v1alpha1", "podgroups"
REPO = Path(__file__).resolve().parents[1]


def pod(name: str, *, gpus: int, annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox",
            "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]},
    }


async def pods_of(cluster: Cluster, namespace: str, selector: str = "") -> list[Any]:
    return list((await cluster.core.list_namespaced_pod(namespace, label_selector=selector)).items)


async def test_spokes_have_ready_gpu_nodes(clusters: dict[str, Cluster]) -> None:
    for name in ("spoke-1", "spoke-2"):
        nodes = (await clusters[name].core.list_node()).items
        assert len(nodes) == 4, name
        for node in nodes:
            ready = [c.status for c in node.status.conditions if c.type == "Ready"]
            assert ready == ["True"], node.metadata.name
            assert node.status.allocatable[GPU] == "8"
            assert not node.spec.taints
    hub_nodes = (await clusters["hub"].core.list_node()).items
    assert len(hub_nodes) == 2


async def test_job_with_gpu_pods_runs_to_complete(
    clusters: dict[str, Cluster], namespace: str
) -> None:
    spoke = clusters["spoke-1"]
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
        "spec": {"parallelism": 4, "completions": 4, "backoffLimit": 0,
                 "template": pod("x", gpus=2, annotations={"mcad.test/runtime": "1.5s"})},
    }
    del job["spec"]["template"]["metadata"]["name"]
    await spoke.batch.create_namespaced_job(namespace, job)

    async def complete() -> bool:
        status = (await spoke.batch.read_namespaced_job_status("train", namespace)).status
        return any(c.type == "Complete" and c.status == "True" for c in status.conditions or [])

    await wait_until(complete, within=60, what="Job train to be Complete")
    pods = await pods_of(spoke, namespace, "job-name=train")
    assert len(pods) == 4
    assert {p.status.phase for p in pods} == {"Succeeded"}


async def test_podgroup_gang_schedules_together(
    clusters: dict[str, Cluster], namespace: str
) -> None:
    spoke = clusters["spoke-2"]
    await spoke.custom.create_namespaced_custom_object(PG_GROUP, PG_VERSION, namespace, PG_PLURAL, {
        "apiVersion": f"{PG_GROUP}/{PG_VERSION}", "kind": "PodGroup",
        "metadata": {"name": "gang"}, "spec": {"minMember": 4}})
    for i in range(4):
        await spoke.core.create_namespaced_pod(namespace, pod(
            f"gang-{i}", gpus=8, labels={"scheduling.x-k8s.io/pod-group": "gang"}))

    async def all_running() -> bool:
        pods = await pods_of(spoke, namespace)
        return len(pods) == 4 and all(p.spec.node_name and p.status.phase == "Running"
                                      for p in pods)

    await wait_until(all_running, within=60, what="the 4 gang pods to run")
    assert len({p.spec.node_name for p in await pods_of(spoke, namespace)}) == 4


async def test_podgroup_gang_that_cannot_fit_stays_unscheduled(
    clusters: dict[str, Cluster], namespace: str
) -> None:
    spoke = clusters["spoke-2"]
    await spoke.custom.create_namespaced_custom_object(PG_GROUP, PG_VERSION, namespace, PG_PLURAL, {
        "apiVersion": f"{PG_GROUP}/{PG_VERSION}", "kind": "PodGroup",
        "metadata": {"name": "too-big"}, "spec": {"minMember": 5}})
    # Four of the five would fit one per node; the gang as a whole does not.
    for i in range(5):
        await spoke.core.create_namespaced_pod(namespace, pod(
            f"big-{i}", gpus=8, labels={"scheduling.x-k8s.io/pod-group": "too-big"}))

    async def none_bound() -> bool:
        pods = await pods_of(spoke, namespace)
        return len(pods) == 5 and not any(p.spec.node_name for p in pods)

    await holds_for(none_bound, seconds=PERMIT_WAITING_SECONDS + 3,
                    what="no pod of the 5-pod gang bound to a node")

    async def all_marked_unschedulable() -> bool:
        pods = await pods_of(spoke, namespace)
        return all(any(c.type == "PodScheduled" and c.status == "False"
                       for c in p.status.conditions or []) for p in pods)

    await wait_until(all_marked_unschedulable, within=30, what="PodScheduled=False on every pod")


async def test_pod_larger_than_any_node_is_unschedulable(
    clusters: dict[str, Cluster], namespace: str
) -> None:
    spoke = clusters["spoke-1"]
    await spoke.core.create_namespaced_pod(namespace, pod("huge", gpus=16))

    async def unschedulable() -> Any:
        p = await spoke.core.read_namespaced_pod("huge", namespace)
        return [c for c in p.status.conditions or []
                if c.type == "PodScheduled" and c.reason == "Unschedulable"]

    conditions = await wait_until(unschedulable, within=30, what="reason Unschedulable")
    assert "nvidia.com/gpu" in conditions[0].message
    p = await spoke.core.read_namespaced_pod("huge", namespace)
    assert p.status.phase == "Pending" and not p.spec.node_name


@pytest.mark.parametrize(("annotations", "want_phase", "want_ready"), [
    pytest.param({}, "Running", "True", id="plain-pod-runs-ready"),
    pytest.param({"mcad.test/never-ready": "true"}, "Running", "False", id="never-ready"),
    pytest.param({"mcad.test/runtime": "1s"}, "Succeeded", "False", id="runtime-succeeds"),
    pytest.param({"mcad.test/fail-after": "1s"}, "Failed", "False", id="fail-after-fails"),
])
async def test_pod_stages_follow_annotations(
    clusters: dict[str, Cluster], namespace: str, annotations: dict[str, str],
    want_phase: str, want_ready: str,
) -> None:
    spoke = clusters["spoke-1"]
    await spoke.core.create_namespaced_pod(namespace, pod("p", gpus=1, annotations=annotations))

    async def reached() -> Any:
        p = await spoke.core.read_namespaced_pod("p", namespace)
        ready = [c.status for c in p.status.conditions or [] if c.type == "Ready"]
        return p if p.status.phase == want_phase and ready == [want_ready] else None

    await wait_until(reached, within=30, what=f"phase {want_phase}, Ready={want_ready}")
    if want_phase == "Running":  # it stays there
        await holds_for(reached, seconds=2, what=f"phase {want_phase}, Ready={want_ready}")
    await spoke.core.delete_namespaced_pod("p", namespace)

    async def gone() -> bool:
        return not await pods_of(spoke, namespace)

    await wait_until(gone, within=30, what="the deleted pod to go away")


def test_down_leaves_no_process(tmp_path: Path) -> None:
    directory = tmp_path / "tb"
    state = up(directory, TestbedSpec(spokes=1, nodes=1, gpus_per_node=2), owner_for_life=True)
    pids = [state.supervisor_pid, *state.pids.values()]
    assert all(pid_alive(p) for p in pids)
    assert (directory / "spoke-1.kubeconfig").is_file()
    assert (directory / "logs" / "spoke-1-apiserver.log").is_file()
    down(directory)
    assert [p for p in pids if pid_alive(p)] == []


def test_ctrl_c_during_up_leaves_no_process(tmp_path: Path) -> None:
    directory = tmp_path / "tb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "e2e.cluster", "up", "--dir", str(directory), "--spokes", "1",
         "--nodes", "1"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, HOLD_BEFORE_READY_ENV: "60"},  # so Ctrl-C lands during up
        # Run from a background job (nohup, &), SIGINT is inherited as ignored, and
        # Python then never raises KeyboardInterrupt: give the child the default back.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509

    def started() -> bool:
        state = read_state(directory)
        return bool(state and "spoke-1-apiserver" in state.pids)

    deadline = time.monotonic() + 60
    while not started() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    state = read_state(directory)
    assert state is not None and proc.poll() is None, "up finished before it could be interrupted"
    pids = [state.supervisor_pid, *state.pids.values()]
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert [p for p in pids if pid_alive(p)] == []
