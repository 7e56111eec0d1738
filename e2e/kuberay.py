"""The KubeRay operator on the test bed, and the Ray heads KWOK cannot give it.

The operator (github.com/ray-project/kuberay/ray-operator v1.5.0, pinned in
``e2e/kuberay/go.mod``) is built from its Go module by ``e2e.gotools`` (never vendored,
nothing committed) into the test bed's cache folder under its own key: about two
minutes the first time on a machine, reused after. It runs outside the cluster against
one spoke, with the RayCluster, RayJob and RayService CRDs that ship with the module
applied on that spoke only (``KubeRay.start``; the tests' fixture is
``e2e/dispatch/test_kuberay.py``).

KWOK's pods run no containers, so a RayCluster's head pod has no Ray dashboard, and
KubeRay's RayJob controller needs one: it submits the Ray job and reads its status over
plain HTTP at the head Service's cluster DNS name
(``http://<cluster>-head-svc.<namespace>.svc.cluster.local:8265``; no flag changes that
but ``--use-kubernetes-proxy``, which goes through the API server's Service proxy to a
pod IP that KWOK makes up). It does so with Go's default HTTP transport, which honours
``HTTP_PROXY``; so the operator is started with ``HTTP_PROXY`` naming ``RayHeads``, a
loopback server that stands in for the cluster network and the Ray heads behind it.
It answers the Ray Jobs REST API calls KubeRay makes (submit, get, stop, delete) for
the head each request names, and runs a submitted job for as long as its metadata says,
as KWOK's pods do: ``mcad.test/runtime`` (then SUCCEEDED) or ``mcad.test/fail-after``
(then FAILED); with neither it runs until stopped. The operator's own requests to the
API server are HTTPS to loopback, which Go never sends through a proxy. Whatever a
RayJob's status says, the operator wrote it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from e2e.cluster.stages import FAIL_AFTER, RUNTIME
from e2e.cluster.topology import free_ports
from e2e.clusters import Cluster, kubectl
from e2e.gotools import module_dir, tool

MODULE = "github.com/ray-project/kuberay/ray-operator"
CRDS = ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml")
CRD_NAMES = ("crd/rayclusters.ray.io", "crd/rayjobs.ray.io", "crd/rayservices.ray.io")
HEAD_SUFFIX = ".svc.cluster.local:8265"
"""Where KubeRay looks for a head's dashboard: its Service's name in the cluster's DNS
domain, on the dashboard port (the head container's port named ``dashboard``)."""


def operator_binary(log: Callable[[str], object] = print) -> Path:
    """The built operator (built now unless the cache has it; ``log`` gets its progress)."""
    return tool("kuberay", MODULE, "kuberay-operator", log=log)


def crd_files() -> list[Path]:
    bases = module_dir("kuberay", MODULE) / "config" / "crd" / "bases"
    return [bases / name for name in CRDS]


def _seconds(value: str) -> float:
    """A duration as KWOK's stages read ours: ``1.5s``, ``72s``, ``2m``."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    for unit in sorted(units, key=len, reverse=True):
        if value.endswith(unit):
            return float(value[:-len(unit)]) * units[unit]
    return float(value)


@dataclass
class RayJobRun:
    """One Ray job a head was given: when, and how it ends."""

    head: str
    submission_id: str
    entrypoint: str
    metadata: dict[str, str]
    started: float
    stopped: float | None = None

    def state(self, now: float) -> tuple[str, float | None, str]:
        """(Ray's status, when it ended, its message) at ``now``."""
        if self.stopped is not None:
            return "STOPPED", self.stopped, "Job was intentionally stopped."
        if FAIL_AFTER in self.metadata:
            end = self.started + _seconds(self.metadata[FAIL_AFTER])
            if now >= end:
                return "FAILED", end, "Job entrypoint command failed with exit code 1"
        elif RUNTIME in self.metadata:
            end = self.started + _seconds(self.metadata[RUNTIME])
            if now >= end:
                return "SUCCEEDED", end, "Job finished successfully."
        return "RUNNING", None, "Job is currently running."

    def info(self, now: float) -> dict[str, Any]:
        """The job as Ray's ``GET /api/jobs/<id>`` says it (times in milliseconds)."""
        status, ended, message = self.state(now)
        return {"type": "SUBMISSION", "job_id": self.submission_id,
                "submission_id": self.submission_id, "status": status, "message": message,
                "entrypoint": self.entrypoint, "metadata": self.metadata,
                "start_time": int(self.started * 1000),
                "end_time": int(ended * 1000) if ended else 0}


@dataclass
class RayHeads:
    """The Ray heads' Jobs API, served as an HTTP proxy on loopback (see the module's
    docstring). ``runs`` is every job submitted, by (head, submission id)."""

    runs: dict[tuple[str, str], RayJobRun] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    """Every request, as ``METHOD host path``: what the operator asked of which head."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> None:
        heads = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                heads.answer(self, "GET")

            def do_POST(self) -> None:
                heads.answer(self, "POST")

            def do_DELETE(self) -> None:
                heads.answer(self, "DELETE")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, name="ray-heads",
                         daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def answer(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(handler.path)  # a proxy is sent the whole URL
        head = url.netloc or handler.headers.get("Host", "")
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        with self.lock:
            self.requests.append(f"{method} {head} {url.path}")
            code, reply = self._jobs_api(head, method, url.path, body)
        data = json.dumps(reply).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _jobs_api(self, head: str, method: str, path: str,
                  body: bytes) -> tuple[int, Any]:
        if not head.endswith(HEAD_SUFFIX):
            return 502, {"error": f"no Ray head at {head}: only heads' dashboards are here"}
        parts = [p for p in path.split("/") if p]
        if parts[:2] != ["api", "jobs"]:
            return 404, {"error": f"{path} is not part of the Jobs API"}
        now = time.time()
        if method == "POST" and len(parts) == 2:
            request = json.loads(body or b"{}")
            submission = str(request.get("submission_id") or f"raysubmit_{len(self.runs)}")
            if (head, submission) in self.runs:
                return 500, {"error": f"Job with submission_id {submission} already "
                                      "exists. Please use a different submission_id."}
            self.runs[(head, submission)] = RayJobRun(
                head, submission, str(request.get("entrypoint", "")),
                dict(request.get("metadata") or {}), started=now)
            return 200, {"job_id": submission, "submission_id": submission}
        if len(parts) < 3:
            return 200, [run.info(now) for (h, _), run in self.runs.items() if h == head]
        run = self.runs.get((head, parts[2]))
        if run is None:
            return 404, {"error": f"Job {parts[2]} does not exist"}
        if method == "GET" and len(parts) == 3:
            return 200, run.info(now)
        if method == "POST" and parts[3:] == ["stop"]:
            running = run.state(now)[0] == "RUNNING"
            if running:
                run.stopped = now
            return 200, {"stopped": running}
        if method == "DELETE" and len(parts) == 3:
            del self.runs[(head, parts[2])]
            return 200, {"deleted": True}
        return 404, {"error": f"{method} {path} is not part of the Jobs API"}


@dataclass
class KubeRay:
    """The operator running against one spoke, its CRDs applied there, its heads here."""

    spoke: Cluster
    heads: RayHeads
    proc: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(cls, spoke: Cluster, kubectl_path: Path, work: Path,
              log: Callable[[str], object] = print) -> KubeRay:
        binary = operator_binary(log)
        for crd in crd_files():
            kubectl(kubectl_path, spoke, "apply", "--server-side", "-f", str(crd))
        kubectl(kubectl_path, spoke, "wait", "--for=condition=Established",
                "--timeout=60s", *CRD_NAMES)
        heads = RayHeads()
        heads.start()
        (health,) = free_ports(1)
        log_path = work / "kuberay-operator.log"
        env = {**os.environ, "HTTP_PROXY": heads.url, "http_proxy": heads.url,
               "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
        with log_path.open("wb") as out:
            proc = subprocess.Popen(
                [str(binary), "--kubeconfig", str(spoke.kubeconfig),
                 "--enable-leader-election=false", "--metrics-addr", "0",
                 "--health-probe-bind-address", f"127.0.0.1:{health}",
                 "--log-stdout-encoder", "console"],
                stdout=out, stderr=subprocess.STDOUT, env=env)
        return cls(spoke, heads, proc, log_path)

    def stop(self, kubectl_path: Path) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.heads.stop()
        kubectl(kubectl_path, self.spoke, "delete", "--wait=false", *CRD_NAMES)

    def log_tail(self, lines: int = 40) -> str:
        """The end of the operator's log, for a failing test's message."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
