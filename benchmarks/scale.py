"""mcad at scale on the test bed: 3 spokes x 1,000 KWOK nodes, 10,000 AppWrappers.

    .venv/bin/python benchmarks/scale.py [--nodes 1000] [--appwrappers 10000]
        [--ceiling 2000] [--json FILE] [--no-write]
    .venv/bin/python benchmarks/scale.py --smoke     # make test: 3 x 100 nodes, 1,000

1. The ceiling, from the same run: a plain asyncio client doing the API writes mcad
   needs per AppWrapper (finalizer patch and status patch on the hub AppWrapper, the Job
   create on a spoke), 64 at a time, as fast as these API servers accept them, in a
   burst just before mcad's drain (``ceiling_per_s``: the ceiling issue 34 holds mcad
   to), and again just after it; the mean of the two is kept as a second figure
   (``ceiling_bracket_per_s``: it spans the state the drain builds and the machine's
   drift over the drain's time). Unless ``--smoke``, a second burst right after the
   first, the reporting ceiling (``reporting_ceiling_per_s``, and mcad's
   ``share_of_reporting_ceiling``): the same client adds the fourth write every
   dispatcher that reports its pods makes (the PodsReady status) and watches what it
   wrote (the namespace's AppWrappers on the hub, its pods on each spoke). A second
   measure, published beside the issue's; the target is held against the first.
2. mcad's memory with nothing queued (3,000 nodes listed), then with the backlog listed:
   the slope per 1,000 AppWrappers; and, while mcad idles with nothing queued, the hub
   API server's CPU (``hub_idle_cores``). This is read first, on the empty hub: mcad
   serves its webhooks as the manifests install it, and this first start has it issue
   its certificate and point the CRD's conversion webhook at its address. Whenever
   mcad is stopped after that (the ceilings, the backlog's creation) the process mcad
   runs for its conversion (``--conversion-address``) answers there alone, with mcad's
   certificate, so the hub is measured as installed: unanswered, its v1beta2 watch
   cache lists every AppWrapper again each second.
3. ``--appwrappers`` small AppWrappers (1 pod x 1 GPU) are queued while mcad is
   stopped; mcad is started and the clock runs from its /readyz until the last wrapped
   Job's creation on a spoke (its creationTimestamp, listed once mcad's own counter says
   all are dispatched): sustained dispatches per second, over time.
4. While the backlog drains, a probe AppWrapper of priority 100 every 3 s: how long from
   its creation to its Job seen on a spoke (a watch of the probes' Jobs only).
5. The dispatch cycle's duration and the Lease renewals' delays (mcad's histograms),
   the hub's calls to the conversion webhook and their duration (its histogram),
   terms lost (``mcad_leadership_lost_total``), and the controller's RSS and CPU (from
   /proc), sampled every second.
6. The work left behind: mcad keeps running for 30 s after the last dispatch (the last
   Job seen created by a watch of the spokes' Jobs started when ``LATE_WATCH_SHARE`` are
   left;
   from its creation stamp if that watch missed it, and as a second figure,
   ``after_drain_hub_cpu_ratio_stamped``), and the
   hub API server's CPU in those 30 s over its idle level (``after_drain_hub_cpu_ratio``;
   1.0 is as idle as before the backlog), the seconds until it stays within 1.5x of
   that level (``after_drain_hub_busy_s``), and its level in the last 10 s of the window
   (``after_drain_hub_settled_cores``: the hub idle with the backlog's objects in it).
   What the hub commits after the last dispatch is counted by a watch of the
   namespace's AppWrappers started with the late Job watch (``after_drain_hub_writes``:
   the writes, those making PodsReady true, and when the last of each came).

``--hub-tail-profile FILE`` serves the test bed's /debug/pprof and writes a CPU profile
of the hub API server for 6 s from when mcad's counter says every AppWrapper is
dispatched (Go's pprof).

Writes docs/benchmarks.md "Scale" and docs/img/scale.png unless --no-write; --json
writes the figures (``ceiling_per_s``, ``ceiling_bracket_per_s``, ``mcad_per_s``,
``share_of_ceiling``, ``dispatched``, ``lease_losses``, ``probe_wait_p50_s``,
``rss_max_mb``, ``after_drain_hub_cpu_ratio`` and more). ``--smoke`` exits 1 when mcad's
rate is below half of the bracket (a regression gate, not the target, unchanged: since
the ceiling's aftermath is waited out, seven smoke-size runs on this 2-core machine
gave 67-104% of the same run's bracket, and the two of 2026-11-27 59%). Run it under
the test bed lock when other work may start a test bed (it brings up its own).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import contextlib
import itertools
import json
import math
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bedtools import (
    JOBS,
    PODS,
    REPO,
    Mcad,
    connected,
    install_mcad,
    kubeconfig,
    kubectl,
    say,
    seen_objects,
    start_mcad,
    stop_mcad,
    testbed,
    write_section,
)
from prerequisites import MATPLOTLIB, PY_SPY, TESTBED, check, py_spy

from e2e.cluster.build import artifacts
from e2e.cluster.components import PROFILING_ENV
from e2e.cluster.topology import TestbedSpec, free_ports
from e2e.waiting import wait_until
from mcad.api.visibility import API_SERVICE
from mcad.controller.clock import parse_time, rfc3339, utcnow
from mcad.core.life.wrapping import UID_LABEL
from mcad.gateway import refs, verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import NotFound
from mcad.gateway.refs import ResourceRef
from mcad.gateway.watch import watch_objects

SPOKES = ("spoke-1", "spoke-2", "spoke-3")
CONCURRENCY = 64


PROBE_LABEL = "scale.mcad.dev/probe"
"""On the probes' Jobs only: the one watch the benchmark keeps open follows these."""


def small_aw(name: str, priority: int = 0, *, probe: bool = False) -> dict[str, Any]:
    labels = {PROBE_LABEL: "true"} if probe else {}
    return {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": name, **({"labels": labels} if labels else {})},
            "spec": {"priority": priority, "resources": {"GenericItems": [{"generictemplate": {
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, **({"labels": labels} if labels else {})},
                "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "busybox",
                        "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "100m"},
                                      "limits": {"nvidia.com/gpu": "1"}}}]}}}}}]}}}


async def bounded(items: list[Any], work: Any, limit: int = CONCURRENCY) -> None:
    sem = asyncio.Semaphore(limit)

    async def one(item: Any) -> None:
        async with sem:
            await work(item)

    await asyncio.gather(*(one(i) for i in items))


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
COMPONENTS = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller", "kwok")
"""Test bed processes by name (/proc truncates kube-controller-manager's)."""


STANDINS: set[int] = set()
"""The pids of the conversion stand-ins running now (``standin``)."""

HUB_APISERVER = "hub-apiserver"
"""The test bed's name for the hub's API server (its pid is in the state's ``pids``)."""
HUB_PIDS: set[int] = set()
"""The hub API server's pid, once the test bed is up: its CPU is told apart from the
spokes' (the hub pays for the AppWrappers' writes and conversions, the spokes for the
Jobs and their pods)."""


def cpu_seconds(mcad_pid: int | None = None) -> dict[str, float]:
    """CPU seconds used so far by the machine's processes, by component: the test bed's
    (all four API servers together, and so on), mcad's, this benchmark's own (the
    ceiling's client; its probes and their watch), the conversion stand-in's (which
    answers the CRD's conversion webhook while mcad is stopped), and the rest."""
    out: dict[str, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        pid = int(entry)
        component = ("mcad" if pid == mcad_pid
                     else "mcad's conversion process" if mcad_pid and fields[1] == str(mcad_pid)
                     else "benchmark" if pid == os.getpid()
                     else "conversion stand-in" if pid in STANDINS
                     else "kube-apiserver (hub)" if pid in HUB_PIDS
                     else "kube-apiserver (spokes)" if name == "kube-apiserver" and HUB_PIDS
                     else name if name in COMPONENTS else "other")
        out[component] = out.get(component, 0.0) + \
            (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return out


def cpu_per_appwrapper(before: dict[str, float], after: dict[str, float],
                       count: int) -> dict[str, float]:
    """Milliseconds of CPU per AppWrapper, by component, between two readings."""
    return {k: 1000 * (after.get(k, 0.0) - before.get(k, 0.0)) / count
            for k in sorted(after.keys() | before.keys())}


# -- 1. the ceiling ------------------------------------------------------------------------

async def ceiling(hub: Connection, spokes: list[Connection], count: int, *,
                  ns: str = "ceiling", clean: bool = True, reporting: bool = False
                  ) -> tuple[float, dict[str, float]]:
    """AppWrappers per second a plain client gets through mcad's three writes each, and
    the machine's CPU per AppWrapper meanwhile (``cpu_per_appwrapper``); then, if
    ``clean``, its objects removed and their aftermath waited out (``quiet``).

    ``reporting``: the client does what any dispatcher that reads its writes back and
    reports its pods must do as well (``REPORTING``), a second figure beside the issue's
    ceiling, not the one its target is held against."""
    await verbs.create(hub, refs.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": ns}})
    for spoke in spokes:
        await verbs.create(spoke, refs.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": ns}})
    names = [f"c-{i:05d}" for i in range(count)]
    await bounded(names, lambda n: verbs.create(hub, refs.APPWRAPPERS, small_aw(n),
                                                namespace=ns))
    say(f"{'reporting ' if reporting else ''}ceiling: {count} AppWrappers made; timing the "
        f"{'four writes and the reads' if reporting else 'three writes'} of each")

    async def dispatch_like(index_name: tuple[int, str]) -> None:
        index, name = index_name
        await verbs.merge_patch(hub, refs.APPWRAPPERS, name, {"metadata": {
            "finalizers": ["workload.codeflare.dev/finalizer"]}}, namespace=ns)
        await verbs.merge_patch(hub, refs.APPWRAPPERS, name, {"status": {
            "state": "Running", "clusterName": SPOKES[index % len(spokes)]}},
            namespace=ns, subresource="status")
        job = small_aw(name)["spec"]["resources"]["GenericItems"][0]["generictemplate"]
        await verbs.create(spokes[index % len(spokes)], JOBS, job, namespace=ns)
        if reporting:
            await verbs.merge_patch(hub, refs.APPWRAPPERS, name, {"status": {
                "running": 1, "pending": 0, "conditions": [{
                    "type": "PodsReady", "status": "True", "reason": "PodsReady",
                    "message": "1 of 1 pods ready",
                    "lastTransitionTime": rfc3339(utcnow())}]}},
                namespace=ns, subresource="status")

    reads = [(hub, refs.APPWRAPPERS), *((s, PODS) for s in spokes)] if reporting else []
    listed = [asyncio.Event() for _ in reads]
    watchers = [asyncio.create_task(read_back(conn, ref, ns, done))
                for (conn, ref), done in zip(reads, listed, strict=True)]
    # Bounded: a watch that failed outright would otherwise hold the run here, silent.
    await asyncio.wait_for(asyncio.gather(*(done.wait() for done in listed)), LISTED_WITHIN_S)
    started, cpu_before = time.monotonic(), cpu_seconds()
    await bounded(list(enumerate(names)), dispatch_like)
    rate = count / (time.monotonic() - started)
    cpu = cpu_per_appwrapper(cpu_before, cpu_seconds(), count)
    for task in watchers:
        task.cancel()
    await asyncio.gather(*watchers, return_exceptions=True)
    say(f"{'reporting ' if reporting else ''}ceiling: {rate:.0f} AppWrappers/s")
    if not clean:
        return rate, cpu
    async def remove(name: str) -> None:  # out of mcad's way: no finalizer, no Job
        await verbs.merge_patch(hub, refs.APPWRAPPERS, name, {"metadata": {"finalizers": []}},
                                namespace=ns)
        # Deleted here, as stored (v1beta1): the namespace controller would list them as
        # v1beta2, its preferred version, through mcad's conversion webhook, and no mcad
        # runs yet to answer it, so the namespace would never go.
        await verbs.delete(hub, refs.APPWRAPPERS, name, namespace=ns)

    await bounded(names, remove)
    for conn in (hub, *spokes):
        await verbs.delete(conn, refs.NAMESPACES, ns)
    await quiet(ns, [hub, *spokes])
    return rate, cpu


REPORTING = ("mcad's 3 writes and a fourth, the PodsReady status, per AppWrapper, with the "
             "namespace's AppWrappers watched on the hub and its pods on each spoke, every "
             "event decoded")
"""What the reporting ceiling adds to the issue's: the least a dispatcher that reads its
own writes back (to decide from what the hub holds) and reports its pods' readiness in
the AppWrapper's status (as v1beta2 users rely on) costs the API servers per AppWrapper.
It still leaves out what is mcad's own choice: Events, fenced writes, and waiting for
the pods before the fourth write. The hub's v1beta2 watch converts each write in both
(answered by the stand-in here, by mcad in the drain)."""


LISTED_WITHIN_S = 60.0
"""How long the reporting ceiling waits for its watches' first lists."""


async def read_back(conn: Connection, ref: ResourceRef, ns: str,
                    listed: asyncio.Event) -> None:
    """Watch ``ref`` in ``ns`` and decode every event, until cancelled (the reporting
    ceiling's reads); ``listed`` is set once the first list is in, as mcad's informers
    have listed before it is ready."""
    async for _event in watch_objects(conn, ref, namespace=ns, shared=False):
        listed.set()


async def quiet(ns: str, conns: list[Connection], timeout: float = 600) -> None:
    """Wait until namespace ``ns`` is gone from every cluster: its Jobs' pods made, bound,
    run and deleted. Without this wait the ceiling's aftermath ran beside mcad's drain:
    in a 1,000 smoke, 0.8 pod DELETEs and 0.6 pod PATCHes per AppWrapper on each spoke
    were the ceiling's, with the machine 98% busy, and mcad's rate fell from 44/s (no
    ceiling before it) to 29/s."""
    started = time.monotonic()
    told = started
    left = list(conns)

    async def gone() -> bool:
        nonlocal told
        still = []
        for conn in left:
            try:
                await verbs.get(conn, refs.NAMESPACES, ns)
                still.append(conn)
            except NotFound:
                pass
        left[:] = still
        if left and time.monotonic() - told >= 5:
            told = time.monotonic()
            say(f"ceiling: waiting for namespace {ns} to go from "
                f"{', '.join(c.name for c in left)} ({told - started:.0f}s)")
        return not left

    await wait_until(gone, within=timeout, what=f"namespace {ns} to be deleted", interval=1)
    say(f"ceiling: cleaned up in {time.monotonic() - started:.0f}s")


def bracket(before: float, after: float) -> float:
    """The bracket, a second figure beside the ceiling (the burst before the drain,
    which the target is held against): the mean of that burst (empty clusters) and one
    just after the drain (its 10,000 Jobs, pods and AppWrappers in place), so that it
    spans the drain's state and its time. A burst before alone measured 41 s against a
    drain of 230-390 s on a machine whose speed drifts by a third over minutes (the
    whole machine's CPU per ceiling AppWrapper went from 31 to 48 ms between runs), and
    on clusters emptier than any the drain works on: the bracket says how much of a gap
    is the state and the drift."""
    return (before + after) / 2


# -- 2-4. mcad -------------------------------------------------------------------------------

@dataclass
class Seen:
    """When each probe's Job was first seen on a spoke (monotonic seconds)."""

    jobs: dict[str, float] = field(default_factory=dict)
    steps: dict[str, dict[str, float]] = field(default_factory=dict)
    """On the hub, by probe: when its creation, its finalizer and its dispatch (status
    Running) were first seen, to tell where a probe's wait goes."""

    async def follow(self, conn: Connection) -> None:
        async for items in seen_objects(conn, JOBS, label_selector=PROBE_LABEL):
            now = time.monotonic()
            for job in items:
                self.jobs.setdefault(job["metadata"]["name"], now)

    async def follow_hub(self, hub: Connection) -> None:
        async for items in seen_objects(hub, refs.APPWRAPPERS, label_selector=PROBE_LABEL):
            now = time.monotonic()
            for aw in items:
                steps = self.steps.setdefault(aw["metadata"]["name"], {})
                steps.setdefault("created", now)
                if aw["metadata"].get("finalizers"):
                    steps.setdefault("finalizer", now)
                if (aw.get("status") or {}).get("state") == "Running":
                    steps.setdefault("dispatched", now)


def probe_steps(probes: dict[str, float], seen: Seen) -> dict[str, float]:
    """The median seconds from a probe's creation to each step the benchmark saw: its
    create call's return, then its creation, its finalizer and its dispatch on the hub's
    watch, its Job on a spoke's."""
    out: dict[str, float] = {}
    for step in ("returned", "created", "finalizer", "dispatched", "job"):
        waits = [(seen.jobs.get(name) if step == "job"
                  else seen.steps.get(name, {}).get(step)) for name in probes]
        got = [w - probes[name] for name, w in zip(probes, waits, strict=True)
               if w is not None]
        if got:
            out[step] = statistics.median(got)
    return out


async def created_jobs(spokes: list[Connection], ns: str) -> dict[str, float]:
    """Every wrapped Job in ``ns`` on the spokes, by name: its creationTimestamp (epoch
    seconds) plus half a second, the middle of the second the API server stamps.

    The backlog's Jobs are timed afterwards from what the API servers recorded, not by a
    watch while mcad drains: a watch of every Job cost the spokes three JSON events per
    AppWrapper, and this process their decoding, inside mcad's window only (the
    ceiling's client needs no watch), which is load of the instrument, not of the
    dispatcher. A second's resolution is under 0.5% of a 10,000 drain."""
    out: dict[str, float] = {}
    for conn in spokes:
        items, _ = await verbs.list_all(conn, JOBS, namespace=ns, label_selector=UID_LABEL)
        for job in items:
            stamp = datetime.fromisoformat(job["metadata"]["creationTimestamp"])
            out[job["metadata"]["name"]] = stamp.timestamp() + 0.5
    return out


async def events_from_now(conn: Connection, path: str) -> AsyncIterator[dict[str, Any]]:
    """The watch events at ``path`` from now on, none of what is there already: its
    resourceVersion is read with a list of one item, so a late watch carries the few
    hundred events of the drain's end, not the backlog's."""
    listed = await conn.request("GET", path, params={"limit": "1"})
    params = {"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"],
              "timeoutSeconds": "3600"}
    async for line in conn.stream_lines(path, params=params, read_timeout=3630,
                                        shared=False):
        yield line


async def last_jobs_seen(conn: Connection, ns: str, seen: dict[str, float]) -> None:
    """Each Job created in ``ns`` on ``conn`` from now on, by name: when this watch saw
    it (monotonic seconds). Started near the drain's end only (``LATE_WATCH_SHARE``), so the
    last dispatch is timed to the watch's delay, not to the second of its stamp; its
    events are a few hundred, not the backlog's."""
    async for line in events_from_now(conn, JOBS.path(namespace=ns)):
        if line.get("type") == "ADDED":
            seen.setdefault(line["object"]["metadata"]["name"], time.monotonic())


@dataclass
class TailWrites:
    """The AppWrapper writes the hub committed near the drain's end, seen by a watch of
    the namespace's AppWrappers started with the late Job watch (``LATE_WATCH_SHARE``):
    when each write was seen (monotonic seconds), and when the write that made each
    AppWrapper's PodsReady true was seen. What the hub does in the first second after
    the last dispatch is its one unnamed part of the after-drain window; the writes that
    must follow the last dispatches (their pods come up after them) are counted here."""

    since: float = 0.0
    """When the watch started (epoch seconds). A PodsReady that turned true before it
    (its lastTransitionTime, a second's resolution, says so) was made by a write this
    watch did not see: a later write of that AppWrapper is not the one that made it."""
    writes: list[float] = field(default_factory=list)
    ready: dict[str, float] = field(default_factory=dict)

    def see(self, aw: dict[str, Any], now: float) -> None:
        self.writes.append(now)
        for cond in (aw.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodsReady" and cond.get("status") == "True":
                turned = parse_time(cond.get("lastTransitionTime"))
                if turned is not None and turned.timestamp() >= math.floor(self.since):
                    self.ready.setdefault(aw["metadata"]["name"], now)

    def after(self, moment: float) -> dict[str, float]:
        """The writes and PodsReady seen after ``moment``, and when the last of each
        came (seconds after it; 0 when none)."""
        writes = [t - moment for t in self.writes if t > moment]
        ready = [t - moment for t in self.ready.values() if t > moment]
        return {"writes": len(writes), "ready": len(ready),
                "last_write_s": max(writes, default=0.0),
                "last_ready_s": max(ready, default=0.0)}


async def last_writes_seen(hub: Connection, ns: str, seen: TailWrites) -> None:
    """Each AppWrapper write in ``ns`` from now on (``TailWrites``); like
    ``last_jobs_seen``, a few hundred events near the drain's end."""
    seen.since = time.time()
    async for line in events_from_now(hub, refs.APPWRAPPERS.path(namespace=ns)):
        if line.get("type") == "MODIFIED":
            seen.see(line["object"], time.monotonic())


async def created_if_all(spokes: list[Connection], ns: str,
                         wanted: set[str]) -> dict[str, float] | None:
    """``created_jobs`` once every wanted Job is there (mcad counts a dispatch when the
    hub records it, a moment before it creates the Job). Each call lists every Job, so
    it is asked once a second, not at ``wait_until``'s default pace."""
    created = await created_jobs(spokes, ns)
    return created if wanted <= created.keys() else None



@dataclass
class Samples:
    """The controller's process, once a second: (seconds since ready, value)."""

    rss_mb: list[tuple[float, float]] = field(default_factory=list)
    cpu: list[tuple[float, float]] = field(default_factory=list)
    """CPU seconds per second (1.0 = one core busy)."""
    children_rss_mb: list[tuple[float, float]] = field(default_factory=list)
    """The RSS of the controller's child processes together (its conversion webhook's)."""


def children_of(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (none when /proc cannot say)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def read_proc(pid: int) -> tuple[str, list[str]]:
    status = Path(f"/proc/{pid}/status").read_text()
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return status, stat


def loop_schedstat(pid: int) -> tuple[float, float]:
    """Seconds the process's main thread (mcad's event loop) has run on a CPU, and has
    waited on a run queue for one while runnable (the kernel's schedstat). Why: the
    probe's steps after its decision (a worker's turn, the status write, the Job's
    create) are each a pass of that loop, and on this 2-core machine a pass that is
    ready may still wait for a CPU the API servers hold. NaN where the kernel keeps no
    schedstat (the table then says nan, not a 0% that was never read)."""
    try:
        run, wait, _ = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()
    except (OSError, ValueError):
        return float("nan"), float("nan")
    return int(run) / 1e9, int(wait) / 1e9


def rss_of(pid: int) -> float:
    status, _ = read_proc(pid)
    return next(int(line.split()[1]) for line in status.splitlines()
                if line.startswith("VmRSS:")) / 1024


async def sample_process(pid: int, out: Samples, origin: float) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    last: tuple[float, float] | None = None
    while True:
        try:
            _, stat = read_proc(pid)  # /proc reads do not block
            rss = rss_of(pid)
        except OSError:
            return
        now = time.monotonic()
        out.rss_mb.append((now - origin, rss))
        children = 0.0
        for child in children_of(pid):
            with contextlib.suppress(OSError, StopIteration):
                children += rss_of(child)
        out.children_rss_mb.append((now - origin, children))
        cpu_s = (int(stat[11]) + int(stat[12])) / ticks
        if last is not None:
            out.cpu.append((now - origin, (cpu_s - last[1]) / (now - last[0])))
        last = (now, cpu_s)
        await asyncio.sleep(1)


def buckets_of(metrics_text: str, name: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of histogram ``name`` on a /metrics page."""
    out: list[tuple[float, float]] = []
    for line in metrics_text.splitlines():
        if line.startswith(f"{name}_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out.append((float("inf") if le == "+Inf" else float(le),
                        float(line.rsplit(" ", 1)[1])))
    return out


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """A quantile of a histogram, interpolated in its buckets."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        return float("nan")
    want = q * total
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= want:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (want - below) / max(count - below, 1e-9)
        lower, below = upper, count
    return lower


def highest_bucket(buckets: list[tuple[float, float]]) -> float:
    """The upper bound of the highest bucket with any observation in it."""
    top, below = 0.0, 0.0
    for upper, count in buckets:
        if count > below:
            top = upper
        below = count
    return top


def sample_value(metrics_text: str, name: str, absent: float = 0.0) -> float:
    """Sample ``name`` on a /metrics page, summed over its label sets (``absent`` when
    the page has none)."""
    values = [float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines()
              if line.startswith((name + " ", name + "{"))]
    return sum(values) if values else absent


@dataclass(frozen=True)
class GcReading:
    """The hub API server's Go collector, from one /metrics page: cycles so far, when the
    last one ended (epoch seconds) and the heap in use (bytes); NaN where absent."""

    cycles: float
    last_end: float
    heap: float

    @classmethod
    def of(cls, text: str) -> GcReading:
        nan = float("nan")
        return cls(sample_value(text, "go_gc_duration_seconds_count", nan),
                   sample_value(text, "go_memstats_last_gc_time_seconds", nan),
                   sample_value(text, "go_memstats_heap_inuse_bytes", nan))


def gc_after(start: GcReading, end: GcReading, since: float) -> tuple[float, float]:
    """Collector cycles that ended after epoch second ``since`` as far as two readings
    taken after it tell (the cycles between them, and one more if the last that ``start``
    saw ended after ``since``), and seconds from ``since`` to the end of the last one
    ``end`` saw (negative: none ended after it)."""
    cycles = end.cycles - start.cycles + (1 if start.last_end >= since else 0)
    return cycles, end.last_end - since


PROBE_EVERY_S = 3.0


IDLE_S = 30.0
"""How long the hub API server's idle CPU is read, mcad running with nothing queued (it
idles at about 0.01 of a core: 30 s is 30 of /proc's 10 ms ticks)."""
AFTER_DRAIN_S = 30.0
"""The window after the last dispatch whose hub CPU is held to the idle level."""
TAIL_PROFILE: list[Path] = []
"""``--hub-tail-profile``: where to write a CPU profile of the hub API server taken over
the seconds after the drain (Go's pprof format)."""
TAIL_PROFILE_AHEAD = 0
"""The tail profile starts when mcad's counter (read once a second) has this many
dispatches left: with none left, within a second of the last dispatch's record, so it
holds the seconds after the drain and little of the drain itself."""
TAIL_PROFILE_S = 6


def hub_profile(state: Any, out: Path, seconds: int) -> None:
    """A CPU profile of the hub API server for ``seconds`` (the test bed must serve
    /debug/pprof: ``PROFILING_ENV``)."""
    with out.open("wb") as sink:
        subprocess.run([str(artifacts().path("kubectl")), "--kubeconfig",
                        str(kubeconfig(state, "hub")), "get", "--raw",
                        f"/debug/pprof/profile?seconds={seconds}"], stdout=sink, check=True)


STAMP_NOTE = "a second's resolution, taken as the middle of its second"
LATE_WATCH_SHARE = 1 / 50
"""The spokes' Jobs are watched from when this share of the dispatches is left (mcad's
counter; at least 20): the last dispatch is the last Job that watch saw created. Its
events are load of the instrument inside mcad's window, so it is kept to the last 2%
(200 of 10,000; the smoke's 20 of 1,000), not a fixed 300, which was 30% of the smoke's
drain."""
STORED_IDLE_FROM_S = 60.0
"""When (seconds after the last dispatch) the second idle level is read, for ``IDLE_S``:
the hub with the backlog's objects stored and mcad running, once nothing is left to do
(``hub_stored_idle_cores``). Not read by ``--smoke``."""


def cpu_of(pid: int) -> float:
    """CPU seconds process ``pid`` has used so far."""
    _, stat = read_proc(pid)
    return (int(stat[11]) + int(stat[12])) / CLOCK_TICKS


HUB_REQUESTS = ("apiserver_request_total",
                "apiserver_crd_conversion_webhook_duration_seconds_count",
                "apiserver_admission_webhook_admission_duration_seconds_count")
"""The hub API server's own counters read around the window after the drain: what it was
asked, by verb and resource, and how often it called a conversion or admission webhook."""


def hub_metrics(state: Any) -> str:
    """The hub API server's /metrics page."""
    return kubectl(state, "hub", "get", "--raw", "/metrics")


CONVERSIONS = "apiserver_crd_conversion_webhook_duration_seconds"
"""The hub API server's histogram of its calls to the CRD's conversion webhook (each
AppWrapper written is converted once for its v1beta2 watch cache)."""


def conversions_between(before: str, after: str) -> list[tuple[float, float]]:
    """The successful conversion calls between two readings of ``hub_metrics``, as
    (upper bound, cumulative count): how long the hub waited on the webhook."""
    def succeeded(text: str) -> list[tuple[float, float]]:
        return buckets_of("\n".join(line for line in text.splitlines()
                                     if 'succeeded="true"' in line), CONVERSIONS)
    old = dict(succeeded(before))
    return [(upper, count - old.get(upper, 0.0)) for upper, count in succeeded(after)]


async def converted_all(state: Any, steady_s: float = 1.0) -> None:
    """Wait until the hub's v1beta2 watch cache has converted what was written: its
    count of conversion calls unchanged for ``steady_s``. It converts one AppWrapper at
    a time, in order, and may still be behind the backlog's creation when that ends;
    what it converts after the stand-in stops would be counted in mcad's window."""
    last: list[float] = []

    async def steady() -> bool:
        text = await asyncio.to_thread(hub_metrics, state)
        last.append(sum(count for _, count in conversions_between("", text)[-1:]))
        return len(last) > 1 and last[-1] == last[-2]

    await wait_until(steady, within=120, what="the hub to convert the backlog",
                     interval=steady_s)


def hub_requests(state: Any, text: str | None = None) -> dict[str, float]:
    """The hub API server's request counters, summed by what tells the work apart:
    ``verb resource[/subresource]`` for requests, and the webhook counters by version
    or webhook name (from ``text``, a page of ``hub_metrics``, or read now)."""
    text = hub_metrics(state) if text is None else text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name not in HUB_REQUESTS or "}" not in rest:
            continue
        labels = dict(part.split("=", 1) for part in
                      rest.rsplit("}", 1)[0].replace('"', "").split(",") if "=" in part)
        if name == "apiserver_request_total":
            code = labels.get("code", "")
            what = (f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
                    + (f"/{labels['subresource']}" if labels.get("subresource") else "")
                    + ("" if code.startswith("2") else f" ({code})"))
        elif "conversion" in name:
            what = (f"conversion webhook {labels.get('crd_name', '?')} "
                    f"{labels.get('from_version', '?')}->{labels.get('to_version', '?')}")
        else:
            what = f"admission webhook {labels.get('name', '?')}"
        counts[what] = counts.get(what, 0.0) + float(rest.rsplit(" ", 1)[1])
    return counts


LATENCIES = ("apiserver_request_duration_seconds",
             "apiserver_admission_webhook_admission_duration_seconds")


def hub_latencies(before: str, after: str) -> dict[str, float]:
    """The hub's mean milliseconds per call between two pages of ``hub_metrics``, by
    ``verb resource[/subresource]`` (its handling of the request, webhooks included) and
    by admission webhook (the call out alone): where a probe's creation waits."""
    def sums(text: str) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for line in text.splitlines():
            name, _, rest = line.partition("{")
            base, _, part = name.rpartition("_")
            if base not in LATENCIES or part not in ("sum", "count") or "}" not in rest:
                continue
            labels = dict(kv.split("=", 1) for kv in
                          rest.rsplit("}", 1)[0].replace('"', "").split(",") if "=" in kv)
            what = (f"admission webhook {labels.get('name', '?')}" if "admission" in base
                    else f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
                    + (f"/{labels['subresource']}" if labels.get("subresource") else ""))
            pair = out.setdefault(what, [0.0, 0.0])
            pair[part == "count"] += float(rest.rsplit(" ", 1)[1])
        return out
    old, new = sums(before), sums(after)
    return {what: round(1000 * (total - old.get(what, [0.0, 0.0])[0]) / calls, 1)
            for what, (total, count) in sorted(new.items())
            if (calls := count - old.get(what, [0.0, 0.0])[1]) > 0
            and not what.startswith(("WATCH", "LIST", "GET"))}


def most_asked(before: dict[str, float], after: dict[str, float], top: int = 8
               ) -> list[tuple[str, int]]:
    """What the hub was asked most between two readings of ``hub_requests``."""
    grown = {k: int(v - before.get(k, 0.0)) for k, v in after.items()}
    return sorted(((k, n) for k, n in grown.items() if n > 0), key=lambda kv: -kv[1])[:top]


def hub_apiserver(state: Any) -> int:
    """The hub API server's pid (the test bed's supervisor records it)."""
    return int(state.pids["hub-apiserver"])


Ports = tuple[int, int]
"""mcad's webhook port and its conversion process's, the same for every start in a run."""


def webhook_flags(ports: Ports) -> tuple[str, ...]:
    """mcad serving its webhooks as the manifests install it: admission and the
    visibility API on the first port, the CRD's conversion between v1beta1 and v1beta2
    from a process of its own on the second, where the stand-in answers while mcad is
    stopped."""
    webhook, conversion = ports
    return ("--webhook-address", f"127.0.0.1:{webhook}", "--webhook-url",
            f"https://127.0.0.1:{webhook}", "--conversion-address", f"127.0.0.1:{conversion}",
            *MCAD_EXTRA)


MCAD_EXTRA: list[str] = []
"""More flags for every mcad the benchmark starts (``--mcad-config``: a policy to
measure, such as another ``workers``)."""


def unregister(state: Any) -> None:
    """Take away what a stopped mcad registered and nothing would answer: the admission
    webhooks, so AppWrappers can be created while no mcad runs (the backlog, the
    ceiling's), and the visibility API's APIService, whose failing discovery would hold
    every namespace deletion (the ceiling's) until mcad is back. mcad's leader
    registers both again when it starts. The CRD's conversion stays registered,
    answered by the stand-in (``standin``) meanwhile."""
    kubectl(state, "hub", "delete", "validatingwebhookconfiguration,"
            "mutatingwebhookconfiguration", "mcad", "--ignore-not-found")
    kubectl(state, "hub", "delete", "apiservice", API_SERVICE, "--ignore-not-found")


@contextlib.asynccontextmanager
async def standin(state: Any, ports: Ports) -> AsyncIterator[None]:
    """The CRD's conversion webhook answered while mcad is stopped, by the process mcad
    itself runs for it (``mcad.webhook.conversion_server``) with mcad's certificate on
    mcad's conversion address (the second of ``ports``), so that the ceiling's client and the
    backlog's creation meet the hub as installed. Unanswered, the hub's v1beta2 watch
    cache (the controller manager's garbage collector and quota monitor watch
    AppWrappers at v1beta2) fails to convert and lists every stored AppWrapper from
    etcd again, about once a second: with 1,000 stored and nothing else happening, the
    hub API server used 0.059 cores and etcd 0.034, against 0.017 and 0.009 answered.
    mcad must have run once (``idle``): its leader issued the certificate and pointed
    the CRD at the address."""
    secret = json.loads(kubectl(state, "hub", "get", "secret", "-n", "mcad-system",
                                "mcad-webhook-tls", "-o", "json"))
    folder = Path(tempfile.mkdtemp(prefix="mcad-standin-"))
    for key in ("tls.crt", "tls.key"):
        (folder / key).write_bytes(base64.b64decode(secret["data"][key]))
    proc = await asyncio.to_thread(
        subprocess.Popen, [sys.executable, "-m", "mcad.webhook.conversion_server",
                           "--address", f"127.0.0.1:{ports[1]}", "--cert",
                           str(folder / "tls.crt"), "--key", str(folder / "tls.key")],
        cwd=REPO, stdout=subprocess.DEVNULL)
    STANDINS.add(proc.pid)

    async def listening() -> bool:
        if proc.poll() is not None:
            raise SystemExit(f"the conversion stand-in exited with {proc.returncode}")
        with contextlib.suppress(OSError), \
                socket.create_connection(("127.0.0.1", ports[1]), 1):
            return True
        return False

    try:
        await wait_until(listening, within=30, what="the conversion stand-in to listen")
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        STANDINS.discard(proc.pid)
        shutil.rmtree(folder, ignore_errors=True)


async def idle(state: Any, log: Path, ports: Ports) -> tuple[float, float]:
    """mcad's RSS with nothing queued, once it is ready and has listed every node; and
    the hub API server's CPU (cores) over the next ``IDLE_S`` seconds meanwhile: the
    level the hub is held to after the drain (mcad running, nothing to do). Run first,
    on the empty hub: this first start also has mcad's leader issue the webhook's
    certificate and point the CRD's conversion at the second of ``ports`` (``standin``
    serves there after it). What it registered for callers other than the conversion is taken away
    when it stops (``unregister``)."""
    mcad: Mcad = await asyncio.to_thread(start_mcad, state, log, extra=webhook_flags(ports))
    hub = hub_apiserver(state)
    try:
        await asyncio.sleep(3)  # a settling window for the reading, not a wait for a state
        rss = rss_of(mcad.proc.pid)
        started, before = time.monotonic(), cpu_of(hub)
        await asyncio.sleep(IDLE_S)
        return rss, (cpu_of(hub) - before) / (time.monotonic() - started)
    finally:
        stop_mcad(mcad)
        unregister(state)


HUB_SAMPLE_S = 0.1
"""How often the hub API server's CPU is read while mcad runs. Once a second was too
coarse for the after-drain measure: the reading is interpolated between samples, so the
second that straddles the last dispatch lent the window after it up to a second of the
drain's CPU (0.6 cores there), more than the 1.5x of idle allows in all (0.22-0.28
CPU-seconds). /proc counts in 10 ms ticks; a read costs microseconds."""


async def sample_cpu(pid: int, out: list[tuple[float, float]], origin: float,
                     every: float = 1.0) -> None:
    """(seconds since ``origin``, CPU seconds used so far) of ``pid``, each ``every``
    seconds."""
    while True:
        try:
            out.append((time.monotonic() - origin, cpu_of(pid)))
        except OSError:
            return
        await asyncio.sleep(every)


def used_between(series: list[tuple[float, float]], start: float, end: float) -> float:
    """CPU seconds used between ``start`` and ``end`` by a process sampled as
    ``sample_cpu`` does, its cumulative reading interpolated between samples."""
    times = [t for t, _ in series]

    def at(moment: float) -> float:
        i = bisect.bisect_left(times, moment)
        if i < len(times) and times[i] == moment:
            return series[i][1]
        if i == 0:
            return series[0][1]
        if i == len(times):
            return series[-1][1]
        (t0, v0), (t1, v1) = series[i - 1], series[i]
        return v0 + (v1 - v0) * (moment - t0) / (t1 - t0)
    return at(end) - at(start) if series else 0.0


def busy_after(series: list[tuple[float, float]], start: float, end: float,
               level: float, window: float = 5.0) -> float:
    """Seconds after ``start`` from which the process's CPU over every ``window`` (up
    to ``end``; windows a second apart) stays within 1.5x of ``level`` cores."""
    moment = end - window
    while moment >= start:
        if used_between(series, moment, moment + window) / window > 1.5 * level:
            return moment + 1.0 - start
        moment -= 1.0
    return 0.0


async def drain(state: Any, hub: Connection, spokes: list[Connection], count: int,
                log: Path, *, ports: Ports, rss_idle: float, hub_idle: float,
                profile: bool = True, stored_idle: bool = False) -> dict[str, Any]:
    """The backlog queued while mcad is stopped (the stand-in converting), then mcad
    started on ``ports`` and timed until the last Job; ``rss_idle`` and ``hub_idle`` are
    ``idle``'s readings."""
    ns = "scale"
    await verbs.create(hub, refs.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": ns}})
    names = [f"aw-{i:05d}" for i in range(count)]
    started = time.monotonic()
    async with standin(state, ports):
        await bounded(names, lambda n: verbs.create(hub, refs.APPWRAPPERS, small_aw(n),
                                                    namespace=ns))
        await converted_all(state)
    say(f"queued {count} AppWrappers in {time.monotonic() - started:.0f}s; starting mcad")
    seen = Seen()
    watchers = [asyncio.create_task(seen.follow(s)) for s in spokes]
    watchers.append(asyncio.create_task(seen.follow_hub(hub)))
    hub_before = await asyncio.to_thread(hub_metrics, state)
    launched = time.monotonic()
    mcad: Mcad = await asyncio.to_thread(start_mcad, state, log, extra=webhook_flags(ports))
    ready, ready_wall, cpu_ready = time.monotonic(), time.time(), cpu_seconds(mcad.proc.pid)
    rss_ready = rss_of(mcad.proc.pid)
    loop_ready = loop_schedstat(mcad.proc.pid)
    samples = Samples()
    sampler = asyncio.create_task(sample_process(mcad.proc.pid, samples, ready))
    hub_cpu: list[tuple[float, float]] = []
    stored_text = ""  # (mcad's metrics at the end of the stored-idle window)
    hub_sampler = asyncio.create_task(sample_cpu(hub_apiserver(state), hub_cpu, ready,
                                                 every=HUB_SAMPLE_S))
    probes: dict[str, float] = {}
    done = 0  # dispatches so far, probes included (mcad's counter, read once a second)

    async def probe_loop() -> None:
        index = 0
        while done < count:  # only behind the backlog
            name = f"probe-{index:04d}"
            probes[name] = time.monotonic()
            await verbs.create(hub, refs.APPWRAPPERS, small_aw(name, priority=100, probe=True),
                               namespace=ns)
            seen.steps.setdefault(name, {})["returned"] = time.monotonic()
            index += 1
            await asyncio.sleep(PROBE_EVERY_S)

    last_report = time.monotonic()
    answers: list[float] = []  # seconds mcad's /metrics took, read once a second
    unanswered: list[float] = []  # seconds since ready when it did not answer in 5 s
    limits: list[float] = []  # mcad_reconcile_limit, read with each answer
    late_seen: dict[str, float] = {}  # Job name: when the late watch saw it (monotonic)
    tail = TailWrites()  # the hub's AppWrapper writes near the end (a late watch)
    tail_profile: list[asyncio.Task[None]] = []  # (--hub-tail-profile)

    async def drained() -> bool:
        nonlocal done, last_report
        asked = time.monotonic()
        try:
            text = await asyncio.to_thread(mcad.metrics)
        except (TimeoutError, urllib.error.URLError) as err:
            # A stall of mcad's loop: counted and published, the threads dumped (the
            # first few), and the drain followed on; three 10,000 runs ended here.
            unanswered.append(asked - ready)
            say(f"mcad: /metrics unanswered within 5 s ({err}), "
                f"{asked - ready:.0f}s since ready")
            if len(unanswered) <= STALL_DUMPS:
                await asyncio.to_thread(dump_threads, mcad.proc.pid, len(unanswered))
            return False
        answers.append(time.monotonic() - asked)
        done = int(sample_value(text, "mcad_dispatches_total"))
        limits.append(sample_value(text, "mcad_reconcile_limit"))
        left = count + len(probes) - done  # (mcad's counter counts the probes too)
        if TAIL_PROFILE and left <= TAIL_PROFILE_AHEAD and not tail_profile:
            tail_profile.append(asyncio.create_task(asyncio.to_thread(
                hub_profile, state, TAIL_PROFILE[0], TAIL_PROFILE_S)))
            say(f"profiling the hub API server for {TAIL_PROFILE_S} s into {TAIL_PROFILE[0]}")
        if left <= max(20, count * LATE_WATCH_SHARE) and len(watchers) == len(spokes) + 1:
            watchers.extend(asyncio.create_task(last_jobs_seen(s, ns, late_seen))
                            for s in spokes)
            watchers.append(asyncio.create_task(last_writes_seen(hub, ns, tail)))
        if time.monotonic() - last_report > 15:
            rss = samples.rss_mb[-1][1] if samples.rss_mb else 0
            say(f"mcad: {done} dispatched (probes included) of {count} queued, "
                f"{time.monotonic() - ready:.0f}s since ready, RSS {rss:.0f} MB, "
                f"reconciling at most {limits[-1]:.0f} at once")
            last_report = time.monotonic()
        return done >= count + len(probes) and probes.keys() <= seen.jobs.keys()

    prober = asyncio.create_task(probe_loop())
    profiler = start_profile(mcad.proc.pid, PROFILE_S) if profile else None
    try:
        await wait_until(drained, within=3600, what="the backlog to drain", interval=1)
        prober.cancel()
        cpu = cpu_per_appwrapper(cpu_ready, cpu_seconds(mcad.proc.pid), count)
        loop_run, loop_wait = (b - a for a, b in zip(
            loop_ready, loop_schedstat(mcad.proc.pid), strict=True))
        loop_for = time.monotonic() - ready
        metrics_text = mcad.metrics()
        # The hub's counters from here on are the work after the drain: read before the
        # Jobs are listed, so the writes that follow the last dispatches are among them.
        asked_from = time.monotonic() - ready
        hub_drained = await asyncio.to_thread(hub_metrics, state)
        asked_before = hub_requests(state, hub_drained)
        wanted = set(names)
        created = await wait_until(lambda: created_if_all(spokes, ns, wanted), within=60,
                                   what="every dispatched Job to be listed", interval=1)
        assert created is not None
        # The work the drain left behind: mcad runs on while the hub is watched. The last
        # dispatch is the last Job the late watch saw, if it saw the last stamped one.
        stamped = max(created.values()) - ready_wall  # seconds since ready
        last_name = max(created, key=lambda n: created[n])
        watched = last_name in late_seen
        last_dispatch = max(late_seen.values()) - ready if watched else stamped
        left = ready + last_dispatch + AFTER_DRAIN_S + 1.5 - time.monotonic()
        say(f"mcad: every Job made, the last {last_dispatch:.1f} s after ready "
            f"({'watched' if watched else 'not watched: from its stamp'}; its stamp says "
            f"{stamped:.1f} s); watching the hub for {AFTER_DRAIN_S:.0f} s after it")
        await asyncio.sleep(max(0.0, left))  # a measuring window, not a wait for a state
        for task in tail_profile:
            await task  # (long done: 6 s from the drain's end)
        after_text = await asyncio.to_thread(mcad.metrics)
        hub_after = await asyncio.to_thread(hub_metrics, state)
        asked = most_asked(asked_before, hub_requests(state, hub_after))
        asked_for_s = time.monotonic() - ready - asked_from
        if stored_idle:
            say(f"reading the hub's idle level with the backlog stored, "
                f"{STORED_IDLE_FROM_S:.0f}-{STORED_IDLE_FROM_S + IDLE_S:.0f} s after the "
                "last dispatch")
            left = ready + last_dispatch + STORED_IDLE_FROM_S + IDLE_S + 1.5 \
                - time.monotonic()
            await asyncio.sleep(max(0.0, left))  # a measuring window, not a wait
            stored_text = await asyncio.to_thread(mcad.metrics)
    finally:
        profiled = finish_profile(profiler)
        stop_mcad(mcad)
        unregister(state)
        sampler.cancel()
        hub_sampler.cancel()
        for w in watchers:
            w.cancel()
    last = max(created[n] for n in names)
    after_drain = used_between(hub_cpu, last_dispatch, last_dispatch + AFTER_DRAIN_S) \
        / AFTER_DRAIN_S
    after_stamped = used_between(hub_cpu, stamped, stamped + AFTER_DRAIN_S) / AFTER_DRAIN_S
    stored = used_between(hub_cpu, last_dispatch + STORED_IDLE_FROM_S,
                          last_dispatch + STORED_IDLE_FROM_S + IDLE_S) / IDLE_S \
        if stored_idle else float("nan")
    waits = sorted(seen.jobs[p] - t for p, t in probes.items() if p in seen.jobs)
    cycle = buckets_of(metrics_text, "mcad_dispatch_cycle_duration_seconds")
    conversions = conversions_between(hub_before, hub_drained)
    gc_before, gc_drained, gc_end = (GcReading.of(t) for t in (hub_before, hub_drained,
                                                                hub_after))
    gc_cycles, gc_last = gc_after(gc_drained, gc_end, ready_wall + last_dispatch)
    renewals = buckets_of(metrics_text, "mcad_lease_renewal_seconds")
    return {
        "appwrappers": count, "dispatched": len(wanted & created.keys()),
        "startup_s": ready - launched, "drain_s": last - ready_wall,
        # Under the stamps' second the drain has no rate (a toy size can be dispatched
        # before /readyz answers, and its "drain" is then negative).
        "mcad_per_s": count / (last - ready_wall) if last - ready_wall >= 1.0
        else float("nan"),
        "probes": len(waits),
        "probe_wait_p50_s": statistics.median(waits) if waits else float("nan"),
        "probe_wait_max_s": max(waits, default=float("nan")),
        "probe_steps_p50_s": probe_steps(probes, seen),
        "cycle_p50_ms": 1000 * quantile(cycle, 0.5),
        "cycle_p99_ms": 1000 * quantile(cycle, 0.99),
        "drain_hub_asked": most_asked(hub_requests(state, hub_before),
                                      hub_requests(state, hub_drained), top=12),
        "drain_hub_mean_ms": hub_latencies(hub_before, hub_drained),
        "drain_conversions": int(conversions[-1][1]) if conversions else 0,
        "drain_conversion_p50_ms": 1000 * quantile(conversions, 0.5),
        "drain_conversion_p99_ms": 1000 * quantile(conversions, 0.99),
        "metrics_answer_p50_s": quantile_of(answers, 0.5),
        "metrics_answer_p99_s": quantile_of(answers, 0.99),
        "metrics_answer_max_s": max(answers, default=float("nan")),
        "metrics_unanswered": len(unanswered),
        "reconcile_limit_p50": quantile_of(limits, 0.5),
        "reconcile_limit_min": min(limits, default=float("nan")),
        "reconcile_limit_max": max(limits, default=float("nan")),
        "loop_running_share": loop_run / loop_for,
        "loop_waiting_for_cpu_share": loop_wait / loop_for,
        "metrics_unanswered_at_s": unanswered,
        "lease_losses": int(sample_value(metrics_text, "mcad_leadership_lost_total")),
        "lease_renewal_p99_s": quantile(renewals, 0.99),
        "lease_renewal_max_bucket_s": highest_bucket(renewals),
        "cpu_ms_per_appwrapper": cpu,
        "rss_idle_mb": rss_idle, "rss_ready_mb": rss_ready,
        "rss_slope_mb_per_1000": (rss_ready - rss_idle) / (count / 1000),
        "rss_max_mb": max((v for _, v in samples.rss_mb), default=0.0),
        "conversion_rss_max_mb": max((v for _, v in samples.children_rss_mb), default=0.0),
        "cpu_mean": statistics.fmean(v for _, v in samples.cpu) if samples.cpu else 0.0,
        "hub_idle_cores": hub_idle, "after_drain_hub_cores": after_drain,
        "after_drain_hub_cpu_ratio": after_drain / hub_idle if hub_idle else float("inf"),
        "after_drain_hub_cpu_ratio_stamped": after_stamped / hub_idle if hub_idle
        else float("inf"),
        "last_dispatch_watched": watched,
        "last_dispatch_stamped_s": stamped,
        "hub_stored_idle_cores": stored,
        "after_drain_hub_cpu_ratio_stored": after_drain / stored if stored else float("inf"),
        "stored_idle_workqueue_depth": int(sample_value(stored_text, "mcad_workqueue_depth"))
        if stored_idle else -1,
        "after_drain_hub_busy_s": busy_after(hub_cpu, last_dispatch,
                                             last_dispatch + AFTER_DRAIN_S, hub_idle),
        "last_dispatch_s": last_dispatch,
        "after_drain_hub_settled_cores": used_between(
            hub_cpu, last_dispatch + AFTER_DRAIN_S - 10, last_dispatch + AFTER_DRAIN_S) / 10,
        "after_drain_hub_series": [
            round(used_between(hub_cpu, last_dispatch + i, last_dispatch + i + 1), 3)
            for i in range(int(AFTER_DRAIN_S))],
        "events_dropped": int(sample_value(after_text, "mcad_events_dropped_total")),
        "status_writes_waiting_at_end": int(sample_value(after_text,
                                                         "mcad_status_writes_waiting")),
        "workqueue_depth_at_end": int(sample_value(after_text, "mcad_workqueue_depth")),
        "after_drain_hub_asked": asked,
        "after_drain_hub_writes": tail.after(ready + last_dispatch),
        "drain_hub_gc_cycles": gc_drained.cycles - gc_before.cycles,
        "drain_hub_heap_mb": gc_drained.heap / 2**20,
        "after_drain_hub_gc_cycles": gc_cycles,
        "after_drain_hub_last_gc_s": gc_last,
        "after_drain_hub_asked_from_s": asked_from - last_dispatch,
        "after_drain_hub_asked_for_s": asked_for_s,
        "profile": profiled,
        "timeline": sorted(created[n] - ready_wall for n in names),
        "rss_series": samples.rss_mb, "cpu_series": samples.cpu,
        "hub_cpu_series": [(b[0], (b[1] - a[1]) / (b[0] - a[0]))
                           for a, b in itertools.pairwise(hub_cpu) if b[0] > a[0]],
    }


PROFILE_S = 60
PROFILE_RAW = Path("/tmp/scale-mcad-profile.txt")
STALL_DUMPS = 3
"""When mcad's /metrics goes unanswered, its threads are dumped (the first this many
times) to ``/tmp/scale-stall-N.txt``: what its loop waited on."""


def quantile_of(values: list[float], q: float) -> float:
    """The ``q`` quantile of plain samples (nearest rank; nan when none)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def dump_threads(pid: int, n: int) -> None:
    """py-spy's dump of every thread of ``pid`` (with native frames: a C call holding
    the interpreter shows), into ``/tmp/scale-stall-<n>.txt``."""
    spy = py_spy()
    if spy is None:
        return
    out = Path(f"/tmp/scale-stall-{n}.txt")
    try:
        done = subprocess.run([str(spy), "dump", "--pid", str(pid), "--native"],
                              capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return
    out.write_text(done.stdout + done.stderr)
    say(f"mcad's threads at the stall: {out}")


def start_profile(pid: int, seconds: int) -> subprocess.Popen[bytes] | None:
    """Sample mcad with py-spy (when installed: the bench extra; a run that writes the
    doc checks it first) for the first ``seconds`` of the drain: where the controller's
    CPU goes, for the doc."""
    spy = py_spy()
    if spy is None:
        say("py-spy not installed: no profile (pip install -e '.[bench]')")
        return None
    return subprocess.Popen([str(spy), "record", "--pid", str(pid), "--duration",
                             str(seconds), "--rate", "50", "--format", "raw", "--nonblocking",
                             "--output", str(PROFILE_RAW)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def finish_profile(proc: subprocess.Popen[bytes] | None) -> list[tuple[str, float, float]]:
    """(function, share of samples in it or below, share with it on top), largest first."""
    if proc is None:
        return []
    try:
        proc.wait(timeout=PROFILE_S + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
    if not PROFILE_RAW.is_file():
        return []
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for line in PROFILE_RAW.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [_frame(f) for f in stack.split(";") if f]
        for name in set(frames):
            inclusive[name] = inclusive.get(name, 0) + count
        if frames:
            own[frames[-1]] = own.get(frames[-1], 0) + count
    if not total:
        return []
    ranked = sorted(inclusive, key=lambda n: (-own.get(n, 0), -inclusive[n]))[:12]
    mcad_frames = sorted((n for n in inclusive if n.startswith("mcad.") or "(mcad/" in n),
                         key=lambda n: -inclusive[n])[:12]
    names = list(dict.fromkeys([*mcad_frames, *ranked]))
    return [(n, inclusive[n] / total, own.get(n, 0) / total) for n in names]


def _frame(frame: str) -> str:
    """py-spy's "function (path/to/file.py:line)" as "function (file path)"."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    short = path.split("/site-packages/")[-1].split("/lib/python3.11/")[-1]
    if "/mcad/" in short:
        short = "mcad/" + short.split("/mcad/", 1)[1]
    return f"{name} ({short})"


def plot(f: dict[str, Any], path: Path) -> None:
    import matplotlib  # noqa: PLC0415  (only the written figures need it: the bench extra)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    timeline: list[float] = f["timeline"]
    width = 5.0
    end = max(timeline) if timeline else 0.0
    edges = [i * width for i in range(int(end // width) + 2)]
    rates = [sum(1 for t in timeline if a <= t < b) / width
             for a, b in itertools.pairwise(edges)]
    depth = [f["appwrappers"] - sum(1 for t in timeline if t < e) for e in edges]
    fig, axes = plt.subplots(4, 1, figsize=(9, 9), sharex=True)
    axes[0].step(edges[:-1], rates, where="post", label="mcad")
    axes[0].axhline(f["ceiling_per_s"], color="black", linestyle="-", linewidth=1,
                    label="ceiling: a plain client's burst before the drain")
    axes[0].axhline(f["ceiling_bracket_per_s"], color="grey", linestyle="--",
                    label="bracket: mean of the bursts before and after")
    axes[0].set_ylabel("dispatched / s")
    axes[0].legend(loc="lower right")
    axes[1].plot(edges, depth)
    axes[1].set_ylabel("queued")
    axes[2].plot([t for t, _ in f["rss_series"]], [v for _, v in f["rss_series"]])
    axes[2].axhline(250, color="grey", linestyle="--")
    axes[2].set_ylabel("RSS MB")
    axes[3].plot([t for t, _ in f["cpu_series"]], [v for _, v in f["cpu_series"]],
                 label="mcad")
    axes[3].plot([t for t, _ in f["hub_cpu_series"]], [v for _, v in f["hub_cpu_series"]],
                 label="hub API server")
    axes[3].axhline(f["hub_idle_cores"], color="grey", linestyle=":",
                    label="hub API server, idle before the backlog")
    axes[3].axvline(f["last_dispatch_s"], color="grey", linestyle="--",
                    label="last dispatch")
    axes[3].set_ylabel("CPU (cores)")
    axes[3].legend(loc="upper right", fontsize=8)
    axes[3].set_xlabel("seconds since mcad was ready")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(f: dict[str, Any], nodes: int) -> str:
    nan = float("nan")
    roof, bracketed = f["ceiling_per_s"], f["ceiling_bracket_per_s"]
    return "\n".join([
        "## Scale (3 spokes x 1,000 nodes, 10,000 AppWrappers)", "",
        f"Measured on {time.strftime('%Y-%m-%d')} by `python benchmarks/scale.py --nodes "
        f"{nodes} --appwrappers {f['appwrappers']}` ({platform.machine()}, 2 cores; the "
        f"hub, 3 spokes x {nodes} KWOK nodes x 8 GPUs, their etcd, KWOK and mcad all on "
        "this machine).", "",
        "| what | figure | target |", "|---|---:|---|",
        f"| ceiling: a plain client doing mcad's 3 writes per AppWrapper, {CONCURRENCY} at "
        f"a time, in a burst just before the drain | {roof:.0f} AppWrappers/s | |",
        f"| bracket: the mean of that burst and one just after the drain "
        f"({f['ceiling_after_per_s']:.0f}/s) | {bracketed:.0f} AppWrappers/s | |",
        *([f"| reporting ceiling, a second measure: {REPORTING}, {CONCURRENCY} at a "
           f"time, just after the burst above | {f['reporting_ceiling_per_s']:.0f} "
           "AppWrappers/s | |"] if "reporting_ceiling_per_s" in f else []),
        f"| sustained dispatch, {f['appwrappers']:,} queued, mcad ready to the last Job | "
        f"{f['mcad_per_s']:.0f} AppWrappers/s ({f['drain_s']:.0f} s; {f['dispatched']:,} "
        f"dispatched), **{f['share_of_ceiling']:.0%} of the ceiling** "
        f"({f['share_of_bracket']:.0%} of the bracket"
        + (f"; {f['share_of_reporting_ceiling']:.0%} of the reporting ceiling"
           if "share_of_reporting_ceiling" in f else "")
        + ") | >= 90% of the ceiling |",
        f"| a priority-100 probe submitted behind the backlog, creation to its Job on a "
        f"spoke ({f['probes']} probes, one every {PROBE_EVERY_S:.0f} s) | median "
        f"{f['probe_wait_p50_s']:.2f} s, max {f['probe_wait_max_s']:.2f} s | median <= "
        "0.5 s |",
        f"| mcad's /metrics, read once a second by this script while draining: answered "
        f"in; unanswered within 5 s | p50 {f.get('metrics_answer_p50_s', nan):.2f} s, p99 "
        f"{f.get('metrics_answer_p99_s', nan):.2f} s, max "
        f"{f.get('metrics_answer_max_s', nan):.2f} s; {f.get('metrics_unanswered', 0)} "
        "times | |",
        f"| mcad's event loop (its main thread) from ready to the drain's end, in the "
        f"kernel's schedstat: running; runnable but waiting for a CPU | "
        f"{f.get('loop_running_share', nan):.0%}; "
        f"{f.get('loop_waiting_for_cpu_share', nan):.0%} of the time | |",
        f"| AppWrappers reconciled at most at once (`mcad_reconcile_limit`, read once a "
        f"second): median (least, most) | {f.get('reconcile_limit_p50', nan):.0f} "
        f"({f.get('reconcile_limit_min', nan):.0f}, {f.get('reconcile_limit_max', nan):.0f})"
        " | |",
        f"| terms lost (`mcad_leadership_lost_total`); Lease renewal delay | "
        f"{f['lease_losses']}; p99 {f['lease_renewal_p99_s']:.3f} s, highest bucket "
        f"{f['lease_renewal_max_bucket_s']:g} s | 0 |",
        f"| dispatch cycle (mcad's histogram, interpolated) | p50 {f['cycle_p50_ms']:.0f} "
        f"ms, p99 {f['cycle_p99_ms']:.0f} ms | |",
        "| what the hub API server was asked most from mcad's start to the last Job (its "
        "own counters) | "
        + ("; ".join(f"{what}: {n:,}" for what, n in f.get("drain_hub_asked") or [])
           or "-") + " | |",
        f"| the hub's calls to mcad's conversion webhook from mcad's start to the last Job "
        f"(its v1beta2 watch cache converts each AppWrapper written; the hub's histogram) | "
        f"{f.get('drain_conversions', 0):,}; p50 {f.get('drain_conversion_p50_ms', 0):.1f} "
        f"ms, p99 {f.get('drain_conversion_p99_ms', 0):.0f} ms | |",
        f"| controller RSS: idle with {3 * nodes:,} nodes; {f['appwrappers']:,} listed; max "
        f"while draining | {f['rss_idle_mb']:.0f} MB; {f['rss_ready_mb']:.0f} MB; "
        f"**{f['rss_max_mb']:.0f} MB** | max <= 250 MB |",
        f"| RSS of mcad's conversion webhook process (`--conversion-address`), max while "
        f"draining | {f.get('conversion_rss_max_mb', 0.0):.0f} MB | (beside the "
        "controller's) |",
        f"| memory per 1,000 AppWrappers (listed minus idle, per 1,000) | "
        f"{f['rss_slope_mb_per_1000']:.1f} MB | |",
        f"| controller CPU, mean while draining | {f['cpu_mean']:.2f} cores | |",
        f"| the hub API server's CPU in the {AFTER_DRAIN_S:.0f} s after the last dispatch, "
        f"over its idle level before the backlog ({f['after_drain_hub_cores']:.3f} against "
        f"{f['hub_idle_cores']:.3f} cores; back within 1.5x of it "
        f"{f['after_drain_hub_busy_s']:.0f} s after the last dispatch; "
        f"{f['after_drain_hub_settled_cores']:.3f} cores 20-30 s after it) | "
        f"**{f['after_drain_hub_cpu_ratio']:.2f}** | <= 1.5 |",
        f"| the same, from the last Job's creation stamp ({STAMP_NOTE}; the row above "
        f"times the last dispatch "
        + ("by a watch of the last Jobs" if f.get("last_dispatch_watched") else
           "by its stamp too: the late watch missed it") + ") | "
        f"{f.get('after_drain_hub_cpu_ratio_stamped', float('nan')):.2f} | (a second "
        "measure) |",
        f"| the same, over the hub's idle level with the backlog's objects stored (mcad "
        f"running, {STORED_IDLE_FROM_S:.0f}-{STORED_IDLE_FROM_S + IDLE_S:.0f} s after the "
        f"last dispatch, work queue {f.get('stored_idle_workqueue_depth', -1)}: "
        f"{f.get('hub_stored_idle_cores', float('nan')):.3f} cores) | "
        f"{f.get('after_drain_hub_cpu_ratio_stored', float('nan')):.2f} | (a second "
        "measure, not the target's) |",
        f"| what the hub API server was asked most in that window (its own counters, read "
        f"from {f.get('after_drain_hub_asked_from_s', 0):.1f} s after the last dispatch, "
        f"as mcad's counter said every one was made, for "
        f"{f.get('after_drain_hub_asked_for_s', 0):.0f} s) | "
        + ("; ".join(f"{what}: {n:,}" for what, n in f.get("after_drain_hub_asked") or [])
           or "-") + " | |",
        *([f"| the AppWrapper writes the hub committed after the last dispatch (a watch "
           f"of the namespace's AppWrappers from the last {LATE_WATCH_SHARE:.0%} of the "
           f"drain): all; PodsReady among them; seconds after it to the last of each; the "
           f"hub's CPU in the first three seconds (cores) | "
           f"{w['writes']:.0f}; {w['ready']:.0f}; {w['last_write_s']:.2f} s, "
           f"{w['last_ready_s']:.2f} s; "
           + ", ".join(f"{c:.2f}" for c in f["after_drain_hub_series"][:3]) + " | |"
           for w in [f.get("after_drain_hub_writes")] if w]),
        *([f"| the hub API server's Go collector (its /metrics): cycles in the drain; "
           f"heap in use at its end; cycles ending in the window after it | "
           f"{f['drain_hub_gc_cycles']:.0f} (one every "
           f"{f['drain_s'] / max(f['drain_hub_gc_cycles'], 1):.1f} s); "
           f"{f['drain_hub_heap_mb']:,.0f} MB; {f['after_drain_hub_gc_cycles']:.0f} (the "
           f"last ended {abs(f['after_drain_hub_last_gc_s']):.1f} s "
           f"{'after' if f['after_drain_hub_last_gc_s'] >= 0 else 'before'} the last "
           "dispatch) | |"]
          if "drain_hub_gc_cycles" in f else []),
        f"| mcad start to ready ({f['appwrappers']:,} queued) | {f['startup_s']:.1f} s | |", "",
        "![Dispatch rate, queue, RSS and CPU while the backlog drains](img/scale.png)", "",
        *cpu_table(f.get("ceiling_cpu_ms_per_appwrapper") or {},
                   f.get("cpu_ms_per_appwrapper") or {}, f['mcad_per_s'], roof,
                   reporting_cpu=f.get("reporting_ceiling_cpu_ms_per_appwrapper") or {},
                   reporting_roof=f.get("reporting_ceiling_per_s", 0.0)),
        *profile_table(f.get("profile") or [])])


def cpu_table(ceiling_cpu: dict[str, float], mcad_cpu: dict[str, float],
              rate: float, roof: float, *, reporting_cpu: dict[str, float] | None = None,
              reporting_roof: float = 0.0) -> list[str]:
    """The machine's CPU per AppWrapper, by process, in the ceiling's window and in
    mcad's (and the reporting ceiling's, if run): with every core busy, the rates are in
    the inverse ratio of the totals."""
    if not ceiling_cpu or not mcad_cpu:
        return []
    columns = [ceiling_cpu, *([reporting_cpu] if reporting_cpu else []), mcad_cpu]
    names = sorted(set().union(*columns),
                   key=lambda k: -max(c.get(k, 0.0) for c in columns))
    heads = ["ceiling (the burst before the drain)",
             *(["reporting ceiling"] if reporting_cpu else []), "mcad's drain"]
    rates = [roof, *([reporting_roof] if reporting_cpu else []), rate]

    def row(cells: list[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    return ["Where the machine's CPU went, milliseconds per AppWrapper (from /proc, by "
            "process; the hub's API server apart from the three spokes' together; "
            "`benchmark` is this script: the ceiling's client, then the probes, their "
            "watch and the metrics it reads; "
            "`conversion stand-in` answers the CRD's conversion webhook in the ceiling's "
            "window, where mcad answers it in its own):", "",
            row(["process", *heads]), row(["---", *["---:"] * len(heads)]),
            *(row([name, *(f"{c.get(name, 0.0):.1f}" for c in columns)]) for name in names),
            row(["**all**", *(f"**{sum(c.values()):.1f}**" for c in columns)]),
            row(["AppWrappers/s", *(f"{r:.0f}" for r in rates)]), ""]


def profile_table(rows: list[tuple[str, float, float]]) -> list[str]:
    if not rows:
        return []
    return [f"Where mcad's CPU went in the first {PROFILE_S} s of the drain (py-spy, 50 "
            "samples/s; share of samples with the function on the stack, and on top):", "",
            "| function | on the stack | on top |", "|---|---:|---:|",
            *(f"| `{name}` | {inclusive:.0%} | {own:.0%} |" for name, inclusive, own in rows),
            ""]


# The smoke's gate: a share of the same run's ceiling (see --smoke in main).
SMOKE_SHARE = 1 / 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--appwrappers", type=int, default=10000)
    parser.add_argument("--ceiling", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="3 x 100 nodes, 1,000 AppWrappers, nothing written; exit 1 "
                             "below half of the bracket")
    parser.add_argument("--mcad-config", type=Path,
                        help="mcad's policy file (YAML) to measure instead of the defaults")
    parser.add_argument("--hub-tail-profile", type=Path,
                        help=f"write a CPU profile of the hub API server over the "
                             f"{TAIL_PROFILE_S} s after the drain (pprof)")
    args = parser.parse_args()
    if args.hub_tail_profile:
        os.environ[PROFILING_ENV] = "1"
        TAIL_PROFILE.append(args.hub_tail_profile.resolve())
    if args.mcad_config:
        MCAD_EXTRA.extend(["--config", str(args.mcad_config.resolve())])
    if args.smoke:
        # The ceiling from as many AppWrappers as mcad dispatches. Its share swung over
        # 39-106% while the ceiling's Jobs, pods and namespace deletion still ran beside
        # mcad's drain; with that waited out (``quiet``), seven runs gave 67-104%
        # (ceiling 48-70/s), so the gate is the half, 17 points under the worst.
        args.nodes, args.appwrappers, args.ceiling, args.no_write = 100, 1000, 1000, True
    check("benchmarks/scale.py", [*TESTBED, *([] if args.no_write else [MATPLOTLIB, PY_SPY])])
    spec = TestbedSpec(spokes=3, nodes=args.nodes, gpus_per_node=8, cpu_per_node="64",
                       memory_per_node="512Gi", pods_per_node=110)

    async def run(state: Any) -> dict[str, Any]:
        async with connected(state, ["hub", *SPOKES]) as conns:
            spokes = [conns[s] for s in SPOKES]
            log = Path("/tmp/scale-mcad-run.log")
            webhook, conversion = free_ports(2)
            ports: Ports = (webhook, conversion)
            rss_idle, hub_idle = await idle(state, log, ports)
            say(f"mcad with nothing queued: RSS {rss_idle:.0f} MB; the hub API server "
                f"{hub_idle:.3f} cores")
            async with standin(state, ports):
                before, before_cpu = await ceiling(conns["hub"], spokes, args.ceiling)
                reported: tuple[float, dict[str, float]] | None = None
                if not args.smoke:  # a second figure; the smoke's gate is the bracket
                    reported = await ceiling(conns["hub"], spokes, args.ceiling,
                                             ns="ceiling-reporting", reporting=True)
            figures = await drain(state, conns["hub"], spokes, args.appwrappers, log,
                                  ports=ports, rss_idle=rss_idle, hub_idle=hub_idle,
                                  profile=not args.smoke, stored_idle=not args.smoke)
            async with standin(state, ports):
                after, after_cpu = await ceiling(conns["hub"], spokes, args.ceiling,
                                                 ns="ceiling-after", clean=False)
            bracketed = bracket(before, after)
            rate = figures["mcad_per_s"]
            return {
                "ceiling_per_s": before, "ceiling_bracket_per_s": bracketed, **figures,
                "share_of_ceiling": rate / before if before else 0.0,
                "share_of_bracket": rate / bracketed if bracketed else 0.0,
                "mcad_config": str(args.mcad_config) if args.mcad_config else None,
                **({} if reported is None else {
                    "reporting_ceiling_per_s": reported[0],
                    "share_of_reporting_ceiling": rate / reported[0] if reported[0] else 0.0,
                    "reporting_ceiling_cpu_ms_per_appwrapper": reported[1]}),
                "ceiling_before_per_s": before, "ceiling_after_per_s": after,
                "ceiling_cpu_ms_per_appwrapper": before_cpu,
                "ceiling_bracket_cpu_ms_per_appwrapper": {
                    k: bracket(before_cpu.get(k, 0.0), after_cpu.get(k, 0.0))
                    for k in before_cpu.keys() | after_cpu.keys()}}

    with testbed(spec, "scale") as (state, _):
        HUB_PIDS.add(state.pids[HUB_APISERVER])
        install_mcad(state, list(SPOKES))
        result = asyncio.run(run(state))
    series = {k: result.pop(k) for k in SERIES}
    print(json.dumps({k: v for k, v in result.items() if k != "profile"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if not args.no_write:
        plot({**result, **series}, REPO / "docs" / "img" / "scale.png")
        write_section("Scale (3 spokes x 1,000 nodes, 10,000 AppWrappers)",
                      render(result, args.nodes))
        say("wrote docs/benchmarks.md and docs/img/scale.png")
    say(f"the hub API server after the last dispatch: {result['after_drain_hub_cores']:.3f} "
        f"cores against {result['hub_idle_cores']:.3f} idle "
        f"(x{result['after_drain_hub_cpu_ratio']:.2f}; at most x1.5 wanted; "
        f"x{result['after_drain_hub_cpu_ratio_stamped']:.2f} from the last Job's stamp; "
        f"x{result['after_drain_hub_cpu_ratio_stored']:.2f} over its level with the "
        "backlog stored); asked most: "
        + "; ".join(f"{what}: {n:,}" for what, n in result["after_drain_hub_asked"])
        + "; AppWrapper writes after the last dispatch (PodsReady): "
        f"{result['after_drain_hub_writes']['writes']:.0f} "
        f"({result['after_drain_hub_writes']['ready']:.0f}), the last "
        f"{result['after_drain_hub_writes']['last_write_s']:.2f} s after it")
    if args.smoke:
        return smoke_verdict(result)
    return 0


SERIES = ("timeline", "rss_series", "cpu_series", "hub_cpu_series")
"""The figures' time series: in the plot, not in the JSON."""


def smoke_verdict(result: dict[str, Any]) -> int:
    """The smoke's gate, unchanged: mcad's rate at least half of the bracket (what the
    ceiling was before the burst before the drain became the ceiling). The share of the
    burst before is said, not gated: in two smoke runs of this code it was 51% and 63%
    (59% of the bracket in both), so a gate on it at half would fail a sound run on
    this machine's noise alone."""
    rate, roof = result["mcad_per_s"], result["ceiling_per_s"]
    floor = SMOKE_SHARE * result["ceiling_bracket_per_s"]
    verdict = "ok" if rate >= floor else "FAILED"
    say(f"scale smoke {verdict}: {rate:.0f}/s against a ceiling of {roof:.0f}/s "
        f"({result['share_of_ceiling']:.0%}) and a bracket of "
        f"{result['ceiling_bracket_per_s']:.0f}/s ({result['share_of_bracket']:.0%}); at "
        f"least {SMOKE_SHARE:.0%} of the bracket wanted")
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    raise SystemExit(main())
