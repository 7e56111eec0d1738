"""One live link per registered cluster: its connection, watches and capacity.

A ``SpokeLink`` watches the cluster's nodes and pods (list-then-watch, no polling)
and keeps per-node requested resources current incrementally, so building the
cluster's ``ClusterCapacity`` for a dispatch cycle costs one pass over the nodes.
It also watches, per wrapped kind, the objects that carry an AppWrapper uid label,
to read their conditions for completion. Every change calls ``on_change`` with the
uids of the AppWrappers it concerns, so the controller reacts to events, not timers.
A link that cannot connect or whose watches break reports itself not ready, with
a reason, while the rest of the controller keeps working.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcad.core.capacity import (
    ClusterCapacity,
    ClusterName,
    NodeCapacity,
    NodeName,
    Reservation,
)
from mcad.core.demand import Taint, pod_request
from mcad.core.resources import EMPTY, ResourceList
from mcad.core.wrapping import UID_LABEL
from mcad.gateway import resources as refs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import BadKubeconfig, GatewayError
from mcad.gateway.resources import Discovery, ResourceRef
from mcad.gateway.watch import Changed, Relisted, StreamBroken, watch_objects

log = logging.getLogger(__name__)
TERMINAL = ("Succeeded", "Failed")


@dataclass
class _Pod:
    uid: str
    node: str
    terminal: bool
    request: ResourceList
    owner_uid: str  # AppWrapper uid label, or ""
    raw: dict[str, Any]


@dataclass
class LinkHealth:
    ready: bool = False
    reason: str = "Connecting"
    message: str = "connecting to the cluster"


@dataclass
class SpokeLink:
    """Everything the controller knows about one cluster, kept current by watches."""

    name: str
    on_change: Callable[[str, Iterable[str], bool], None]
    """Called with (cluster, AppWrapper uids concerned, capacity changed)."""
    on_health: Callable[[str], None]
    conn: Connection | None = None
    discovery: Discovery | None = None
    health: LinkHealth = field(default_factory=LinkHealth)
    labels: Mapping[str, str] = field(default_factory=dict)
    schedulable: bool = True
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    requested: dict[str, ResourceList] = field(default_factory=dict)
    pods: dict[str, _Pod] = field(default_factory=dict)
    pods_by_owner: dict[str, set[str]] = field(default_factory=dict)
    items: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    watched_kinds: dict[tuple[str, str], asyncio.Task[None]] = field(default_factory=dict)
    synced: set[str] = field(default_factory=set)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _node_cache: dict[str, NodeCapacity] = field(default_factory=dict)

    # -- life ---------------------------------------------------------------------------
    async def start(self, connect: Callable[[], Any]) -> None:
        """Connect and start the node and pod watches (errors become health)."""
        try:
            self.conn = await connect()
        except BadKubeconfig as err:
            self._set_health(False, "BadKubeconfig", str(err))
            return
        except GatewayError as err:
            self._set_health(False, "ConnectFailed", str(err))
            return
        self.discovery = Discovery(self.conn)
        self._tasks = [
            asyncio.create_task(self._follow(refs.NODES, self._on_node),
                                name=f"spoke {self.name} nodes"),
            asyncio.create_task(self._follow(refs.PODS, self._on_pod),
                                name=f"spoke {self.name} pods"),
        ]

    async def stop(self) -> None:
        tasks = [*self._tasks, *self.watched_kinds.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks, self.watched_kinds = [], {}
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    def _set_health(self, ready: bool, reason: str, message: str) -> None:
        if (self.health.ready, self.health.reason, self.health.message) != (ready, reason,
                                                                           message):
            self.health = LinkHealth(ready, reason, message)
            self.on_health(self.name)

    async def _follow(self, ref: ResourceRef, handle: Callable[[str, dict[str, Any]], None],
                      label_selector: str | None = None) -> None:
        assert self.conn is not None
        async for event in watch_objects(self.conn, ref, label_selector=label_selector):
            if isinstance(event, StreamBroken):
                self.synced.discard(ref.plural)
                self._set_health(False, "Unreachable", event.error.message)
                continue
            if isinstance(event, Relisted):
                self._relist(ref, event.items, handle)
                self.synced.add(ref.plural)
                if {"nodes", "pods"} <= self.synced:
                    ready_nodes = sum(1 for n in self.nodes.values() if _node_ready(n))
                    self._set_health(True, "Connected",
                                     f"{len(self.nodes)} nodes, {ready_nodes} ready")
                continue
            assert isinstance(event, Changed)
            handle(event.type, event.obj)

    def _relist(self, ref: ResourceRef, items: list[dict[str, Any]],
                handle: Callable[[str, dict[str, Any]], None]) -> None:
        """A full list replaces what was known: what it lacks was deleted meanwhile."""
        known = self._known(ref)
        fresh = {_cache_key(ref, i) for i in items}
        for key in set(known) - fresh:
            handle("DELETED", known[key])
        for item in items:
            handle("ADDED", item)

    def _known(self, ref: ResourceRef) -> dict[Any, dict[str, Any]]:
        if ref is refs.NODES:
            return dict(self.nodes)
        if ref is refs.PODS:
            return {uid: pod.raw for uid, pod in self.pods.items()}
        return {key: entry["object"] for key, entry in self.items.items() if key[0] == ref.kind}

    # -- nodes and pods -----------------------------------------------------------------
    def _on_node(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = obj
        self._node_cache.pop(name, None)
        self.on_change(self.name, (), True)

    def _on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid", "")
        old = self.pods.pop(uid, None)
        if old is not None:
            self._account(old, -1)
        owner = (meta.get("labels") or {}).get(UID_LABEL, "")
        if kind != "DELETED":
            spec = obj.get("spec") or {}
            phase = (obj.get("status") or {}).get("phase", "Pending")
            try:
                request = pod_request(spec)
            except ValueError:
                request = EMPTY
            pod = _Pod(uid, spec.get("nodeName", ""), phase in TERMINAL, request, owner,
                       _slim(obj))
            self.pods[uid] = pod
            self._account(pod, +1)
        new = self.pods.get(uid)
        capacity_changed = (old is None or new is None or old.terminal != new.terminal
                            or old.node != new.node)
        self.on_change(self.name, (owner,) if owner else (), capacity_changed)

    def _account(self, pod: _Pod, sign: int) -> None:
        if pod.owner_uid:
            owned = self.pods_by_owner.setdefault(pod.owner_uid, set())
            if sign > 0:
                owned.add(pod.uid)
            else:
                owned.discard(pod.uid)
                if not owned:
                    del self.pods_by_owner[pod.owner_uid]
        if pod.node and not pod.terminal:
            current = self.requested.get(pod.node, EMPTY)
            self.requested[pod.node] = current + pod.request if sign > 0 \
                else current - pod.request
            self._node_cache.pop(pod.node, None)

    def pods_of(self, owner_uid: str) -> list[dict[str, Any]]:
        return [self.pods[u].raw for u in self.pods_by_owner.get(owner_uid, ())]

    def placed_pods_of(self, owner_uid: str) -> int:
        """Pods of an AppWrapper that no longer need a reservation: bound or finished."""
        return sum(1 for u in self.pods_by_owner.get(owner_uid, ())
                   if self.pods[u].node or self.pods[u].terminal)

    # -- wrapped objects ----------------------------------------------------------------
    def watch_kind(self, ref: ResourceRef) -> None:
        """Follow objects of this kind that carry an AppWrapper uid label (once)."""
        key = (ref.api_version, ref.kind)
        if key in self.watched_kinds or key == ("v1", "Pod"):
            return
        self.watched_kinds[key] = asyncio.create_task(
            self._follow(ref, self.item_handler(ref), label_selector=UID_LABEL),
            name=f"spoke {self.name} {ref.kind}")

    def item_handler(self, ref: ResourceRef) -> Callable[[str, dict[str, Any]], None]:
        """What a watch event of a wrapped object of this kind does to the cache: keep
        its conditions (for completion) and tell the owner AppWrapper."""

        def handle(kind: str, obj: dict[str, Any]) -> None:
            meta = obj.get("metadata") or {}
            item_key = _cache_key(ref, obj)
            if kind == "DELETED":
                self.items.pop(item_key, None)
            else:
                self.items[item_key] = {
                    "object": {"metadata": {k: meta.get(k) for k in
                                            ("name", "namespace", "labels")}},
                    "conditions": {c.get("type", ""): c.get("status", "")
                                   for c in (obj.get("status") or {}).get("conditions") or []
                                   if isinstance(c, dict)}}
            owner = (meta.get("labels") or {}).get(UID_LABEL, "")
            self.on_change(self.name, (owner,) if owner else (), False)

        return handle

    def item_conditions(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        entry = self.items.get((kind, namespace, name))
        return None if entry is None else dict(entry["conditions"])

    # -- capacity -----------------------------------------------------------------------
    def capacity(self, reservations: tuple[Reservation, ...] = ()) -> ClusterCapacity:
        nodes = []
        for name, node in self.nodes.items():
            cached = self._node_cache.get(name)
            if cached is None:
                cached = self._node_cache[name] = _node_capacity(
                    node, self.requested.get(name, EMPTY))
            nodes.append(cached)
        ordered = tuple(sorted(nodes, key=lambda n: n.name))
        return ClusterCapacity(name=ClusterName(self.name), nodes=ordered,
                               labels=dict(self.labels), ready=self.health.ready,
                               schedulable=self.schedulable, reservations=reservations)


def _cache_key(ref: ResourceRef, obj: Mapping[str, Any]) -> Any:
    """How each cache of a link keys its objects: nodes by name, pods by uid, wrapped
    objects by (kind, namespace, name)."""
    meta = obj.get("metadata") or {}
    if ref is refs.NODES:
        return meta.get("name", "")
    if ref is refs.PODS:
        return meta.get("uid", "")
    return (ref.kind, meta.get("namespace", ""), meta.get("name", ""))


def _node_ready(node: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _node_capacity(node: Mapping[str, Any], requested: ResourceList) -> NodeCapacity:
    spec, status = node.get("spec") or {}, node.get("status") or {}
    try:
        allocatable = ResourceList.parse(status.get("allocatable") or status.get("capacity"))
    except ValueError:
        allocatable = EMPTY
    taints = tuple(Taint(t.get("key", ""), t.get("value", ""), t.get("effect", ""))
                   for t in spec.get("taints") or [])
    return NodeCapacity(name=NodeName(node["metadata"]["name"]), allocatable=allocatable,
                        requested=requested.clamp_zero(),
                        labels=dict(node["metadata"].get("labels") or {}), taints=taints,
                        unschedulable=bool(spec.get("unschedulable")), ready=_node_ready(node))


def _slim(pod: dict[str, Any]) -> dict[str, Any]:
    """The fields of a pod the controller reads (keeps memory per pod small)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    return {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "uid": meta.get("uid"), "labels": meta.get("labels") or {},
                         "deletionTimestamp": meta.get("deletionTimestamp")},
            "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName", "")},
            "status": {"phase": status.get("phase", "Pending"),
                       "conditions": [{"type": c.get("type"), "status": c.get("status")}
                                      for c in status.get("conditions") or []]}}


