"""AppWrapper v1beta2's semantics in a whole controller over scripted hub and spoke: an
AppWrapper written as v1beta2 (stored as the conversion stores it) runs like any other;
``spec.suspend`` keeps it out of the queue until cleared and takes a running one back;
one whose ``managedBy`` names another controller is left alone (no finalizer, no
status); ``kueue.x-k8s.io/queue-name`` charges the node the configuration maps it to,
and an unknown queue waits with a sentence; ``kueue.x-k8s.io/priority-class`` gives the
value of the class it names, and an unknown class waits until it appears."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcad.api.conversion import V1BETA2_KEPT, to_v1beta1
from mcad.config import RunConfig
from mcad.core.placement.capacity import AppWrapperKey
from mcad.gateway import watch as watch_module
from tests.controller.seam import (
    AW_PATH,
    GPU,
    Hub,
    Running,
    SpokeJobs,
    run_controller,
    spoke_transport,
    until,
)
from tests.gateway.scripted import ScriptedTransport, listing

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


@pytest.fixture(autouse=True)
def fast_watch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "BACKOFF_MIN_S", 0.01)


@contextlib.asynccontextmanager
async def controlling(hub: Hub, spoke: ScriptedTransport,
                      config: RunConfig | None = None) -> AsyncIterator[Running]:
    async for run in run_controller(hub, spoke, config):
        yield run


def v1beta2(name: str, *, pods: int = 1, suspend: bool | None = None,
            managed_by: str | None = None, labels: dict[str, str] | None = None
            ) -> dict[str, Any]:
    """A v1beta2 AppWrapper of one Job, stored as the conversion webhook stores it."""
    spec: dict[str, Any] = {"components": [{"template": {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"requests": {GPU: "8"}}}]}}}}}]}
    if suspend is not None:
        spec["suspend"] = suspend
    if managed_by is not None:
        spec["managedBy"] = managed_by
    return to_v1beta1({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                       "metadata": {"name": name, "namespace": "ns", "labels": labels or {}},
                       "spec": spec})


def status_of(hub: Hub, name: str) -> dict[str, Any]:
    return dict(hub.get("ns", name).get("status") or {})


def queued_reason(hub: Hub, name: str) -> str:
    for cond in status_of(hub, name).get("conditions") or []:
        if cond["type"] == "Queued" and cond["status"] == "True":
            return str(cond["reason"])
    return ""


def edit(hub: Hub, name: str, **spec: Any) -> None:
    """A v1beta2 client changes the spec: the kept annotation changes (no new
    generation, as the API server does for metadata)."""
    obj = hub.get("ns", name)
    annotations = obj["metadata"]["annotations"]
    kept = json.loads(annotations[V1BETA2_KEPT])
    kept.update(spec)
    annotations[V1BETA2_KEPT] = json.dumps(kept)
    obj["metadata"]["resourceVersion"] = str(next(hub.versions))
    hub.transport.live[AW_PATH].event("MODIFIED", obj)


async def test_a_v1beta2_appwrapper_runs_like_any_other() -> None:
    hub, spoke = Hub(), spoke_transport()
    jobs = SpokeJobs(spoke)
    async with controlling(hub, spoke):
        hub.add(v1beta2("train", pods=2))
        await until("dispatched", lambda: status_of(hub, "train").get("state") == "Running")
        await until("created", lambda: "train" in jobs.jobs)
    assert hub.get("ns", "train")["metadata"].get("finalizers")


async def test_suspend_keeps_it_out_of_the_queue_and_takes_a_running_one_back() -> None:
    hub, spoke = Hub(), spoke_transport()
    jobs = SpokeJobs(spoke)
    async with controlling(hub, spoke):
        hub.add(v1beta2("held", suspend=True))
        await until("suspended", lambda: queued_reason(hub, "held") == "Suspended")
        assert "spec.suspend is true" in status_of(hub, "held")["message"]
        await asyncio.sleep(5)
        assert not jobs.jobs and status_of(hub, "held")["state"] == "Pending"
        edit(hub, "held", suspend=False)
        await until("dispatched once cleared", lambda: "held" in jobs.jobs)
        edit(hub, "held", suspend=True)
        await until("taken back", lambda: "held" in jobs.deleted)
        await until("suspended again", lambda: queued_reason(hub, "held") == "Suspended")
        assert status_of(hub, "held")["state"] == "Pending"


async def test_an_appwrapper_managed_by_another_controller_is_left_alone() -> None:
    hub, spoke = Hub(), spoke_transport()
    jobs = SpokeJobs(spoke)
    async with controlling(hub, spoke) as run:
        hub.add(v1beta2("theirs", managed_by="kueue.x-k8s.io/multikueue"))
        hub.add(v1beta2("ours", managed_by="workload.codeflare.dev/appwrapper-controller"))
        await until("ours dispatched", lambda: "ours" in jobs.jobs)
        await asyncio.sleep(5)
        assert "status" not in hub.get("ns", "theirs")
        assert not hub.get("ns", "theirs")["metadata"].get("finalizers")
        assert AppWrapperKey("ns/theirs") not in run.controller.state.appwrappers


async def test_a_queue_name_charges_its_node_and_an_unknown_one_waits() -> None:
    hub, spoke = Hub(), spoke_transport()
    jobs = SpokeJobs(spoke)
    config = RunConfig(queue_names={"default-queue": {"gpus": "team-a"}})
    async with controlling(hub, spoke, config) as run:
        hub.add(v1beta2("known", labels={"kueue.x-k8s.io/queue-name": "default-queue"}))
        hub.add(v1beta2("lost", labels={"kueue.x-k8s.io/queue-name": "nope"}))
        await until("the lost one waits", lambda: queued_reason(hub, "lost") == "QueueNotFound")
        assert "names queue 'nope', which the mcad configuration does not map to quota " \
               "(queueNames has default-queue)" in status_of(hub, "lost")["message"]
        rec = run.controller.state.appwrappers[AppWrapperKey("ns/known")]
        entry = rec.core_entry(config)
        assert entry.quota_labels["gpus"] == "team-a" and entry.hold is None
        assert "lost" not in jobs.jobs


async def test_a_priority_class_gives_its_value_and_an_unknown_one_waits() -> None:
    hub, spoke = Hub(), spoke_transport()
    SpokeJobs(spoke)
    hub.transport.on("GET", CLASSES, listing([
        {"metadata": {"name": "high", "resourceVersion": "1"}, "value": 1000}]))
    async with controlling(hub, spoke) as run:
        hub.add(v1beta2("urgent", labels={"kueue.x-k8s.io/priority-class": "high"}))
        hub.add(v1beta2("later", labels={"kueue.x-k8s.io/priority-class": "someday"}))
        await until("the unknown class waits",
                    lambda: queued_reason(hub, "later") == "PriorityClassNotFound")
        appwrappers = run.controller.state.appwrappers
        assert appwrappers[AppWrapperKey("ns/urgent")].priority == 1000
        hub.transport.live[CLASSES].event("ADDED", {
            "metadata": {"name": "someday", "resourceVersion": "2"}, "value": -5})
        await until("dispatched once its class exists",
                    lambda: status_of(hub, "later").get("state") == "Running")
        assert appwrappers[AppWrapperKey("ns/later")].priority == -5
