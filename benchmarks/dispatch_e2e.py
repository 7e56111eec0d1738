"""Dispatch latency and throughput on the real test bed (a benchmark, not a test).

1. Latency: with room available, create one AppWrapper at a time and time how long
   until its wrapped Job exists on a spoke (seen through a watch of the spokes' Jobs);
   report p50 / p99 over ``--latency-runs``.
2. Throughput: queue ``--queued`` small AppWrappers while mcad is stopped, start it, and
   time until every wrapped Job exists on a spoke: sustained dispatches per second.

Writes the figures into docs/benchmarks.md between ``<!-- dispatch-e2e -->`` markers.

    python benchmarks/dispatch_e2e.py [--latency-runs 100] [--queued 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prerequisites import TESTBED, check  # noqa: E402

from e2e.cluster.build import artifacts  # noqa: E402
from e2e.cluster.launcher import down, up  # noqa: E402
from e2e.cluster.topology import TestbedSpec, TestbedState, free_ports  # noqa: E402
from mcad.core.life.wrapping import UID_LABEL  # noqa: E402
from mcad.gateway import refs, verbs  # noqa: E402
from mcad.gateway.connection import Connection, connect  # noqa: E402
from mcad.gateway.refs import ResourceRef  # noqa: E402
from mcad.gateway.watch import Changed, Relisted, watch_objects  # noqa: E402

DOC = REPO / "docs" / "benchmarks.md"
START, END = "<!-- dispatch-e2e -->", "<!-- /dispatch-e2e -->"
JOBS = ResourceRef("batch/v1", "Job", "jobs", namespaced=True)


def small_aw(name: str) -> dict[str, Any]:
    return {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": name},
            "spec": {"resources": {"GenericItems": [{"generictemplate": {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "busybox",
                        "resources": {"requests": {"cpu": "100m"}}}]}}}}}]}}}


class JobArrivals:
    """When each wrapped Job first appeared on any spoke (by Job name)."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.event = asyncio.Event()

    async def follow(self, conn: Connection) -> None:
        async for event in watch_objects(conn, JOBS, label_selector=UID_LABEL):
            items = event.items if isinstance(event, Relisted) else \
                [event.obj] if isinstance(event, Changed) else []
            for job in items:
                self.seen.setdefault(job["metadata"]["name"], time.perf_counter())
            self.event.set()

    async def wait_for(self, names: set[str], timeout: float) -> None:
        deadline = time.perf_counter() + timeout
        while not names <= set(self.seen):
            self.event.clear()
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                missing = len(names - set(self.seen))
                raise SystemExit(f"{missing} Jobs never appeared")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), remaining)


def start_mcad(state: TestbedState, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    hub = next(c.kubeconfig for c in state.clusters if c.name == "hub")
    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "mcad.cli", "run", "--kubeconfig", hub,
                             "--metrics-address", f"127.0.0.1:{port}", "--metrics-auth=false",
                             "--log-level", "WARNING"], cwd=REPO, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                if r.status == 200 and r.read() == b"ready":  # leading and synced
                    return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("mcad run did not become ready")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


async def measure(state: TestbedState, args: argparse.Namespace, directory: Path
                  ) -> dict[str, Any]:
    kubeconfig = {c.name: Path(c.kubeconfig) for c in state.clusters}
    hub = await connect(kubeconfig["hub"], name="hub")
    spokes = [await connect(kubeconfig[n], name=n) for n in ("spoke-1", "spoke-2")]
    arrivals = JobArrivals()
    watchers = [asyncio.create_task(arrivals.follow(s)) for s in spokes]
    for ns in ("bench-latency", "bench-throughput"):
        await verbs.create(hub, refs.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": ns}})
    proc, _ = start_mcad(state, directory / "mcad-run.log")
    latencies = []
    try:
        for i in range(args.latency_runs):
            name = f"lat-{i}"
            t0 = time.perf_counter()
            await verbs.create(hub, refs.APPWRAPPERS, small_aw(name), namespace="bench-latency")
            await arrivals.wait_for({name}, 30)
            latencies.append(arrivals.seen[name] - t0)
    finally:
        stop(proc)
    names = [f"thr-{i}" for i in range(args.queued)]
    sem = asyncio.Semaphore(32)

    async def submit(name: str) -> None:
        async with sem:
            await verbs.create(hub, refs.APPWRAPPERS, small_aw(name),
                               namespace="bench-throughput")

    await asyncio.gather(*(submit(n) for n in names))
    t0 = time.perf_counter()
    proc, _ = start_mcad(state, directory / "mcad-run.log")
    ready_at = time.perf_counter()
    try:
        await arrivals.wait_for(set(names), 600)
    finally:
        stop(proc)
    last = max(arrivals.seen[n] for n in names)
    for w in watchers:
        w.cancel()
    await hub.close()
    for s in spokes:
        await s.close()
    lat_ms = sorted(x * 1000 for x in latencies)
    return {
        "p50_ms": statistics.median(lat_ms),
        "p99_ms": lat_ms[min(len(lat_ms) - 1, round(0.99 * (len(lat_ms) - 1)))],
        "max_ms": lat_ms[-1], "runs": len(lat_ms),
        "throughput": args.queued / (last - ready_at), "queued": args.queued,
        "drain_s": last - ready_at, "startup_s": ready_at - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-runs", type=int, default=100)
    parser.add_argument("--queued", type=int, default=1000)
    args = parser.parse_args()
    check("benchmarks/dispatch_e2e.py", TESTBED)
    directory = Path(tempfile.mkdtemp(prefix="mcad-bench-"))
    spec = TestbedSpec(spokes=2, nodes=4, gpus_per_node=8, cpu_per_node="1000",
                       pods_per_node=400)
    state = up(directory, spec, owner_for_life=True, log=lambda _m: None)
    try:
        hub = next(c.kubeconfig for c in state.clusters if c.name == "hub")
        subprocess.run([str(artifacts().path("kubectl")), "--kubeconfig", hub, "apply", "-k",
                        str(REPO / "crds")], check=True, capture_output=True)
        subprocess.run([str(artifacts().path("kubectl")), "--kubeconfig", hub, "wait",
                        "--for=condition=Established", "crd/appwrappers.workload.codeflare.dev"],
                       check=True, capture_output=True)
        for spoke in ("spoke-1", "spoke-2"):
            kc = next(c.kubeconfig for c in state.clusters if c.name == spoke)
            subprocess.run([sys.executable, "-m", "mcad.cli", "cluster", "register", spoke,
                            "--kubeconfig", kc, "--hub-kubeconfig", hub], check=True,
                           cwd=REPO, capture_output=True)
        figures = asyncio.run(measure(state, args, directory))
    finally:
        down(directory)
    lines = [
        START,
        f"Measured on {time.strftime('%Y-%m-%d')}, {platform.machine()}, 2 cores, on the test "
        "bed (hub + 2 spokes x 4 KWOK nodes, every control plane on this machine too).",
        "",
        "| what | figure | target |",
        "| --- | --- | --- |",
        f"| dispatch latency, AppWrapper created -> wrapped Job exists on the spoke, "
        f"{figures['runs']} runs | p50 {figures['p50_ms']:.0f} ms, p99 "
        f"{figures['p99_ms']:.0f} ms, max {figures['max_ms']:.0f} ms | p50 <= 100 ms |",
        f"| sustained dispatch throughput, {figures['queued']} small AppWrappers queued, "
        f"from `mcad run` ready to the last Job on a spoke | "
        f"{figures['throughput']:.0f} AppWrappers/s ({figures['drain_s']:.1f} s) | >= 50/s |",
        "",
        "Method: `python benchmarks/dispatch_e2e.py`. Latency: one AppWrapper at a time "
        "(1 pod, 100m CPU), clock from just before the create request to the moment a watch "
        "on the spokes' Jobs sees the wrapped Job. Throughput: the AppWrappers are created "
        "while mcad is stopped; mcad is started and the clock runs from its /readyz to the "
        "last Job seen (each dispatch = finalizer patch + conditional status patch + Job "
        "create, so 3 API writes per AppWrapper, plus the status updates that follow).",
        END,
    ]
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if START in text:
        head, _, rest = text.partition(START)
        _, _, tail = rest.partition(END)
        text = head + "\n".join(lines) + tail
    else:
        text = text.rstrip("\n") + "\n\n## Dispatch on the test bed (end to end)\n\n" + \
            "\n".join(lines) + "\n"
    DOC.write_text(text)
    print(figures)


if __name__ == "__main__":
    main()
