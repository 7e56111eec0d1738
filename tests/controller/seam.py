"""A whole ``Controller`` over scripted hub and spoke transports, for table tests.

The controller runs for real (informers, dispatcher, work queue, reconcilers,
supervisor); only the bytes on the wire are scripted. The hub keeps the AppWrappers
the test gives it and applies what the controller sends for them the way the API
server would for those few verbs (JSON merge patch; a ``metadata.resourceVersion`` in
the patch makes it conditional, answered 409 when stale), echoing each change on the
AppWrapper watch. Everything else is scripted answers. A test injects failures by
queueing answers (``hub.on(...)``) or breaking a live stream, then looks at the hub's
objects, the requests sent, and the metrics.

One spoke, registered as SpokeCluster ``local`` (the hub itself): 4 nodes x 8 GPUs.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from mcad.config import RunConfig
from mcad.controller import clock
from mcad.controller.runner import Controller
from mcad.gateway.connection import Connection
from mcad.gateway.transport import Reply
from tests.gateway.scripted import (
    CORE_KINDS,
    Request,
    ScriptedTransport,
    aggregated_discovery,
    listing,
    reply,
    status,
)

AW_PATH = "/apis/workload.codeflare.dev/v1beta1/appwrappers"
AW_NS_PATH = "/apis/workload.codeflare.dev/v1beta1/namespaces/{ns}/appwrappers"
GPU = "nvidia.com/gpu"


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


@dataclass
class Hub:
    """The scripted hub with its AppWrappers."""

    transport: ScriptedTransport = field(default_factory=ScriptedTransport)
    appwrappers: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    versions: itertools.count[int] = field(default_factory=lambda: itertools.count(100))
    spoke_cluster: dict[str, Any] = field(default_factory=lambda: {
        "apiVersion": "cluster.codeflare.dev/v1alpha1", "kind": "SpokeCluster",
        "metadata": {"name": "local", "uid": "spoke-uid", "resourceVersion": "1"},
        "spec": {"local": True}})

    def __post_init__(self) -> None:
        t = self.transport
        t.on("GET", AW_PATH, self._list_appwrappers)
        t.on("GET", "/apis/quota.codeflare.dev/v1alpha1/quotasubtrees", listing([]))
        t.on("GET", "/apis/cluster.codeflare.dev/v1alpha1/spokeclusters",
             lambda _r: listing([self.spoke_cluster]))
        t.on("GET", "/api/v1/namespaces/mcad-system/secrets", listing([]))
        t.on("PATCH", "/apis/cluster.codeflare.dev/v1alpha1/spokeclusters/local/status",
             self._patch_spoke)
        t.on("GET", "/apis/cluster.codeflare.dev/v1alpha1/spokeclusters/local",
             lambda _r: reply(200, self.spoke_cluster))

    def add(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta["resourceVersion"] = str(next(self.versions))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        meta.setdefault("generation", 1)
        key = (meta["namespace"], meta["name"])
        self.appwrappers[key] = obj
        base = AW_NS_PATH.format(ns=meta["namespace"]) + f"/{meta['name']}"
        self.transport.on("GET", base, lambda _r: reply(200, self.appwrappers[key])
                          if key in self.appwrappers else status(404, "NotFound"))
        self.transport.on("PATCH", base, self._patch(key))
        self.transport.on("PATCH", base + "/status", self._patch(key))
        self.transport.on("POST", f"/api/v1/namespaces/{meta['namespace']}/events",
                          reply(201, {}))
        live = self.transport.live.get(AW_PATH)
        if live is not None:
            live.event("ADDED", obj)

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self.appwrappers[(namespace, name)]

    def _list_appwrappers(self, request: Request) -> Reply:
        return listing(list(copy.deepcopy(list(self.appwrappers.values()))),
                       version=str(next(self.versions)))

    def _patch_spoke(self, request: Request) -> Reply:
        """The SpokeCluster status patched as the API server would (conditional when the
        patch carries a resourceVersion), echoed on its watch."""
        current = self.spoke_cluster
        wanted = (request.body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            return status(409, "Conflict")
        body = copy.deepcopy(request.body)
        body.pop("metadata", None)
        updated = merge(current, body)
        updated["metadata"]["resourceVersion"] = str(next(self.versions))
        self.spoke_cluster = updated
        live = self.transport.live.get("/apis/cluster.codeflare.dev/v1alpha1/spokeclusters")
        if live is not None:
            live.event("MODIFIED", updated)
        return reply(200, updated)

    def _patch(self, key: tuple[str, str]) -> Any:
        def answer(request: Request) -> Reply:
            current = self.appwrappers.get(key)
            if current is None:
                return status(404, "NotFound")
            wanted = (request.body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                return status(409, "Conflict", "the object has been modified")
            body = copy.deepcopy(request.body)
            (body.get("metadata") or {}).pop("resourceVersion", None)
            updated = merge(current, body)
            updated["metadata"]["resourceVersion"] = str(next(self.versions))
            self.appwrappers[key] = updated
            live = self.transport.live.get(AW_PATH)
            if live is not None:
                live.event("MODIFIED", updated)
            return reply(200, updated)
        return answer


def spoke_transport(nodes: int = 4, gpus: int = 8,
                    labels: Callable[[int], dict[str, str]] | None = None) -> ScriptedTransport:
    """A spoke with ``nodes`` empty ready nodes (node ``i`` labelled ``labels(i)``),
    serving batch/v1 Jobs."""
    spoke = ScriptedTransport("https://spoke.invalid")
    spoke.on("GET", "/readyz", reply(200))
    spoke.on("GET", "/api/v1/nodes", listing([
        {"metadata": {"name": f"n{i}", "labels": labels(i) if labels else {}},
         "status": {"allocatable": {GPU: str(gpus), "cpu": "32", "memory": "256Gi",
                                    "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}]}}
        for i in range(nodes)]))
    spoke.on("GET", "/api/v1/pods", listing([]))
    spoke.on("GET", "/api/v1/namespaces", listing([]))  # none closed (a labelled watch)
    core, groups = aggregated_discovery(*CORE_KINDS, ("batch/v1", "Job", "jobs", True))
    spoke.on("GET", "/api", core)
    spoke.on("GET", "/apis", groups)
    spoke.on("GET", "/apis/batch/v1/jobs", listing([]))
    spoke.on("POST", "/api/v1/namespaces", reply(201, {}))
    return spoke


@dataclass
class SpokeJobs:
    """Jobs on the scripted spoke, as created, read and deleted by the controller: POST
    stores (409 when the name is taken), GET finds, DELETE removes; each change is echoed
    on the live Job watch. ``pod`` pushes a pod of a Job onto the live pod watch."""

    spoke: ScriptedTransport
    namespace: str = "ns"
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    made: int = 0
    """Jobs created so far (each gets a uid of its own, as the API server gives)."""
    cascade: bool = False
    """Delete a Job's pods with it (the garbage collector's part), when pushed by ``pod``."""
    pods: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Per Job: its pods as last pushed."""

    def __post_init__(self) -> None:
        base = f"/apis/batch/v1/namespaces/{self.namespace}/jobs"
        self.spoke.on("POST", base, self._create)

    def _watch(self, kind: str, obj: dict[str, Any]) -> None:
        live = self.spoke.live.get("/apis/batch/v1/jobs")
        if live is not None:
            live.event(kind, obj)

    def _create(self, request: Request) -> Reply:
        name = request.body["metadata"]["name"]
        if name in self.jobs:
            return status(409, "AlreadyExists")
        job = copy.deepcopy(request.body)
        self.made += 1
        job["metadata"]["uid"] = f"job-{name}" if self.made == 1 else f"job-{name}-{self.made}"
        self.jobs[name] = job
        path = f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{name}"
        self.spoke.only("GET", path, lambda _r: reply(200, self.jobs[name])
                        if name in self.jobs else status(404, "NotFound"))
        self.spoke.only("DELETE", path, self._delete(name))
        self._watch("ADDED", job)
        return reply(201, job)

    def _delete(self, name: str) -> Any:
        def answer(request: Request) -> Reply:
            job = self.jobs.pop(name, None)
            if job is None:
                return status(404, "NotFound")
            self.deleted.append(name)
            self._watch("DELETED", job)
            for pod in self.pods.pop(name, {}).values() if self.cascade else ():
                self.spoke.live["/api/v1/pods"].event("DELETED", pod)
            return reply(200, {})
        return answer

    def set_conditions(self, name: str, **conditions: str) -> None:
        job = self.jobs[name]
        job["status"] = {"conditions": [{"type": t, "status": v}
                                        for t, v in conditions.items()]}
        self._watch("MODIFIED", job)

    def pod(self, job: str, index: int, *, phase: str = "Running", ready: bool = True,
            node: str = "n0", kind: str = "ADDED", exit_code: int | None = None,
            reason: str = "Error") -> None:
        """A pod of ``job`` (``exit_code``: a Failed pod's container ended so)."""
        template = self.jobs[job]["spec"]["template"]
        status: dict[str, Any] = {"phase": phase, "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}
        if exit_code is not None:
            status["containerStatuses"] = [{"name": "main", "state": {"terminated": {
                "exitCode": exit_code, "reason": reason,
                "finishedAt": "2026-01-01T00:00:10Z"}}}]
        pod = {"metadata": {"name": f"{job}-{index}", "namespace": self.namespace,
                            "uid": f"{self.jobs[job]['metadata']['uid']}-pod-{index}",
                            "labels": template["metadata"]["labels"]},
               "spec": {"nodeName": node, "containers": template["spec"]["containers"]},
               "status": status}
        if kind == "DELETED":
            self.pods.get(job, {}).pop(pod["metadata"]["name"], None)
        else:
            self.pods.setdefault(job, {})[pod["metadata"]["name"]] = pod
        self.spoke.live["/api/v1/pods"].event(kind, pod)


@dataclass
class Running:
    hub: Hub
    spoke: ScriptedTransport
    controller: Controller
    task: asyncio.Task[None]


async def run_controller(hub: Hub, spoke: ScriptedTransport,
                         config: RunConfig | None = None, *,
                         on_listed: Callable[[], None] = lambda: None
                         ) -> AsyncIterator[Running]:
    """Run a controller on ``hub`` and ``spoke`` until the caller is done."""
    async def connect_spoke(name: str) -> Connection:
        return spoke.connection(name)

    controller = Controller(hub=hub.transport.connection("hub", attempts=2),
                            connect_hub=connect_spoke, config=config or RunConfig(), workers=4,
                            on_listed=on_listed)
    clock.use(clock.loop_clock())
    task = asyncio.create_task(controller.run())
    try:
        yield Running(hub, spoke, controller, task)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        clock.use(None)


async def until(what: str, check: Callable[[], object], within: float = 60) -> None:
    """Wait (on the test's loop clock) until ``check()`` holds, or fail naming ``what``."""
    for _ in range(int(within * 10)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not {what} after {within}s")


def job_appwrapper(name: str, namespace: str = "ns", *, pods: int = 1,
                   gpus: int = 8, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": namespace,
                     **({"annotations": annotations} if annotations else {})},
        "spec": {"schedulingSpec": {"minAvailable": pods}, "resources": {"GenericItems": [{
            "completionstatus": "Complete",
            "generictemplate": {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "busybox",
                        "resources": {"requests": {GPU: str(gpus)}}}]}}}}}]}},
    }
