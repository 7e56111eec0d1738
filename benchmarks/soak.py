"""The chaos soak on a fresh test bed (a benchmark, not a test): see ``e2e/soak.py``.

Brings up hub + 2 spokes x 4 nodes x 8 GPUs, installs the CRDs and a 48-GPU quota
tree, registers the spokes, runs ``mcad run`` (spokeLostSeconds 20), submits the
AppWrappers while the seeded fault schedule runs, settles, checks the invariants, and
writes the figures into docs/reliability.md between ``<!-- soak -->`` markers.

    python benchmarks/soak.py [--appwrappers 300] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prerequisites import TESTBED, check  # noqa: E402

from e2e.cluster.build import artifacts  # noqa: E402
from e2e.cluster.launcher import down, up  # noqa: E402
from e2e.cluster.topology import TestbedSpec  # noqa: E402
from e2e.controller import ControllerProcess  # noqa: E402
from e2e.soak import Soak, SoakPlan, SoakReport  # noqa: E402
from mcad.gateway.connection import connect  # noqa: E402

DOC = REPO / "docs" / "reliability.md"
START, END = "<!-- soak -->", "<!-- /soak -->"


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


async def soak(plan: SoakPlan, directory: Path, kubeconfigs: dict[str, Path]) -> SoakReport:
    config = directory / "mcad-config.yaml"
    config.write_text(yaml.safe_dump({"spokeLostSeconds": plan.spoke_lost_seconds}))
    controller = ControllerProcess(kubeconfigs["hub"], directory, name="mcad-soak",
                                   extra_args=("--config", str(config)))
    controller.start()
    hub = await connect(kubeconfigs["hub"], name="hub")
    spokes = {n: await connect(kubeconfigs[n], name=n) for n in ("spoke-1", "spoke-2")}
    try:
        return await Soak(plan=plan, testbed_dir=directory, hub=hub, spokes=spokes,
                          controller=controller, log=log).run()
    finally:
        controller.stop()
        await hub.close()
        for conn in spokes.values():
            await conn.close()


def render(report: SoakReport, plan: SoakPlan) -> str:
    faults = ", ".join(f"{kind} {n}" for kind, n in sorted(report.faults.items()))
    requeues = ", ".join(f"{r} {n}" for r, n in sorted(report.requeues.items())) or "none"
    rows = [
        ("AppWrappers (1-2 pods x 1-8 GPUs, 5-25 s each)", str(report.appwrappers)),
        ("faults injected", f"{sum(report.faults.values())} ({faults})"),
        ("completed", f"{report.completed} of {report.appwrappers}"),
        ("requeues by last reason", requeues),
        ("samples of both spokes' pods (1 per second)",
         f"{report.samples} ({report.unanswered_samples} with a frozen spoke)"),
        ("two copies of a gang running at once (a violation)", str(len(report.double_runs))),
        ("a recorded leftover of a lost spoke seen running beside its new copy, before "
         "it was collected (not a violation: see above)", str(report.leftover_overlaps)),
        ("orphaned objects on the spokes", str(len(report.orphans))),
        ("left anywhere after deleting every AppWrapper", str(len(report.left_after_delete))),
        ("quota used != what runs", f"{len(report.quota_mismatches)} of "
                                    f"{report.quota_checks} checks"),
        ("violations", str(report.violations)),
    ]
    lines = [START,
             f"Run on {time.strftime('%Y-%m-%d')}, {platform.machine()}, 2 cores, seed "
             f"{report.seed}, {report.seconds / 60:.0f} min, with `python benchmarks/soak.py "
             f"--appwrappers {plan.appwrappers} --seed {plan.seed}` (spokeLostSeconds "
             f"{plan.spoke_lost_seconds:.0f}, a fault every {plan.fault_every_s[0]:.0f}-"
             f"{plan.fault_every_s[1]:.0f} s, spokes frozen {plan.pause_s[0]:.0f}-"
             f"{plan.pause_s[1]:.0f} s).", "", "| what | count |", "| --- | --- |",
             *(f"| {what} | {count} |" for what, count in rows)]
    for title, items in (("not completed", report.not_completed),
                         ("double runs", [f"{u} on {s}" for _, u, s in report.double_runs]),
                         ("orphans", report.orphans),
                         ("left after delete", report.left_after_delete),
                         ("quota", report.quota_mismatches)):
        if items:
            lines += ["", f"{title}: " + "; ".join(items[:20])]
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--appwrappers", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--arrival", type=float, default=1.0,
                        help="mean seconds between arrivals")
    args = parser.parse_args()
    check("benchmarks/soak.py", TESTBED)
    plan = SoakPlan(appwrappers=args.appwrappers, seed=args.seed, arrival_s=args.arrival)
    directory = Path(tempfile.mkdtemp(prefix="mcad-soak-"))
    log(f"bringing a test bed up in {directory}")
    state = up(directory, TestbedSpec(spokes=2, nodes=4, gpus_per_node=8),
               owner_for_life=True, log=log)
    try:
        kubeconfigs = {c.name: Path(c.kubeconfig) for c in state.clusters}
        kubectl = str(artifacts().path("kubectl"))
        subprocess.run([kubectl, "--kubeconfig", kubeconfigs["hub"], "apply", "-k",
                        str(REPO / "crds")], check=True, capture_output=True)
        subprocess.run([kubectl, "--kubeconfig", kubeconfigs["hub"], "wait",
                        "--for=condition=Established", "--timeout=60s",
                        "crd/appwrappers.workload.codeflare.dev",
                        "crd/quotasubtrees.quota.codeflare.dev"], check=True,
                       capture_output=True)
        for spoke in ("spoke-1", "spoke-2"):
            subprocess.run([sys.executable, "-m", "mcad.cli", "cluster", "register", spoke,
                            "--kubeconfig", kubeconfigs[spoke], "--hub-kubeconfig",
                            kubeconfigs["hub"]], check=True, cwd=REPO, capture_output=True)
        report = asyncio.run(soak(plan, directory, kubeconfigs))
    finally:
        down(directory)
    text = render(report, plan)
    doc = DOC.read_text()
    head, _, rest = doc.partition(START)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + text + tail)
    print(text)
    sys.exit(1 if report.violations else 0)


if __name__ == "__main__":
    main()
