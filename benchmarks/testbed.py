"""Measure the test bed: warm rebuild, ``up`` time and the memory of every component.

Not a test: it writes its figures into docs/testbed.md between the markers
``<!-- testbed-figures -->`` and ``<!-- /testbed-figures -->``. A cold build time is
passed in with ``--cold-build-seconds`` (measured with empty GOMODCACHE/GOCACHE, see
the doc), since wiping the machine's Go caches is not something a script should do.

    python benchmarks/testbed.py [--runs 3] [--cold-build-seconds S]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e.cluster.build import build  # noqa: E402
from e2e.cluster.launcher import down, up  # noqa: E402
from e2e.cluster.topology import TestbedSpec  # noqa: E402

DOC = REPO / "docs" / "testbed.md"
START, END = "<!-- testbed-figures -->", "<!-- /testbed-figures -->"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cold-build-seconds", type=float, default=0.0)
    args = parser.parse_args()

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
        START,
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
        END,
    ]
    text = DOC.read_text()
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + "\n".join(lines) + tail)
    print(json.dumps({"reuse_s": reuse, "relink_s": relink, "up_s": ups, "rss_mib": rss},
                     indent=1))


if __name__ == "__main__":
    main()
