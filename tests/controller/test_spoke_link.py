"""A spoke link over a scripted spoke: caches follow lists and watches (a relist drops
what was deleted meanwhile, for nodes, pods and wrapped objects alike, so a stale
Failed=True cannot outlive its Job), and health is ready only while every watch is
synced and the API server answers its probe. The namespaces its admin closed to mcad are
followed by a labelled watch, and the namespace of mcad's identity there is learned when
the link connects."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from mcad.controller import spoke_link
from mcad.controller.spoke_link import SpokeLink
from mcad.core.life.wrapping import UID_LABEL
from mcad.gateway.connection import Connection
from mcad.gateway.errors import ServerError
from mcad.gateway.refs import ResourceRef
from mcad.gateway.transport import TransportError
from tests.gateway.scripted import (
    CORE_KINDS,
    ScriptedTransport,
    aggregated_discovery,
    listing,
    reply,
    status,
)
from tests.metrics.sample import sample

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
JOBS = ResourceRef("batch/v1", "Job", "jobs", namespaced=True)
GPU = "nvidia.com/gpu"


def node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {GPU: str(gpus), "cpu": "32"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(uid: str, node_name: str, gpus: int = 2, owner: str = "u1") -> dict[str, Any]:
    return {"metadata": {"name": uid, "namespace": "ns", "uid": uid,
                         "labels": {UID_LABEL: owner}},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "c", "resources": {"requests": {GPU: str(gpus)}}}]},
            "status": {"phase": "Running"}}


def job(name: str, **conditions: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": {UID_LABEL: "u1"}},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conditions.items()]}}


@dataclass
class Running:
    link: SpokeLink
    spoke: ScriptedTransport
    changes: list[tuple[str, tuple[str, ...], bool]]
    task: asyncio.Task[None]


@pytest_asyncio.fixture(loop_scope="function")
async def running() -> AsyncIterator[Running]:
    spoke = ScriptedTransport()
    spoke.on("GET", "/readyz", reply(200))
    core, groups = aggregated_discovery(*CORE_KINDS, ("batch/v1", "Job", "jobs", True))
    spoke.on("GET", "/api", core)
    spoke.on("GET", "/apis", groups)
    changes: list[tuple[str, tuple[str, ...], bool]] = []
    link = SpokeLink(name="east", on_change=lambda c, uids, cap: changes.append(
        (c, tuple(uids), cap)), on_health=lambda _c: None)

    async def connect() -> Connection:
        return spoke.connection("east")

    spoke.on("GET", "/api/v1/nodes", listing([node("n1"), node("n2")]),
             listing([node("n1")]))
    spoke.on("GET", "/api/v1/pods", listing([pod("a", "n1"), pod("b", "n1")]),
             listing([pod("b", "n1")]))
    spoke.on("GET", "/api/v1/namespaces", listing([]))
    task = asyncio.create_task(link.run(connect))
    yield Running(link, spoke, changes, task)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def settle() -> None:
    await asyncio.sleep(0.1)


def break_watch(spoke: ScriptedTransport, path: str) -> None:
    """Break the watch of ``path`` that runs now."""
    spoke.live[path].fail(TransportError("connection reset by peer"))


async def test_ready_once_nodes_and_pods_are_listed(running: Running) -> None:
    await settle()
    assert running.link.health.ready, running.link.health
    assert running.link.health.message == "2 nodes, 2 ready"
    assert running.link.requested["n1"][GPU] == 4 * 10**9
    assert running.link.capacity().free()[GPU] == 12 * 10**9


async def test_a_relist_drops_pods_and_nodes_deleted_meanwhile(running: Running) -> None:
    await settle()
    running.changes.clear()
    # Both watches break; the next lists lack pod "a" and node "n2".
    break_watch(running.spoke, "/api/v1/pods")
    break_watch(running.spoke, "/api/v1/nodes")
    await asyncio.sleep(5)
    link = running.link
    assert sorted(link.nodes) == ["n1"]
    assert [p["metadata"]["name"] for p in link.pods_of("u1")] == ["b"]
    # Pod "a" went while nobody watched: its AppWrapper is still told (the informer keeps
    # only the uid label of a pod, and that is enough).
    assert ("east", ("u1",), True) in running.changes
    assert link.requested["n1"][GPU] == 2 * 10**9
    assert link.health.ready


async def test_a_relist_drops_wrapped_objects_deleted_meanwhile(running: Running) -> None:
    await settle()
    running.spoke.on("GET", "/apis/batch/v1/jobs",
                     listing([job("old", Failed="True"), job("kept", Complete="False")]),
                     listing([job("kept", Complete="True")]))
    running.link.watch_kind(JOBS)
    await settle()
    break_watch(running.spoke, "/apis/batch/v1/jobs")
    assert running.link.item_conditions("Job", "ns", "old") == {"Failed": "True"}
    await asyncio.sleep(5)
    assert running.link.item_conditions("Job", "ns", "old") is None
    assert running.link.item_conditions("Job", "ns", "kept") == {"Complete": "True"}
    assert ("east", ("u1",), False) in running.changes


async def test_a_rayjob_is_read_by_its_own_status(running: Running) -> None:
    """KubeRay writes no conditions on a RayJob: its end is its jobDeploymentStatus and
    jobStatus, read as the conditions they mean (the kind from the watch: list items need
    not carry it)."""
    await settle()
    rayjobs = ResourceRef("ray.io/v1", "RayJob", "rayjobs", namespaced=True)

    def rayjob(name: str, deployment: str, job_status: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "ns", "labels": {UID_LABEL: "u1"}},
                "status": {"jobDeploymentStatus": deployment, "jobStatus": job_status}}

    running.spoke.on("GET", "/apis/ray.io/v1/rayjobs", listing([
        rayjob("done", "Complete", "SUCCEEDED"), rayjob("broke", "Failed", "FAILED"),
        rayjob("busy", "Running", "RUNNING")]))
    running.link.watch_kind(rayjobs)
    await settle()
    assert running.link.item_conditions("RayJob", "ns", "done") == {"Complete": "True"}
    assert running.link.item_conditions("RayJob", "ns", "broke") == {"Failed": "True"}
    assert running.link.item_conditions("RayJob", "ns", "busy") == {}


async def test_not_ready_while_a_wrapped_kind_is_not_listed(running: Running) -> None:
    await settle()
    assert running.link.health.ready
    running.spoke.on("GET", "/apis/batch/v1/jobs", TransportError("refused"))
    running.link.watch_kind(JOBS)
    await asyncio.sleep(3)
    assert not running.link.health.ready
    assert running.link.health.reason == "Unreachable"
    assert "Job" in running.link.health.message
    running.spoke.only("GET", "/apis/batch/v1/jobs", listing([]))
    await asyncio.sleep(60)
    assert running.link.health.ready


async def test_an_api_server_that_stops_answering_probes_is_unreachable(
        running: Running) -> None:
    await settle()
    first_contact = running.link.last_contact
    running.spoke.only("GET", "/readyz", TransportError("timed out"))
    await asyncio.sleep(spoke_link.PROBE_PERIOD_S * 3)
    assert not running.link.health.ready
    assert running.link.health.reason == "Unreachable"
    lost_since = running.link.last_contact
    assert lost_since is not None and first_contact is not None
    running.spoke.only("GET", "/readyz", reply(200))
    await asyncio.sleep(spoke_link.PROBE_PERIOD_S * 2)
    assert running.link.health.ready


async def test_a_watch_task_that_crashes_is_restarted(running: Running,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    await settle()
    before = sample("mcad_task_restarts_total", task="spoke east pods") or 0
    calls = 0
    original = running.link._on_pod

    def explode_once(kind: str, obj: dict[str, Any]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("a bug in a handler")
        original(kind, obj)

    monkeypatch.setattr(running.link, "_on_pod", explode_once)
    for informer in running.link._informers.values():
        if informer.ref.plural == "pods":
            informer.handle = explode_once
    running.spoke.watch("/api/v1/pods").event("ADDED", pod("c", "n2"))
    break_watch(running.spoke, "/api/v1/pods")
    await asyncio.sleep(10)
    assert (sample("mcad_task_restarts_total", task="spoke east pods") or 0) == before + 1
    assert running.link.health.ready


JOBSETS = ResourceRef("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", namespaced=True)
JOBSETS_PATH = "/apis/jobset.x-k8s.io/v1alpha2/jobsets"


async def test_a_kind_whose_crd_is_removed_does_not_make_the_cluster_unready(
        running: Running) -> None:
    """JobSet's CRD is installed, an AppWrapper's JobSet followed, then the CRD removed:
    its list answers 404 from then on. The cluster stays ready (nothing of the kind is
    left there to follow), and at the next discovery the kind is no longer followed."""
    await settle()
    spoke, link = running.spoke, running.link
    _, with_jobsets = aggregated_discovery(
        *CORE_KINDS, ("batch/v1", "Job", "jobs", True),
        ("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", True))
    spoke.only("GET", "/apis", with_jobsets)
    await asyncio.sleep(spoke_link.DISCOVERY_PERIOD_S + 1)
    spoke.on("GET", JOBSETS_PATH, listing([]))
    link.watch_kind(JOBSETS)
    await settle()
    assert link.health.ready and "JobSet" in link._kinds

    _, without = aggregated_discovery(*CORE_KINDS, ("batch/v1", "Job", "jobs", True))
    spoke.only("GET", "/apis", without)
    spoke.only("GET", JOBSETS_PATH, status(404, "NotFound", "the server could not find "
                                                           "the requested resource"))
    break_watch(spoke, JOBSETS_PATH)
    await asyncio.sleep(5)
    assert link.health.ready, link.health
    await asyncio.sleep(spoke_link.DISCOVERY_PERIOD_S)
    assert "JobSet" not in link._kinds
    assert link.health.ready, link.health


# -- closed namespaces and mcad's identity --------------------------------------------------

NAMESPACES_PATH = "/api/v1/namespaces"
REVIEWS_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def namespace(name: str, closed: str | None = "true") -> dict[str, Any]:
    labels = {} if closed is None else {"cluster.codeflare.dev/closed": closed}
    return {"metadata": {"name": name, "uid": f"ns-{name}", "labels": labels}}


def who(username: str) -> Any:
    return reply(201, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                       "status": {"userInfo": {"username": username}}})


@contextlib.asynccontextmanager
async def link_on(*, listed: list[dict[str, Any]], review: Any = None
                  ) -> AsyncIterator[Running]:
    """A link to a spoke with two nodes, listing ``listed`` as its closed namespaces and
    answering the SelfSubjectReview with ``review`` (None: not served, 404)."""
    spoke = ScriptedTransport()
    spoke.on("GET", "/readyz", reply(200))
    core, groups = aggregated_discovery(*CORE_KINDS)
    spoke.on("GET", "/api", core)
    spoke.on("GET", "/apis", groups)
    spoke.on("GET", "/api/v1/nodes", listing([node("n1"), node("n2")]))
    spoke.on("GET", "/api/v1/pods", listing([]))
    spoke.on("GET", NAMESPACES_PATH, listing(listed))
    if review is not None:
        spoke.on("POST", REVIEWS_PATH, review)
    changes: list[tuple[str, tuple[str, ...], bool]] = []
    link = SpokeLink(name="east", on_change=lambda c, uids, cap: changes.append(
        (c, tuple(uids), cap)), on_health=lambda _c: None)

    async def connect() -> Connection:
        return spoke.connection("east")

    task = asyncio.create_task(link.run(connect))
    try:
        yield Running(link, spoke, changes, task)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_closed_namespaces_are_watched_by_their_label_and_reach_the_capacity(
        ) -> None:
    async with link_on(listed=[namespace("cert-manager")]) as running:
        await settle()
        link = running.link
        assert link.health.ready, link.health
        (watch,) = [r for r in running.spoke.requests
                    if r.method == "WATCH" and r.path == NAMESPACES_PATH]
        assert watch.params["labelSelector"] == "cluster.codeflare.dev/closed=true"
        assert link.capacity().closed_namespaces == {"cert-manager"}
        running.changes.clear()
        stream = running.spoke.live[NAMESPACES_PATH]
        stream.event("ADDED", namespace("gpu-operator"))
        await settle()
        assert link.capacity().closed_namespaces == {"cert-manager", "gpu-operator"}
        assert running.changes == [("east", (), True)]  # a cycle decides again
        # The label taken off: the watch says DELETED (it no longer matches).
        stream.event("DELETED", namespace("cert-manager"))
        stream.event("MODIFIED", namespace("gpu-operator", closed="false"))
        await settle()
        assert link.capacity().closed_namespaces == frozenset()


async def test_a_relist_drops_a_namespace_opened_meanwhile_and_a_link_not_synced_is_not_ready(
        ) -> None:
    async with link_on(listed=[namespace("cert-manager"), namespace("monitoring")]) as running:
        await settle()
        running.spoke.only("GET", NAMESPACES_PATH, TransportError("refused"))
        break_watch(running.spoke, NAMESPACES_PATH)
        await asyncio.sleep(3)
        assert not running.link.health.ready  # what is closed is not known
        assert "namespaces" in running.link.health.message
        running.spoke.only("GET", NAMESPACES_PATH, listing([namespace("monitoring")]))
        await asyncio.sleep(60)
        assert running.link.health.ready
        assert running.link.capacity().closed_namespaces == {"monitoring"}


@pytest.mark.parametrize(("review", "want"), [
    (who("system:serviceaccount:spoke-agents:mcad"), "spoke-agents"),
    (who("kubernetes-admin"), None),
    (None, None),  # not served (before Kubernetes 1.28): nothing learned, still ready
    (status(403, "Forbidden"), None),
])
async def test_the_namespace_of_mcad_s_identity_is_learned_on_connecting(
        review: Any, want: str | None) -> None:
    async with link_on(listed=[], review=review) as running:
        await settle()
        assert running.link.health.ready, running.link.health
        assert running.link.capacity().identity_namespace == want
        (asked,) = running.spoke.sent("POST", REVIEWS_PATH)
        assert asked.body == {"apiVersion": "authentication.k8s.io/v1",
                              "kind": "SelfSubjectReview"}


async def test_a_cluster_that_cannot_say_who_mcad_is_now_fails_the_connection() -> None:
    """A failure that may pass (the API server busy) is a failed connection: the link's
    supervisor connects again, and asks again."""
    async with link_on(listed=[], review=status(500, "InternalError")) as running:
        with pytest.raises(ServerError):  # the link's supervisor runs it again
            await asyncio.wait_for(running.task, timeout=120)
        assert not running.link.health.ready
        assert running.link.health.reason == "ConnectFailed"
        assert "SelfSubjectReview" in running.link.health.message
        assert running.spoke.closed  # the connection is not left open
