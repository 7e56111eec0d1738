"""Namespaces closed to mcad, through the gateway seam: a whole controller over a scripted
hub and spoke.

- a spoke namespace its admin labels ``cluster.codeflare.dev/closed=true`` (seen by the
  link's labelled watch) keeps the AppWrapper waiting (NoMatchingCluster, the sentence
  naming namespace, cluster and label): nothing persisted, nothing created; once the
  label is gone it is dispatched;
- a label set after the cycle decided (the watch has not said it yet; the namespace as
  read at creation has it) fails the AppWrapper before anything is created, and leaves
  no Dispatched=True;
- the namespace of mcad's identity on the spoke (its SelfSubjectReview) is closed alike;
- a namespace matching a refusedNamespaces pattern fails before any dispatch is written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcad.config import RunConfig
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
from tests.gateway.scripted import ScriptedTransport, listing, reply, status

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
LABEL = "cluster.codeflare.dev/closed"
NAMESPACES = "/api/v1/namespaces"
REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


@pytest.fixture(autouse=True)
def fast_watch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "BACKOFF_MIN_S", 0.01)


def closed(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"ns-{name}", "labels": {LABEL: "true"}}}


@contextlib.asynccontextmanager
async def controlling(hub: Hub, spoke: ScriptedTransport,
                      config: RunConfig | None = None) -> AsyncIterator[Running]:
    async for run in run_controller(hub, spoke, config):
        yield run


def status_of(hub: Hub, namespace: str, name: str) -> dict[str, Any]:
    return dict(hub.get(namespace, name).get("status") or {})


def condition(hub: Hub, namespace: str, name: str, type_: str) -> dict[str, Any]:
    return next((c for c in status_of(hub, namespace, name).get("conditions") or []
                 if c["type"] == type_), {})


def dispatched_true_written(hub: Hub, namespace: str, name: str) -> bool:
    """Did any status write for the AppWrapper ever carry Dispatched=True?"""
    path = f"/apis/workload.codeflare.dev/v1beta1/namespaces/{namespace}/appwrappers/" \
           f"{name}/status"
    return any(c.get("type") == "Dispatched" and c.get("status") == "True"
               for r in hub.transport.sent("PATCH", path)
               for c in (r.body.get("status") or {}).get("conditions") or [])


async def test_a_namespace_labelled_closed_on_the_spoke_waits_and_is_dispatched_once_opened(
        ) -> None:
    hub, spoke = Hub(), spoke_transport()
    spoke.only("GET", NAMESPACES, listing([closed("cert-manager")]))
    jobs = SpokeJobs(spoke, namespace="cert-manager")
    hub.add(job_appwrapper("train", "cert-manager"))
    async with controlling(hub, spoke):
        await until("the wait written", lambda: condition(
            hub, "cert-manager", "train", "Queued").get("reason") == "NoMatchingCluster")
        message = condition(hub, "cert-manager", "train", "Queued")["message"]
        assert message == (
            f"namespace cert-manager is labelled {LABEL}=true on cluster local; mcad does "
            "not create AppWrappers' objects there, and it may use no other cluster: submit "
            "it in the namespace of the team that runs it")
        await asyncio.sleep(5)
        assert not jobs.jobs and not spoke.sent("POST", NAMESPACES)
        assert not status_of(hub, "cert-manager", "train").get("runId")
        assert not dispatched_true_written(hub, "cert-manager", "train")
        # Its admin takes the label off: the watch says DELETED, and it goes.
        spoke.live[NAMESPACES].event("DELETED", closed("cert-manager"))
        await until("the Job created", lambda: "train" in jobs.jobs)
        assert status_of(hub, "cert-manager", "train")["clusterName"] == "local"


async def test_a_label_set_after_the_decision_is_refused_at_creation() -> None:
    """The watch has not told of the label yet; the namespace read when creating (it
    exists: 409 to mcad's create) carries it. Nothing is created, and Dispatched goes
    False with the Failed condition."""
    hub, spoke = Hub(), spoke_transport()
    spoke.only("POST", NAMESPACES, status(409, "AlreadyExists"))
    spoke.on("GET", f"{NAMESPACES}/ns", reply(200, closed("ns")))
    jobs = SpokeJobs(spoke)
    hub.add(job_appwrapper("train"))
    async with controlling(hub, spoke):
        await until("the AppWrapper failed", lambda: status_of(
            hub, "ns", "train").get("state") == "Failed")
        failed = condition(hub, "ns", "train", "Failed")
        assert failed["reason"] == "NamespaceClosed"
        assert failed["message"] == (
            f"namespace ns is labelled {LABEL}=true on cluster local; mcad does not create "
            "AppWrappers' objects there: submit it in the namespace of the team that runs it")
        assert condition(hub, "ns", "train", "Dispatched")["status"] == "False"
        await asyncio.sleep(5)
        assert not jobs.jobs and not spoke.sent("POST", "/apis/batch/v1/namespaces/ns/jobs")


async def test_the_namespace_of_mcad_s_identity_on_the_spoke_is_closed_there() -> None:
    hub, spoke = Hub(), spoke_transport()
    spoke.on("POST", REVIEWS, reply(201, {"status": {"userInfo": {
        "username": "system:serviceaccount:spoke-agents:mcad"}}}))
    jobs = SpokeJobs(spoke, namespace="spoke-agents")
    hub.add(job_appwrapper("steal", "spoke-agents"))
    async with controlling(hub, spoke):
        await until("the wait written", lambda: condition(
            hub, "spoke-agents", "steal", "Queued").get("reason") == "NoMatchingCluster")
        assert condition(hub, "spoke-agents", "steal", "Queued")["message"].startswith(
            "namespace spoke-agents is the namespace of mcad's identity on cluster local; "
            "mcad does not create AppWrappers' objects there, and it may use no other "
            "cluster")
        await asyncio.sleep(5)
        assert not jobs.jobs and not dispatched_true_written(hub, "spoke-agents", "steal")


async def test_a_refused_pattern_fails_before_any_dispatch_is_written() -> None:
    hub, spoke = Hub(), spoke_transport()
    jobs = SpokeJobs(spoke, namespace="gpu-operator")
    hub.add(job_appwrapper("sneak", "gpu-operator"))
    config = RunConfig(refused_namespaces=["kube-*", "gpu-*"])
    async with controlling(hub, spoke, config):
        await until("the AppWrapper failed", lambda: status_of(
            hub, "gpu-operator", "sneak").get("state") == "Failed")
        failed = condition(hub, "gpu-operator", "sneak", "Failed")
        assert failed["reason"] == "SystemNamespace"
        assert failed["message"].startswith(
            "namespace gpu-operator is refused by the pattern gpu-* (refusedNamespaces); "
            "mcad does not create AppWrappers' objects there on any cluster")
        await asyncio.sleep(5)
        assert not jobs.jobs and not spoke.sent("POST", NAMESPACES)
        assert not dispatched_true_written(hub, "gpu-operator", "sneak")
