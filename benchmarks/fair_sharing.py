"""Replay a two-team trace through the dispatch cycle and plot GPUs held per team.

    .venv/bin/python benchmarks/fair_sharing.py [--no-write]

The trace: one cluster of 4 nodes x 8 GPUs and a quota tree ``root`` (32 GPUs, hard)
with two children, ``team-a`` and ``team-b``, 16 GPUs each, both allowed to borrow. Team
a queues a backlog of 24 jobs (4 GPUs, 20 minutes each) at 0:00; team b queues 12 jobs
(4 GPUs, 10 minutes) at 0:15. Time moves in 30-second steps; each step runs the real
``mcad.core.cycle.decide.dispatch_cycle`` on a snapshot of the queue, the cluster and the tree,
applies its dispatches and evictions (an evicted job restarts from the beginning after a
90 s pause) and ends the jobs whose time is up. Nothing else decides: this is the
decider the controller runs, replayed in simulated time, so the figures do not depend on
the machine.

Three policies: age order (priority, then age; what the queue did before fair sharing),
fair sharing by ordering alone, and fair sharing with reclaim. For each: team b's wait
for its first job, how long team b held less than it was owed while it wanted more,
GPU-hours lost to evictions, and the makespan. The plot (docs/img/fair-sharing.png)
shows GPUs held per team over time beside the share each was owed (max-min fair: each
team its 16, or what it asks when that is less, the rest to the other). The figures go
into docs/benchmarks.md under "Fair sharing (two-team trace)".
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prerequisites import MATPLOTLIB, check  # noqa: E402

from mcad.core.cycle.decide import (  # noqa: E402
    QUEUED,
    Admitted,
    AppWrapperEntry,
    CyclePolicy,
    Snapshot,
    dispatch_cycle,
)
from mcad.core.placement.capacity import (  # noqa: E402
    AppWrapperKey,
    ClusterCapacity,
    ClusterName,
    NodeCapacity,
    NodeName,
)
from mcad.core.placement.victims import PreemptionPolicy  # noqa: E402
from mcad.core.quota.forest import QuotaForest, QuotaNodeSpec  # noqa: E402
from mcad.core.workload.demand import Demand, PodSet  # noqa: E402
from mcad.core.workload.resources import ResourceList  # noqa: E402

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
STEP_S = 30
PAUSE_S = 90
TREE = "team"
NODES, GPUS_PER_NODE = 4, 8
CAPACITY = NODES * GPUS_PER_NODE
QUOTA = {"team-a": 16, "team-b": 16}
CLUSTER = ClusterName("spoke-1")
SECTION = "## Fair sharing (two-team trace)"
PLOT = ROOT / "docs" / "img" / "fair-sharing.png"


@dataclass(frozen=True)
class Job:
    name: str
    team: str
    submit_s: int
    gpus: int
    runtime_s: int


TRACE = (
    [Job(f"a-{i:02d}", "team-a", 0, 4, 20 * 60) for i in range(24)]
    + [Job(f"b-{i:02d}", "team-b", 15 * 60, 4, 10 * 60) for i in range(12)]
)


@dataclass
class Run:
    """One job's life in the simulation."""

    job: Job
    entry: AppWrapperEntry
    started_s: int | None = None
    nodes: dict[NodeName, int] = field(default_factory=dict)
    not_before_s: int = 0
    done_s: int | None = None
    evictions: int = 0
    lost_gpu_s: int = 0


@dataclass(frozen=True)
class Policy:
    label: str
    fair: bool
    reclaim: bool


POLICIES = (Policy("age order", fair=False, reclaim=False),
            Policy("fair sharing (ordering)", fair=True, reclaim=False),
            Policy("fair sharing + reclaim", fair=True, reclaim=True))


def forest() -> QuotaForest:
    specs = [QuotaNodeSpec(TREE, "root", None, ResourceList.of(gpu=CAPACITY), True)]
    specs += [QuotaNodeSpec(TREE, team, "root", ResourceList.of(gpu=gpus), False)
              for team, gpus in QUOTA.items()]
    built, problems = QuotaForest.build(specs)
    assert not problems, problems
    return built


def entry_of(job: Job) -> AppWrapperEntry:
    requests = ResourceList.of(gpu=job.gpus)
    demand = Demand(pod_sets=(PodSet(count=1, requests=requests, source=job.name),),
                    min_available=1, total=requests, pods=1)
    return AppWrapperEntry(key=AppWrapperKey(f"default/{job.name}"), uid=job.name, priority=0,
                           created=T0 + timedelta(seconds=job.submit_s), demand=demand,
                           quota_labels={TREE: job.team})


def simulate(policy: Policy) -> tuple[list[Run], list[tuple[int, dict[str, int],
                                                             dict[str, int]]]]:
    """Every job's run and, per step, (second, GPUs held per team, GPUs wanted per team)."""
    runs = {job.name: Run(job, entry_of(job)) for job in TRACE}
    quota = forest()
    cycle_policy = CyclePolicy(preemption=PreemptionPolicy(priority=False,
                                                           reclaim=policy.reclaim),
                               fair_sharing=policy.fair)
    timeline: list[tuple[int, dict[str, int], dict[str, int]]] = []
    now_s = 0
    while any(r.done_s is None for r in runs.values()):
        now = T0 + timedelta(seconds=now_s)
        for run in runs.values():  # jobs whose time is up end
            if run.started_s is not None and now_s >= run.started_s + run.job.runtime_s:
                run.done_s, run.started_s, run.nodes = now_s, None, {}
        used = {NodeName(f"node-{n}"): 0 for n in range(NODES)}
        entries = []
        for run in runs.values():
            if run.done_s is not None or run.job.submit_s > now_s:
                continue
            for node, gpus in run.nodes.items():
                used[node] += gpus
            if run.started_s is not None:
                entries.append(replace(run.entry, phase=Admitted(CLUSTER),
                                       dispatched=T0 + timedelta(seconds=run.started_s)))
            else:
                not_before = T0 + timedelta(seconds=run.not_before_s) \
                    if run.not_before_s > now_s else None
                entries.append(replace(run.entry, phase=QUEUED, not_before=not_before))
        nodes = tuple(NodeCapacity(node, ResourceList.of(gpu=GPUS_PER_NODE),
                                   requested=ResourceList.of(gpu=gpus))
                      for node, gpus in used.items())
        held = {AppWrapperKey(f"default/{r.job.name}"):
                tuple((node, ResourceList.of(gpu=g)) for node, g in r.nodes.items())
                for r in runs.values() if r.started_s is not None}
        snapshot = Snapshot(now=now, appwrappers=tuple(entries),
                            clusters=(ClusterCapacity(CLUSTER, nodes, held_by=held),),
                            quota=quota, policy=cycle_policy)
        result = dispatch_cycle(snapshot)
        for eviction in result.evictions:  # drained at once; back after the pause
            run = runs[eviction.key.split("/", 1)[1]]
            assert run.started_s is not None
            run.lost_gpu_s += (now_s - run.started_s) * run.job.gpus
            run.evictions += 1
            run.started_s, run.nodes = None, {}
            run.not_before_s = now_s + PAUSE_S
            run.entry = replace(run.entry, queued_since=now)
        for dispatch in result.dispatches:
            run = runs[dispatch.key.split("/", 1)[1]]
            run.started_s = now_s
            run.nodes = {node: run.job.gpus for node, _ in dispatch.placement.pods}
        holding = {team: 0 for team in QUOTA}
        wanting = {team: 0 for team in QUOTA}
        for run in runs.values():
            if run.done_s is None and run.job.submit_s <= now_s:
                wanting[run.job.team] += run.job.gpus
                if run.started_s is not None:
                    holding[run.job.team] += run.job.gpus
        timeline.append((now_s, holding, wanting))
        now_s += STEP_S
    return list(runs.values()), timeline


def owed(wanting: dict[str, int]) -> dict[str, int]:
    """Max-min fair split of the capacity: each team its quota or its demand if less;
    what one leaves goes to the other."""
    out = {team: min(want, QUOTA[team]) for team, want in wanting.items()}
    spare = CAPACITY - sum(out.values())
    for team, want in wanting.items():
        extra = min(spare, want - out[team])
        out[team] += extra
        spare -= extra
    return out


@dataclass
class Figures:
    policy: Policy
    b_first_wait_s: int
    b_short_s: int
    b_mean_wait_s: float
    lost_gpu_h: float
    evictions: int
    makespan_s: int


def figures(policy: Policy, runs: list[Run],
            timeline: list[tuple[int, dict[str, int], dict[str, int]]]) -> Figures:
    b_starts = sorted(r.done_s - r.job.runtime_s for r in runs if r.job.team == "team-b"
                      and r.done_s is not None)
    b_submit = min(j.submit_s for j in TRACE if j.team == "team-b")
    short = sum(STEP_S for _, holding, wanting in timeline
                if holding["team-b"] < owed(wanting)["team-b"])
    b_waits = [r.done_s - r.job.runtime_s - r.job.submit_s for r in runs
               if r.job.team == "team-b" and r.done_s is not None]
    return Figures(policy, b_starts[0] - b_submit, short, sum(b_waits) / len(b_waits),
                   sum(r.lost_gpu_s for r in runs) / 3600, sum(r.evictions for r in runs),
                   max(r.done_s or 0 for r in runs))


def plot(results: list[tuple[Policy, list[tuple[int, dict[str, int], dict[str, int]]]]],
         path: Path) -> None:
    # Only the plot needs matplotlib (the ``bench`` extra): --no-write runs without it.
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(len(results), 1, figsize=(9, 2.6 * len(results)), sharex=True)
    colours = {"team-a": "tab:blue", "team-b": "tab:orange"}
    widths = {"team-a": 4.0, "team-b": 1.8}  # a drawn wide under b: equal shares show both
    for ax, (policy, timeline) in zip(axes, results, strict=True):
        minutes = [t / 60 for t, _, _ in timeline]
        for team, colour in colours.items():
            ax.step(minutes, [h[team] for _, h, _ in timeline], where="post", color=colour,
                    linewidth=widths[team], alpha=0.55 if team == "team-a" else 1.0,
                    label=f"{team} holds")
            ax.step(minutes, [owed(w)[team] for _, _, w in timeline], where="post",
                    color=colour, linestyle="--", linewidth=1, label=f"{team} owed")
        ax.set_title(policy.label, fontsize=10)
        ax.set_ylabel("GPUs")
        ax.set_ylim(0, CAPACITY + 2)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper right", fontsize=8, ncol=2)
    axes[-1].set_xlabel("minutes (team b arrives at 15)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(rows: list[Figures]) -> str:
    lines = [SECTION, "",
             "Measured by `benchmarks/fair_sharing.py` (simulated time, the real dispatch "
             "cycle; the same on any machine). One cluster of 4 x 8 GPUs, quota root 32 "
             "(hard) > team-a 16, team-b 16 (both may borrow). Team a queues 24 jobs of "
             "4 GPUs x 20 min at 0:00, team b 12 jobs of 4 GPUs x 10 min at 0:15.", "",
             "| policy | team b's first job waits | team b below its owed share | "
             "team b mean wait | evictions | GPU-hours lost | makespan |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for f in rows:
        lines.append(f"| {f.policy.label} | {f.b_first_wait_s / 60:.1f} min | "
                     f"{f.b_short_s / 60:.1f} min | {f.b_mean_wait_s / 60:.1f} min | "
                     f"{f.evictions} | {f.lost_gpu_h:.1f} | {f.makespan_s / 60:.0f} min |")
    lines += ["", "![GPUs held per team over time, with the share each was owed]"
                  "(img/fair-sharing.png)", ""]
    return "\n".join(lines)


def write_section(text: str) -> None:
    doc = ROOT / "docs" / "benchmarks.md"
    current = doc.read_text()
    if SECTION in current:
        start = current.index(SECTION)
        rest = current[start + len(SECTION):]
        end = rest.find("\n## ")
        current = current[:start] + text.rstrip("\n") + ("\n" + rest[end:] if end >= 0 else "\n")
    else:
        current = current.rstrip("\n") + "\n\n" + text
    doc.write_text(current)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true",
                        help="print the figures; leave docs/ alone")
    args = parser.parse_args()
    check("benchmarks/fair_sharing.py", [] if args.no_write else [MATPLOTLIB])
    rows, timelines = [], []
    for policy in POLICIES:
        print(f"replaying the trace: {policy.label} ...", flush=True)
        runs, timeline = simulate(policy)
        rows.append(figures(policy, runs, timeline))
        timelines.append((policy, timeline))
    text = render(rows)
    print(text)
    if not args.no_write:
        plot(timelines, PLOT)
        write_section(text)
        print(f"wrote {PLOT.relative_to(ROOT)} and docs/benchmarks.md", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
