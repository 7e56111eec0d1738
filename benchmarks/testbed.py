"""Measure the test bed: warm rebuild, ``up`` time and the memory of every component.

Not a test: it writes its figures into docs/testbed.md between the markers
``<!-- testbed-figures -->`` and ``<!-- /testbed-figures -->``. A cold build time is
passed in with ``--cold-build-seconds`` (measured with empty GOMODCACHE/GOCACHE, see
the doc), since wiping the machine's Go caches is not something a script should do.

    python benchmarks/testbed.py [--runs 3] [--cold-build-seconds S]
    python benchmarks/testbed.py --big [--nodes 1000]

``--big``: the scale runs' test bed instead (3 spokes x 1,000 nodes): how long ``up``
takes, the CPU each component uses once it is up and idle (30 s from /proc), and its
memory; written between ``<!-- testbed-big -->`` and ``<!-- /testbed-big -->``. Run it
under the test bed lock when other work may start a test bed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prerequisites import TESTBED, check  # noqa: E402

from e2e.cluster.build import build  # noqa: E402
from e2e.cluster.launcher import down, up  # noqa: E402
from e2e.cluster.topology import TestbedSpec  # noqa: E402

DOC = REPO / "docs" / "testbed.md"
START, END = "<!-- testbed-figures -->", "<!-- /testbed-figures -->"
BIG_START, BIG_END = "<!-- testbed-big -->", "<!-- /testbed-big -->"
IDLE_S = 30.0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


_TICKS = float(os.sysconf("SC_CLK_TCK"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def write_between(start: str, end: str, lines: list[str]) -> None:
    text = DOC.read_text()
    if start not in text:
        raise SystemExit(f"{DOC} has no {start} marker")
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    DOC.write_text(head + "\n".join([start, *lines, end]) + tail)


def big(nodes: int) -> None:
    """3 spokes x ``nodes``: ``up`` time, idle CPU per component, memory."""
    spec = TestbedSpec(spokes=3, nodes=nodes, gpus_per_node=8, cpu_per_node="64",
                       memory_per_node="512Gi", pods_per_node=110)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"up: hub + 3 spokes x {nodes} nodes ...", flush=True)
        t0 = time.monotonic()
        state = up(Path(tmp) / "tb", spec, owner_for_life=True, log=print)
        took = time.monotonic() - t0
        print(f"up in {took:.1f} s; {IDLE_S:.0f} s of idle CPU ...", flush=True)
        pids = {**state.pids, "supervisor (python)": state.supervisor_pid}
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        time.sleep(IDLE_S)  # a measuring window, not a wait for a condition
        cpu = {name: (cpu_seconds(pid) - before[name]) / IDLE_S for name, pid in pids.items()}
        rss = {name: rss_mib(pid) for name, pid in pids.items()}
        down(Path(tmp) / "tb")
    lines = [
        f"Measured on {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{subprocess.run(['nproc'], capture_output=True, text=True, check=False).stdout.strip()}"
        f" cores (`python benchmarks/testbed.py --big`).", "",
        f"`up` with a hub and 3 spokes x {nodes:,} KWOK nodes (8 GPUs, 64 CPUs each): "
        f"**{took:.0f} s** (target: at most 180 s). Then, idle for {IDLE_S:.0f} s:", "",
        "| component | CPU (cores) | RSS MiB |", "| --- | ---: | ---: |",
        *[f"| {name} | {cpu[name]:.2f} | {rss[name]:.0f} |" for name in sorted(pids)],
        f"| **total** | **{sum(cpu.values()):.2f}** | **{sum(rss.values()):.0f}** |",
    ]
    write_between(BIG_START, BIG_END, lines)
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cold-build-seconds", type=float, default=0.0)
    parser.add_argument("--big", action="store_true")
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()
    check("benchmarks/testbed.py", TESTBED)
    if args.big:
        big(args.nodes)
        return

    started = time.monotonic()
    build()
    reuse = time.monotonic() - started
    started = time.monotonic()
    build(force=True)
    relink = time.monotonic() - started

    spec = TestbedSpec(spokes=2, nodes=4, gpus_per_node=8)
    ups, rss = [], {}
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            state = up(Path(tmp) / "tb", spec, owner_for_life=True, log=lambda _m: None)
            ups.append(time.monotonic() - t0)
            if run == args.runs - 1:
                time.sleep(5)  # let every component settle before reading RSS
                rss = {name: rss_mib(pid) for name, pid in sorted(state.pids.items())}
                rss["supervisor (python)"] = rss_mib(state.supervisor_pid)
            down(Path(tmp) / "tb")

    go = subprocess.run(["go", "version"], capture_output=True, text=True, check=False).stdout
    lines = [
        f"Measured on {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{subprocess.run(['nproc'], capture_output=True, text=True, check=False).stdout.strip()}"
        f" cores, {go.strip()}.",
        "",
        "| what | figure |",
        "| --- | --- |",
    ]
    if args.cold_build_seconds:
        lines.append(f"| cold build (empty module and build caches) | "
                     f"{args.cold_build_seconds:.0f} s |")
    lines += [
        f"| warm rebuild (Go build cache warm, binary cache invalidated) | {relink:.1f} s |",
        f"| reuse (binary cache complete) | {reuse * 1000:.0f} ms |",
        f"| `up`, hub + 2 spokes x 4 nodes, {args.runs} runs | median "
        f"{statistics.median(ups):.1f} s, max {max(ups):.1f} s |",
        "",
        "RSS of every component, 5 s after `up` returned (MiB):",
        "",
        "| component | RSS MiB |",
        "| --- | --- |",
        *[f"| {name} | {value:.0f} |" for name, value in rss.items()],
        f"| **total** | **{sum(rss.values()):.0f}** |",
    ]
    write_between(START, END, lines)
    print(json.dumps({"reuse_s": reuse, "relink_s": relink, "up_s": ups, "rss_mib": rss},
                     indent=1))


if __name__ == "__main__":
    main()
