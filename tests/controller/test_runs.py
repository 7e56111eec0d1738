"""Orders tied to their run, through the gateway seam (issue 19's defects 2 to 5).

A whole controller over a scripted hub and spoke, one case per defect found by a read
of the code:

- a retried status write whose first attempt was committed is not taken for a lost
  race (the dispatch stands: one Dispatched Event, no write storm);
- a link rebuilt for a cluster (a rotated Secret) follows the work running there: the
  Job's Complete is seen;
- a grow ordered for a dispatch that is then undone is never carried out on the next
  dispatch;
- an eviction ordered while the victim's dispatch was still assumed is carried out on
  that run once it is persisted, without waiting for another cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from mcad.config import PreemptionSettings, RunConfig
from mcad.controller.objects import PLANNED
from mcad.controller.runner import Controller
from mcad.core.placement.capacity import AppWrapperKey
from mcad.gateway import watch as watch_module
from mcad.gateway.transport import Reply
from tests.builders.quota import make_tree
from tests.controller.seam import (
    AW_PATH,
    GPU,
    Hub,
    Running,
    SpokeJobs,
    job_appwrapper,
    merge,
    run_controller,
    spoke_transport,
    until,
)
from tests.gateway.scripted import Request, ScriptedTransport, listing, status

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
NS_AW = "/apis/workload.codeflare.dev/v1beta1/namespaces/ns/appwrappers"


@contextlib.asynccontextmanager
async def controlling(hub: Hub, spoke: ScriptedTransport,
                      config: RunConfig | None = None) -> AsyncIterator[Running]:
    async for run in run_controller(hub, spoke, config):
        yield run


@pytest.fixture(autouse=True)
def fast_watch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "BACKOFF_MIN_S", 0.01)


def state_of(hub: Hub, name: str) -> dict[str, Any]:
    return dict(hub.get("ns", name).get("status") or {})


def events(hub: Hub, reason: str) -> list[Request]:
    return [r for r in hub.transport.sent("POST", "/api/v1/namespaces/ns/events")
            if r.body.get("reason") == reason]


def commit_quietly(hub: Hub, key: tuple[str, str], answer: Reply,
                   echo_after: float | None = None) -> Callable[[Request], Reply]:
    """A status PATCH the hub applies (conditionally, as the API server would) and then
    answers with ``answer`` (a time-out, say); its watch event comes ``echo_after``
    seconds later (None: never by itself)."""
    def apply(request: Request) -> Reply:
        current = hub.appwrappers[key]
        body = copy.deepcopy(request.body)
        (body.get("metadata") or {}).pop("resourceVersion", None)
        updated = merge(current, body)
        updated["metadata"]["resourceVersion"] = str(next(hub.versions))
        hub.appwrappers[key] = updated
        if echo_after is not None:
            asyncio.get_running_loop().call_later(
                echo_after, lambda: hub.transport.live[AW_PATH].event("MODIFIED", updated))
        return answer
    return apply


async def test_a_committed_write_met_by_its_own_retry_is_not_a_lost_race() -> None:
    """The dispatch's status PATCH is committed but answered 504; the connection retries
    it and gets 409 (the hub holds the first attempt's write). The hub is read again and
    shows this run: the dispatch stands (one Dispatched Event, counted once), instead of
    being undone and decided again while the watch has not echoed it yet."""
    hub, spoke = Hub(), spoke_transport()
    jobs = SpokeJobs(spoke)
    hub.add(job_appwrapper("train"))
    hub.transport.first("PATCH", f"{NS_AW}/train/status",
                        commit_quietly(hub, ("ns", "train"), status(504, "Timeout"),
                                       echo_after=30.0))
    async with controlling(hub, spoke) as run:
        await until("the Job created", lambda: "train" in jobs.jobs)
        await asyncio.sleep(5)
        persists = [r for r in hub.transport.sent("PATCH", f"{NS_AW}/train/status")
                    if (r.body.get("status") or {}).get("clusterName")]
        assert len(persists) == 2  # the attempt and its retry; then nothing more
        assert state_of(hub, "train").get("runId") == persists[0].body["status"].get("runId")
        assert len(events(hub, "Dispatched")) == 1
        assert list(jobs.jobs) == ["train"]
        assert run.controller.state.appwrappers[AppWrapperKey("ns/train")].admitted


@contextlib.asynccontextmanager
async def running_job(name: str = "train") -> AsyncIterator[tuple[Hub, SpokeJobs, Running]]:
    """A controller with one Job AppWrapper running: its Job made on the spoke."""
    hub, spoke = Hub(), spoke_transport()
    jobs = SpokeJobs(spoke)
    spoke.only("GET", "/apis/batch/v1/jobs", lambda _r: listing(list(jobs.jobs.values())))
    hub.add(job_appwrapper(name))
    async with controlling(hub, spoke) as run:
        await until("running", lambda: state_of(hub, name).get("state") == "Running"
                    and name in jobs.jobs)
        yield hub, jobs, run


async def job_completes(hub: Hub, jobs: SpokeJobs, name: str = "train") -> None:
    """The Job reports Complete; the AppWrapper must follow."""
    jobs.set_conditions(name, Complete="True")
    await until("completed", lambda: state_of(hub, name).get("state") == "Completed",
                within=30)


async def test_a_rebuilt_link_follows_the_jobs_running_on_its_cluster() -> None:
    """The link to a cluster is made anew (as a rotated kubeconfig Secret makes it); the
    Job then completes: the new link watches Jobs again before it is ready, so the
    AppWrapper completes and gives its quota back instead of staying Running forever."""
    async with running_job() as (hub, jobs, run):
        links = run.controller.links
        links._stop("local")  # what a rotated Secret does to the link
        links.sync()
        await until("the new link ready", lambda: "local" in run.controller.state.links
                    and run.controller.state.links["local"].health.ready)
        await job_completes(hub, jobs)


async def test_a_running_appwrapper_keeps_no_manifests_and_still_completes() -> None:
    """The manifests are worked out for the dispatch and forgotten once created (kept,
    they were a second copy of every running AppWrapper's templates); its progress is
    followed from what is kept instead, and its Job completing still completes it."""
    async with running_job() as (hub, jobs, run):
        rec = run.controller.state.appwrappers[AppWrapperKey("ns/train")]
        await until("followed", lambda: "followed" in rec.observed.kept)
        assert PLANNED not in rec.observed.kept
        await job_completes(hub, jobs)
        assert PLANNED not in rec.observed.kept


def foreign_pod(index: int, node: str, *, kind: str = "ADDED") -> tuple[str, dict[str, Any]]:
    """A pod mcad does not own taking a whole 8-GPU node."""
    return kind, {"metadata": {"name": f"other-{index}", "namespace": "other",
                               "uid": f"other-{index}", "labels": {}},
                  "spec": {"nodeName": node, "containers": [
                      {"name": "c", "resources": {"requests": {GPU: "8"}}}]},
                  "status": {"phase": "Running"}}


def push(spoke: ScriptedTransport, *pods: tuple[str, dict[str, Any]]) -> None:
    for kind, pod in pods:
        spoke.live["/api/v1/pods"].event(kind, pod)


def elastic_appwrapper() -> dict[str, Any]:
    body = job_appwrapper("elastic", pods=4, gpus=8)
    body["metadata"]["annotations"] = {"workload.codeflare.dev/elastic": "true"}
    body["spec"]["schedulingSpec"]["minAvailable"] = 1
    return body


async def test_a_grow_ordered_for_an_undone_dispatch_is_not_carried_out_on_the_next() -> None:
    """An elastic AppWrapper is dispatched at 1 pod (three nodes taken by others); while
    that dispatch is being persisted room appears and a grow to 4 is ordered for it. The
    persist fails, so that run never was. When it is dispatched again (at 2 pods: room
    is scarce again), the old grow must not be carried out: it was for another run."""
    hub, spoke = Hub(), spoke_transport()
    jobs = SpokeJobs(spoke)
    release = asyncio.Event()

    async def slow_then_fail(request: Request) -> Reply:
        await release.wait()
        return status(500, "InternalError", "etcd leader changed")

    async with controlling(hub, spoke) as run:
        await until("the link ready", lambda: "local" in run.controller.state.links
                    and run.controller.state.links["local"].health.ready)
        push(spoke, *(foreign_pod(i, f"n{i}") for i in range(3)))
        await asyncio.sleep(1)
        hub.transport.first("PATCH", f"{NS_AW}/elastic/status", slow_then_fail,
                            slow_then_fail)  # the attempt and its retry
        hub.add(elastic_appwrapper())
        rec = run.controller.state.appwrappers
        await until("dispatch assumed", lambda: AppWrapperKey("ns/elastic") in rec
                    and rec[AppWrapperKey("ns/elastic")].admitted)
        push(spoke, *(foreign_pod(i, f"n{i}", kind="DELETED") for i in range(3)))
        await until("a grow ordered for the assumed run", lambda: run.controller.dispatcher.last
                    and run.controller.dispatcher.last[1].resizes)
        release.set()
        await until("the persist failed", lambda: len(hub.transport.sent(
            "PATCH", f"{NS_AW}/elastic/status")) >= 2)
        push(spoke, *(foreign_pod(i, f"n{i}") for i in range(2)))  # room is scarce again
        await until("dispatched again and created", lambda: "elastic" in jobs.jobs,
                    within=120)
        await asyncio.sleep(10)
        status_now = state_of(hub, "elastic")
        assert status_now["admittedPods"] == 2
        assert jobs.jobs["elastic"]["spec"]["parallelism"] == 2
        grows = [r for r in spoke.sent("PATCH") if "/jobs/elastic" in r.path]
        assert grows == []


async def test_an_eviction_ordered_while_the_dispatch_was_assumed_is_carried_out() -> None:
    """A low-priority gang's dispatch is still being persisted when an urgent one of the
    same quota node needs its quota: the eviction is ordered for the run the dispatch is
    persisted as, so once it is persisted the eviction is carried out on it with no
    further cycle (the dispatcher is frozen here), not dropped for naming another run."""
    hub, spoke = Hub(), spoke_transport()
    SpokeJobs(spoke)
    hub.transport.only("GET", "/apis/quota.codeflare.dev/v1alpha1/quotasubtrees", listing(
        make_tree("team").node("root", gpu=32).child("default", parent="root", gpu=32,
                                                      hard=True).subtrees()))
    release = asyncio.Event()
    config = RunConfig(preemption=PreemptionSettings(priority=True, reclaim=True))
    key = ("ns", "low")

    async def slow_commit(request: Request) -> Reply:
        await release.wait()
        return hub._patch(key)(request)  # the hub's own merge

    async with controlling(hub, spoke, config) as run:
        controller: Controller = run.controller
        await until("the link ready", lambda: "local" in controller.state.links
                    and controller.state.links["local"].health.ready)
        hub.transport.first("PATCH", f"{NS_AW}/low/status", slow_commit)
        hub.add(job_appwrapper("low", pods=4, gpus=8))
        await until("low assumed", lambda: AppWrapperKey("ns/low") in controller.state
                    .appwrappers and controller.state.appwrappers[AppWrapperKey("ns/low")]
                    .admitted)
        urgent = job_appwrapper("urgent", pods=2, gpus=8)
        urgent["spec"]["priority"] = 100
        hub.add(urgent)
        await until("an eviction ordered", lambda: controller.dispatcher.last
                    and controller.dispatcher.last[1].evictions)
        # No more cycles from here on: the order already made must be carried out alone.
        controller.hub_cache.not_synced = lambda: ["frozen"]  # type: ignore[method-assign]
        release.set()

        def requeuing() -> bool:
            return any(c["type"] == "Requeuing" and c["reason"] == "Preempted" and
                       "ns/urgent" in c["message"]
                       for c in state_of(hub, "low").get("conditions") or [])

        await until("low taken back for urgent", requeuing, within=30)
