"""Topology-aware gangs: racked gangs, GPU use and fragmentation, with and without mcad.

    .venv/bin/python benchmarks/topology.py [--gangs 600] [--seed 1] [--no-testbed]
        [--testbed-gangs 80] [--json FILE] [--no-write]

The trace (the same for every system): ``--gangs`` gangs arriving at random (Poisson,
one every 28 s on average: about 95% of the GPUs asked for), each of 2, 4, 8 or 16 GPUs
in all, in 1 to 8 pods of one shape (2 GPUs = 1 x 2 or 2 x 1; 16 GPUs = 2 x 8, 4 x 4
or 8 x 2), running 10 to 50 minutes. The cluster: 4 blocks x 4 racks x 4 nodes of 8
GPUs (512 GPUs), labelled block, rack and hostname.

Systems:

- ``coscheduling``: the gangs go straight to the cluster; all of a gang's pods are
  placed at once or none (Coscheduling), gangs in arrival order but none blocking the
  others, each pod on the node kube-scheduler's default scoring prefers (the fewest
  requests: it spreads), ties at random;
- ``mcad``: the real dispatch cycle (``mcad.core.cycle.decide.dispatch_cycle``) decides when
  and where; the cluster's kube-scheduler (as above) binds the pods;
- ``mcad + preferred rack`` and ``mcad + required rack``: the same, every gang asking for
  a rack; kube-scheduler binds inside the nodes mcad pinned the gang to (the node
  affinity mcad injects).

Simulated time moves in 10 s steps through the real cycle (as benchmarks/fair_sharing.py
does), so the figures do not depend on the machine. Per system: the fraction of
multi-pod gangs whose pods all ran in one rack, GPU utilisation over the makespan, the
average and 95th-percentile response (submission to completion), and the free GPUs on
partly used nodes (fragmentation: room no 8-GPU pod can use) over time, plotted in
docs/img/topology-fragmentation.png.

The test-bed part (unless ``--no-testbed``) runs the trace's first ``--testbed-gangs``
gangs (times divided by 30, arrivals 4 times closer still, so that gangs wait for room)
on a fresh test bed per system (one spoke, ``--topology
block=4,rack=4``, 64 KWOK nodes), with Jobs + PodGroups, AppWrappers without a topology,
and AppWrappers asking for a preferred rack, and reads where the pods really ran. The
figures go into docs/benchmarks.md under "Topology (racked gangs)".
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prerequisites import MATPLOTLIB, TESTBED, check  # noqa: E402

from mcad.core.cycle.decide import (  # noqa: E402
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
from mcad.core.quota.forest import QuotaForest  # noqa: E402
from mcad.core.workload.demand import Demand, PodSet  # noqa: E402
from mcad.core.workload.resources import ResourceList  # noqa: E402
from mcad.core.workload.topology import HOSTNAME, TopologyPin, TopologyRequest  # noqa: E402

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
STEP_S = 10
BLOCKS, RACKS, NODES_PER_RACK, GPUS_PER_NODE = 4, 4, 4, 8
NODES = BLOCKS * RACKS * NODES_PER_RACK
CAPACITY = NODES * GPUS_PER_NODE
BLOCK, RACK = "mcad.test/block", "mcad.test/rack"
LEVELS = (BLOCK, RACK, HOSTNAME)
CLUSTER = ClusterName("spoke-1")
SHAPES = {2: (1, 2), 4: (1, 2, 4), 8: (1, 2, 4, 8), 16: (2, 4, 8)}
"""Gang GPUs in all -> the pod counts it may come in."""
MEAN_INTERARRIVAL_S = 28.0
SECTION = "Topology (racked gangs)"
PLOT = ROOT / "docs" / "img" / "topology-fragmentation.png"


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass(frozen=True)
class Gang:
    name: str
    submit_s: int
    pods: int
    gpus_per_pod: int
    runtime_s: int

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod


def trace(gangs: int, seed: int) -> list[Gang]:
    rng = random.Random(seed)
    out, now = [], 0.0
    for i in range(gangs):
        total = rng.choice(list(SHAPES))
        pods = rng.choice(SHAPES[total])
        out.append(Gang(f"g{i:04d}", int(now), pods, total // pods,
                        rng.randrange(10, 51) * 60))
        now += rng.expovariate(1 / MEAN_INTERARRIVAL_S)
    return out


# -- the simulated cluster and its scheduler ---------------------------------------------------

def node_labels(index: int) -> dict[str, str]:
    """Node ``index`` (0-based): blocks of racks of nodes, in order (as ``up --topology``)."""
    rack = index // NODES_PER_RACK
    return {BLOCK: f"block-{rack // RACKS + 1}", RACK: f"rack-{rack % RACKS + 1}",
            HOSTNAME: f"node-{index + 1}"}


NAMES = [NodeName(f"node-{i + 1}") for i in range(NODES)]
LABELS = {NAMES[i]: node_labels(i) for i in range(NODES)}


@dataclass
class Cluster:
    """GPUs and pods per node, as the cluster's kube-scheduler binds them."""

    gpus: dict[NodeName, int] = field(default_factory=lambda: dict.fromkeys(NAMES, 0))
    pods: dict[NodeName, int] = field(default_factory=lambda: dict.fromkeys(NAMES, 0))

    def bind(self, gang: Gang, allowed: Callable[[NodeName], bool], rng: random.Random
             ) -> dict[NodeName, int] | None:
        """All of ``gang``'s pods bound at once, or none (Coscheduling): each pod on an
        allowed node with room where the default scoring (least requested: the fewest
        pods, every pod asking 1 cpu) is best, ties at random."""
        placed: dict[NodeName, int] = {}
        for _ in range(gang.pods):
            fits = [n for n in NAMES if allowed(n)
                    and self.gpus[n] + gang.gpus_per_pod <= GPUS_PER_NODE]
            if not fits:
                self.unbind(gang, placed)
                return None
            fewest = min(self.pods[n] for n in fits)
            node = rng.choice([n for n in fits if self.pods[n] == fewest])
            self.gpus[node] += gang.gpus_per_pod
            self.pods[node] += 1
            placed[node] = placed.get(node, 0) + 1
        return placed

    def unbind(self, gang: Gang, placed: dict[NodeName, int]) -> None:
        for node, pods in placed.items():
            self.gpus[node] -= gang.gpus_per_pod * pods
            self.pods[node] -= pods

    def fragmented(self) -> int:
        """Free GPUs on partly used nodes."""
        return sum(GPUS_PER_NODE - used for used in self.gpus.values()
                   if 0 < used < GPUS_PER_NODE)

    def capacity(self, holding: dict[AppWrapperKey, dict[NodeName, int]],
                 gangs: dict[AppWrapperKey, Gang]) -> ClusterCapacity:
        nodes = tuple(NodeCapacity(name, ResourceList.of(gpu=GPUS_PER_NODE, cpu=32),
                                   requested=ResourceList.of(gpu=self.gpus[name],
                                                             cpu=self.pods[name]),
                                   labels=LABELS[name]) for name in NAMES)
        held = {key: tuple((node, ResourceList.of(gpu=gangs[key].gpus_per_pod * pods,
                                                  cpu=pods))
                           for node, pods in on.items()) for key, on in holding.items()}
        return ClusterCapacity(CLUSTER, nodes, held_by=held, topology=LEVELS)


# -- one system over the trace --------------------------------------------------------------------

@dataclass(frozen=True)
class System:
    label: str
    mcad: bool
    asks: str | None = None
    """None, or ``preferred`` / ``required`` (a rack)."""


SYSTEMS = (System("coscheduling", mcad=False), System("mcad", mcad=True),
           System("mcad + preferred rack", mcad=True, asks="preferred"),
           System("mcad + required rack", mcad=True, asks="required"))


@dataclass
class Life:
    gang: Gang
    started_s: int | None = None
    done_s: int | None = None
    nodes: dict[NodeName, int] = field(default_factory=dict)
    racks: int = 0
    blocks: int = 0


@dataclass
class Outcome:
    system: str
    lives: list[Life]
    timeline: list[tuple[int, int, int]]
    """(second, GPUs in use, fragmented GPUs) per step."""
    unbound: int = 0
    """Dispatches the scheduler could not bind inside the pin (should stay 0)."""
    cycle_s: float = 0.0


def entry_of(gang: Gang, asks: str | None) -> AppWrapperEntry:
    requests = ResourceList.of(gpu=gang.gpus_per_pod, cpu=1)
    demand = Demand(pod_sets=(PodSet(gang.pods, requests, source=gang.name),),
                    min_available=gang.pods, total=requests.scale(gang.pods), pods=gang.pods,
                    topology=None if asks is None else TopologyRequest(
                        RACK, asks == "required", "the trace"))
    return AppWrapperEntry(key=AppWrapperKey(f"bench/{gang.name}"), uid=gang.name, priority=0,
                           created=T0 + timedelta(seconds=gang.submit_s), demand=demand)


def simulate(system: System, gangs: list[Gang], seed: int) -> Outcome:
    rng = random.Random(seed)
    cluster = Cluster()
    lives = {AppWrapperKey(f"bench/{g.name}"): Life(g) for g in gangs}
    by_key = {k: life.gang for k, life in lives.items()}
    entries = {k: entry_of(life.gang, system.asks) for k, life in lives.items()}
    pins: dict[AppWrapperKey, TopologyPin | None] = {}
    forest, _ = QuotaForest.build([])
    outcome = Outcome(system.label, list(lives.values()), [])
    now_s, next_report = 0, 3600
    while any(life.done_s is None for life in lives.values()):
        for life in lives.values():
            if life.started_s is not None and life.done_s is None and \
                    now_s >= life.started_s + life.gang.runtime_s:
                life.done_s = now_s
                cluster.unbind(life.gang, life.nodes)
        waiting = [k for k, life in lives.items()
                   if life.started_s is None and life.gang.submit_s <= now_s]
        if system.mcad:
            running = {k: life.nodes for k, life in lives.items()
                       if life.started_s is not None and life.done_s is None}
            snapshot = Snapshot(
                now=T0 + timedelta(seconds=now_s),
                appwrappers=(*(entries[k] for k in waiting), *(
                    replace(entries[k], phase=Admitted(CLUSTER, pins.get(k)),
                            dispatched=T0 + timedelta(seconds=lives[k].started_s or 0))
                    for k in running)),
                clusters=(cluster.capacity(running, by_key),), quota=forest,
                policy=CyclePolicy())
            started = time.perf_counter()
            result = dispatch_cycle(snapshot)
            outcome.cycle_s += time.perf_counter() - started
            for dispatch in result.dispatches:
                pin = dispatch.placement.pin
                bound = cluster.bind(lives[dispatch.key].gang, (
                    (lambda n: True) if pin is None else
                    (lambda n, pin=pin: pin.holds(LABELS[n]))), rng)
                if bound is None:
                    outcome.unbound += 1
                    continue
                _start(lives[dispatch.key], bound, now_s)
                pins[dispatch.key] = pin
        else:
            for key in waiting:
                bound = cluster.bind(lives[key].gang, lambda n: True, rng)
                if bound is not None:
                    _start(lives[key], bound, now_s)
        used = sum(cluster.gpus.values())
        outcome.timeline.append((now_s, used, cluster.fragmented()))
        if now_s >= next_report:
            done = sum(1 for life in lives.values() if life.done_s is not None)
            say(f"  {system.label}: {now_s / 3600:.0f} h simulated, {done}/{len(gangs)} "
                f"done, {len(waiting)} waiting, {used}/{CAPACITY} GPUs in use")
            next_report += 3600
        now_s += STEP_S
    return outcome


def _start(life: Life, bound: dict[NodeName, int], now_s: int) -> None:
    life.started_s, life.nodes = now_s, bound
    life.racks = len({(LABELS[n][BLOCK], LABELS[n][RACK]) for n in bound})
    life.blocks = len({LABELS[n][BLOCK] for n in bound})


def figures(outcome: Outcome) -> dict[str, Any]:
    lives = outcome.lives
    multi = [life for life in lives if life.gang.pods > 1]
    responses = sorted(life.done_s - life.gang.submit_s for life in lives
                       if life.done_s is not None)
    start = min(life.gang.submit_s for life in lives)
    end = max(life.done_s or 0 for life in lives)
    busy = sum(life.gang.gpus * life.gang.runtime_s for life in lives)
    big = [life for life in lives if life.gang.gpus_per_pod == GPUS_PER_NODE]
    return {
        "gangs": len(lives),
        "one_rack": sum(1 for life in multi if life.racks == 1) / len(multi),
        "one_block": sum(1 for life in multi if life.blocks == 1) / len(multi),
        "mean_racks": statistics.fmean(life.racks for life in multi),
        "utilisation": busy / (CAPACITY * (end - start)),
        "avg_response_s": statistics.fmean(responses),
        "p95_response_s": responses[round(0.95 * (len(responses) - 1))],
        "avg_wait_whole_node_s": statistics.fmean(
            (life.started_s or 0) - life.gang.submit_s for life in big) if big else 0.0,
        "avg_fragmented_gpus": statistics.fmean(f for _, _, f in outcome.timeline),
        "makespan_s": end - start,
        "unbound": outcome.unbound,
        "cycle_ms_avg": 1000 * outcome.cycle_s / max(1, len(outcome.timeline)),
    }


# -- writing -----------------------------------------------------------------------------------

def plot(outcomes: dict[str, Outcome]) -> str:
    import matplotlib  # noqa: PLC0415  (only the written figures need it: the bench extra)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for label, outcome in outcomes.items():
        hours = [t / 3600 for t, _, _ in outcome.timeline]
        top.plot(hours, [f for _, _, f in outcome.timeline], label=label, linewidth=1)
        bottom.plot(hours, [u for _, u, _ in outcome.timeline], label=label, linewidth=1)
    top.set_ylabel("free GPUs on partly\nused nodes")
    top.set_title("fragmentation over time (the same trace, 512 GPUs)", fontsize=10)
    bottom.set_ylabel("GPUs in use")
    bottom.set_xlabel("simulated hours")
    bottom.set_ylim(0, CAPACITY + 8)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    top.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=100)
    plt.close(fig)
    return str(PLOT.relative_to(ROOT))


def render(simulated: dict[str, dict[str, Any]], bed: dict[str, dict[str, Any]] | None,
           args: argparse.Namespace) -> str:
    lines = [f"## {SECTION}", "",
             f"Measured on {time.strftime('%Y-%m-%d')} by `python benchmarks/topology.py "
             f"--gangs {args.gangs} --seed {args.seed}"
             + (f" --testbed-gangs {args.testbed_gangs}`" if bed is not None else
                " --no-testbed`") + ". "
             "The trace: gangs of 2, 4, 8 or 16 GPUs in 1 to 8 pods of one shape, one every "
             f"{MEAN_INTERARRIVAL_S:.0f} s on average (Poisson), running 10-50 min, on 4 "
             "blocks x 4 racks x 4 nodes of 8 GPUs. Simulated: 10 s steps through the real "
             "dispatch cycle; the cluster's kube-scheduler binds pods where its default "
             "scoring prefers (the fewest requests, ties at random), inside the nodes mcad "
             "pins the gang to; coscheduling alone places whole gangs in arrival order, "
             "none blocking the others.", "",
             "| system | multi-pod gangs in one rack | in one block | racks per gang | GPU "
             "utilisation | avg response | p95 response | avg wait of 8-GPU-pod gangs | "
             "avg fragmented GPUs |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, f in simulated.items():
        lines.append(f"| {label} | {f['one_rack']:.1%} | {f['one_block']:.1%} | "
                     f"{f['mean_racks']:.2f} | {f['utilisation']:.1%} | "
                     f"{f['avg_response_s'] / 60:.1f} min | {f['p95_response_s'] / 60:.1f} min "
                     f"| {f['avg_wait_whole_node_s'] / 60:.1f} min | "
                     f"{f['avg_fragmented_gpus']:.0f} |")
    cycles = ", ".join(f"{label} {f['cycle_ms_avg']:.1f} ms" for label, f in simulated.items()
                       if label != "coscheduling")
    unbound = ", ".join(f"{label} {f['unbound']}" for label, f in simulated.items()
                        if label != "coscheduling")
    lines += ["", f"Average dispatch cycle (pure core, this machine): {cycles}.", ""]
    plain, pref = simulated.get("mcad"), simulated.get("mcad + preferred rack")
    cos = simulated.get("coscheduling")
    if plain and pref and cos:
        lines += [
            "What it shows. Without topology the spoke's scheduler spreads pods over the "
            "emptiest nodes, so a gang lands on about "
            f"{cos['mean_racks']:.1f} racks and the free GPUs sit on partly used nodes "
            f"({cos['avg_fragmented_gpus']:.0f} on average with coscheduling, "
            f"{plain['avg_fragmented_gpus']:.0f} with mcad): a gang of 8-GPU pods waits for "
            f"whole nodes ({cos['avg_wait_whole_node_s'] / 60:.0f} min with coscheduling; "
            f"{plain['avg_wait_whole_node_s'] / 60:.0f} min with mcad, whose head of line "
            "reserves room for it, at the price of the others' response). With a rack "
            "asked for, mcad pins each gang to the tightest rack that holds it and to the "
            "fullest nodes there (seed 004's bin packing), so whole nodes and whole racks "
            f"stay free: {pref['avg_fragmented_gpus']:.0f} fragmented GPUs on average, "
            f"utilisation {pref['utilisation']:.0%} against {cos['utilisation']:.0%}, and "
            f"the average response falls to {pref['avg_response_s'] / 60:.0f} min from "
            f"{cos['avg_response_s'] / 60:.0f}. A required rack costs a little against a "
            "preferred one (gangs wait for a rack rather than spread) and keeps every gang "
            "in one rack.", "",
            "The spoke's scheduler binds the pods, not mcad: when it puts a gang's pods on "
            "other nodes than mcad counted on (without a pin, or several gangs sharing "
            "pinned nodes in one cycle), a gang dispatched later in the same cycle may not "
            f"fit. Dispatches that could not be bound: {unbound}; the simulation decides "
            "them again at the next step (on a spoke their pods would wait, and the gang be "
            "requeued after its timeout).", ""]
    lines += ["![Fragmentation over time](img/topology-fragmentation.png)", ""]
    if bed is not None:
        lines += ["On the test bed (one spoke, `--topology block=4,rack=4`, 64 KWOK nodes x 8 "
                  f"GPUs; the first {args.testbed_gangs} gangs of the same trace, every time "
                  f"divided by {BED_SCALE:g} and arrivals 4 times closer still; a fresh test "
                  "bed per system; where each pod ran read from the pods and their nodes' "
                  "labels):", "",
                  "| system | gangs | multi-pod gangs in one rack | racks per gang | avg "
                  "response (trace s) |", "|---|---:|---:|---:|---:|"]
        for label, f in bed.items():
            lines.append(f"| {label} | {f['completed']} | {f['one_rack']:.1%} | "
                         f"{f['mean_racks']:.2f} | {f['avg_response_s']:.0f} s |")
        lines.append("")
    return "\n".join(lines)


# -- the test bed -----------------------------------------------------------------------------

BED_SCALE = 30.0
"""Trace times are divided by this on the test bed."""
BED_SYSTEMS = ("coscheduling", "mcad", "mcad + preferred rack")


def run_testbed(gangs: list[Gang], log_dir: Path) -> dict[str, dict[str, Any]]:
    from topology_bed import run_on_testbed  # noqa: PLC0415  (the test bed's own tools)

    out = {}
    for system in BED_SYSTEMS:
        out[system] = run_on_testbed(system, gangs, scale=BED_SCALE, log_dir=log_dir)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--gangs", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-testbed", action="store_true")
    parser.add_argument("--testbed-gangs", type=int, default=80)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    check("benchmarks/topology.py", [*([] if args.no_write else [MATPLOTLIB]),
                                     *([] if args.no_testbed else TESTBED)])
    gangs = trace(args.gangs, args.seed)
    outcomes = {}
    for system in SYSTEMS:
        say(f"{system.label}: simulating {len(gangs)} gangs")
        started = time.perf_counter()
        outcomes[system.label] = simulate(system, gangs, args.seed)
        say(f"{system.label}: done in {time.perf_counter() - started:.0f}s")
    simulated = {label: figures(o) for label, o in outcomes.items()}
    bed = None if args.no_testbed else run_testbed(gangs[:args.testbed_gangs], Path("/tmp"))
    out = {"gangs": args.gangs, "seed": args.seed, "simulated": simulated, "testbed": bed}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    if not args.no_write:
        from bedtools import write_section  # noqa: PLC0415

        plot(outcomes)
        write_section(SECTION, render(simulated, bed, args))
        say(f"wrote docs/benchmarks.md and {PLOT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
