"""``up``, ``down`` and ``status``: the launcher side of the test bed.

``up`` builds the binaries if needed, spawns the supervisor in its own session and
waits for it to report ready; any failure, Ctrl-C or time-out on the way stops the
supervisor, which stops everything it started. ``down`` asks the supervisor to stop,
then makes sure every recorded pid is gone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from e2e.cluster.build import BuildError, build
from e2e.cluster.nodes import TopologyError, topology_labels
from e2e.cluster.topology import TestbedSpec, TestbedState, pid_alive, read_state, write_state

UP_TIMEOUT_S = 300.0


class TestbedError(Exception):
    """The test bed could not be brought up or down; the message says why."""


def up(directory: Path, spec: TestbedSpec, *, owner_for_life: bool = False,
       log: Callable[[str], object] = print) -> TestbedState:
    """Bring a test bed up in ``directory`` and return its state once ready."""
    directory = directory.resolve()
    existing = read_state(directory)
    if existing and pid_alive(existing.supervisor_pid):
        raise TestbedError(f"a test bed already runs in {directory} "
                           f"(supervisor pid {existing.supervisor_pid}); run `down` first")
    try:
        topology_labels(1, spec.nodes, spec.topology)  # a bad --topology fails before starting
        build(log=log)
    except (BuildError, TopologyError) as err:
        raise TestbedError(str(err)) from err
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "logs").mkdir(exist_ok=True)
    (directory / "state.json").unlink(missing_ok=True)
    # A test bed starts empty: etcd data and fault requests of an earlier one go.
    shutil.rmtree(directory / "etcd", ignore_errors=True)
    shutil.rmtree(directory / "requests", ignore_errors=True)
    argv = [sys.executable, "-m", "e2e.cluster", "_supervise", "--dir", str(directory),
            "--owner-pid", str(os.getpid()), *_spec_args(spec)]
    if owner_for_life:
        argv.append("--owner-for-life")
    root = Path(__file__).resolve().parents[2]
    with (directory / "logs" / "supervisor.log").open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=root)
    try:
        return _wait_ready(directory, proc)
    except BaseException:
        _stop_supervisor(proc.pid)
        raise


def _wait_ready(directory: Path, proc: subprocess.Popen[bytes]) -> TestbedState:
    deadline = time.monotonic() + UP_TIMEOUT_S
    while time.monotonic() < deadline:
        state = read_state(directory)
        if state and state.phase == "ready":
            return state
        if state and state.phase == "failed":
            raise TestbedError(f"the test bed failed to start: {state.message}")
        if proc.poll() is not None:
            tail = (directory / "logs" / "supervisor.log").read_text(errors="replace")[-2000:]
            raise TestbedError(f"the supervisor exited with code {proc.returncode}:\n{tail}")
        time.sleep(0.2)
    raise TestbedError(f"the test bed was not ready after {UP_TIMEOUT_S:.0f}s; "
                       f"logs are in {directory / 'logs'}")


def _stop_supervisor(pid: int, timeout: float = 30.0) -> None:
    if not pid_alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


def _ours(pid: int, directory: Path) -> bool:
    """True when ``pid`` still runs a component of this test bed (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return "mcad-testbed" in cmdline or str(directory) in cmdline


def down(directory: Path) -> list[str]:
    """Stop the test bed in ``directory``; returns what was still running and got killed."""
    directory = directory.resolve()
    state = read_state(directory)
    if state is None:
        return []
    _stop_supervisor(state.supervisor_pid)
    killed = []
    for name, pid in state.pids.items():
        if pid_alive(pid) and _ours(pid, directory):
            os.kill(pid, signal.SIGKILL)
            killed.append(name)
    for pid in state.pids.values():
        deadline = time.monotonic() + 5
        while pid_alive(pid) and _ours(pid, directory) and time.monotonic() < deadline:
            time.sleep(0.05)
    state.phase, state.pids = "stopped", {}
    write_state(directory, state)
    return killed


def status(directory: Path) -> str:
    state = read_state(directory.resolve())
    if state is None:
        return f"no test bed in {directory}"
    lines = [f"test bed in {directory}: {state.phase}"
             + (f" ({state.message})" if state.message else ""),
             f"  supervisor pid {state.supervisor_pid}: "
             f"{'running' if pid_alive(state.supervisor_pid) else 'not running'}"]
    for c in state.clusters:
        lines.append(f"  {c.name}: https://127.0.0.1:{c.port}  kubeconfig {c.kubeconfig}")
    for name, pid in sorted(state.pids.items()):
        lines.append(f"    {name:32} pid {pid:<8} {'running' if pid_alive(pid) else 'gone'}")
    return "\n".join(lines)


def _spec_args(spec: TestbedSpec) -> list[str]:
    args = []
    for key, value in asdict(spec).items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                args.append(flag)
        else:
            args += [flag, str(value)]
    return args
