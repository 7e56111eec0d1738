"""The supervisor: the one process that owns every component of a test bed.

It starts etcd, then every apiserver, installs the PodGroup CRD, starts the
controller-managers, schedulers and KWOK, creates the fake nodes and waits until
every apiserver answers ``/readyz`` and every node is Ready; then it records
``phase: ready`` in DIR/state.json and keeps watch. Every component is started
with PR_SET_PDEATHSIG, so if the supervisor dies, for whatever reason, the kernel
kills its components: nothing outlives it.

It stops (and stops everything) on SIGTERM/SIGINT, and when its owner process dies:
during start-up the owner is the ``up`` launcher (Ctrl-C or a crash of the launcher
leaves nothing behind); with ``--owner-for-life`` (pytest fixtures) it is watched
for as long as the test bed runs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

from e2e.cluster import components, nodes, stages
from e2e.cluster.build import Artifacts, artifacts
from e2e.cluster.pki import Credentials, kubeconfig, make_credentials
from e2e.cluster.topology import (
    ClusterState,
    TestbedSpec,
    TestbedState,
    free_ports,
    pid_alive,
    requests_dir,
    write_state,
)

PR_SET_PDEATHSIG = 1
STARTUP_TIMEOUT_S = 240.0


HOLD_BEFORE_READY_ENV = "MCAD_TESTBED_HOLD_BEFORE_READY_S"
"""Seconds the supervisor waits before it records ``ready`` (tests of Ctrl-C only)."""

class StartupError(Exception):
    """A component did not come up; the message says which and where its log is."""


def _die_with_parent() -> None:
    """Runs in each child before exec: SIGKILL it when the supervisor dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Supervisor:
    """Starts components, watches them, stops them in reverse order."""

    def __init__(self, directory: Path, spec: TestbedSpec, *, owner_pid: int,
                 owner_for_life: bool) -> None:
        self.dir = directory
        self.spec = spec
        self.owner_pid = owner_pid
        self.owner_for_life = owner_for_life
        self.logs = directory / "logs"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.argv: dict[str, list[str]] = {}
        self._files: list[IO[bytes]] = []
        self.stopping = threading.Event()
        self.art: Artifacts = artifacts()
        ports = free_ports(2 + len(spec.cluster_names()))
        self.state = TestbedState(
            spec=spec, etcd_port=ports[0], supervisor_pid=os.getpid(),
            clusters=[ClusterState(name=name, port=port, etcd_prefix=f"/{name}",
                                   kubeconfig=str(directory / f"{name}.kubeconfig"))
                      for name, port in zip(spec.cluster_names(), ports[2:], strict=True)],
        )
        self._etcd_peer_port = ports[1]
        self.creds: Credentials | None = None

    # -- process handling -------------------------------------------------------------
    def _start(self, name: str, argv: list[str]) -> None:
        self.argv[name] = argv
        log = (self.logs / f"{name}.log").open("ab")
        self._files.append(log)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                # Started from the main thread only, so preexec_fn is safe.
                                preexec_fn=_die_with_parent)  # noqa: PLW1509
        self.procs[name] = proc
        self.state.pids[name] = proc.pid
        self._save()

    def _save(self) -> None:
        write_state(self.dir, self.state)

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise StartupError(f"{name} exited with code {proc.returncode}; "
                                   f"see {self.logs / (name + '.log')}")
        if self.stopping.is_set():
            raise StartupError("stopped during start-up")
        if self.owner_pid and not pid_alive(self.owner_pid):
            raise StartupError(f"the launcher (pid {self.owner_pid}) went away during start-up")

    def _wait(self, what: str, ready: Callable[[], bool], deadline: float) -> None:
        while not ready():
            self._check_alive()
            if time.monotonic() > deadline:
                raise StartupError(f"timed out waiting for {what}; logs are in {self.logs}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop every component, newest first; SIGKILL what ignores SIGTERM for 10 s."""
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for f in self._files:
            f.close()

    # -- start-up -----------------------------------------------------------------------
    def kubectl(self, cluster: ClusterState, *args: str, stdin: str | None = None) -> str:
        proc = subprocess.run([str(self.art.path("kubectl")), "--kubeconfig", cluster.kubeconfig,
                               *args], input=stdin, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise StartupError(f"kubectl {' '.join(args[:3])} on {cluster.name} failed: "
                               f"{proc.stderr.strip()}")
        return proc.stdout

    def _readyz(self, cluster: ClusterState) -> bool:
        assert self.creds is not None
        ctx = ssl.create_default_context(cafile=str(self.creds.ca_cert))
        req = urllib.request.Request(f"https://127.0.0.1:{cluster.port}/readyz",
                                     headers={"Authorization": f"Bearer {self.creds.token}"})
        try:
            with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _etcd_healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.state.etcd_port}/health"
            with urllib.request.urlopen(url, timeout=2) as resp:
                return b'"true"' in resp.read()
        except (urllib.error.URLError, OSError):
            return False

    def start(self) -> None:
        started = time.monotonic()
        deadline = started + STARTUP_TIMEOUT_S
        self.logs.mkdir(parents=True, exist_ok=True)
        self.creds = creds = make_credentials(self.dir / "pki")
        (self.dir / "stages.yaml").write_text(stages.all_stages())
        self._save()
        self._start("etcd", components.etcd(self.art, data_dir=self.dir / "etcd",
                                             port=self.state.etcd_port,
                                             peer_port=self._etcd_peer_port))
        self._wait("etcd", self._etcd_healthy, deadline)
        for c in self.state.clusters:
            Path(c.kubeconfig).write_text(kubeconfig(name=c.name, port=c.port, creds=creds))
            self._start(f"{c.name}-apiserver", components.apiserver(
                self.art, port=c.port, etcd_port=self.state.etcd_port, prefix=c.etcd_prefix,
                creds=creds))
        for c in self.state.clusters:
            self._wait(f"{c.name} apiserver /readyz", lambda c=c: self._readyz(c), deadline)  # type: ignore[misc]
        # The CRD first, so the coscheduling plugin's informers find it at once.
        for c in self.state.clusters:
            self.kubectl(c, "apply", "-f", str(self.art.podgroup_crd))
        for c in self.state.clusters:
            self.kubectl(c, "wait", "--for=condition=Established", "--timeout=60s",
                         "crd/podgroups.scheduling.x-k8s.io")
            kc = Path(c.kubeconfig)
            sched_config = self.dir / f"{c.name}-scheduler.yaml"
            sched_config.write_text(components.SCHEDULER_CONFIG.format(
                kubeconfig=kc, permit_seconds=components.PERMIT_WAITING_SECONDS))
            self._start(f"{c.name}-controller-manager",
                        components.controller_manager(self.art, kubeconfig=kc, creds=creds))
            self._start(f"{c.name}-scheduler", components.scheduler(self.art, config=sched_config))
            if self.spec.nodes_of(c.name):
                self._start(f"{c.name}-kwok", components.kwok(
                    self.art, kubeconfig=kc, stages=self.dir / "stages.yaml"))
                self.kubectl(c, "create", "-f", "-", stdin=nodes.nodes_document(c.name, self.spec))
        for c in self.state.clusters:
            if self.spec.nodes_of(c.name):
                self._wait(f"{c.name} nodes Ready", lambda c=c: self._nodes_ready(c), deadline)  # type: ignore[misc]
        self.state.up_seconds = round(time.monotonic() - started, 2)
        # Tests of an interrupted ``up`` hold it here, so Ctrl-C surely lands before ready.
        self.stopping.wait(float(os.environ.get(HOLD_BEFORE_READY_ENV, "0") or 0))
        self._check_alive()  # stopped while held: never "ready"
        self.state.phase = "ready"
        self._save()

    def _nodes_ready(self, cluster: ClusterState) -> bool:
        out = self.kubectl(cluster, "get", "nodes", "-o",
                           "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Ready\")]"
                           ".status}{\"\\n\"}{end}")
        states = out.split()
        return len(states) == self.spec.nodes_of(cluster.name) and all(s == "True" for s in states)

    # -- life ---------------------------------------------------------------------------
    def watch(self) -> None:
        """Keep watch until told to stop or the owner (for life) goes away; carry out
        restart requests (``python -m e2e.cluster restart``) on the way."""
        reported: set[str] = set()
        while not self.stopping.wait(0.2):
            if self.owner_for_life and self.owner_pid and not pid_alive(self.owner_pid):
                print(f"owner pid {self.owner_pid} is gone: stopping", flush=True)
                return
            for request in sorted(requests_dir(self.dir).glob("restart-*")):
                self._restart(request)
                reported.discard(request.name.removeprefix("restart-"))
            for name, proc in self.procs.items():
                if proc.poll() is not None and name not in reported:
                    reported.add(name)
                    self.state.message = f"{name} exited with code {proc.returncode}"
                    self._save()
                    print(self.state.message, flush=True)

    def _restart(self, request: Path) -> None:
        """Kill a component (paused or not) and start it again with the same command line
        (an apiserver comes back on the same etcd data); the request file is removed once
        it answers again, which is what the requester waits for."""
        name = request.name.removeprefix("restart-")
        proc = self.procs.get(name)
        if proc is None:
            request.write_text(f"no component {name}")
            request.rename(request.with_name(f"failed-{name}"))
            return
        started = time.monotonic()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        self._start(name, self.argv[name])
        cluster = next((c for c in self.state.clusters if name == f"{c.name}-apiserver"), None)
        if cluster is not None:
            deadline = time.monotonic() + 60
            while not self._readyz(cluster) and time.monotonic() < deadline:
                time.sleep(0.1)
        print(f"restarted {name} in {time.monotonic() - started:.1f}s", flush=True)
        request.unlink()


def supervise(directory: Path, spec: TestbedSpec, *, owner_pid: int, owner_for_life: bool) -> int:
    sup = Supervisor(directory, spec, owner_pid=owner_pid, owner_for_life=owner_for_life)
    signal.signal(signal.SIGTERM, lambda *_: sup.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: sup.stopping.set())
    code = 0
    try:
        sup.start()
        print(f"test bed ready in {sup.state.up_seconds}s", flush=True)
        sup.watch()
    except StartupError as err:
        sup.state.phase, sup.state.message = "failed", str(err)
        print(f"start-up failed: {err}", file=sys.stderr, flush=True)
        code = 1
    except Exception as err:  # anything else still must stop the children
        sup.state.phase, sup.state.message = "failed", f"{type(err).__name__}: {err}"
        print(f"supervisor crashed: {sup.state.message}", file=sys.stderr, flush=True)
        code = 1
    finally:
        sup.stop()
        if sup.state.phase != "failed":
            sup.state.phase = "stopped"
        sup.state.pids = {}
        sup._save()
    return code
