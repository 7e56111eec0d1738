"""Fuzzing figures for docs/security.md (a benchmark, not a test).

1. In process: ``--examples`` AppWrappers from ``tests.builders.fuzz`` through the same
   check ``mcad validate`` and the webhook use (``mcad.validation``): accepted, refused
   with sentences that say where, or a crash (never expected).
2. Through a real hub: ``--hub`` of them created on a fresh test bed with mcad and its
   webhook running (``e2e.fuzzing``): admitted, refused by the CRD's schema, refused by
   the webhook, or a failure (a 5xx or time-out: never expected).

    python benchmarks/fuzz.py [--examples 5000] [--hub 500]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prerequisites import HYPOTHESIS, TESTBED, check  # noqa: E402

from e2e.cluster.build import artifacts  # noqa: E402
from e2e.cluster.launcher import down, up  # noqa: E402
from e2e.cluster.topology import TestbedSpec, free_ports  # noqa: E402
from e2e.controller import ControllerProcess  # noqa: E402
from mcad.config import RunConfig  # noqa: E402
from mcad.gateway import refs, verbs  # noqa: E402
from mcad.gateway.connection import connect  # noqa: E402
from mcad.validation import check_appwrapper  # noqa: E402

if TYPE_CHECKING:
    from e2e.fuzzing import HubFuzz

DOC = REPO / "docs" / "security.md"
START, END = "<!-- fuzz -->", "<!-- /fuzz -->"


def in_process(count: int) -> tuple[Counter[str], float]:
    # Here, not at the top: they need hypothesis, which main checks for first.
    from e2e.fuzzing import draw  # noqa: PLC0415
    from tests.builders.fuzz import names_a_field  # noqa: PLC0415

    outcomes: Counter[str] = Counter()
    started = time.perf_counter()
    for doc in draw(count, seed=1):
        try:
            checked = check_appwrapper(doc, config=RunConfig(), namespace="team-a")
        except Exception:
            outcomes["crashed"] += 1
            continue
        if not checked.problems:
            outcomes["accepted"] += 1
        elif all(names_a_field(p) for p in checked.problems):
            outcomes["refused, each problem naming where"] += 1
        else:
            outcomes["refused without saying where"] += 1
    return outcomes, time.perf_counter() - started


async def through_hub(count: int, directory: Path, kubeconfigs: dict[str, Path]) -> HubFuzz:
    from e2e.fuzzing import draw, send  # noqa: PLC0415  (hypothesis: see in_process)

    port = free_ports(1)[0]
    controller = ControllerProcess(kubeconfigs["hub"], directory, name="mcad-fuzz", extra_args=(
        "--webhook-address", f"127.0.0.1:{port}",
        "--webhook-url", f"https://127.0.0.1:{port}/validate-appwrapper"))
    controller.start()
    hub = await connect(kubeconfigs["hub"], name="hub")
    try:
        await verbs.create(hub, refs.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": "fuzz"}})
        for _ in range(300):
            try:
                await verbs.get(hub, refs.VALIDATING_WEBHOOKS, "mcad")
                break
            except Exception:
                await asyncio.sleep(0.2)
        await asyncio.sleep(6)  # the server reads its new certificate every 5 s
        return await send(hub, "fuzz", draw(count, seed=2))
    finally:
        controller.stop()
        await hub.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--hub", type=int, default=500)
    args = parser.parse_args()
    check("benchmarks/fuzz.py", [HYPOTHESIS, *TESTBED])
    local, seconds = in_process(args.examples)
    print(f"in process: {dict(local)} in {seconds:.1f}s", flush=True)
    directory = Path(tempfile.mkdtemp(prefix="mcad-fuzz-"))
    state = up(directory, TestbedSpec(spokes=1, nodes=2, gpus_per_node=8),
               owner_for_life=True, log=print)
    try:
        kubeconfigs = {c.name: Path(c.kubeconfig) for c in state.clusters}
        subprocess.run([str(artifacts().path("kubectl")), "--kubeconfig", kubeconfigs["hub"],
                        "apply", "-k", str(REPO / "crds")], check=True, capture_output=True)
        subprocess.run([sys.executable, "-m", "mcad.cli", "cluster", "register", "spoke-1",
                        "--kubeconfig", kubeconfigs["spoke-1"], "--hub-kubeconfig",
                        kubeconfigs["hub"]], check=True, cwd=REPO, capture_output=True)
        hub = asyncio.run(through_hub(args.hub, directory, kubeconfigs))
    finally:
        down(directory)
    print(f"through the hub: {hub}", flush=True)
    rows = [f"| in process (`mcad validate`'s and the webhook's check) | {args.examples} | "
            + ", ".join(f"{k} {v}" for k, v in sorted(local.items())) + f" ({seconds:.0f} s) |",
            f"| through the real hub, with mcad and its webhook | {hub.sent} | "
            + ", ".join(f"{k} {v}" for k, v in sorted(hub.outcomes.items()))
            + f"; failures (5xx, time-outs) {len(hub.failures)}; refusals not saying where "
              f"{len(hub.unexplained)} |"]
    text = "\n".join([START, f"Measured on {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
                      f"with `python benchmarks/fuzz.py --examples {args.examples} --hub "
                      f"{args.hub}`:", "", "| where | AppWrappers | outcome |",
                      "| --- | --- | --- |", *rows, END])
    doc = DOC.read_text()
    head, _, rest = doc.partition(START)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + text + tail)
    print(text)


if __name__ == "__main__":
    main()
