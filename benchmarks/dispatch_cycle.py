"""Time one dispatch cycle of the pure core at the scale the project promises.

    .venv/bin/python benchmarks/dispatch_cycle.py [--repeat 15] [--no-write]

Builds 10,000 queued AppWrappers (1-4 pods of 1, 2, 4 or 8 GPUs with cpu and memory to
match, priorities 0-4, nine quota leaves, a fifth with a clusterSelector, a tenth with
a nodeSelector), 10 clusters x 100 nodes of 8 GPUs (about half used, a few tainted or
cordoned, some reservations), a 3-level quota tree with 500 admitted AppWrappers
charged to it, preemption on. Times ``dispatch_cycle`` (after one warm-up run),
measures peak memory of one more run with tracemalloc, and writes the figures into
docs/benchmarks.md under "Dispatch cycle (pure core)".
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcad.core.capacity import (  # noqa: E402
    AppWrapperKey,
    ClusterCapacity,
    ClusterName,
    NodeCapacity,
    NodeName,
    Reservation,
)
from mcad.core.cycle import (  # noqa: E402
    Admitted,
    AppWrapperEntry,
    CyclePolicy,
    Snapshot,
    dispatch_cycle,
)
from mcad.core.demand import Demand, PodSet, Taint  # noqa: E402
from mcad.core.placement import ClusterSelector, PlacementPolicy  # noqa: E402
from mcad.core.quota import QuotaForest, QuotaNodeSpec  # noqa: E402
from mcad.core.resources import ResourceList  # noqa: E402
from mcad.core.victims import PreemptionPolicy  # noqa: E402

QUEUED = 10_000
ADMITTED = 500
CLUSTERS = 10
NODES = 100
NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
TREE = "quota_context"
ORGS = ("org-a", "org-b", "org-c")
TEAMS = tuple(f"{org}-team-{t}" for org in ORGS for t in (1, 2, 3))
SECTION = "## Dispatch cycle (pure core)"


def gang(pods: int, gpus: int, *, selector: tuple[tuple[str, str], ...] = (),
         source: str = "") -> Demand:
    per_pod = ResourceList.of(gpu=gpus, cpu=4 * gpus, memory=f"{32 * gpus}Gi")
    pod_set = PodSet(count=pods, requests=per_pod, node_selector=selector, source=source)
    return Demand(pod_sets=(pod_set,), min_available=pods, total=per_pod.scale(pods), pods=pods)


def build_clusters(rng: random.Random) -> tuple[ClusterCapacity, ...]:
    clusters = []
    for c in range(CLUSTERS):
        name = f"spoke-{c + 1}"
        nodes = []
        for n in range(NODES):
            used = rng.choice((0, 2, 4, 4, 6, 8))
            nodes.append(NodeCapacity(
                name=NodeName(f"{name}-node-{n + 1:03d}"),
                allocatable=ResourceList.of(gpu=8, cpu=64, memory="512Gi", pods=110),
                requested=ResourceList.of(gpu=used, cpu=4 * used, memory=f"{32 * used}Gi",
                                          pods=used),
                labels={"gpu.product": "a100" if n % 2 else "h100"},
                taints=(Taint("dedicated", "infra"),) if n % 50 == 7 else (),
                unschedulable=n % 97 == 5,
            ))
        reservations = tuple(
            Reservation(AppWrapperKey(f"ns/reserved-{c}-{r}"),
                        gang(1, 4).pod_sets) for r in range(3))
        clusters.append(ClusterCapacity(
            name=ClusterName(name), nodes=tuple(nodes),
            labels={"region": "east" if c % 2 else "west"}, reservations=reservations))
    return tuple(clusters)


def build_quota() -> QuotaForest:
    specs = [QuotaNodeSpec(TREE, "root", None, ResourceList.of(gpu=6400), True)]
    for org in ORGS:
        specs.append(QuotaNodeSpec(TREE, org, "root", ResourceList.of(gpu=2000), False))
    for i, team in enumerate(TEAMS):
        specs.append(QuotaNodeSpec(TREE, team, team.rsplit("-team-", 1)[0],
                                   ResourceList.of(gpu=600), i % 4 == 3))
    specs.append(QuotaNodeSpec(TREE, "default", "root", ResourceList.of(gpu=64), True))
    forest, problems = QuotaForest.build(specs)
    assert not problems, problems
    return forest


def build_appwrappers(rng: random.Random) -> tuple[AppWrapperEntry, ...]:
    entries = []
    east = ClusterSelector.from_spec({"matchLabels": {"region": "east"}})
    for i in range(ADMITTED):
        entries.append(AppWrapperEntry(
            key=AppWrapperKey(f"team/running-{i}"), uid=f"uid-r-{i}",
            priority=rng.randrange(3), created=NOW - timedelta(hours=3),
            demand=gang(1, 8), quota_labels={TREE: rng.choice(TEAMS)},
            phase=Admitted(ClusterName(f"spoke-{i % CLUSTERS + 1}"))))
    for i in range(QUEUED):
        selector = (("gpu.product", "h100"),) if i % 10 == 3 else ()
        entries.append(AppWrapperEntry(
            key=AppWrapperKey(f"team/job-{i}"), uid=f"uid-{i:05d}",
            priority=rng.randrange(5),
            created=NOW - timedelta(seconds=rng.randrange(3600)),
            demand=gang(rng.choice((1, 1, 2, 4)), rng.choice((1, 2, 4, 8)), selector=selector,
                        source=f"GenericItems[0] Job/job-{i}"),
            quota_labels={TREE: rng.choice(TEAMS)},
            cluster_selector=east if i % 5 == 1 else ClusterSelector(),
            not_before=NOW + timedelta(seconds=30) if i % 100 == 42 else None))
    rng.shuffle(entries)
    return tuple(entries)


def build_snapshot(seed: int = 7) -> Snapshot:
    rng = random.Random(seed)
    return Snapshot(now=NOW, appwrappers=build_appwrappers(rng), clusters=build_clusters(rng),
                    quota=build_quota(),
                    policy=CyclePolicy(PlacementPolicy.BEST_FIT,
                                       preemption=PreemptionPolicy(priority=True, reclaim=True),
                                       starvation_seconds=300))


def measure(snapshot: Snapshot, repeat: int) -> dict[str, float]:
    load = os.getloadavg()[0]
    dispatch_cycle(snapshot)  # warm-up: imports, first-time caches
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        dispatch_cycle(snapshot)
        times.append((time.perf_counter() - start) * 1000)
    tracemalloc.start()
    dispatch_cycle(snapshot)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    times.sort()
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    return {"min": times[0], "median": statistics.median(times), "p95": p95,
            "peak_mib": peak / 2**20, "load": load}


def report(snapshot: Snapshot, figures: dict[str, float], repeat: int) -> str:
    result = dispatch_cycle(snapshot)
    reasons = Counter(p.reason.value for p in result.pending)
    outcome = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda x: -x[1]))
    verdict = "meets" if figures["median"] <= 50 else "MISSES"
    machine = (f"{platform.python_implementation()} {platform.python_version()}, "
               f"{platform.machine()}, {_cpus()} CPUs")
    return f"""{SECTION}

`benchmarks/dispatch_cycle.py` (run with `make bench`). One `dispatch_cycle` call on a
snapshot of {QUEUED:,} queued and {ADMITTED} admitted AppWrappers, {CLUSTERS} clusters x
{NODES} nodes of 8 `nvidia.com/gpu` (about half in use, a few tainted or cordoned, 3
reservations per cluster), a 3-level quota tree (root, 3 organisations, 9 teams and a
`default` leaf), preemption on, best-fit placement, starvation threshold 300 s.
Queued gangs have 1-4 pods of 1, 2, 4 or 8 GPUs; a fifth select a cluster region, a
tenth select a GPU product per node, one in a hundred is pausing after a requeue.

Method: one warm-up run, then {repeat} timed runs with `time.perf_counter`; peak memory
is that of one more run under `tracemalloc` (Python allocations made during the cycle).
Machine: {machine}, shared with other work (load average {figures['load']:.2f} when the runs
began). The garbage collector stays on: the p95 is where a full collection of the
snapshot's ~100,000 objects lands inside a cycle (a controller can `gc.freeze()` its
long-lived caches to avoid that).

| figure | value |
|---|---|
| min | {figures['min']:.1f} ms |
| median | {figures['median']:.1f} ms |
| p95 | {figures['p95']:.1f} ms |
| peak memory | {figures['peak_mib']:.1f} MiB |

Outcome of the cycle: {len(result.dispatches)} dispatched, {len(result.evictions)} evictions;
pending: {outcome}. The median {verdict} the 50 ms target.

Why it is fast: the queue is sorted once (three stable sorts on simple keys); free room
only shrinks within a cycle, so "this quota charge did not fit" and "this pod shape did
not fit these clusters" are cached for the rest of the cycle, and most of the queue is
answered from those caches in about 2 us each; cluster totals reject a gang before any
node is scanned; first-fit resumes where the same pod shape last found room; a misfit
is explained (the costly part) for one cluster only; each quota assignment gets one
preemption turn per cycle, which bounds the eviction searches. Profiled with cProfile;
the remaining time is the per-AppWrapper loop (~75%), the sort (~12%) and setup.
"""


def _cpus() -> int:
    return os.cpu_count() or 1


def write(section: str) -> Path:
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    start = text.find(SECTION)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + ("" if end < 0 else text[end:])
    path.write_text(text.rstrip("\n") + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--no-write", action="store_true",
                        help="print the figures without touching docs/benchmarks.md")
    args = parser.parse_args()
    snapshot = build_snapshot()
    figures = measure(snapshot, args.repeat)
    section = report(snapshot, figures, args.repeat)
    print(section)
    if not args.no_write:
        print(f"written to {write(section)}")


if __name__ == "__main__":
    main()
