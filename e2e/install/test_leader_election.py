"""Two replicas of ``mcad run`` on the real hub: one leads and dispatches, the other
stands by (serving /readyz and /metrics, writing nothing); after ``kill -9`` of the
leader the standby dispatches new work within 20 s; after SIGTERM (a rolling update)
it takes over within a few seconds; and no AppWrapper is ever dispatched twice."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from e2e.clusters import Cluster, kubectl
from e2e.dispatch.conftest import (
    ControllerProcess,
    create_aw,
    get_aw,
    job_appwrapper,
    wait_state,
)
from e2e.waiting import wait_until
from mcad.api.visibility import API_SERVICE
from mcad.webhook.apiservice import EXTERNAL_SERVICE

SPOKES = ("spoke-1", "spoke-2")
FAILOVER_LIMIT_S = 20.0


def readyz(proc: ControllerProcess) -> str:
    """What /readyz says, ready or not (a 503 says why: a new leader is not ready until
    its caches are listed and its first registration pass is done)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.port}/readyz", timeout=5) as r:
            return str(r.read().decode())
    except urllib.error.HTTPError as err:
        return str(err.read().decode())


async def dispatch_events(hub: Cluster, namespace: str) -> dict[str, int]:
    events = (await hub.core.list_namespaced_event(namespace)).items
    out: dict[str, int] = {}
    for event in events:
        if event.reason == "Dispatched":
            out[event.involved_object.name] = out.get(event.involved_object.name, 0) + 1
    return out


async def jobs_per_appwrapper(clusters: dict[str, Cluster], namespace: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for spoke in SPOKES:
        for job in (await clusters[spoke].batch.list_namespaced_job(namespace)).items:
            out[job.metadata.name] = out.get(job.metadata.name, 0) + 1
    return out


async def time_to_running(hub: Cluster, namespace: str, name: str, since: float) -> float:
    await wait_state(hub, namespace, name, "Running", "Completed", within=60)
    return time.monotonic() - since


async def test_one_leader_writes_and_the_standby_takes_over(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    hub = clusters["hub"]
    standby = ControllerProcess(mcad.hub_kubeconfig, tmp_path, name="replica-b")
    standby.start(wait_ready=False)
    figures: dict[str, Any] = {}
    try:
        assert readyz(standby).startswith("standby: the Lease mcad-system/mcad is held by")
        assert mcad.sample("mcad_leader") == 1 and standby.sample("mcad_leader") == 0
        await create_aw(hub, aw_namespace, job_appwrapper("before", pods=1, gpus=1,
                                                          runtime="1s"))
        await wait_state(hub, aw_namespace, "before", "Completed", within=60)
        assert standby.sample("mcad_dispatches_total", cluster="spoke-1") is None
        assert standby.sample("mcad_dispatches_total", cluster="spoke-2") is None

        # kill -9 of the leader: the standby waits out the Lease (15 s), then dispatches.
        killed = time.monotonic()
        mcad.kill()
        await create_aw(hub, aw_namespace, job_appwrapper("after-kill", pods=1, gpus=1,
                                                          runtime="1s"))
        figures["kill_9_s"] = await time_to_running(hub, aw_namespace, "after-kill", killed)
        assert figures["kill_9_s"] < FAILOVER_LIMIT_S, figures
        assert standby.sample("mcad_leader") == 1

        # The old leader comes back as a standby; then the new leader is stopped as a
        # rolling update stops it (SIGTERM): it releases the Lease, the other takes over.
        mcad.start(wait_ready=False)
        assert readyz(mcad).startswith("standby")
        stopped = time.monotonic()
        standby.stop()
        await create_aw(hub, aw_namespace, job_appwrapper("after-term", pods=1, gpus=1,
                                                          runtime="1s"))
        figures["sigterm_s"] = await time_to_running(hub, aw_namespace, "after-term", stopped)
        assert figures["sigterm_s"] < 8, figures

        async def leading() -> bool:
            return readyz(mcad) == "ready"

        await wait_until(leading, within=30, what="the restarted replica to lead")
        for name in ("before", "after-kill", "after-term"):
            await wait_state(hub, aw_namespace, name, "Completed", within=60)
        assert await jobs_per_appwrapper(clusters, aw_namespace) == {
            "before": 1, "after-kill": 1, "after-term": 1}
        assert await dispatch_events(hub, aw_namespace) == {
            "before": 1, "after-kill": 1, "after-term": 1}
        print(f"failover figures: {figures}")
    finally:
        standby.stop()
        if mcad.proc is None or mcad.proc.poll() is not None:
            mcad.start()


async def test_a_reset_in_flight_survives_a_leader_change_and_finishes_once(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    """A gang is reset (its pod failed), and the leader is killed during the reset's
    pause: the standby takes the Lease and finishes the reset, once: one new Job, one
    Resetting Event, ``resettingCount`` 1."""
    hub, ns = clusters["hub"], aw_namespace
    standby = ControllerProcess(mcad.hub_kubeconfig, tmp_path, name="replica-b")
    standby.start(wait_ready=False)
    try:
        wire = job_appwrapper("flaky", pods=2, gpus=1, runtime="5s")
        wire["metadata"]["annotations"] = {
            "workload.codeflare.dev.appwrapper/failureGracePeriodDuration": "0s",
            "workload.codeflare.dev.appwrapper/retryPausePeriodDuration": "25s"}
        await create_aw(hub, ns, wire)

        async def pods() -> list[Any]:
            found = []
            for spoke in SPOKES:
                found += (await clusters[spoke].core.list_namespaced_pod(
                    ns, label_selector="job-name=flaky")).items
            return found

        async def two_running() -> list[Any] | None:
            running = [p for p in await pods() if p.status.phase == "Running"]
            return running if len(running) == 2 else None

        first = await wait_until(two_running, within=60, what="flaky's pods running")
        spoke = str((await get_aw(hub, ns, "flaky"))["status"]["clusterName"])
        await clusters[spoke].core.patch_namespaced_pod(
            first[0].metadata.name, ns,
            {"metadata": {"annotations": {"mcad.test/fail-after": "0s"}}})

        async def reset_events() -> list[Any]:
            events = (await hub.core.list_namespaced_event(ns)).items
            return [e for e in events if e.reason == "Resetting"
                    and e.involved_object.name == "flaky"]

        async def resetting_and_told() -> bool:
            conds = (await get_aw(hub, ns, "flaky"))["status"].get("conditions") or []
            return any(c["type"] == "Resetting" and c["status"] == "True"
                       for c in conds) and bool(await reset_events())

        # Events are posted by their own task after the status write; a leader killed
        # between the two loses the Event (Events are best effort, as in Kubernetes).
        # What this test holds is that the standby does not tell it a second time, so
        # it kills only once the first leader's Event is on the hub.
        await wait_until(resetting_and_told, within=30, what="flaky resetting, and told")
        mcad.kill()  # in the reset's pause: the standby must finish it
        done = await wait_state(hub, ns, "flaky", "Completed", within=120)
        assert done["status"]["resettingCount"] == 1
        resets = await reset_events()
        assert len(resets) == 1 and (resets[0].count or 1) == 1, resets
        assert await jobs_per_appwrapper(clusters, ns) == {"flaky": 1}
    finally:
        standby.stop()
        if mcad.proc is None or mcad.proc.poll() is not None:
            mcad.start()


def test_a_leader_is_ready_only_once_its_registration_is_in_place(
        mcad: ControllerProcess, hub_crds: Cluster, kubectl_path: Path) -> None:
    """/readyz says ready once the leader's first registration pass is done: the APIService
    already names this replica when ``start`` (which waits for ready) returns. Before, it
    said ready once the certificate was loaded, and the pass's last write (the
    APIService) could land after a ``kubectl apply`` of the manifests that followed the
    start, undoing it: the fresh-clone CI of d0ece2c failed so in e2e/install/conftest.py,
    right after test_leader_election restarted the session's controller. Alone, this
    test passed on the code before too (the pass usually ends before the caches are
    listed): it states the rule, it does not force the race."""
    mcad.stop()
    try:
        # Another registration in its place, as a replica gone (or the manifests) left it.
        kubectl(kubectl_path, hub_crds, "patch", "apiservice", API_SERVICE, "--type=merge",
                "-p", '{"spec": {"service": {"name": "mcad-visibility", "port": 443}}}')
    finally:
        mcad.start()
    service = yaml.safe_load(kubectl(kubectl_path, hub_crds, "get", "apiservice", API_SERVICE,
                                     "-o", "yaml"))["spec"]["service"]
    assert (service["name"], service["port"]) == (EXTERNAL_SERVICE, mcad.tls_port)
