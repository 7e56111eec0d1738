"""Estimated starts and backfill rules, in simulated time through the real cycle.

    .venv/bin/python benchmarks/estimates.py [--jobs 200] [--json FILE] [--no-write]
    .venv/bin/python benchmarks/estimates.py --smoke     # make test: small, nothing written;
        # fails if a head starts after its reservation with exact run times, or if a
        # backfill that understated its run time outstays its promise to a waiting head

No API servers: the trace is played through ``mcad.core`` as the controller would (a
cycle at every arrival and completion, and every minute), with the controller's rules
for run times: an AppWrapper is expected to run its declared time, else the median of
its family's completed runs so far, else an hour (``mcad.core.life.runhistory``). Estimated
starts come from ``mcad.core.views.estimates`` (the plan the controller's estimator makes).

Three traces (the same jobs for every rule):

- ``seed002``: the seed's gang trace: one job every 17 s, 2 pods x 8 GPUs, 72 s each, on
  4 nodes x 8 GPUs (one family: the first runs are estimated by the default);
- ``mixed``: 1-32 GPU jobs of 8 families on 16 nodes x 8 GPUs, Poisson arrivals at
  about the cluster's capacity, run times heavy-tailed (each family's median times a
  log-normal factor, sigma 0.8);
- ``declared``: the ``mixed`` jobs, each declaring ``dispatchDuration.expected`` wrong by
  up to +-50% (uniform), so estimates rest on what users say.

For each trace and each backfill rule, ``none`` (the head of the line holds its room at
once: MCAD's rule with ``starvationSeconds: 0``), ``mcad`` (MCAD's rule, 300 s) and
``reservation`` (EASY, 300 s): GPU utilisation over the makespan, the average and worst
response (submission to completion), and ``head_late_s``: the worst lateness of a head
of the line against its reservation (``reservation``), or against the estimate it had
when it became the head (the others). Under ``reservation`` a job backfilled on the
promise to end before a head's reservation that still runs when it comes due is evicted
as the controller does (a cycle runs at every promise's moment; its pods go at once and
it waits again, its run to be done anew): ``evicted`` counts them, and
``backfill_overstay_s`` is the longest any ran past its promise while its head waited
(0 when promises are kept). For the ``mcad`` rule (the default) the estimate
error: the median and p90 absolute difference between the estimated and the real start,
at submission and halfway through the wait, over the jobs that waited.

Writes docs/benchmarks.md "Estimated starts and backfill" and docs/img/estimates.png
unless --no-write; ``--json FILE`` writes ``traces.<trace>.estimate.{median_abs_error_s,
p90_abs_error_s, halfway_median_abs_error_s, halfway_p90_abs_error_s, jobs}`` and
``traces.<trace>.rules.<rule>.{utilisation, avg_response_s, max_response_s,
head_late_s, evicted, backfill_overstay_s}``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bedtools import say  # noqa: E402
from prerequisites import MATPLOTLIB, check  # noqa: E402

from mcad.core.cycle.backfill import BackfillRule  # noqa: E402
from mcad.core.cycle.decide import run_cycle  # noqa: E402
from mcad.core.cycle.snapshot import (  # noqa: E402
    QUEUED,
    Admitted,
    AppWrapperEntry,
    BackfillPromise,
    CyclePolicy,
    Snapshot,
)
from mcad.core.placement.capacity import (  # noqa: E402
    AppWrapperKey,
    ClusterCapacity,
    ClusterName,
    NodeCapacity,
    NodeName,
)
from mcad.core.quota.forest import QuotaForest  # noqa: E402
from mcad.core.views.estimates import estimate_starts  # noqa: E402
from mcad.core.workload.demand import Demand, PodSet  # noqa: E402
from mcad.core.workload.resources import ResourceList  # noqa: E402

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
DEFAULT_RUNTIME_S = 3600.0
TICK_S = 60.0
GPU = "nvidia.com/gpu"
RULES = {"none": (BackfillRule.MCAD, 0.0), "mcad": (BackfillRule.MCAD, 300.0),
         "reservation": (BackfillRule.RESERVATION, 300.0)}


@dataclass(frozen=True)
class Job:
    name: str
    family: str
    pods: int
    gpus: int
    """Per pod."""
    submit: float
    runtime: float
    """What it really runs (seconds)."""
    declared: float | None = None


@dataclass(frozen=True)
class Trace:
    name: str
    nodes: int
    jobs: tuple[Job, ...]


def traces(count: int, seed: int = 7) -> list[Trace]:
    seed002 = tuple(Job(f"gang-{i:03d}", "gang", 2, 8, 17.0 * i, 72.0) for i in range(count))
    rng = random.Random(seed)
    families = [(f"f{i}", size, median) for i, (size, median) in enumerate(
        [(1, 600), (2, 1800), (4, 900), (8, 3600), (8, 1200), (16, 2700), (32, 5400),
         (4, 300)])]
    work = sum(size * median for _, size, median in families) / len(families)
    gap = work / (16 * 8) / 0.95  # arrivals at about the capacity
    jobs, at = [], 0.0
    for i in range(count):
        family, size, median = rng.choice(families)
        runtime = median * rng.lognormvariate(0.0, 0.8)
        pods, per_pod = (size // 8, 8) if size >= 8 else (1, size)
        jobs.append(Job(f"{family}-{i:03d}", family, pods, per_pod, at, round(runtime)))
        at += rng.expovariate(1.0 / gap)
    mixed = tuple(jobs)
    declared = tuple(Job(j.name, j.family, j.pods, j.gpus, j.submit, j.runtime,
                         declared=round(j.runtime * rng.uniform(0.5, 1.5))) for j in mixed)
    return [Trace("seed002", 4, seed002), Trace("mixed", 16, mixed),
            Trace("declared", 16, declared)]


@dataclass
class Run:
    starts: dict[str, float] = field(default_factory=dict)
    """Job -> its last start (a job evicted for a head starts again later)."""
    ends: dict[str, float] = field(default_factory=dict)
    estimates: dict[str, dict[float, float | None]] = field(default_factory=dict)
    """Job -> sample moment -> estimated start (None: no estimate)."""
    head_first: dict[str, float] = field(default_factory=dict)
    """Job -> what it was promised (or estimated) when it first became the head."""
    evicted: int = 0
    """Backfills evicted because their promise to a waiting head came due."""
    overstay: float = 0.0
    """The worst time a backfill ran past its promise while its head still waited."""


def key(job: Job) -> AppWrapperKey:
    return AppWrapperKey(f"bench/{job.name}")


def moment(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def seconds_of(when: datetime) -> float:
    return (when - EPOCH).total_seconds()


def simulate(trace: Trace, rule: str, samples: dict[str, list[float]] | None = None
             ) -> Run:
    """Play ``trace`` under ``rule``; with ``samples`` (job -> moments), make the
    estimator's plan at those moments and keep each job's estimate."""
    backfill, starvation = RULES[rule]
    policy = CyclePolicy(starvation_seconds=starvation, backfill=backfill)
    by_key = {key(j): j for j in trace.jobs}
    demands = {j.name: Demand((PodSet(j.pods, ResourceList({GPU: j.gpus * 10**9})),),
                              j.pods, ResourceList({GPU: j.pods * j.gpus * 10**9}), j.pods)
               for j in trace.jobs}
    allocatable = ResourceList({GPU: 8 * 10**9, "pods": 110 * 10**9})
    used: dict[str, dict[str, int]] = {f"n{i:02d}": {} for i in range(trace.nodes)}
    held: dict[AppWrapperKey, tuple[tuple[NodeName, ResourceList], ...]] = {}
    history: dict[str, list[float]] = {}
    run = Run()
    arrivals = sorted(trace.jobs, key=lambda j: j.submit)
    queued: list[Job] = []
    requeued: dict[str, float] = {}
    """Job -> when it went back to the queue (evicted for a head)."""
    running: dict[str, Job] = {}
    promises: dict[str, BackfillPromise] = {}
    completions: list[tuple[float, str, float]] = []
    """(end, job, its start): an entry whose start is not the job's last is void."""
    sample_at = sorted({t for moments in (samples or {}).values() for t in moments})
    wanted = {t: [n for n, ms in (samples or {}).items() if t in ms] for t in sample_at}
    now, next_tick, index, sample_index = 0.0, 0.0, 0, 0
    again = False
    quota, _ = QuotaForest.build([])

    def expected(job: Job) -> float:
        if job.declared is not None:
            return job.declared
        past = history.get(job.family)
        return statistics.median(past) if past else DEFAULT_RUNTIME_S

    def snapshot() -> Snapshot:
        entries = [AppWrapperEntry(key(j), j.name, 0, moment(j.submit), demands[j.name],
                                   phase=QUEUED, expected_runtime=expected(j),
                                   queued_since=moment(requeued[j.name])
                                   if j.name in requeued else None)
                   for j in queued]
        entries += [AppWrapperEntry(key(j), j.name, 0, moment(j.submit), demands[j.name],
                                    phase=Admitted(ClusterName("c1")),
                                    dispatched=moment(run.starts[j.name]),
                                    expected_runtime=expected(j),
                                    backfill_promise=promises.get(j.name))
                    for j in running.values()]
        nodes = tuple(NodeCapacity(NodeName(n), allocatable, ResourceList(u))
                      for n, u in used.items())
        cluster = ClusterCapacity(ClusterName("c1"), nodes, held_by=dict(held))
        return Snapshot(moment(now), tuple(entries), (cluster,), quota, policy)

    def runtime_of(entry: AppWrapperEntry) -> timedelta:
        return timedelta(seconds=entry.expected_runtime or DEFAULT_RUNTIME_S)

    def leave(job: Job) -> None:
        """``job`` stops running (it ended, or is evicted): its room is given back."""
        running.pop(job.name)
        promises.pop(job.name, None)
        for node, requests in held.pop(key(job)):
            room = used[node]
            for resource, amount in requests.items():
                room[resource] = room.get(resource, 0) - amount

    while index < len(arrivals) or queued or running:
        moments = [next_tick]
        if index < len(arrivals):
            moments.append(arrivals[index].submit)
        if completions:
            moments.append(completions[0][0])
        if sample_index < len(sample_at):
            moments.append(sample_at[sample_index])
        # A promise coming due is a moment of its own, as the controller's timer makes it;
        # room given back by an eviction is decided on at once, as its pods' end is.
        moments += [seconds_of(p.end) for p in promises.values() if seconds_of(p.end) > now]
        if again:
            moments.append(now)
        now = min(moments)
        # (Ends a microsecond past ``now`` are now: datetimes keep microseconds, so a
        # run expected to end just at a promise must not be taken for an overrun.)
        while completions and completions[0][0] <= now + 1e-3:
            _, name, started = heapq.heappop(completions)
            if name not in running or run.starts[name] != started:
                continue  # it was evicted meanwhile: this end is void
            job = running[name]
            leave(job)
            run.ends[name] = now
            history.setdefault(job.family, []).append(job.runtime)
            history[job.family] = history[job.family][-10:]
        while index < len(arrivals) and arrivals[index].submit <= now:
            queued.append(arrivals[index])
            index += 1
        if now >= next_tick:
            next_tick = now + TICK_S
        current = snapshot()
        books, result = run_cycle(current)
        ends = {e.key: e.dispatched + runtime_of(e) for e in current.appwrappers
                if isinstance(e.phase, Admitted) and e.dispatched is not None}
        head = books.line.first
        if head is not None and by_key[head.key].name not in run.head_first:
            promise = books.line.promise
            if promise is not None and promise.reservation.head == str(head.key):
                run.head_first[by_key[head.key].name] = seconds_of(promise.reservation.start)
            else:
                plan = estimate_starts(current, expected_end=ends, runtime_of=runtime_of,
                                       horizon=timedelta(days=3), max_steps=80, first=result)
                found = plan.starts.get(head.key)
                if found is not None and found.start is not None:
                    run.head_first[by_key[head.key].name] = seconds_of(found.start)
        while sample_index < len(sample_at) and sample_at[sample_index] <= now:
            names = wanted[sample_at[sample_index]]
            plan = estimate_starts(current, expected_end=ends, runtime_of=runtime_of,
                                   horizon=timedelta(days=3), max_steps=80, first=result)
            for name in names:
                found = plan.starts.get(AppWrapperKey(f"bench/{name}"))
                start = (None if found is None or found.start is None
                         else seconds_of(found.start))
                run.estimates.setdefault(name, {})[sample_at[sample_index]] = start
            sample_index += 1
        again = bool(result.evictions)
        for eviction in result.evictions:  # its pods go at once; it waits again
            job = by_key[eviction.key]
            leave(job)
            run.evicted += 1
            queued.append(job)
            requeued[job.name] = now
        for dispatch in result.dispatches:
            job = by_key[dispatch.key]
            queued.remove(job)
            running[job.name] = job
            run.starts[job.name] = now
            if dispatch.promise is not None:
                promises[job.name] = dispatch.promise
            per_node = tuple(dispatch.placement.node_requests().items())
            held[dispatch.key] = per_node
            for node, requests in per_node:
                room = used[node]
                for resource, amount in requests.items():
                    room[resource] = room.get(resource, 0) + amount
            heapq.heappush(completions, (now + job.runtime, job.name, now))
        waiting = {key(j) for j in queued}
        for promise in promises.values():  # past its promise, its head still waiting
            if promise.head in waiting:
                run.overstay = max(run.overstay, now - seconds_of(promise.end))
    return run


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rule_figures(trace: Trace, run: Run) -> dict[str, float]:
    gpu_seconds = sum(j.pods * j.gpus * j.runtime for j in trace.jobs)
    makespan = max(run.ends.values()) - min(j.submit for j in trace.jobs)
    responses = [run.ends[j.name] - j.submit for j in trace.jobs]
    late = [run.starts[name] - promised for name, promised in run.head_first.items()]
    return {"utilisation": gpu_seconds / (trace.nodes * 8 * makespan),
            "avg_response_s": statistics.mean(responses),
            "max_response_s": max(responses),
            "head_late_s": max([0.0, *late]),
            "evicted": float(run.evicted),
            "backfill_overstay_s": run.overstay}


def estimate_figures(trace: Trace, first: Run, sampled: Run) -> dict[str, float]:
    at_submit: list[float] = []
    halfway: list[float] = []
    for job in trace.jobs:
        start = first.starts[job.name]
        if start <= job.submit:
            continue  # it did not wait
        seen = sampled.estimates.get(job.name, {})
        for when, into in ((job.submit, at_submit), (job.submit + (start - job.submit) / 2,
                                                    halfway)):
            estimate = seen.get(when)
            if estimate is not None:
                into.append(abs(estimate - start))
    return {"median_abs_error_s": quantile(at_submit, 0.5),
            "p90_abs_error_s": quantile(at_submit, 0.9),
            "halfway_median_abs_error_s": quantile(halfway, 0.5),
            "halfway_p90_abs_error_s": quantile(halfway, 0.9),
            "jobs": float(len(at_submit))}


def measure(count: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for trace in traces(count):
        rules: dict[str, Any] = {}
        for rule in RULES:
            started = time.monotonic()
            run = simulate(trace, rule)
            rules[rule] = rule_figures(trace, run)
            say(f"{trace.name}/{rule}: utilisation {rules[rule]['utilisation']:.0%}, "
                f"response avg {rules[rule]['avg_response_s']:.0f}s max "
                f"{rules[rule]['max_response_s']:.0f}s, head late "
                f"{rules[rule]['head_late_s']:.0f}s ({time.monotonic() - started:.0f}s)")
            if rule == "mcad":
                first = run
        samples = {j.name: [j.submit, j.submit + (first.starts[j.name] - j.submit) / 2]
                   for j in trace.jobs if first.starts[j.name] > j.submit}
        started = time.monotonic()
        sampled = simulate(trace, "mcad", samples)
        assert sampled.starts == first.starts  # planning never changes a decision
        estimate = estimate_figures(trace, first, sampled)
        say(f"{trace.name}: estimate error at submission median "
            f"{estimate['median_abs_error_s']:.0f}s p90 {estimate['p90_abs_error_s']:.0f}s, "
            f"halfway median {estimate['halfway_median_abs_error_s']:.0f}s over "
            f"{estimate['jobs']:.0f} jobs that waited ({time.monotonic() - started:.0f}s)")
        out[trace.name] = {"estimate": estimate, "rules": rules}
    return {"traces": out}


def render(results: dict[str, Any], count: int) -> str:
    lines = ["## Estimated starts and backfill", "",
             f"Measured on {time.strftime('%Y-%m-%d')} by `python benchmarks/estimates.py "
             f"--jobs {count}` (simulated time through the real cycle, no API servers; "
             "the traces and rules are described in the script's docstring).", "",
             "| trace | estimate error at submission (median / p90) | halfway (median / "
             "p90) | jobs that waited |", "|---|---:|---:|---:|"]
    for name, trace in results["traces"].items():
        e = trace["estimate"]
        lines.append(f"| {name} | {e['median_abs_error_s']:.0f} s / {e['p90_abs_error_s']:.0f}"
                     f" s | {e['halfway_median_abs_error_s']:.0f} s / "
                     f"{e['halfway_p90_abs_error_s']:.0f} s | {e['jobs']:.0f} |")
    lines += ["", "| trace | rule | GPU utilisation | response avg / max | head of line "
              "late (worst) | backfills evicted for a head |", "|---|---|---:|---:|---:|---:|"]
    for name, trace in results["traces"].items():
        for rule, r in trace["rules"].items():
            lines.append(f"| {name} | {rule} | {r['utilisation']:.0%} | "
                         f"{r['avg_response_s']:.0f} s / {r['max_response_s']:.0f} s | "
                         f"{r['head_late_s']:.0f} s | {r['evicted']:.0f} |")
    lines += ["", "![Response and head-of-line lateness per rule](img/estimates.png)"]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib  # noqa: PLC0415  (only the written figures need it: the bench extra)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    traces_ = list(results["traces"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.25
    for offset, rule in enumerate(RULES):
        xs = [i + (offset - 1) * width for i in range(len(traces_))]
        axes[0].bar(xs, [results["traces"][t]["rules"][rule]["avg_response_s"] / 60
                         for t in traces_], width, label=rule)
        axes[1].bar(xs, [results["traces"][t]["rules"][rule]["head_late_s"] / 60
                         for t in traces_], width, label=rule)
    for ax, title in zip(axes, ("average response (min)", "head of line late, worst (min)"),
                         strict=True):
        ax.set_xticks(range(len(traces_)), traces_)
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="40 jobs per trace, nothing written; exit 1 if reservation "
                             "backfill let a head start later than promised with exact "
                             "declared run times, or let a backfill that understated its "
                             "run time stay past its promise while the head waited")
    args = parser.parse_args()
    if args.smoke:
        args.jobs, args.no_write = 40, True
    check("benchmarks/estimates.py", [] if args.no_write else [MATPLOTLIB])
    results = measure(args.jobs)
    print(json.dumps(results, indent=2))
    if args.smoke:
        mixed = next(t for t in traces(args.jobs) if t.name == "mixed")
        exact = Trace("exact", mixed.nodes, tuple(
            Job(j.name, j.family, j.pods, j.gpus, j.submit, j.runtime, declared=j.runtime)
            for j in mixed.jobs))
        late = rule_figures(exact, simulate(exact, "reservation"))["head_late_s"]
        verdict = "ok" if late <= 0.001 else "FAILED"  # (datetimes keep microseconds)
        say(f"estimates smoke {verdict}: with exact run times a head of the line started "
            f"{late:.3f}s after its reservation (0 wanted)")
        # The gangs declare their run times exactly, the small jobs a quarter of theirs:
        # the small ones backfill on promises they cannot keep (120 jobs: enough heads
        # that cannot start without the liars' room).
        longer = next(t for t in traces(120) if t.name == "mixed")
        liars = Trace("understated", longer.nodes, tuple(
            Job(j.name, j.family, j.pods, j.gpus, j.submit, j.runtime,
                declared=j.runtime if j.pods * j.gpus >= 8 else max(1.0, round(j.runtime / 4)))
            for j in longer.jobs))
        kept = rule_figures(liars, simulate(liars, "reservation"))
        promises = "ok" if kept["evicted"] > 0 and kept["backfill_overstay_s"] <= 0.001 \
            else "FAILED"
        say(f"estimates smoke {promises}: with the small jobs' run times understated "
            f"fourfold, {kept['evicted']:.0f} backfills were evicted for their head (some "
            f"wanted), and the longest one ran past its promise while its head waited was "
            f"{kept['backfill_overstay_s']:.3f}s (0 wanted)")
        if "FAILED" in (verdict, promises):
            return 1
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if not args.no_write:
        from bedtools import write_section  # noqa: PLC0415
        plot(results, REPO / "docs" / "img" / "estimates.png")
        write_section("Estimated starts and backfill", render(results, args.jobs))
        say("wrote docs/benchmarks.md and docs/img/estimates.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
