"""The test-bed part of benchmarks/topology.py: one system, one fresh test bed.

One spoke of 64 KWOK nodes x 8 GPUs labelled ``--topology block=4,rack=4``. The trace's
gangs are submitted at their scaled times (arrivals ``SQUEEZE`` times closer together
still) as a batch/v1 Job with a PodGroup
(Coscheduling), straight to the spoke for ``coscheduling``, wrapped in an AppWrapper on
the hub for ``mcad`` (``mcad + preferred rack``: with ``schedulingSpec.topology``). The
SpokeCluster names the levels block, rack, hostname. Where each pod ran is read from the
pods and their nodes' labels; times are taken when the watch brings each change.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bedtools import (
    JOBS,
    POD_GROUP_LABEL,
    PODGROUPS,
    PodRecorder,
    connected,
    install_mcad,
    kubectl,
    say,
    start_mcad,
    stop_mcad,
    testbed,
)

from e2e.cluster.stages import RUNTIME
from e2e.cluster.topology import TestbedSpec
from mcad.gateway import refs, verbs

NAMESPACE = "topology"
GANG_LABEL = "topology-gang"
BLOCK, RACK, HOSTNAME = "mcad.test/block", "mcad.test/rack", "kubernetes.io/hostname"
SQUEEZE = 4.0
"""Arrivals come this much closer together than in the trace (runtimes do not), so that
a short run has gangs waiting for room."""


def gang_objects(gang: Any, *, scale: float) -> list[dict[str, Any]]:
    """The Job (pods of one shape, 1 cpu each) and its PodGroup."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": gang.name},
           "spec": {"parallelism": gang.pods, "completions": gang.pods, "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": {GANG_LABEL: gang.name,
                                                POD_GROUP_LABEL: gang.name},
                                     "annotations": {RUNTIME: f"{gang.runtime_s / scale:g}s"}},
                        "spec": {"restartPolicy": "Never", "containers": [{
                            "name": "main", "image": "busybox",
                            "resources": {"requests": {"nvidia.com/gpu": str(gang.gpus_per_pod),
                                                       "cpu": "1"},
                                          "limits": {"nvidia.com/gpu":
                                                     str(gang.gpus_per_pod)}}}]}}}}
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": gang.name}, "spec": {"minMember": gang.pods}}
    return [group, job]


def appwrapper(gang: Any, *, scale: float, asks: str | None) -> dict[str, Any]:
    scheduling: dict[str, Any] = {"minAvailable": gang.pods}
    if asks:
        scheduling["topology"] = {asks: RACK}
    return {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": gang.name},
            "spec": {"schedulingSpec": scheduling, "resources": {"GenericItems": [
                {"replicas": 1, "generictemplate": obj}
                for obj in gang_objects(gang, scale=scale)]}}}


def run_on_testbed(system: str, gangs: list[Any], *, scale: float,
                   log_dir: Path) -> dict[str, Any]:
    return asyncio.run(_run(system, gangs, scale=scale, log_dir=log_dir))


async def _run(system: str, gangs: list[Any], *, scale: float,
               log_dir: Path) -> dict[str, Any]:
    spec = TestbedSpec(spokes=1, nodes=64, gpus_per_node=8, cpu_per_node="32",
                       topology="block=4,rack=4")
    uses_mcad = system.startswith("mcad")
    asks = "preferred" if "preferred" in system else "required" if "required" in system \
        else None
    with testbed(spec, system) as (state, _):
        mcad = None
        if uses_mcad:
            install_mcad(state, ["spoke-1"])
            kubectl(state, "hub", "patch", "spokecluster", "spoke-1", "--type", "merge", "-p",
                    json.dumps({"spec": {"topology": {"levels": [BLOCK, RACK, HOSTNAME]}}}))
            mcad = start_mcad(state, log_dir / "topology-mcad-run.log")
        try:
            async with connected(state, ["hub", "spoke-1"]) as conns:
                spoke, hub = conns["spoke-1"], conns["hub"]
                await verbs.create(hub if uses_mcad else spoke, refs.NAMESPACES, {
                    "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
                nodes, _ = await verbs.list_all(spoke, refs.NODES)
                racks = {n["metadata"]["name"]: (n["metadata"]["labels"][BLOCK],
                                                 n["metadata"]["labels"][RACK])
                         for n in nodes}
                recorder = PodRecorder(
                    lambda pod: (pod["metadata"].get("labels") or {}).get(GANG_LABEL))
                watcher = asyncio.create_task(recorder.follow(spoke, NAMESPACE))
                started = time.monotonic()
                submitted: dict[str, float] = {}
                say(f"{system}: submitting {len(gangs)} gangs over "
                    f"{gangs[-1].submit_s / scale / SQUEEZE:.0f}s")
                for gang in gangs:
                    await asyncio.sleep(max(0.0, started + gang.submit_s / scale / SQUEEZE
                                            - time.monotonic()))
                    submitted[gang.name] = time.monotonic()
                    if uses_mcad:
                        await verbs.create(hub, refs.APPWRAPPERS,
                                           appwrapper(gang, scale=scale, asks=asks),
                                           namespace=NAMESPACE)
                    else:
                        for obj in gang_objects(gang, scale=scale):
                            await verbs.create(spoke, PODGROUPS if obj["kind"] == "PodGroup"
                                               else JOBS, obj, namespace=NAMESPACE)
                pods = sum(g.pods for g in gangs)

                def all_done() -> bool:
                    finished = sum(1 for p in recorder.pods.values() if p.phase == "Succeeded")
                    return finished >= pods

                progress = asyncio.create_task(_progress(system, recorder, pods))
                budget = sum(g.runtime_s for g in gangs) / scale + 600
                await recorder.wait(all_done, timeout=budget, what=f"{system}: every gang")
                for task in (watcher, progress):
                    task.cancel()
        finally:
            if mcad is not None:
                stop_mcad(mcad)
    return _figures(gangs, recorder, racks, submitted, scale)


async def _progress(system: str, recorder: PodRecorder, pods: int) -> None:
    while True:
        await asyncio.sleep(30)
        done = sum(1 for p in recorder.pods.values() if p.phase == "Succeeded")
        running = sum(1 for p in recorder.pods.values() if p.phase == "Running")
        say(f"{system}: {done}/{pods} pods done, {running} running")


def _figures(gangs: list[Any], recorder: PodRecorder, racks: dict[str, tuple[str, str]],
             submitted: dict[str, float], scale: float) -> dict[str, Any]:
    by_gang: dict[str, list[Any]] = {}
    for pod in recorder.pods.values():
        by_gang.setdefault(pod.job, []).append(pod)
    multi = [g for g in gangs if g.pods > 1]
    spans = {g.name: len({racks[p.node] for p in by_gang.get(g.name, []) if p.node})
             for g in multi}
    responses = [(max(p.finished for p in by_gang[g.name]) - submitted[g.name]) * scale
                 for g in gangs if g.name in by_gang
                 and all(p.finished is not None for p in by_gang[g.name])]
    return {"completed": len(responses),
            "one_rack": sum(1 for n in spans.values() if n == 1) / len(spans),
            "mean_racks": statistics.fmean(spans.values()),
            "avg_response_s": statistics.fmean(responses)}
