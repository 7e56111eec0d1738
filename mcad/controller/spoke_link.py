"""One live link per registered cluster: its connection, watches, probe and capacity.

A ``SpokeLink`` watches the cluster's nodes and pods (``Informer``: list-then-watch, no
polling) and keeps per-node requested resources current incrementally, so building the
cluster's ``ClusterCapacity`` for a dispatch cycle costs one pass over the nodes. It
also watches, per wrapped kind, the objects that carry an AppWrapper uid label, to read
their conditions for completion; and the namespaces its admin closed to mcad (label
``cluster.codeflare.dev/closed=true``: a watch with that label selector, so only those
few are sent). On connecting it asks who mcad is there (a SelfSubjectReview): the
namespace of that identity, a ServiceAccount's, is closed too (``mcad.core.placement.namespaces``).
Every change calls ``on_change`` with the uids of the AppWrappers it concerns, so the
controller reacts to events, not timers.

A link (re)built for a cluster (a rotated kubeconfig Secret, a re-registered cluster, a
restart) watches again, before it is ready, every wrapped kind that the AppWrappers
running there use (``kinds_in_use``), so a Job's ``Complete`` is never missed because
the link that would have seen it is a new one.

Health, stated once: the link is ready when it is connected, *every* one of its watches
has listed and is following (the wrapped kinds in use at connect time included), and
the cluster answered the last probe (a GET of ``/readyz`` every few seconds: a paused
API server hangs watches without breaking them, and only a request with a deadline
notices). Otherwise it is not ready and says why
(``BadKubeconfig``, ``ConnectFailed``, ``Syncing``, ``Unreachable``), while the rest of
the controller keeps working. Once its probes fail, the requests still waiting on the
cluster are given up (``Connection.abandon``), so a silent cluster holds none of the
controller's reconcile places for a request's whole time-out. ``last_contact`` is
when the cluster last answered, which is what "lost for spokeLostSeconds" is measured
from. The watches and the probe run under the link's own ``Supervisor``: a watch that
dies is restarted, never silently gone.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from sys import intern
from typing import Any

from mcad.controller.clock import parse_time, utcnow
from mcad.controller.informer import Informer
from mcad.controller.supervisor import Supervisor
from mcad.core.life.health import FailedPod, GangState, NodeHealth, NodeHealthRules
from mcad.core.life.wrapping import UID_LABEL, reported_conditions
from mcad.core.placement.capacity import (
    AppWrapperKey,
    ClusterCapacity,
    ClusterName,
    NodeCapacity,
    NodeName,
    UnboundPods,
)
from mcad.core.placement.namespaces import CLOSED_LABEL, identity_namespace
from mcad.core.workload.demand import Taint, pod_request
from mcad.core.workload.resources import EMPTY, ResourceList
from mcad.gateway import refs, verbs
from mcad.gateway.connection import SHARED_VALUE_CHARS, Connection, WriteFence
from mcad.gateway.errors import (
    ApiError,
    BadKubeconfig,
    Forbidden,
    GatewayError,
    NotFound,
    UnknownKind,
    Unreachable,
)
from mcad.gateway.refs import Discovery, ResourceRef

log = logging.getLogger(__name__)
TERMINAL = ("Succeeded", "Failed")
PROBE_PERIOD_S = 3.0
PROBE_TIMEOUT_S = 5.0
PROBE_FAILURES = 2
"""Consecutive failed probes after which the cluster is Unreachable."""
DISCOVERY_PERIOD_S = 30.0
"""How often the cluster's discovery is read again (a CRD installed later is seen)."""


@dataclass(slots=True)
class _Pod:
    uid: str
    node: str
    terminal: bool
    request: ResourceList
    owner_uid: str  # AppWrapper uid label, or ""
    name: str
    namespace: str
    phase: str
    ready: bool
    deleted_at: str | None
    """Its deletionTimestamp: on its way out."""
    failure: FailedPod | None = None
    """A Failed pod: its first container that ended badly (what gang health reads)."""

    def as_read(self) -> dict[str, Any]:
        """The pod as progress reads it (``core.life.completion.count_pods``), made when asked:
        kept as these few fields, not as dicts, since 10,000 running pods are kept."""
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self.deleted_at:
            meta["deletionTimestamp"] = self.deleted_at
        return {"metadata": meta, "status": {"phase": self.phase, "conditions": [
            {"type": "Ready", "status": "True" if self.ready else "False"}]}}


@dataclass
class LinkHealth:
    ready: bool = False
    reason: str = "Connecting"
    message: str = "connecting to the cluster"


Connector = Callable[[], Awaitable[Connection]]


@dataclass
class SpokeLink:
    """Everything the controller knows about one cluster, kept current by watches."""

    name: str
    on_change: Callable[[str, Iterable[str], bool], None]
    """Called with (cluster, AppWrapper uids concerned, capacity changed)."""
    on_health: Callable[[str], None]
    kinds_in_use: Callable[[str], set[tuple[str, str]]] = lambda _cluster: set()
    """(apiVersion, kind) of what the AppWrappers running on this cluster wrap."""
    fence: WriteFence | None = None
    local: bool = False
    """The hub itself (single-cluster mode): namespaces there are the AppWrappers' own."""
    conn: Connection | None = None
    discovery: Discovery | None = None
    health: LinkHealth = field(default_factory=LinkHealth)
    last_contact: datetime | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    schedulable: bool = True
    topology: tuple[str, ...] = ()
    """Its topology levels (the SpokeCluster's, else the policy's)."""
    leftovers: int = 0
    """Objects recorded to delete here (``Leftovers``): no new work until they are gone."""
    started_at: datetime = field(default_factory=utcnow)
    """When this link was made: "lost since" for a cluster never reached since."""
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    requested: dict[str, ResourceList] = field(default_factory=dict)
    pods: dict[str, _Pod] = field(default_factory=dict)
    pods_by_owner: dict[str, set[str]] = field(default_factory=dict)
    held_by: dict[str, dict[str, ResourceList]] = field(default_factory=dict)
    """Per AppWrapper uid: what its bound, running pods request on each node."""
    pod_epochs: dict[str, int] = field(default_factory=dict)
    """Per AppWrapper uid with pods here: a number that changes whenever one of its pods
    does and is never reused, so the dispatcher keeps what it worked out from them (its
    reservation, where it holds room) until then (no entry: it has no pods here)."""
    _pod_epoch: int = 0
    namespaces_made: set[str] = field(default_factory=set)
    """Namespaces known to exist on the cluster (reset whenever the link reconnects)."""
    closed_namespaces: frozenset[str] = frozenset()
    """Namespaces labelled ``cluster.codeflare.dev/closed=true`` here, as last watched."""
    identity_namespace: str | None = None
    """The namespace of the ServiceAccount mcad acts as here (None: another identity,
    or the cluster does not say)."""
    node_health: NodeHealthRules = field(default_factory=NodeHealthRules)
    """Which node label says how healthy a node's GPUs are (``nodeHealth``)."""
    deleted_items: dict[str, set[str]] = field(default_factory=dict)
    """Per AppWrapper uid: its wrapped objects (``Kind/name``) deleted since mcad last
    created them. While it runs, mcad deletes none: a deletion is someone else's."""
    item_uids: dict[tuple[str, str], str] = field(default_factory=dict)
    """(AppWrapper uid, ``Kind/name``) -> the uid of that object as last made or seen: a
    late DELETED of an earlier one (a reset deleted it, and made a new one) is not the
    deletion of the one that runs."""
    _informers: dict[str, Informer] = field(default_factory=dict)
    _kinds: dict[str, Informer] = field(default_factory=dict)
    _supervisor: Supervisor | None = None
    _probe_failures: int = 0
    _discovered: bool = False
    _required_kinds: set[str] = field(default_factory=set)
    """Kinds in use when the link connected: watched and listed before it is ready."""
    _node_cache: dict[str, NodeCapacity] = field(default_factory=dict)

    # -- life ---------------------------------------------------------------------------
    async def run(self, connect: Connector) -> None:
        """Connect, then keep the watches and the probe running until cancelled.

        A kubeconfig that cannot be used waits here (a new Secret replaces the link); a
        cluster that cannot be reached raises, so the caller's supervisor retries.
        """
        try:
            conn = await connect()
        except BadKubeconfig as err:
            self._set_health(False, "BadKubeconfig", str(err))
            await asyncio.Event().wait()
            raise AssertionError("unreachable") from err  # pragma: no cover
        except GatewayError as err:
            self._set_health(False, "ConnectFailed", str(err))
            raise
        try:
            self.identity_namespace = await self._identity(conn)
        except GatewayError as err:
            # A cluster that does not answer at all is Unreachable, as its watches would
            # say (and the SpokeCluster's condition shows the address it tried).
            reason = "Unreachable" if isinstance(err, Unreachable) else "ConnectFailed"
            self._set_health(False, reason, f"cannot ask the cluster who mcad is there "
                                            f"(SelfSubjectReview): {err}")
            await conn.close()
            raise
        conn.write_fence = self.fence
        self.conn, self.discovery = conn, Discovery(conn)
        self._reset()
        self._supervisor = Supervisor(prefix=f"spoke {self.name} ")
        self._informers = {
            "nodes": Informer(conn, refs.NODES, self._on_node, key=_by_name, keep=_identity,
                              on_sync=self._on_sync),
            # Pods and wrapped objects change often and only a few fields are kept
            # (interned here): decoded plainly, a pod event costs half as much.
            "pods": Informer(conn, refs.PODS, self._on_pod, key=_by_uid, keep=_identity,
                             on_sync=self._on_sync, shared=False),
            "namespaces": Informer(conn, refs.NAMESPACES, self._on_namespace, key=_by_name,
                                   keep=_identity, label_selector=f"{CLOSED_LABEL}=true",
                                   on_sync=self._on_sync),
        }
        self._set_health(False, "Syncing", "listing the cluster's nodes, pods and closed "
                                           "namespaces")
        try:
            await self._supervisor.run(*((name, informer.run)
                                         for name, informer in self._informers.items()),
                                       ("probe", self._probe), ("discovery", self._discover))
        finally:
            self._supervisor = None
            self.conn, self.discovery = None, None
            self._set_health(False, "Disconnected", "the link to the cluster was stopped")
            await conn.close()

    def _reset(self) -> None:
        self.nodes.clear()
        self.requested.clear()
        self.pods.clear()
        self.pods_by_owner.clear()
        self.pod_epochs.clear()
        self.held_by.clear()
        self.namespaces_made.clear()
        self.closed_namespaces = frozenset()
        self.deleted_items.clear()
        self.item_uids.clear()
        self._kinds.clear()
        self._node_cache.clear()
        self._probe_failures = 0
        self._discovered = False
        self._required_kinds.clear()

    def _set_health(self, ready: bool, reason: str, message: str) -> None:
        if (self.health.ready, self.health.reason, self.health.message) != (ready, reason,
                                                                           message):
            self.health = LinkHealth(ready, reason, message)
            if not ready:
                log.warning("cluster %s is not ready: %s (%s)", self.name, reason, message)
            self.on_health(self.name)

    def _refresh_health(self) -> None:
        """Ready only when connected, answering, nodes and pods synced, no watch broken."""
        if self.conn is None:
            return
        if self._probe_failures >= PROBE_FAILURES:
            since = self.lost_since().strftime("%H:%M:%S")
            self._set_health(False, "Unreachable", f"the API server has not answered its "
                             f"probes since {since} UTC")
            return
        # A wrapped kind's watch that is still listing does not make the cluster less
        # usable (nothing reads its objects but progress, which waits for them), so
        # only nodes, pods and the closed namespaces must be synced; a kind's broken
        # watch still counts.
        behind = [name for name, informer in self._informers.items() if not informer.synced]
        # A kind answered 404 is not served any more (its CRD went): not a broken cluster
        # (discovery notices within a period and stops following it).
        behind += [name for name, informer in self._kinds.items()
                   if not informer.synced and not _gone(informer.error)
                   and (informer.error or name in self._required_kinds)]
        if behind:
            errors = [i.error.message for i in [*self._informers.values(),
                                                *self._kinds.values()]
                      if i.error and not _gone(i.error)]
            if errors:
                self._set_health(False, "Unreachable", f"watches of {', '.join(behind)} "
                                 f"broke: {errors[0]}")
            else:
                self._set_health(False, "Syncing", f"listing {', '.join(behind)}")
            return
        if not self._discovered:
            self._set_health(False, "Syncing", "reading the cluster's API discovery")
            return
        ready_nodes = sum(1 for n in self.nodes.values() if _node_ready(n))
        self._set_health(True, "Connected", f"{len(self.nodes)} nodes, {ready_nodes} ready")

    def lost_since(self) -> datetime:
        """Since when the cluster has not answered (meaningful while it is not ready)."""
        return self.last_contact or self.started_at

    def _on_sync(self, synced: bool, error: ApiError | None) -> None:
        if synced:
            self.last_contact = utcnow()
        self._refresh_health()

    async def _identity(self, conn: Connection) -> str | None:
        """The namespace of the ServiceAccount mcad acts as on the cluster (a
        SelfSubjectReview: whoever is authenticated may ask it). A cluster that does not
        serve it (before Kubernetes 1.28) or refuses it says nothing: logged, and
        ``refusedNamespaces`` is then the way to close that namespace."""
        try:
            review = await verbs.create(conn, refs.SELFSUBJECTREVIEWS, {
                "apiVersion": refs.SELFSUBJECTREVIEWS.api_version,
                "kind": refs.SELFSUBJECTREVIEWS.kind}, fenced=False)
        except (NotFound, Forbidden) as err:
            log.warning("cluster %s does not say who mcad is there (SelfSubjectReview: %s); "
                        "the namespace of its identity is not refused there unless "
                        "refusedNamespaces names it", self.name, err.message)
            return None
        user = ((review.get("status") or {}).get("userInfo") or {}).get("username")
        return identity_namespace(str(user or ""))

    async def _discover(self) -> None:
        """Learn which kinds the cluster serves, at once and then every 30 s (a CRD
        installed there later becomes usable without a restart); the first time, watch
        the wrapped kinds in use here again."""
        assert self.discovery is not None
        while True:
            try:
                before = self.discovery.kinds
                served = await self.discovery.refresh()
                if served != before:
                    self._unwatch_kinds_not_served(served)
                    self.on_change(self.name, (), True)  # AppWrappers may fit here now
                if not self._discovered:
                    await self._watch_kinds_in_use()
                self._discovered = True
            except ApiError as err:
                log.warning("discovery on %s failed: %s", self.name, err)
            self._refresh_health()
            await asyncio.sleep(DISCOVERY_PERIOD_S if self._discovered else PROBE_PERIOD_S)

    async def _watch_kinds_in_use(self) -> None:
        assert self.discovery is not None
        for api_version, kind in sorted(self.kinds_in_use(self.name)):
            try:
                ref = await self.discovery.resource_for(api_version, kind)
            except UnknownKind:
                continue  # its AppWrapper is sent elsewhere (KindNotServed) when followed
            if ref.kind not in self._kinds and (ref.api_version, ref.kind) != ("v1", "Pod"):
                self._required_kinds.add(ref.kind)
            self.watch_kind(ref)

    async def _probe(self) -> None:
        assert self.conn is not None
        while True:
            try:
                await self.conn.request("GET", "/readyz", timeout=PROBE_TIMEOUT_S, attempts=1)
            except ApiError as err:
                self._probe_failures += 1
                log.debug("probe of %s failed: %s", self.name, err)
                if self._probe_failures >= PROBE_FAILURES:
                    # Whatever still waits on it would hold its reconcile place for the
                    # request's whole time-out: given up now, at each failed probe.
                    given_up = self.conn.abandon(f"{self._probe_failures} probes failed")
                    if given_up:
                        log.warning("cluster %s: %d requests waiting for an answer given "
                                    "up, as its probes fail", self.name, given_up)
            else:
                self._probe_failures = 0
                self.last_contact = utcnow()
            self._refresh_health()
            await asyncio.sleep(PROBE_PERIOD_S)

    # -- nodes, pods and closed namespaces ----------------------------------------------
    def _on_node(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        before = self.nodes.get(name)
        if kind == "DELETED":
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = _slim_node(obj)
        self._node_cache.pop(name, None)
        # A node whose GPUs must now be evacuated: the gangs running there are looked at.
        rules = self.node_health
        now_evict = kind != "DELETED" and rules.of(
            self.nodes[name]["metadata"].get("labels") or {}) is NodeHealth.NO_EXECUTE
        was_evict = before is not None and rules.of(
            before["metadata"].get("labels") or {}) is NodeHealth.NO_EXECUTE
        owners = {pod.owner_uid for pod in self.pods.values()
                  if pod.node == name and pod.owner_uid} if now_evict and not was_evict \
            else set()
        self.on_change(self.name, owners, True)

    def _on_namespace(self, kind: str, obj: dict[str, Any]) -> None:
        """A namespace labelled closed (or no longer: a watch with a label selector sends
        DELETED for one that stops matching): the cycle decides again."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        closed = kind != "DELETED" and (meta.get("labels") or {}).get(CLOSED_LABEL) == "true"
        if closed == (name in self.closed_namespaces):
            return
        self.closed_namespaces = self.closed_namespaces | {name} if closed \
            else self.closed_namespaces - {name}
        self.on_change(self.name, (), True)

    def _on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid", "")
        old = self.pods.pop(uid, None)
        if old is not None:
            self._account(old, -1)
        owner = intern(str((meta.get("labels") or {}).get(UID_LABEL, "")))
        if kind != "DELETED":
            spec = obj.get("spec") or {}
            phase = (obj.get("status") or {}).get("phase", "Pending")
            try:
                request = pod_request(spec) if "containers" in spec else \
                    (old.request if old is not None else EMPTY)
            except ValueError:
                request = EMPTY
            name = str(meta.get("name", ""))
            pod = _Pod(uid, intern(str(spec.get("nodeName", ""))), phase in TERMINAL,
                       request, owner, name=name,
                       namespace=intern(str(meta.get("namespace", ""))),
                       phase=intern(str(phase)), ready=_pod_ready(obj),
                       deleted_at=meta.get("deletionTimestamp") or None,
                       failure=_failure(name, obj) if phase == "Failed" else None)
            self.pods[uid] = pod
            self._account(pod, +1)
        new = self.pods.get(uid)
        capacity_changed = (old is None or new is None or old.terminal != new.terminal
                            or old.node != new.node)
        self.on_change(self.name, (owner,) if owner else (), capacity_changed)

    def _account(self, pod: _Pod, sign: int) -> None:
        if pod.owner_uid:
            self._pod_epoch += 1
            self.pod_epochs[pod.owner_uid] = self._pod_epoch
            owned = self.pods_by_owner.setdefault(pod.owner_uid, set())
            if sign > 0:
                owned.add(pod.uid)
            else:
                owned.discard(pod.uid)
                if not owned:
                    del self.pods_by_owner[pod.owner_uid]
                    del self.pod_epochs[pod.owner_uid]
        if pod.node and not pod.terminal:
            current = self.requested.get(pod.node, EMPTY)
            self.requested[pod.node] = current + pod.request if sign > 0 \
                else current - pod.request
            self._node_cache.pop(pod.node, None)
            if pod.owner_uid:
                held = self.held_by.setdefault(pod.owner_uid, {})
                now = held.get(pod.node, EMPTY) + (pod.request if sign > 0
                                                   else pod.request.scale(-1))
                if now:
                    held[pod.node] = now
                else:
                    held.pop(pod.node, None)
                    if not held:
                        del self.held_by[pod.owner_uid]

    def pods_of(self, owner_uid: str) -> list[dict[str, Any]]:
        return [self.pods[u].as_read() for u in self.pods_by_owner.get(owner_uid, ())]

    def placed_requests_of(self, owner_uid: str) -> list[ResourceList]:
        """Requests of the AppWrapper's pods that need no reservation: bound or finished."""
        return [self.pods[u].request for u in self.pods_by_owner.get(owner_uid, ())
                if self.pods[u].node or self.pods[u].terminal]

    # -- wrapped objects ----------------------------------------------------------------
    def watch_kind(self, ref: ResourceRef) -> None:
        """Follow objects of this kind that carry an AppWrapper uid label (once)."""
        if ref.kind in self._kinds or (ref.api_version, ref.kind) == ("v1", "Pod") \
                or self.conn is None or self._supervisor is None:
            return
        informer = Informer(self.conn, ref,
                            lambda event, obj: self._item_handler(ref.kind, event, obj),
                            label_selector=UID_LABEL, keep=functools.partial(_slim_item, ref),
                            on_sync=self._on_sync,
                            shared=False)
        self._kinds[ref.kind] = informer
        self._supervisor.spawn(ref.kind, informer.run)
        self._refresh_health()

    def _unwatch_kinds_not_served(self, served: frozenset[tuple[str, str]] | None) -> None:
        """Stop following wrapped kinds the cluster no longer serves (their CRD was
        removed, and with it every object of theirs): their watch would fail for ever
        and keep the whole cluster unready. A kind served again is followed again by the
        next AppWrapper that creates one."""
        if served is None or self._supervisor is None:
            return
        for kind, informer in list(self._kinds.items()):
            if (informer.ref.api_version, kind) not in served:
                log.info("cluster %s no longer serves %s (%s): no longer followed", self.name,
                         kind, informer.ref.api_version)
                self._supervisor.cancel(kind)
                del self._kinds[kind]
                self._required_kinds.discard(kind)
        self._refresh_health()

    def _item_handler(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(UID_LABEL, "")
        if owner:
            name, uid = f"{kind}/{meta.get('name', '')}", str(meta.get("uid") or "")
            if event == "DELETED":
                if self.item_uids.get((owner, name)) == uid:
                    self.deleted_items.setdefault(owner, set()).add(name)
                    del self.item_uids[(owner, name)]
            elif not meta.get("deletionTimestamp"):  # (one on its way out is no news)
                self.item_made(owner, name, uid)
        self.on_change(self.name, (owner,) if owner else (), False)

    def item_made(self, owner_uid: str, name: str, uid: str) -> None:
        """The AppWrapper's object ``Kind/name`` is there as ``uid`` (made by mcad, or
        seen): only its own deletion counts from now on."""
        if uid:
            self.item_uids[(owner_uid, name)] = uid
        gone = self.deleted_items.get(owner_uid)
        if gone is not None:
            gone.discard(name)
            if not gone:
                del self.deleted_items[owner_uid]

    def forget_items(self, owner_uid: str) -> None:
        """mcad deletes the AppWrapper's objects (a reset, a requeue, a failure, its
        deletion): what goes now is not someone else's doing."""
        self.deleted_items.pop(owner_uid, None)
        for key in [k for k in self.item_uids if k[0] == owner_uid]:
            del self.item_uids[key]

    def gang(self, owner_uid: str, expected: int) -> GangState:
        """The AppWrapper's pods and objects as gang health reads them: pods by phase
        (those on their way out left aside), the failed ones and why, running ones on
        nodes whose GPUs must be evacuated, and objects deleted by someone else."""
        pending = running = succeeded = 0
        failed: list[FailedPod] = []
        evict: list[tuple[str, str]] = []
        rules, resource = self.node_health, self.node_health.resource
        for uid in self.pods_by_owner.get(owner_uid, ()):
            pod = self.pods[uid]
            if pod.phase == "Failed":
                failed.append(pod.failure or FailedPod(pod.name))
                continue
            if pod.deleted_at:
                continue
            if pod.phase == "Succeeded":
                succeeded += 1
            elif pod.phase == "Running":
                running += 1
                node = self.nodes.get(pod.node)
                if node is not None and pod.request.get(resource, 0) > 0 and rules.of(
                        node["metadata"].get("labels") or {}) is NodeHealth.NO_EXECUTE:
                    evict.append((pod.name, pod.node))
            else:
                pending += 1
        return GangState(expected=expected, pending=pending, running=running,
                         succeeded=succeeded, failed=tuple(sorted(failed, key=_failed_order)),
                         on_evict_nodes=tuple(sorted(evict)),
                         missing=tuple(sorted(self.deleted_items.get(owner_uid, ()))))

    def item_conditions(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        """The conditions (type -> status) of a wrapped object as last seen; None if absent."""
        informer = self._kinds.get(kind)
        entry = None if informer is None else informer.objects.get((namespace, name))
        return None if entry is None else dict(entry["conditions"])

    # -- capacity -----------------------------------------------------------------------
    def capacity(self, reservations: tuple[UnboundPods, ...] = (),
                 held_by: Mapping[AppWrapperKey, tuple[tuple[NodeName, ResourceList], ...]]
                 | None = None) -> ClusterCapacity:
        nodes = []
        for name, node in self.nodes.items():
            cached = self._node_cache.get(name)
            if cached is None:
                cached = self._node_cache[name] = _node_capacity(
                    node, self.requested.get(name, EMPTY), self.node_health)
            nodes.append(cached)
        ordered = tuple(sorted(nodes, key=lambda n: n.name))
        return ClusterCapacity(name=ClusterName(self.name), nodes=ordered,
                               labels=dict(self.labels), ready=self.health.ready,
                               schedulable=self.schedulable and not self.leftovers,
                               unbound=reservations,
                               kinds=self.discovery.kinds if self.discovery else None,
                               held_by=held_by or {}, topology=self.topology,
                               closed_namespaces=self.closed_namespaces,
                               identity_namespace=self.identity_namespace)


def _by_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _by_uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def _identity(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What an informer keeps of a node or pod: enough to say which one was deleted and
    whose it was (the link keeps the fields it reads itself)."""
    meta = obj.get("metadata") or {}
    return {"metadata": {**{k: _interned(meta.get(k)) for k in ("name", "namespace", "uid")},
                         **_owner_label(meta)}}


def _interned(value: Any) -> Any:
    """One string object for equal short values kept of plainly decoded objects (the
    limit ``loads`` shares by)."""
    return intern(value) if isinstance(value, str) and len(value) <= SHARED_VALUE_CHARS \
        else value


def _owner_label(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Of an object's labels, only the AppWrapper uid label (the one mcad reads): a Job's
    pod carries six more, and 10,000 running pods are kept."""
    owner = (meta.get("labels") or {}).get(UID_LABEL)
    return {"labels": {UID_LABEL: _interned(owner)}} if owner else {}


def _node_ready(node: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _node_capacity(node: Mapping[str, Any], requested: ResourceList,
                   rules: NodeHealthRules) -> NodeCapacity:
    spec, status = node.get("spec") or {}, node.get("status") or {}
    try:
        allocatable = ResourceList.parse(status.get("allocatable") or status.get("capacity"))
    except ValueError:
        allocatable = EMPTY
    taints = tuple(Taint(t.get("key", ""), t.get("value", ""), t.get("effect", ""))
                   for t in spec.get("taints") or [])
    labels = dict(node["metadata"].get("labels") or {})
    return NodeCapacity(name=NodeName(node["metadata"]["name"]), allocatable=allocatable,
                        requested=requested.clamp_zero(), labels=labels, taints=taints,
                        unschedulable=bool(spec.get("unschedulable")), ready=_node_ready(node),
                        health=rules.of(labels))


def _slim_node(node: dict[str, Any]) -> dict[str, Any]:
    """The fields of a node that capacity reads (not its images or addresses)."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, \
        node.get("status") or {}
    return {"metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}},
            "spec": {"taints": spec.get("taints") or [],
                     "unschedulable": spec.get("unschedulable", False)},
            "status": {"allocatable": status.get("allocatable"),
                       "capacity": status.get("capacity"),
                       "conditions": [{"type": c.get("type"), "status": c.get("status")}
                                      for c in status.get("conditions") or []]}}


def _failed_order(pod: FailedPod) -> tuple[str, str]:
    return (pod.finished.isoformat() if pod.finished else "", pod.name)


def _failure(name: str, pod: Mapping[str, Any]) -> FailedPod:
    """Why a Failed pod failed: its first container (init containers first) that ended
    with a non-zero code, with that code, its reason and when; else the pod's reason."""
    status = pod.get("status") or {}
    for container in [*(status.get("initContainerStatuses") or []),
                      *(status.get("containerStatuses") or [])]:
        ended = ((container or {}).get("state") or {}).get("terminated") or \
            ((container or {}).get("lastState") or {}).get("terminated")
        if not ended:
            continue
        try:
            code = int(ended.get("exitCode", 0))
        except (TypeError, ValueError):
            continue
        if code != 0:
            return FailedPod(name, code, intern(str(ended.get("reason") or "")),
                             parse_time(ended.get("finishedAt")))
    return FailedPod(name, None, intern(str(status.get("reason") or "")), None)


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _slim_item(ref: ResourceRef, obj: dict[str, Any]) -> dict[str, Any]:
    """A wrapped object of ``ref``'s kind as completion reads it: identity and
    conditions (a RayJob's read off its status: ``mcad.core.life.wrapping.reported_conditions``;
    the kind comes from the watch, since a list's items need not say it)."""
    meta = obj.get("metadata") or {}
    conditions = reported_conditions(ref.api_version, ref.kind, obj.get("status"))
    return {"metadata": {"name": _interned(meta.get("name")), "uid": meta.get("uid"),
                         "namespace": _interned(meta.get("namespace")), **_owner_label(meta),
                         **({"deletionTimestamp": meta["deletionTimestamp"]}
                            if meta.get("deletionTimestamp") else {})},
            "conditions": {_interned(t): _interned(s) for t, s in conditions.items()}}


def _gone(error: ApiError | None) -> bool:
    """The resource answered 404: the cluster no longer serves the kind."""
    return error is not None and error.status == 404
