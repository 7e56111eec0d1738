"""Seed 000 (Cloud Native AI Day EU 2024): 1,000 ten-pod Jobs on 100 nodes, side by side.

    .venv/bin/python benchmarks/seed000.py [--jobs 1000] [--time-scale 0.25]
        [--systems kube-scheduler,coscheduling,mcad] [--json FILE] [--no-write]

The experiment: ``--jobs`` Jobs of 10 pods x 2 CPU, all submitted at once, on 100 KWOK
nodes of 10 CPUs (1,000 CPUs: 50 such Jobs at a time). A pod's work (3 minutes, plus up
to 50% jitter, fixed per Job by its index) starts only when *every* pod of its Job runs,
as for a distributed training job whose workers wait for each other; the benchmark
emulates that clock by annotating a Job's pods with ``mcad.test/runtime`` the moment all
ten are Running (KWOK then ends them that long after). Each Job has a 15-minute
deadline (``activeDeadlineSeconds``): a Job whose pods never all run fails.

Systems, each on a fresh test bed: ``kube-scheduler`` (the Jobs alone: pods scheduled
one by one, partial Jobs hold CPUs and can deadlock), ``coscheduling`` (Jobs + PodGroups,
minMember 10), ``mcad`` (Job + PodGroup in an AppWrapper, dispatched just in time).
Reports Jobs completed and failed, throughput against the theoretical maximum (50 Jobs
per mean work time), makespan. ``--time-scale`` multiplies every duration (work,
deadline); figures are in seed seconds. One invocation runs every system asked for at
the same time scale, one after another, and writes one table and one plot of the CPUs
each held (docs/benchmarks.md "Seed 000", docs/img/seed000-*.png) unless --no-write.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bedtools import (
    JOBS,
    POD_GROUP_LABEL,
    PODGROUPS,
    REPO,
    PodRecorder,
    connected,
    install_mcad,
    say,
    seen_objects,
    start_mcad,
    stop_mcad,
    testbed,
    write_section,
)
from bedtools import (
    SEED_NAMESPACE as NAMESPACE,
)
from bedtools import (
    SEED_SYSTEMS as SYSTEMS,
)
from prerequisites import MATPLOTLIB, TESTBED, check

from e2e.cluster.stages import RUNTIME
from e2e.cluster.topology import TestbedSpec
from mcad.gateway import refs, verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import ApiError
from mcad.gateway.refs import ResourceRef

NODES, CPU_PER_NODE, PODS, CPU_PER_POD = 100, 10, 10, 2
WORK_S, JITTER, DEADLINE_S = 180.0, 0.5, 900.0
PODS_REF = ResourceRef("v1", "Pod", "pods", True)


def work_seconds(index: int) -> float:
    """Job ``index``'s work: 3 minutes plus up to 50%, the same for every system."""
    return WORK_S * (1 + JITTER * random.Random(index).random())


def job_objects(name: str, index: int, *, scale: float, gang: bool) -> list[dict[str, Any]]:
    labels = {POD_GROUP_LABEL: name} if gang else {}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "annotations": {"seed/work": f"{work_seconds(index)}"}},
           "spec": {"parallelism": PODS, "completions": PODS, "backoffLimit": 0,
                    "activeDeadlineSeconds": max(1, round(DEADLINE_S * scale)),
                    "template": {
                        "metadata": {"labels": {"seed-job": name, **labels}},
                        "spec": {"restartPolicy": "Never", "containers": [{
                            "name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": str(CPU_PER_POD)}}}]}}}}
    if not gang:
        return [job]
    return [{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": name}, "spec": {"minMember": PODS}}, job]


def appwrapper(name: str, index: int, *, scale: float) -> dict[str, Any]:
    return {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": name},
            "spec": {"schedulingSpec": {"minAvailable": PODS},
                     "resources": {"GenericItems": [
                         {"replicas": 1, "generictemplate": obj}
                         for obj in job_objects(name, index, scale=scale, gang=True)]}}}


@dataclass
class Run:
    system: str
    started: float = 0.0
    gang_at: dict[str, float] = field(default_factory=dict)
    """When every pod of a Job was Running (its work clock started)."""
    outcome: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Job name -> (Complete or Failed, when)."""
    recorder: PodRecorder | None = None


async def gang_clock(conn: Connection, run: Run, scale: float) -> None:
    """Start a Job's work when all its pods run: annotate them with their runtime."""
    assert run.recorder is not None
    recorder = run.recorder
    while True:
        await asyncio.sleep(0.25)  # (the recorder's event belongs to the main wait)
        by_job: dict[str, list[tuple[str, Any]]] = {}
        for uid, pod in recorder.pods.items():
            by_job.setdefault(pod.job, []).append((uid, pod))
        for job, pods in by_job.items():
            if job in run.gang_at or len(pods) < PODS:
                continue
            running = [(u, p) for u, p in pods if p.phase == "Running"]
            if len(running) < PODS:
                continue
            run.gang_at[job] = time.monotonic()
            index = int(job.rsplit("-", 1)[1])
            runtime = f"{work_seconds(index) * scale:.2f}s"
            for uid, _ in running:
                name = recorder.names.get(uid)
                if name is None:
                    continue
                with contextlib.suppress(ApiError):  # gone: its Job failed meanwhile
                    await verbs.merge_patch(conn, PODS_REF, name, {"metadata": {
                        "annotations": {RUNTIME: runtime}}}, namespace=NAMESPACE)


async def follow_jobs(conn: Connection, run: Run) -> None:
    async for items in seen_objects(conn, JOBS, namespace=NAMESPACE):
        for job in items:
            name = job["metadata"]["name"]
            for cond in (job.get("status") or {}).get("conditions") or []:
                if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
                    run.outcome.setdefault(name, (cond["type"], time.monotonic()))


async def run_system(system: str, jobs: int, scale: float, log_dir: Path) -> Run:
    spec = TestbedSpec(spokes=1, nodes=NODES, gpus_per_node=0, cpu_per_node=str(CPU_PER_NODE),
                       memory_per_node="64Gi", pods_per_node=110)
    run = Run(system)
    with testbed(spec, system) as (state, _):
        mcad = None
        if system == "mcad":
            install_mcad(state, ["spoke-1"])
            mcad = start_mcad(state, log_dir / "seed000-mcad-run.log")
        try:
            async with connected(state, ["hub", "spoke-1"]) as conns:
                spoke, hub = conns["spoke-1"], conns["hub"]
                await verbs.create(hub if system == "mcad" else spoke, refs.NAMESPACES, {
                    "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
                recorder = PodRecorder(
                    lambda pod: (pod["metadata"].get("labels") or {}).get("seed-job"))
                run.recorder = recorder
                tasks = [asyncio.create_task(recorder.follow(spoke, NAMESPACE)),
                         asyncio.create_task(follow_jobs(spoke, run)),
                         asyncio.create_task(gang_clock(spoke, run, scale)),
                         asyncio.create_task(_progress(system, run, jobs))]
                run.started = time.monotonic()
                say(f"{system}: submitting {jobs} Jobs of {PODS} pods x {CPU_PER_POD} CPU")
                sem = asyncio.Semaphore(16)

                async def submit(index: int) -> None:
                    name = f"job-{index:04d}"
                    async with sem:
                        if system == "mcad":
                            await verbs.create(hub, refs.APPWRAPPERS,
                                               appwrapper(name, index, scale=scale),
                                               namespace=NAMESPACE)
                            return
                        for obj in job_objects(name, index, scale=scale,
                                               gang=system == "coscheduling"):
                            ref = PODGROUPS if obj["kind"] == "PodGroup" else JOBS
                            await verbs.create(spoke, ref, obj, namespace=NAMESPACE)

                await asyncio.gather(*(submit(i) for i in range(jobs)))
                budget = (jobs / 50 + 2) * (DEADLINE_S + WORK_S * 1.5) * scale + 600
                await recorder.wait(lambda: len(run.outcome) >= jobs, timeout=budget,
                                    what=f"{system}: every Job to complete or fail")
                for task in tasks:
                    task.cancel()
        finally:
            if mcad is not None:
                stop_mcad(mcad)
    return run


async def _progress(system: str, run: Run, jobs: int) -> None:
    while True:
        await asyncio.sleep(30)
        done = sum(1 for o, _ in run.outcome.values() if o == "Complete")
        failed = sum(1 for o, _ in run.outcome.values() if o == "Failed")
        say(f"{system}: {done} complete, {failed} failed, {len(run.gang_at)} started of "
            f"{jobs}, {time.monotonic() - run.started:.0f}s")


def figures(run: Run, jobs: int, scale: float) -> dict[str, Any]:
    done = [t for o, t in run.outcome.values() if o == "Complete"]
    failed = sum(1 for o, _ in run.outcome.values() if o == "Failed")
    end = max((t for _, t in run.outcome.values()), default=run.started)
    makespan = (end - run.started) / scale
    mean_work = statistics.fmean(work_seconds(i) for i in range(jobs))
    concurrent = NODES * CPU_PER_NODE // (PODS * CPU_PER_POD)
    best = concurrent / mean_work  # Jobs per second, with every CPU busy all the time
    throughput = len(done) / makespan if makespan else 0.0
    _, held, _ = cpus_over_time(run, scale)
    if max(held) > NODES * CPU_PER_NODE:  # pods counted twice or after they were gone
        say(f"WARNING: the pod recorder counts {max(held)} CPUs held on a cluster of "
            f"{NODES * CPU_PER_NODE}: its figures cannot be trusted")
    return {"completed": len(done), "failed": failed, "makespan_s": makespan,
            "throughput_jobs_per_min": throughput * 60, "max_jobs_per_min": best * 60,
            "throughput_vs_max": throughput / best if best else 0.0,
            "cpus_held_max": max(held)}


def cpus_over_time(run: Run, scale: float) -> tuple[list[float], list[int], list[int]]:
    """(seed seconds, CPUs held by running pods, CPUs of pods whose whole Job runs)."""
    assert run.recorder is not None
    events: list[tuple[float, int, int]] = []
    for pod in run.recorder.pods.values():
        if pod.running is None:
            continue
        end = pod.finished
        events.append(((pod.running - run.started) / scale, CPU_PER_POD, 0))
        if end is not None:
            events.append(((end - run.started) / scale, -CPU_PER_POD, 0))
        gang = run.gang_at.get(pod.job)
        if gang is not None and (end is None or gang < end):
            events.append(((max(gang, pod.running) - run.started) / scale, 0, CPU_PER_POD))
            if end is not None:
                events.append(((end - run.started) / scale, 0, -CPU_PER_POD))
    events.sort()
    times, held, working = [0.0], [0], [0]
    for moment, d_held, d_working in events:
        times.append(moment)
        held.append(held[-1] + d_held)
        working.append(working[-1] + d_working)
    return times, held, working


def plot(runs: dict[str, Run], scale: float) -> list[str]:
    import matplotlib  # noqa: PLC0415  (only the written figures need it: the bench extra)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    written = []
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.4 * len(runs)), sharex=True,
                             squeeze=False)
    for ax, (system, run) in zip(axes[:, 0], runs.items(), strict=True):
        times, held, working = cpus_over_time(run, scale)
        ax.step(times, held, where="post", label="held by running pods")
        ax.step(times, working, where="post", label="working (whole Job running)")
        ax.set_title(system, fontsize=10)
        ax.set_ylabel("CPUs")
        ax.set_ylim(0, NODES * CPU_PER_NODE * 1.05)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="lower right", fontsize=8)
    axes[-1, 0].set_xlabel("seed seconds since submission")
    fig.tight_layout()
    path = REPO / "docs" / "img" / "seed000-cpus.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(str(path.relative_to(REPO)))
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for system, run in runs.items():
        values = sorted((t - run.started) / scale for o, t in run.outcome.values()
                        if o == "Complete")
        if values:
            ax.plot(values, [(i + 1) / len(run.outcome) for i in range(len(values))],
                    label=system)
    ax.set_xlabel("response time (seed seconds, submission to completion)")
    ax.set_ylabel("fraction of Jobs completed")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = REPO / "docs" / "img" / "seed000-response.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(str(path.relative_to(REPO)))
    return written


def render(results: dict[str, dict[str, Any]], jobs: int, scale: float) -> str:
    systems = ",".join(results)
    lines = ["## Seed 000 (ten-pod Jobs on 100 nodes, Cloud Native AI Day EU 2024)", "",
             f"Measured on {time.strftime('%Y-%m-%d')} by `python benchmarks/seed000.py "
             f"--systems {systems} --time-scale {scale:g}`, in one run"
             f"{f' of {jobs} Jobs' if jobs != 1000 else ''} ({platform.machine()}, 2 cores, "
             f"a fresh test bed per system, one after another: one cluster of {NODES} KWOK "
             f"nodes x {CPU_PER_NODE} CPUs). {jobs} Jobs of {PODS} pods x {CPU_PER_POD} CPU "
             "submitted at once; a Job's work (3 min + up to 50% jitter) starts when all its "
             f"pods run; 15 min deadline. Durations scaled by {scale:g} for every system; "
             "figures in seed time.", "",
             "| system | completed | failed | throughput | of the maximum | makespan | "
             "most CPUs held |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for system, f in results.items():
        lines.append(f"| {system} | {f['completed']}/{jobs} | {f['failed']} | "
                     f"{f['throughput_jobs_per_min']:.2f} Jobs/min | "
                     f"{f['throughput_vs_max']:.0%} | {f['makespan_s'] / 60:.1f} min | "
                     f"{f['cpus_held_max']:,} |")
    best = next(iter(results.values()))["max_jobs_per_min"] if results else 0
    lines += ["", f"The maximum, {best:.2f} Jobs/min, is every CPU busy all the time: "
                  f"{NODES * CPU_PER_NODE // (PODS * CPU_PER_POD)} Jobs at once for the mean "
                  "work time."]
    mcad = results.get("mcad")
    if mcad is not None:
        met = "meets" if mcad["throughput_vs_max"] >= 0.9 else "misses"
        lines[-1] += (f" mcad reaches {mcad['throughput_vs_max']:.0%} of it ({met} the 90% "
                      "target): it creates each Job when its whole gang fits, so its "
                      "deadline runs from dispatch, and the few seconds a ten-pod Job takes "
                      "to start when a slot frees (dispatch, the Job controller, the "
                      "scheduler, KWOK) are small beside its work.")
    lost = [s for s, f in results.items() if s != "mcad" and f["failed"]]
    if lost:
        lines[-1] += (f" {' and '.join(lost)} create every Job at submission: a Job's "
                      "15-minute deadline (`activeDeadlineSeconds`) runs from its creation "
                      f"while {jobs * PODS:,} pods wait at once, so the Jobs that do not get "
                      "all their pods running in time fail (the seed reports that "
                      "kube-scheduler alone fragments the cluster and deadlocks).")
    lines[-1] += (f" CPUs held by running pods can never exceed the cluster's "
                  f"{NODES * CPU_PER_NODE:,} (the last column checks the pod recorder: a pod "
                  "deleted before it ended counts as gone from then on).")
    lines += ["", "![CPUs held and working over time, per system](img/seed000-cpus.png)", "",
              "![Response times, per system](img/seed000-response.png)", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--time-scale", type=float, default=0.25)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if set(systems) - set(SYSTEMS):
        parser.error(f"choose systems from {', '.join(SYSTEMS)}")
    check("benchmarks/seed000.py", [*TESTBED, *([] if args.no_write else [MATPLOTLIB])])
    results = {}
    runs = {}
    for system in systems:
        run = asyncio.run(run_system(system, args.jobs, args.time_scale, Path("/tmp")))
        runs[system] = run
        results[system] = figures(run, args.jobs, args.time_scale)
        say(f"{system}: {json.dumps(results[system])}")
    out = {"jobs": args.jobs, "time_scale": args.time_scale, "systems": results}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    if not args.no_write:
        write_section("Seed 000 (ten-pod Jobs on 100 nodes, Cloud Native AI Day EU 2024)",
                      render(results, args.jobs, args.time_scale))
        say(f"wrote docs/benchmarks.md and {', '.join(plot(runs, args.time_scale))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
