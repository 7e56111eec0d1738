"""The controller process: hub watches, spoke links, dispatcher, lifecycle, reports.

One root TaskGroup holds every long-lived task, each named; a task that dies takes
the controller down loudly rather than leaving it half-alive. Hub watch events only
update caches and poke the dispatcher or the lifecycle; decisions happen there.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.clock import rfc3339, utcnow
from mcad.controller.dispatcher import Dispatcher
from mcad.controller.lifecycle import Lifecycle
from mcad.controller.objects import ObjectManager
from mcad.controller.records import AppWrapperRecord, key_of
from mcad.controller.spokes import SpokeLink
from mcad.controller.state import ControllerState
from mcad.controller.writer import HubWriter, set_condition
from mcad.core.quota import QuotaAssignment, QuotaForest, QuotaNodeSpec, nodes_from_subtree
from mcad.gateway import objects as verbs
from mcad.gateway import resources as refs
from mcad.gateway.connection import Connection, connect
from mcad.gateway.errors import ApiError, BadKubeconfig
from mcad.gateway.resources import ResourceRef
from mcad.gateway.watch import Changed, Relisted, StreamBroken, watch_objects

log = logging.getLogger(__name__)
REPORT_EVERY_S = 1.0
STATES = ("Pending", "Running", "RunningHoldCompletion", "Completed", "Failed")


class Controller:
    def __init__(self, *, hub: Connection, hub_kubeconfig: Path, config: RunConfig) -> None:
        self.hub = hub
        self.hub_kubeconfig = hub_kubeconfig
        self.config = config
        self.state = ControllerState()
        self.writer = HubWriter(hub)
        self.objects = ObjectManager(state=self.state, config=config, writer=self.writer,
                                     released=self._released)
        self.lifecycle = Lifecycle(state=self.state, config=config, writer=self.writer,
                                   objects=self.objects, released=self._released)
        self.dispatcher = Dispatcher(state=self.state, config=config, writer=self.writer,
                                     objects=self.objects, evict=self.lifecycle.evict,
                                     follow=self.lifecycle.enqueue)
        self._dirty = asyncio.Event()
        self._link_tasks: dict[str, asyncio.Task[None]] = {}
        self._spoke_status: dict[str, dict[str, Any]] = {}

    def ready(self) -> bool:
        return {"appwrappers", "quotasubtrees", "spokeclusters", "secrets"} <= self.state.synced

    def _released(self) -> None:
        self.dispatcher.trigger()
        self._dirty.set()

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._watch(refs.APPWRAPPERS, self._on_appwrapper),
                                  name="watch appwrappers")
                group.create_task(self._watch(refs.QUOTASUBTREES, self._on_subtree),
                                  name="watch quotasubtrees")
                group.create_task(self._watch(refs.SPOKECLUSTERS, self._on_spoke),
                                  name="watch spokeclusters")
                group.create_task(self._watch(refs.SECRETS, self._on_secret,
                                              namespace=self.config.namespace),
                                  name="watch secrets")
                group.create_task(self.dispatcher.run(self.ready), name="dispatcher")
                group.create_task(self.lifecycle.run(), name="lifecycle")
                group.create_task(self._report(), name="reports")
        finally:
            await asyncio.gather(*(link.stop() for link in self.state.links.values()),
                                 return_exceptions=True)

    # -- hub watches --------------------------------------------------------------------
    async def _watch(self, ref: ResourceRef, handle: Callable[[str, dict[str, Any]], None],
                     *, namespace: str | None = None) -> None:
        known: dict[str, dict[str, Any]] = {}
        async for event in watch_objects(self.hub, ref, namespace=namespace):
            if isinstance(event, StreamBroken):
                log.warning("hub watch of %s broke: %s", ref.plural, event.error)
                metrics.count_api_error("hub", event.error.reason or "WatchBroken")
                continue
            if isinstance(event, Relisted):
                fresh = {_ident(o): o for o in event.items}
                for ident in set(known) - set(fresh):
                    handle("DELETED", known.pop(ident))
                for ident, obj in fresh.items():
                    known[ident] = obj
                    handle("ADDED", obj)
                self.state.synced.add(ref.plural)
                self.dispatcher.trigger()
                continue
            assert isinstance(event, Changed)
            if event.type == "DELETED":
                known.pop(_ident(event.obj), None)
            else:
                known[_ident(event.obj)] = event.obj
            handle(event.type, event.obj)

    def _on_appwrapper(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if kind == "DELETED":
            rec = self.state.appwrappers.pop(key, None)
            if rec is not None:
                self.state.by_uid.pop(rec.uid, None)
                self.writer.forget(key)
            self._released()
            return
        rec = self.state.appwrappers.get(key)
        if rec is None:
            rec = self.state.appwrappers[key] = AppWrapperRecord(obj={})
        elif rec.uid and rec.uid != (obj.get("metadata") or {}).get("uid"):
            rec = self.state.appwrappers[key] = AppWrapperRecord(obj={})  # recreated
        if not rec.update(obj):
            return
        self.state.by_uid[rec.uid] = key
        self._dirty.set()
        if rec.queued:
            self.dispatcher.trigger()
        if rec.deleting or rec.admitted:
            self.lifecycle.enqueue(key)

    def _on_subtree(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.state.subtrees.pop(_ident(obj), None)
        else:
            self.state.subtrees[_ident(obj)] = obj
        nodes: list[QuotaNodeSpec] = []
        problems: list[str] = []
        for ident, subtree in sorted(self.state.subtrees.items()):
            try:
                nodes.extend(nodes_from_subtree(subtree))
            except ValueError as err:
                problems.append(f"QuotaSubtree {ident}: {err}")
        self.state.forest, more = QuotaForest.build(nodes)
        self.state.quota_problems = problems + more
        for problem in self.state.quota_problems:
            log.warning("quota: %s", problem)
        for rec in self.state.appwrappers.values():
            rec.entry = None
        self._released()

    def _on_spoke(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.state.spoke_objects.pop(name, None)
        else:
            self.state.spoke_objects[name] = obj
        self._sync_links()

    def _on_secret(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.state.secrets.pop(name, None)
        else:
            self.state.secrets[name] = obj
        self._sync_links()

    # -- spoke links ----------------------------------------------------------------------
    def _source(self, spoke: dict[str, Any]) -> tuple[str, Callable[[], Awaitable[Connection]]]:
        """A fingerprint of how to reach the spoke, and how to connect to it."""
        spec = spoke.get("spec") or {}
        name = spoke["metadata"]["name"]
        if spec.get("local"):
            return "local", lambda: connect(self.hub_kubeconfig, name=name)
        ref = spec.get("kubeconfigSecret") or {}
        secret = self.state.secrets.get(ref.get("name", ""))
        data = ((secret or {}).get("data") or {}).get(ref.get("key", "kubeconfig"))
        if secret is None or data is None:
            missing = (f"Secret {self.config.namespace}/{ref.get('name')} has no key "
                       f"{ref.get('key', 'kubeconfig')!r}" if secret else
                       f"Secret {self.config.namespace}/{ref.get('name')} does not exist")

            async def fail() -> Connection:
                raise BadKubeconfig(missing)
            return f"missing:{missing}", fail
        digest = hashlib.sha256(data.encode()).hexdigest()

        async def from_secret() -> Connection:
            try:
                text = base64.b64decode(data).decode()
            except ValueError as err:
                raise BadKubeconfig("the Secret's kubeconfig is not base64") from err
            return await connect(text, name=name)
        return digest, from_secret

    def _sync_links(self) -> None:
        wanted = self.state.spoke_objects
        for name in list(self.state.links):
            if name not in wanted:
                self._stop_link(name)
                metrics.forget_cluster(name)
        for name, spoke in wanted.items():
            source, connector = self._source(spoke)
            spec = spoke.get("spec") or {}
            link = self.state.links.get(name)
            if link is not None and self.state.link_sources.get(name) != source:
                self._stop_link(name)
                link = None
            if link is None:
                link = SpokeLink(name=name, on_change=self._on_spoke_change,
                                 on_health=self._on_link_health)
                self.state.links[name] = link
                self.state.link_sources[name] = source
                self._link_tasks[name] = asyncio.get_running_loop().create_task(
                    link.start(connector), name=f"connect {name}")
            link.labels = dict(spec.get("labels") or {})
            link.schedulable = not spec.get("unschedulable")
        self._dirty.set()
        self.dispatcher.trigger()

    def _stop_link(self, name: str) -> None:
        link = self.state.links.pop(name)
        self.state.link_sources.pop(name, None)
        task = self._link_tasks.pop(name, None)
        if task is not None:
            task.cancel()
        asyncio.get_running_loop().create_task(link.stop(), name=f"stop {name}")

    def _on_spoke_change(self, cluster: str, uids: Iterable[str], capacity: bool) -> None:
        for uid in uids:
            key = self.state.by_uid.get(uid)
            if key is not None:
                self.lifecycle.enqueue(key)
        if capacity:
            self.dispatcher.trigger()
            self._dirty.set()

    def _on_link_health(self, cluster: str) -> None:
        self._dirty.set()
        self.dispatcher.trigger()
        for rec in self.state.appwrappers.values():
            if rec.cluster == cluster:
                self.lifecycle.enqueue(rec.key)

    # -- reports --------------------------------------------------------------------------
    async def _report(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self._report_once()
            except ApiError as err:
                log.warning("report: %s", err)
            await asyncio.sleep(REPORT_EVERY_S)

    async def _report_once(self) -> None:
        counts = dict.fromkeys(STATES, 0)
        forest = self.state.forest.copy()
        for rec in self.state.appwrappers.values():
            state = rec.state if rec.state in counts else "Pending"
            counts["Running" if rec.assumed_cluster else state] += 1
            if rec.admitted and rec.demand is not None:
                assignment = forest.resolve(rec.meta.get("labels") or {})
                if isinstance(assignment, QuotaAssignment):
                    forest.charge(assignment, rec.demand.total)
        metrics.report_appwrapper_states(counts)
        for tree, node in forest.nodes():
            metrics.report_quota(tree, node, limit=forest.limit(tree, node),
                                 used=forest.usage(tree, node))
        for name, link in list(self.state.links.items()):
            cluster = link.capacity()
            capacity, allocatable, free = cluster.capacity(), cluster.allocatable(), \
                cluster.free()
            metrics.report_cluster(name, ready=link.health.ready, capacity=capacity,
                                   allocatable=allocatable, free=free)
            await self._write_spoke_status(name, link, {
                "capacity": capacity.to_strings(), "allocatable": allocatable.to_strings(),
                "free": free.to_strings(), "nodes": len(cluster.nodes),
                "readyNodes": sum(1 for n in cluster.nodes if n.ready)})

    async def _write_spoke_status(self, name: str, link: SpokeLink,
                                  status: dict[str, Any]) -> None:
        health = ("True" if link.health.ready else "False", link.health.reason,
                  link.health.message)
        last = self._spoke_status.get(name)
        if last == {**status, "health": health}:
            return
        spoke = self.state.spoke_objects.get(name)
        if spoke is None:
            return
        now = utcnow()
        conditions = set_condition(
            list((spoke.get("status") or {}).get("conditions") or []), type_="Ready",
            status=health[0], reason=health[1], message=health[2], now=now,
            generation=int(spoke["metadata"].get("generation", 0) or 0))
        try:
            await verbs.merge_patch(self.hub, refs.SPOKECLUSTERS, name, {
                "status": {**status, "conditions": conditions, "lastSyncTime": rfc3339(now)}},
                subresource="status")
        except ApiError as err:
            log.warning("SpokeCluster %s status: %s", name, err)
            return
        self._spoke_status[name] = {**status, "health": health}


def _ident(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
