"""What the test-bed benchmarks share: a fresh test bed per system, mcad on it, a record
of every pod's life seen through watches, and writing a section of docs/benchmarks.md.

Times are taken where the benchmark sees them (``time.monotonic()`` when a watch event
arrives), not from API timestamps, which have whole seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e.cluster.build import artifacts  # noqa: E402
from e2e.cluster.launcher import down, up  # noqa: E402
from e2e.cluster.topology import TestbedSpec, TestbedState, free_ports  # noqa: E402
from mcad.gateway.connection import Connection, connect  # noqa: E402
from mcad.gateway.refs import ResourceRef  # noqa: E402
from mcad.gateway.watch import Changed, Relisted, watch_objects  # noqa: E402

PODS = ResourceRef("v1", "Pod", "pods", namespaced=True)
JOBS = ResourceRef("batch/v1", "Job", "jobs", namespaced=True)
PODGROUPS = ResourceRef("scheduling.x-k8s.io/v1alpha1", "PodGroup", "podgroups", True)
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
SEED_SYSTEMS = ("kube-scheduler", "coscheduling", "mcad")
"""What the seeds' experiments compare: Jobs alone, Jobs + PodGroups, AppWrappers."""
SEED_NAMESPACE = "seed"


async def seen_objects(conn: Connection, ref: ResourceRef, *, namespace: str | None = None,
                       label_selector: str | None = None
                       ) -> AsyncIterator[list[dict[str, Any]]]:
    """Every batch of ``ref`` objects a watch brings (a relist's, or one changed), forever;
    the benchmarks only look at what they see, deletions included as last seen."""
    async for event in watch_objects(conn, ref, namespace=namespace,
                                     label_selector=label_selector):
        yield event.items if isinstance(event, Relisted) else \
            [event.obj] if isinstance(event, Changed) else []
DOC = REPO / "docs" / "benchmarks.md"


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@contextlib.contextmanager
def testbed(spec: TestbedSpec, what: str) -> Iterator[tuple[TestbedState, Path]]:
    """A fresh test bed for one system, torn down afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="mcad-bench-"))
    say(f"{what}: bringing up a fresh test bed ({spec.spokes} spoke(s) x {spec.nodes} nodes "
        f"x {spec.gpus_per_node} GPUs)")
    state = up(directory, spec, owner_for_life=True, log=say)
    try:
        yield state, directory
    finally:
        down(directory)
        say(f"{what}: test bed down")


def kubeconfig(state: TestbedState, name: str) -> Path:
    return Path(next(c.kubeconfig for c in state.clusters if c.name == name))


def kubectl(state: TestbedState, cluster: str, *args: str) -> str:
    proc = subprocess.run([str(artifacts().path("kubectl")), "--kubeconfig",
                           str(kubeconfig(state, cluster)), *args],
                          check=True, capture_output=True, text=True)
    return proc.stdout


def install_mcad(state: TestbedState, spokes: list[str]) -> None:
    """mcad's CRDs on the hub and the spokes registered (as `make demo` does)."""
    kubectl(state, "hub", "apply", "-k", str(REPO / "crds"))
    kubectl(state, "hub", "wait", "--for=condition=Established",
            "crd/appwrappers.workload.codeflare.dev")
    for spoke in spokes:
        subprocess.run([sys.executable, "-m", "mcad.cli", "cluster", "register", spoke,
                        "--kubeconfig", str(kubeconfig(state, spoke)), "--hub-kubeconfig",
                        str(kubeconfig(state, "hub"))], check=True, cwd=REPO,
                       capture_output=True)


@dataclass
class Mcad:
    proc: subprocess.Popen[bytes]
    port: int

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())


def start_mcad(state: TestbedState, log: Path, *, extra: tuple[str, ...] = ()) -> Mcad:
    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "mcad.cli", "run", "--kubeconfig",
                             str(kubeconfig(state, "hub")), "--metrics-address",
                             f"127.0.0.1:{port}", "--metrics-auth=false", "--log-level", "INFO",
                             *extra],
                            cwd=REPO, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    for _ in range(1200):
        if proc.poll() is not None:
            raise SystemExit(f"mcad run exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                if r.status == 200 and r.read() == b"ready":
                    return Mcad(proc, port)
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()  # (not left behind, retrying a test bed that goes down next)
    proc.wait()
    raise SystemExit(f"mcad run did not become ready in 120 s; see {log}")


def stop_mcad(mcad: Mcad) -> None:
    mcad.proc.terminate()
    try:
        mcad.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        mcad.proc.kill()


@dataclass
class PodLife:
    """When the benchmark saw each step of one pod (monotonic seconds)."""

    job: str
    gpus: int
    created: float
    bound: float | None = None
    running: float | None = None
    finished: float | None = None
    phase: str = "Pending"
    node: str | None = None
    """The node it was bound to."""


@dataclass
class PodRecorder:
    """Every pod of the watched namespace on one cluster, by uid."""

    job_of: Callable[[dict[str, Any]], str | None]
    pods: dict[str, PodLife] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    """Pod name by uid."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def follow(self, conn: Connection, namespace: str) -> None:
        async for event in watch_objects(conn, PODS, namespace=namespace):
            now = time.monotonic()
            if isinstance(event, Relisted):
                listed = {p["metadata"]["uid"] for p in event.items}
                for uid in self.pods.keys() - listed:
                    self._gone(uid, now)
                for pod in event.items:
                    self._see(pod, now)
            elif isinstance(event, Changed):
                self._see(event.obj, now)
                if event.type == "DELETED":
                    self._gone(event.obj["metadata"]["uid"], now)
            self.changed.set()

    def _gone(self, uid: str, now: float) -> None:
        """A pod deleted before it was seen to end (its Job failed or was deleted, a
        requeue): it holds nothing from now on. Without this, it would be counted as
        holding its CPUs for the rest of the run, and its replacement beside it."""
        life = self.pods.get(uid)
        if life is not None and life.running is not None and life.finished is None:
            life.finished = now

    def _see(self, pod: dict[str, Any], now: float) -> None:
        uid = pod["metadata"]["uid"]
        life = self.pods.get(uid)
        if life is None:
            job = self.job_of(pod)
            if job is None:
                return
            gpus = sum(int(c.get("resources", {}).get("requests", {}).get("nvidia.com/gpu", 0))
                       for c in pod["spec"].get("containers", []))
            life = self.pods[uid] = PodLife(job, gpus, now)
            self.names[uid] = pod["metadata"]["name"]
        if life.bound is None and pod["spec"].get("nodeName"):
            life.bound = now
            life.node = pod["spec"]["nodeName"]
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase == "Running" and life.running is None:
            life.running = now
        if phase in ("Succeeded", "Failed") and life.finished is None:
            life.finished = now
            if life.running is None:
                life.running = now
        life.phase = phase

    async def wait(self, done: Callable[[], bool], *, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(remaining, 5))


@contextlib.asynccontextmanager
async def connected(state: TestbedState, names: list[str]
                    ) -> AsyncIterator[dict[str, Connection]]:
    conns = {n: await connect(kubeconfig(state, n), name=n) for n in names}
    try:
        yield conns
    finally:
        for conn in conns.values():
            await conn.close()


def write_section(section: str, text: str) -> None:
    """Replace (or append) the ``## section`` of docs/benchmarks.md with ``text``."""
    doc = DOC.read_text()
    heading = f"## {section}"
    if heading in doc:
        start = doc.index(heading)
        rest = doc[start + len(heading):]
        end = rest.find("\n## ")
        doc = doc[:start] + text.rstrip("\n") + ("\n" + rest[end:] if end >= 0 else "\n")
    else:
        doc = doc.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    DOC.write_text(doc)
