"""Leader failover on the real test bed (a benchmark, not a test).

Two replicas of ``mcad run`` on one hub. Each round: note who leads, stop it (``kill
-9``, or SIGTERM as a rolling update does), create a small AppWrapper at once, and time
until it is dispatched (its wrapped Job exists on a spoke), i.e. until the standby has
taken the Lease, synced and dispatched. The stopped replica is started again (as the
new standby) before the next round. Also checks, after all rounds, that no AppWrapper
was dispatched twice (one Job each, one Dispatched Event each).

Writes the figures into docs/operations.md between ``<!-- failover -->`` markers.

    python benchmarks/failover.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prerequisites import TESTBED, check  # noqa: E402

from e2e.cluster.build import artifacts  # noqa: E402
from e2e.cluster.launcher import down, up  # noqa: E402
from e2e.cluster.topology import TestbedSpec  # noqa: E402
from e2e.controller import ControllerProcess  # noqa: E402
from mcad.gateway import refs, verbs  # noqa: E402
from mcad.gateway.connection import Connection, connect  # noqa: E402
from mcad.gateway.errors import ApiError  # noqa: E402
from mcad.gateway.refs import ResourceRef  # noqa: E402

DOC = REPO / "docs" / "operations.md"
START, END = "<!-- failover -->", "<!-- /failover -->"
JOBS = ResourceRef("batch/v1", "Job", "jobs", namespaced=True)
NAMESPACE = "bench-failover"


def small_aw(name: str) -> dict[str, Any]:
    return {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": name},
            "spec": {"resources": {"GenericItems": [{"completionstatus": "Complete",
                                                     "generictemplate": {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                "spec": {"parallelism": 1, "completions": 1, "template": {
                    "metadata": {"annotations": {"mcad.test/runtime": "1s"}},
                    "spec": {"restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "busybox",
                        "resources": {"requests": {"cpu": "100m"}}}]}}}}}]}}}


async def jobs_named(spokes: list[Connection], name: str) -> int:
    count = 0
    for spoke in spokes:
        try:
            await verbs.get(spoke, JOBS, name, namespace=NAMESPACE)
            count += 1
        except ApiError:  # NotFound, or the spoke is busy: not there (yet)
            continue
    return count


async def until_dispatched(spokes: list[Connection], name: str, since: float) -> float:
    while await jobs_named(spokes, name) == 0:
        if time.monotonic() - since > 120:
            raise SystemExit(f"{name} was not dispatched within 120 s")
        await asyncio.sleep(0.05)
    return time.monotonic() - since


def leader_of(replicas: list[ControllerProcess]) -> ControllerProcess:
    for _ in range(600):
        for replica in replicas:
            try:
                if replica.sample("mcad_leader") == 1:
                    return replica
            except OSError:
                continue
        time.sleep(0.1)
    raise SystemExit("no replica leads")


async def measure(hub_kubeconfig: Path, spoke_kubeconfigs: list[Path], rounds: int,
                  directory: Path) -> dict[str, Any]:
    hub = await connect(hub_kubeconfig, name="hub")
    spokes = [await connect(k, name=k.stem) for k in spoke_kubeconfigs]
    await verbs.create(hub, refs.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": NAMESPACE}})
    replicas = [ControllerProcess(hub_kubeconfig, directory, name=f"replica-{i}",
                                  extra_args=("--log-level", "WARNING")) for i in "ab"]
    replicas[0].start()
    replicas[1].start(wait_ready=False)
    results: dict[str, list[float]] = {"kill": [], "term": []}
    names = []
    try:
        for i in range(rounds * 2):
            how = "kill" if i % 2 == 0 else "term"
            leader = leader_of(replicas)
            name = f"{how}-{i}"
            names.append(name)
            since = time.monotonic()
            leader.kill() if how == "kill" else leader.stop()
            await verbs.create(hub, refs.APPWRAPPERS, small_aw(name), namespace=NAMESPACE)
            took = await until_dispatched(spokes, name, since)
            results[how].append(took)
            print(f"round {i + 1}: {how} -> dispatched by the standby after {took:.1f} s",
                  flush=True)
            leader.start(wait_ready=False)
        duplicates = [n for n in names if await jobs_named(spokes, n) != 1]
        events = (await verbs.list_all(hub, refs.EVENTS, namespace=NAMESPACE))[0]
        dispatched = [e["involvedObject"]["name"] for e in events
                      if e.get("reason") == "Dispatched"]
        twice = sorted({n for n in dispatched if dispatched.count(n) > 1})
    finally:
        for replica in replicas:
            replica.stop()
        await hub.close()
        for spoke in spokes:
            await spoke.close()
    return {"kill": results["kill"], "term": results["term"], "duplicates": duplicates,
            "dispatched_twice": twice, "appwrappers": len(names)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of each kind (kill -9, SIGTERM)")
    args = parser.parse_args()
    check("benchmarks/failover.py", TESTBED)
    directory = Path(tempfile.mkdtemp(prefix="mcad-failover-"))
    print(f"bringing a test bed up in {directory}", flush=True)
    state = up(directory, TestbedSpec(spokes=2, nodes=2, gpus_per_node=8),
               owner_for_life=True, log=lambda m: print(m, flush=True))
    try:
        kc = {c.name: Path(c.kubeconfig) for c in state.clusters}
        kubectl = str(artifacts().path("kubectl"))
        subprocess.run([kubectl, "--kubeconfig", kc["hub"], "apply", "-k", str(REPO / "crds")],
                       check=True, capture_output=True)
        subprocess.run([kubectl, "--kubeconfig", kc["hub"], "wait",
                        "--for=condition=Established", "crd/appwrappers.workload.codeflare.dev"],
                       check=True, capture_output=True)
        for spoke in ("spoke-1", "spoke-2"):
            subprocess.run([sys.executable, "-m", "mcad.cli", "cluster", "register", spoke,
                            "--kubeconfig", kc[spoke], "--hub-kubeconfig", kc["hub"]],
                           check=True, cwd=REPO, capture_output=True)
        figures = asyncio.run(measure(kc["hub"], [kc["spoke-1"], kc["spoke-2"]], args.rounds,
                                      directory))
    finally:
        down(directory)
    kill, term = figures["kill"], figures["term"]
    lines = [
        START,
        f"Measured on {time.strftime('%Y-%m-%d')}, {platform.machine()}, 2 cores, on the test "
        f"bed (hub + 2 spokes, every control plane on this machine), {len(kill)} rounds of "
        "each kind, with `python benchmarks/failover.py`:",
        "",
        "| leader stopped by | new work dispatched by the standby after | limit |",
        "| --- | --- | --- |",
        f"| `kill -9` (crash, node loss) | median {statistics.median(kill):.1f} s, max "
        f"{max(kill):.1f} s | 20 s |",
        f"| SIGTERM (rolling update: the Lease is released) | median "
        f"{statistics.median(term):.1f} s, max {max(term):.1f} s | |",
        "",
        f"AppWrappers dispatched twice: {len(figures['dispatched_twice'])}; with other than "
        f"exactly one Job on the spokes: {len(figures['duplicates'])} (of "
        f"{figures['appwrappers']}). The clock runs from the stop to the moment the new "
        "AppWrapper's Job exists on a spoke, so it includes taking the Lease, listing the "
        "hub and the spokes, and the dispatch itself. After `kill -9` the standby must wait "
        "for the Lease to expire (15 s as it observes it, checked every 2 s).",
        END,
    ]
    text = DOC.read_text()
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + "\n".join(lines) + tail)
    print(figures)


if __name__ == "__main__":
    main()
