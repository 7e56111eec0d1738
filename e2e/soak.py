"""The chaos soak: many AppWrappers over two spokes while faults are injected at random.

Used by ``benchmarks/soak.py`` (the long run, figures into docs/reliability.md) and by
``e2e/faults/test_soak.py`` (a short run inside ``make test``). While AppWrappers of 1-2
pods x 1-8 GPUs (running 5-25 s each) arrive, a random schedule (seeded, so it can be
replayed) injects one fault at a time: a spoke's API server frozen for 10-60 s, the
controller killed with SIGKILL and started again, or the hub's API server restarted.
Throughout, a sampler lists every spoke's pods each second. After the faults stop and
everything settles, the invariant checker reports:

- every AppWrapper Completed;
- never two copies of one gang running at once on the spokes (sampled throughout; a
  copy on a spoke whose SpokeCluster lists it as a recorded leftover, being collected
  after that spoke was lost, is counted apart: it could not be stopped while the spoke
  did not answer);
- no orphaned object on any spoke (every wrapped Job belongs to an AppWrapper placed
  there), and after deleting every AppWrapper nothing of theirs left anywhere;
- quota used equals what runs (mcad_quota_used against the AppWrappers the hub says run,
  checked at quiet moments and at the end).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.cluster import faults
from e2e.controller import ControllerProcess
from mcad.core.life.wrapping import UID_LABEL
from mcad.gateway import refs, verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import ApiError, NotFound
from mcad.gateway.refs import ResourceRef

JOBS = ResourceRef("batch/v1", "Job", "jobs", namespaced=True)
SPOKES = ("spoke-1", "spoke-2")
NAMESPACE = "soak"
GPU = "nvidia.com/gpu"
QUOTA_GPUS = 48


@dataclass
class SoakPlan:
    appwrappers: int = 300
    seed: int = 1
    arrival_s: float = 1.0
    """Mean seconds between two arrivals."""
    fault_every_s: tuple[float, float] = (20.0, 45.0)
    pause_s: tuple[float, float] = (10.0, 60.0)
    spoke_lost_seconds: float = 20.0
    settle_timeout_s: float = 1200.0
    kinds: tuple[str, ...] = ()
    """Faults in this order (then again); empty: drawn at random."""


@dataclass
class SoakReport:
    seed: int
    appwrappers: int
    faults: Counter[str] = field(default_factory=Counter)
    completed: int = 0
    not_completed: list[str] = field(default_factory=list)
    double_runs: list[tuple[float, str, tuple[str, ...]]] = field(default_factory=list)
    leftover_overlaps: int = 0
    orphans: list[str] = field(default_factory=list)
    left_after_delete: list[str] = field(default_factory=list)
    quota_mismatches: list[str] = field(default_factory=list)
    quota_checks: int = 0
    samples: int = 0
    unanswered_samples: int = 0
    requeues: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def violations(self) -> int:
        return (len(self.not_completed) + len(self.double_runs) + len(self.orphans)
                + len(self.left_after_delete) + len(self.quota_mismatches))


def appwrapper(name: str, rng: random.Random) -> dict[str, Any]:
    pods = rng.choice((1, 1, 2))
    gpus = rng.choice((1, 2, 4, 8))
    runtime = rng.randint(5, 25)
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
        "metadata": {"name": name, "labels": {"soak-quota": "team"}},
        "spec": {"schedulingSpec": {"minAvailable": pods, "requeuing": {
            "timeInSeconds": 120, "pauseTimeInSeconds": 5, "maxNumRequeuings": 0}},
            "resources": {"GenericItems": [{"completionstatus": "Complete",
                                            "generictemplate": {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                         "template": {
                             "metadata": {"annotations": {"mcad.test/runtime": f"{runtime}s"}},
                             "spec": {"restartPolicy": "Never", "containers": [{
                                 "name": "main", "image": "busybox", "resources": {
                                     "requests": {GPU: str(gpus), "cpu": "1"},
                                     "limits": {GPU: str(gpus)}}}]}}}}}]}}}


def quota_tree() -> dict[str, Any]:
    return {"apiVersion": "quota.codeflare.dev/v1alpha1", "kind": "QuotaSubtree",
            "metadata": {"name": "soak-quota", "namespace": "kube-system",
                         "labels": {"tree": "soak-quota"}},
            "spec": {"children": [{"name": "team", "quotas": {
                "hardLimit": True, "requests": {GPU: str(QUOTA_GPUS)}}}]}}


class Soak:
    def __init__(self, *, plan: SoakPlan, testbed_dir: Path, hub: Connection,
                 spokes: dict[str, Connection], controller: ControllerProcess,
                 log: Callable[[str], object] = print) -> None:
        self.plan = plan
        self.dir = testbed_dir
        self.hub = hub
        self.spokes = spokes
        self.controller = controller
        self.log = log
        self.rng = random.Random(plan.seed)
        self.report = SoakReport(seed=plan.seed, appwrappers=plan.appwrappers)
        self.names: list[str] = []
        self.uids: dict[str, str] = {}
        self.frozen: set[str] = set()
        self.quiet = asyncio.Event()

    # -- the run --------------------------------------------------------------------------
    async def run(self) -> SoakReport:
        started = time.monotonic()
        await self._create(refs.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": NAMESPACE}})
        await self._create(refs.QUOTASUBTREES, quota_tree(), namespace="kube-system")
        submitted = asyncio.Event()
        sampler = asyncio.create_task(self._sample())
        injector = asyncio.create_task(self._inject(submitted))
        try:
            await self._submit()
            submitted.set()
            await injector
            self.log("faults done; waiting for every AppWrapper to complete")
            await self._settle()
        finally:
            sampler.cancel()
            injector.cancel()
            await asyncio.gather(sampler, injector, return_exceptions=True)
            for spoke in list(self.frozen):
                faults.resume(self.dir, spoke)
        try:
            await self._check_end()
        finally:
            with contextlib.suppress(ApiError):  # its tree would hold back later work
                await verbs.delete(self.hub, refs.QUOTASUBTREES, "soak-quota",
                                   namespace="kube-system")
        self.report.seconds = time.monotonic() - started
        return self.report

    async def _create(self, ref: ResourceRef, body: dict[str, Any], *,
                      namespace: str | None = None) -> dict[str, Any]:
        for _ in range(120):
            try:
                return await verbs.create(self.hub, ref, body, namespace=namespace)
            except ApiError as err:
                if err.reason == "AlreadyExists":
                    return body
                await asyncio.sleep(1)  # the hub is being restarted: try again
        raise RuntimeError(f"could not create {body['metadata']['name']}")

    async def _submit(self) -> None:
        for i in range(self.plan.appwrappers):
            name = f"soak-{i:04d}"
            created = await self._create(refs.APPWRAPPERS, appwrapper(name, self.rng),
                                         namespace=NAMESPACE)
            self.names.append(name)
            self.uids[name] = str(created["metadata"].get("uid", ""))
            if i % 50 == 0:
                self.log(f"submitted {i + 1}/{self.plan.appwrappers}; faults so far: "
                         f"{dict(self.report.faults)}")
            await asyncio.sleep(self.rng.expovariate(1 / self.plan.arrival_s))

    async def _inject(self, submitted: asyncio.Event) -> None:
        while not submitted.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(submitted.wait(),
                                       self.rng.uniform(*self.plan.fault_every_s))
            if submitted.is_set():
                return
            drawn = sum(self.report.faults.values())
            kind = self.plan.kinds[drawn % len(self.plan.kinds)] if self.plan.kinds else \
                self.rng.choice(("pause-spoke", "pause-spoke", "kill-controller",
                                 "restart-hub"))
            self.report.faults[kind] += 1
            if kind == "pause-spoke":
                spoke = self.rng.choice(SPOKES)
                seconds = self.rng.uniform(*self.plan.pause_s)
                self.log(f"fault: {spoke} frozen for {seconds:.0f}s")
                faults.pause(self.dir, spoke)
                self.frozen.add(spoke)
                try:
                    await asyncio.sleep(seconds)
                finally:
                    faults.resume(self.dir, spoke)
                    self.frozen.discard(spoke)
            elif kind == "kill-controller":
                self.log("fault: mcad killed with SIGKILL, started again")
                self.controller.kill()
                await asyncio.to_thread(self.controller.start, wait_ready=False)
            else:
                self.log("fault: hub API server restarted")
                took = await asyncio.to_thread(faults.restart, self.dir, "hub")
                self.log(f"  hub answering again after {took:.1f}s")

    # -- observing ------------------------------------------------------------------------
    async def _pods(self, spoke: str) -> dict[str, int] | None:
        """Running pods per AppWrapper uid on ``spoke``; None when it does not answer."""
        try:
            listing = await asyncio.wait_for(self.spokes[spoke].request(
                "GET", refs.PODS.path(namespace=NAMESPACE), params={"labelSelector": UID_LABEL},
                timeout=2, attempts=1), 3)
        except (ApiError, TimeoutError):
            return None
        out: Counter[str] = Counter()
        for pod in listing.get("items") or []:
            meta = pod.get("metadata") or {}
            if (pod.get("status") or {}).get("phase") == "Running" and \
                    not meta.get("deletionTimestamp"):
                out[(meta.get("labels") or {}).get(UID_LABEL, "")] += 1
        return dict(out)

    async def _leftovers(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        try:
            listing, _ = await verbs.list_all(self.hub, refs.SPOKECLUSTERS)
        except ApiError:
            return out
        for spoke in listing:
            name = spoke["metadata"]["name"]
            out[name] = {e.get("uid", "") for e in (spoke.get("status") or {}).get(
                "leftovers") or []}
        return out

    async def _sample(self) -> None:
        while True:
            sample = {spoke: await self._pods(spoke) for spoke in SPOKES}
            self.report.samples += 1
            if any(v is None for v in sample.values()):
                self.report.unanswered_samples += 1
            where: dict[str, list[str]] = {}
            for spoke, pods in sample.items():
                for uid in pods or {}:
                    where.setdefault(uid, []).append(spoke)
            doubles = {uid: spokes for uid, spokes in where.items() if len(spokes) > 1}
            if doubles:
                ledgers = await self._leftovers()
                for uid, spokes in doubles.items():
                    if any(uid in ledgers.get(s, set()) for s in spokes):
                        self.report.leftover_overlaps += 1
                    else:
                        self.report.double_runs.append((time.monotonic(), uid, tuple(spokes)))
            await asyncio.sleep(1)

    async def _states(self) -> dict[str, dict[str, Any]]:
        listing, _ = await verbs.list_all(self.hub, refs.APPWRAPPERS, namespace=NAMESPACE)
        return {a["metadata"]["name"]: a for a in listing}

    async def _settle(self) -> None:
        deadline = time.monotonic() + self.plan.settle_timeout_s
        while time.monotonic() < deadline:
            try:
                states = await self._states()
            except ApiError:
                await asyncio.sleep(2)
                continue
            done = sum(1 for a in states.values()
                       if (a.get("status") or {}).get("state") == "Completed")
            if done == len(self.names):
                return
            await self._check_quota(states)
            await asyncio.sleep(5)
        self.log("settle timed out")

    async def _check_quota(self, before: dict[str, dict[str, Any]]) -> None:
        """mcad_quota_used against what the hub says runs, when nothing moved for the
        seconds the metric may lag behind (it is reported about once a second)."""
        await asyncio.sleep(2.5)
        try:
            used = self.controller.sample("mcad_quota_used", tree="soak-quota", node="team",
                                          resource=GPU)
            after = await self._states()
        except (OSError, ApiError):
            return
        if _placements(before) != _placements(after):
            return  # something was dispatched, requeued or finished meanwhile
        running = sum(_gpus(a) for a in after.values() if _holds_quota(a))
        self.report.quota_checks += 1
        if used is not None and int(used) != running:
            self.report.quota_mismatches.append(f"mcad_quota_used {used} != {running} running")

    async def _check_end(self) -> None:
        states = await self._states()
        for name in self.names:
            status = (states.get(name) or {}).get("status") or {}
            if status.get("state") == "Completed":
                self.report.completed += 1
            else:
                self.report.not_completed.append(f"{name}: {status.get('state')} "
                                                 f"{status.get('message', '')}")
            for cond in status.get("conditions") or []:
                if cond.get("type") == "Requeuing" and cond.get("status") == "False":
                    self.report.requeues[str(cond.get("reason"))] += 1
        await self._check_quota(states)
        placed = {str(a["metadata"]["uid"]): (a.get("status") or {}).get("clusterName")
                  for a in states.values()}
        for spoke, conn in self.spokes.items():
            jobs, _ = await verbs.list_all(conn, JOBS, namespace=NAMESPACE,
                                           label_selector=UID_LABEL)
            for job in jobs:
                uid = job["metadata"]["labels"][UID_LABEL]
                if placed.get(uid) != spoke:
                    self.report.orphans.append(f"Job {job['metadata']['name']} on {spoke}")
        # Delete everything; nothing of it may stay anywhere.
        for name in self.names:
            with contextlib.suppress(NotFound):
                await verbs.delete(self.hub, refs.APPWRAPPERS, name, namespace=NAMESPACE)
        deadline = time.monotonic() + 300
        left: list[str] = []
        while time.monotonic() < deadline:
            left = [f"AppWrapper {n}" for n in (await self._states())]
            for spoke, conn in self.spokes.items():
                for ref in (JOBS, refs.PODS):
                    objs, _ = await verbs.list_all(conn, ref, namespace=NAMESPACE,
                                                   label_selector=UID_LABEL)
                    left += [f"{ref.kind} {o['metadata']['name']} on {spoke}" for o in objs]
            ledgers = await self._leftovers()
            left += [f"leftover {u} on {s}" for s, uids in ledgers.items() for u in uids]
            if not left:
                break
            await asyncio.sleep(2)
        self.report.left_after_delete = left


def _placements(states: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    return {n: ((a.get("status") or {}).get("clusterName"), (a.get("status") or {}).get("state"))
            for n, a in states.items()}


def _holds_quota(aw: dict[str, Any]) -> bool:
    status = aw.get("status") or {}
    return bool(status.get("clusterName")) and status.get("state") not in ("Completed",
                                                                           "Failed")


def _gpus(aw: dict[str, Any]) -> int:
    total = 0
    for item in aw["spec"]["resources"]["GenericItems"]:
        spec = item["generictemplate"]["spec"]
        container = spec["template"]["spec"]["containers"][0]
        total += int(spec["parallelism"]) * int(container["resources"]["requests"][GPU])
    return total
