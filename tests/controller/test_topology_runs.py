"""Topology through the controller, over the scripted hub and spoke: the pin chosen by
the cycle is persisted with the dispatch (``status.topology``) and reaches every pod
template of the created Job as a required node affinity; the policy's levels stand in
for a spoke that names none; a level no spoke knows leaves the AppWrapper pending with
the sentence.

The spoke's 4 nodes are two racks (``n0``, ``n1`` in r1; ``n2``, ``n3`` in r2) of one
block."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcad.config import RunConfig
from mcad.core.life.health import AUTOPILOT_LABEL
from mcad.core.workload.topology import HOSTNAME
from mcad.gateway import watch as watch_module
from tests.controller.seam import (
    Hub,
    Running,
    SpokeJobs,
    job_appwrapper,
    run_controller,
    spoke_transport,
    until,
)
from tests.gateway.scripted import ScriptedTransport

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
BLOCK, RACK = "example.com/block", "example.com/rack"


@pytest.fixture(autouse=True)
def fast_watch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "BACKOFF_MIN_S", 0.01)


def racked_spoke() -> ScriptedTransport:
    return spoke_transport(labels=lambda i: {BLOCK: "b1", RACK: f"r{1 + i // 2}",
                                             HOSTNAME: f"n{i}"})


@contextlib.asynccontextmanager
async def controlling(hub: Hub, spoke: ScriptedTransport,
                      config: RunConfig | None = None) -> AsyncIterator[Running]:
    async for run in run_controller(hub, spoke, config):
        yield run


def rack_appwrapper(name: str, *, pods: int, gpus: int = 8,
                    level: str = RACK) -> dict[str, Any]:
    body = job_appwrapper(name, pods=pods, gpus=gpus)
    body["spec"]["schedulingSpec"]["topology"] = {"required": level}
    return body


def affinity(job: dict[str, Any]) -> Any:
    return job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


async def test_the_pin_is_persisted_and_reaches_the_pod_template() -> None:
    hub, spoke = Hub(), racked_spoke()
    hub.spoke_cluster["spec"]["topology"] = {"levels": [BLOCK, RACK]}
    jobs = SpokeJobs(spoke)
    hub.add(rack_appwrapper("train", pods=2))
    async with controlling(hub, spoke):
        await until("the Job created", lambda: "train" in jobs.jobs)
        status = hub.get("ns", "train")["status"]
        assert status["topology"] == {"levels": [BLOCK, RACK], "domains": [["b1", "r1"]]}
        assert affinity(jobs.jobs["train"]) == [{"matchExpressions": [
            {"key": BLOCK, "operator": "In", "values": ["b1"]},
            {"key": RACK, "operator": "In", "values": ["r1"]},
            # (and off nodes whose GPUs are unhealthy: mcad.core.life.health)
            {"key": AUTOPILOT_LABEL, "operator": "NotIn",
             "values": ["ERR", "EVICT", "TESTING"]}]}]


async def test_the_policy_s_levels_stand_in_for_a_spoke_that_names_none() -> None:
    """With the hostname as the last level the gang is pinned to the nodes it uses."""
    hub, spoke = Hub(), racked_spoke()
    jobs = SpokeJobs(spoke)
    hub.add(rack_appwrapper("train", pods=2, gpus=4))
    config = RunConfig(topology_levels=[BLOCK, RACK, HOSTNAME])
    async with controlling(hub, spoke, config):
        await until("the Job created", lambda: "train" in jobs.jobs)
        assert hub.get("ns", "train")["status"]["topology"] == {
            "levels": [BLOCK, RACK, HOSTNAME], "domains": [["b1", "r1", "n0"]]}
        assert affinity(jobs.jobs["train"])[0]["matchExpressions"][-2] == {
            "key": HOSTNAME, "operator": "In", "values": ["n0"]}


async def test_a_level_no_spoke_knows_waits_with_the_sentence() -> None:
    hub, spoke = Hub(), racked_spoke()
    hub.spoke_cluster["spec"]["topology"] = {"levels": [BLOCK, RACK]}
    jobs = SpokeJobs(spoke)
    hub.add(rack_appwrapper("train", pods=1, level="example.com/row"))
    async with controlling(hub, spoke):
        await until("pending with a reason", lambda: (hub.get("ns", "train").get("status")
                                                      or {}).get("message"))
        status = hub.get("ns", "train")["status"]
        assert status["state"] == "Pending"
        assert status["message"] == (
            "no cluster it may use knows the topology level example.com/row it asks for "
            "(spec.schedulingSpec.topology.required): local has no topology level "
            "example.com/row (its levels: example.com/block, example.com/rack); name one "
            "of their levels")
        assert jobs.jobs == {}


async def test_the_spoke_status_shows_free_gpus_per_rack_and_the_fragments() -> None:
    hub, spoke = Hub(), racked_spoke()
    hub.spoke_cluster["spec"]["topology"] = {"levels": [BLOCK, RACK]}
    jobs = SpokeJobs(spoke)
    hub.add(rack_appwrapper("train", pods=1, gpus=4))
    async with controlling(hub, spoke):
        await until("the Job created", lambda: "train" in jobs.jobs)
        jobs.pod("train", 0, node="n0")

        def summary() -> str:
            return str(((hub.spoke_cluster.get("status") or {}).get("topology") or {})
                       .get("summary", ""))
        await until("the status shows the room the gang holds", lambda: "12" in summary())
        assert summary() == ("free GPU per rack: b1/r1 12, b1/r2 16; 4 of 28 free GPU on "
                             "partly used nodes")
