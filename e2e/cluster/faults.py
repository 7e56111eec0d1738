"""Faults on a running test bed: pause, resume and restart one cluster's API server.

``pause`` freezes the kube-apiserver (SIGSTOP): its port stays open, so clients see
what a network partition looks like, hangs and time-outs, not refusals; ``resume``
thaws it (SIGCONT) and everything it held continues. ``restart`` kills the apiserver and
starts it again with the same command line, on the same etcd data (clients see reset
connections, then a fresh server; watches must relist or resume). Restart goes through
the supervisor, which owns every process of the test bed, so the new apiserver dies with
the test bed like the others.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from e2e.cluster.topology import pid_alive, read_state, requests_dir


class FaultError(Exception):
    """The fault could not be injected; the message says why."""


def _apiserver(directory: Path, cluster: str) -> tuple[str, int]:
    state = read_state(directory.resolve())
    if state is None or state.phase != "ready" or not pid_alive(state.supervisor_pid):
        raise FaultError(f"no test bed runs in {directory}")
    names = [c.name for c in state.clusters]
    if cluster not in names:
        raise FaultError(f"the test bed has no cluster {cluster!r}; it has {', '.join(names)}")
    component = f"{cluster}-apiserver"
    pid = state.pids.get(component, 0)
    if not pid_alive(pid):
        raise FaultError(f"{component} is not running")
    return component, pid


def pause(directory: Path, cluster: str) -> None:
    """Freeze ``cluster``'s API server (clients hang, as behind a partition)."""
    _, pid = _apiserver(directory, cluster)
    os.kill(pid, signal.SIGSTOP)


def resume(directory: Path, cluster: str) -> None:
    """Thaw a paused API server."""
    _, pid = _apiserver(directory, cluster)
    os.kill(pid, signal.SIGCONT)


def restart(directory: Path, cluster: str, *, timeout: float = 90.0) -> float:
    """Kill ``cluster``'s API server and start it again on the same etcd data; returns
    the seconds until it answered /readyz again."""
    component, _ = _apiserver(directory, cluster)
    request = requests_dir(directory.resolve()) / f"restart-{component}"
    started = time.monotonic()
    request.write_text("")
    while request.exists():
        if time.monotonic() - started > timeout:
            raise FaultError(f"{component} did not come back within {timeout:.0f}s")
        time.sleep(0.1)
    failed = request.with_name(f"failed-{component}")
    if failed.exists():
        raise FaultError(failed.read_text())
    return time.monotonic() - started
