"""The wrapped objects on a spoke: plan, create idempotently, delete, check gone.

Creation resolves every kind through the spoke's discovery first, so a cluster-scoped
kind refuses the AppWrapper before anything exists, and a kind the chosen cluster does
not serve sends it back to the queue to go elsewhere (``KindNotServed``); then it
creates the namespace if missing (labelled as mcad's, with Pod Security enforced; an
existing one is the same team's, and the system namespaces are refused before anything
is written) and each object. An object the API server refuses for good (400/422
invalid, 403 forbidden, e.g. by Pod Security) fails the AppWrapper with the server's
own sentence, after what was already created is deleted; other errors are retried with
the work queue's backoff.
An object that already exists with our uid label is ours (a restart or a retry, not a
duplicate); one without it belongs to someone else, and the AppWrapper fails with that
said rather than adopting it. On the hub itself (single-cluster mode) each object also
gets a controller ownerReference to its AppWrapper, as MCAD sets.

Deletion removes what the current dispatch *recorded* it created (the status's
``componentStatus``), not what the spec says now, so objects renamed or removed by a
spec change are not left behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.clock import utcnow
from mcad.controller.records import AppWrapperRecord
from mcad.controller.spoke_link import SpokeLink
from mcad.controller.state import ControllerState
from mcad.controller.writer import HubWriter
from mcad.core.cycle.elastic import merged, resized_manifest
from mcad.core.life.health import policy_problems
from mcad.core.life.wrapping import (
    Refusal,
    WrappedObject,
    for_remote_spoke,
    is_ours,
    owned_by,
    wrapped_objects,
)
from mcad.core.placement.namespaces import CLOSED_LABEL, closed_refusal
from mcad.core.workload.topology import pinned
from mcad.gateway import refs, verbs
from mcad.gateway.errors import (
    AlreadyExists,
    ApiError,
    Forbidden,
    Invalid,
    NotFound,
    UnknownKind,
    Unreachable,
)
from mcad.gateway.refs import ResourceRef

log = logging.getLogger(__name__)
MANAGED_LABEL = "workload.codeflare.dev/managed"
CLEAR_TIMEOUT_S, CLEAR_ATTEMPTS = 10.0, 2
"""Each request of one clearing step gives up within about 20 s: the step is retried by
the reconciler anyway, and a deletion on a cluster that stopped answering must reach
``spokeLostSeconds`` on time, not wait out the default budget of a minute per request."""
"""On the spoke namespaces mcad created: where it may write."""


PLANNED = "planned"


@dataclass(frozen=True, slots=True)
class Followed:
    """A wrapped object as its progress is followed: no manifest."""

    api_version: str
    kind: str
    name: str
    completion: tuple[str, ...]


class KindNotServed(Exception):
    """The cluster chosen does not serve a kind the AppWrapper wraps (its discovery was
    behind, or a CRD was removed); the AppWrapper must go elsewhere."""


class ObjectManager:
    def __init__(self, *, state: ControllerState, config: RunConfig, writer: HubWriter,
                 released: Callable[[], None]) -> None:
        self.state = state
        self.config = config
        self.writer = writer
        self.released = released
        self.node_health = config.node_health.rules()

    def plan(self, rec: AppWrapperRecord) -> list[WrappedObject] | Refusal:
        """The objects to create, with their manifests, worked out once per generation of
        the AppWrapper and kept until they are created (``ensure`` forgets them: a
        running AppWrapper's manifests were a second copy of its templates, for as long
        as it ran)."""
        return rec.observed.per_generation(PLANNED, lambda: self._planned(rec))

    def followed(self, rec: AppWrapperRecord) -> list[Followed] | Refusal:
        """What is read of each wrapped object while it runs (its identity and the
        condition types that complete it), kept per generation: each pod event reconciles
        the AppWrapper, and these need not be worked out each time."""
        def make() -> list[Followed] | Refusal:
            planned = self.plan(rec) if PLANNED in rec.observed.kept else self._planned(rec)
            return planned if isinstance(planned, Refusal) else [
                Followed(w.api_version, w.kind, w.name, w.completion) for w in planned]
        return rec.observed.per_generation("followed", make)

    def _planned(self, rec: AppWrapperRecord) -> list[WrappedObject] | Refusal:
        unreadable = policy_problems(rec.meta.get("annotations") or {})
        if unreadable:
            return Refusal("InvalidAnnotation", "; ".join(unreadable))
        return self.config.refused_namespace(rec.namespace) or wrapped_objects(
            name=rec.name, namespace=rec.namespace, uid=rec.uid, spec=rec.spec,
            kind_allowed=self.config.kind_allowed,
            token_secrets_allowed=self.config.allow_service_account_token_secrets)

    def usable_link(self, cluster: str) -> SpokeLink | None:
        link = self.state.links.get(cluster)
        if link is None or link.conn is None or link.discovery is None:
            return None
        return link

    async def refuse(self, rec: AppWrapperRecord, refusal: Refusal) -> None:
        """Fail the AppWrapper for good: nothing of it is (or stays) created."""
        # Dispatched goes False with it: a refusal found after the dispatch was persisted
        # (a namespace mcad may not write into) must not leave Dispatched=True behind.
        ok = await self.writer.patch_status(rec, {
            "state": "Failed", "message": refusal.message, "clusterName": "",
        }, conditions=(("Failed", "True", refusal.reason, refusal.message),
                       ("Queued", "False", refusal.reason, refusal.message),
                       ("Dispatched", "False", refusal.reason, refusal.message)))
        if ok:
            self.writer.event(rec, reason=refusal.reason, message=refusal.message,
                              warning=True)
            self.released()

    async def _refuse_after_clearing(self, rec: AppWrapperRecord, refusal: Refusal) -> None:
        """Fail the AppWrapper once the deletion of what was created for it is under way:
        a Failed AppWrapper no longer names its cluster, so nothing would come back for
        objects left there. A cluster that does not answer raises: retried later."""
        if await self.clear(rec) is None:
            raise Unreachable(f"cannot remove what was created for {rec.key} before failing "
                              f"it ({refusal.reason})", cluster=rec.cluster)
        await self.refuse(rec, refusal)

    async def _refs(self, link: SpokeLink, planned: list[WrappedObject]
                    ) -> list[tuple[WrappedObject, ResourceRef]] | Refusal:
        assert link.discovery is not None
        out = []
        for wrapped in planned:
            try:
                ref = await link.discovery.resource_for(wrapped.api_version, wrapped.kind)
            except UnknownKind as err:
                raise KindNotServed(f"{wrapped.describe}: cluster {link.name} serves no kind "
                                    f"{wrapped.kind} in {wrapped.api_version}") from err
            if not ref.namespaced:
                return Refusal("ClusterScoped", f"{wrapped.describe} is cluster-scoped on "
                                                f"{link.name}; an AppWrapper may only create "
                                                "namespaced objects")
            out.append((wrapped, ref))
        return out

    async def ensure(self, rec: AppWrapperRecord) -> bool:
        """Create whatever of the AppWrapper is missing on its cluster; True when all is
        there. A refusal fails the AppWrapper; ``KindNotServed`` is raised for a kind the
        cluster lacks; an API error is raised, and the work queue retries the AppWrapper
        after its backoff."""
        link = self.usable_link(rec.cluster)
        if link is None:
            return False
        planned = self.plan(rec)
        resolved = planned if isinstance(planned, Refusal) else await self._refs(link, planned)
        if isinstance(resolved, Refusal):
            await self._refuse_after_clearing(rec, resolved)
            return False
        assert link.conn is not None
        try:
            refusal = await self._ensure_namespace(link, rec.namespace)
            if refusal is not None:
                await self.refuse(rec, refusal)
                return False
            for wrapped, ref in resolved:
                link.watch_kind(ref)
                manifest = owned_by(wrapped.manifest, name=rec.name, uid=rec.uid) \
                    if link.local else for_remote_spoke(wrapped.manifest)
                manifest = pinned(manifest, rec.pin)  # kept in its topology domains
                manifest = self.node_health.guarded(manifest)  # off unhealthy GPUs
                pods = rec.admitted_pods()
                change = None if pods is None else resized_manifest(
                    wrapped.kind, wrapped.api_version, manifest, pods)
                if change is not None:  # elastic, started below its full size
                    manifest = merged(manifest, change)
                try:
                    made = await verbs.create(link.conn, ref, manifest,
                                              namespace=rec.namespace)
                    link.item_made(rec.uid, f"{wrapped.kind}/{wrapped.name}",
                                   str((made.get("metadata") or {}).get("uid") or ""))
                except (Invalid, Forbidden) as err:
                    if isinstance(err, Forbidden) and "exceeded quota" in err.message:
                        raise  # a namespace ResourceQuota: room may come back; retried
                    # Refused for a reason that will not go away by retrying (a field the
                    # API server rejects, a Pod Security violation, no right to create it).
                    await self._refuse_after_clearing(rec, Refusal(
                        "CreationRefused", f"{wrapped.describe} was refused by cluster "
                                           f"{link.name}: {err.message}"))
                    return False
                except AlreadyExists:
                    existing = await verbs.get(link.conn, ref, wrapped.name,
                                               namespace=rec.namespace)
                    link.item_made(rec.uid, f"{wrapped.kind}/{wrapped.name}",
                                   str((existing.get("metadata") or {}).get("uid") or ""))
                    if not is_ours(existing, uid=rec.uid):
                        await self._refuse_after_clearing(rec, Refusal(
                            "NameTaken", f"{wrapped.describe} already exists on cluster "
                                         f"{link.name} and does not belong to this "
                                         "AppWrapper; rename it or delete the other one"))
                        return False
        except ApiError as err:
            metrics.count_api_error(link.name, err.reason or type(err).__name__)
            if isinstance(err, NotFound):
                link.namespaces_made.discard(rec.namespace)  # deleted behind our back
            raise
        rec.observed.forget(PLANNED)  # all created: the manifests are not needed again
        return True

    async def _ensure_namespace(self, link: SpokeLink, namespace: str) -> Refusal | None:
        """Make the AppWrapper's namespace on the spoke when it is missing (labelled as
        mcad's, with Pod Security enforced). One that exists is the same team's
        (``spokeNamespaces: same``, the default) and is used as it is; with
        ``spokeNamespaces: managed`` only one mcad made or labelled is, and otherwise
        the sentence says why not. One its admin closed (a label set after the cycle
        decided: the link's watch, or the namespace as read here) or the namespace of
        mcad's identity there is refused before anything is created in it."""
        closed = closed_refusal(namespace, cluster=link.name, closed=link.closed_namespaces,
                                identity=link.identity_namespace)
        if closed is not None:
            return closed
        if namespace in link.namespaces_made:
            return None
        assert link.conn is not None
        labels = {MANAGED_LABEL: "true",
                  "pod-security.kubernetes.io/enforce": self.config.spoke_namespace_pod_security}
        try:
            await verbs.create(link.conn, refs.NAMESPACES, {
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": namespace, "labels": labels}})
        except AlreadyExists:
            existing = await verbs.get(link.conn, refs.NAMESPACES, namespace)
            labels = (existing.get("metadata") or {}).get("labels") or {}
            if labels.get(CLOSED_LABEL) == "true":
                return closed_refusal(namespace, cluster=link.name, closed=(namespace,),
                                      identity=None)
            managed = labels.get(MANAGED_LABEL)
            if managed != "true" and not link.local and \
                    self.config.spoke_namespaces == "managed":
                return Refusal("NamespaceNotManaged", (
                    f"namespace {namespace} exists on cluster {link.name} and mcad did not "
                    f"create it; with spokeNamespaces: managed, mcad writes only into spoke "
                    f"namespaces it created or that are labelled {MANAGED_LABEL}=true"))
        link.namespaces_made.add(namespace)
        return None

    async def resize(self, rec: AppWrapperRecord, pods: int) -> bool:
        """Run the elastic AppWrapper's objects at ``pods`` pods (its Job's parallelism,
        its PodGroup's minMember); False when its cluster cannot be used now (nothing
        was changed); an API error is raised (the work queue retries)."""
        link = self.usable_link(rec.cluster)
        planned = self.plan(rec)
        if link is None or link.conn is None or link.discovery is None or \
                isinstance(planned, Refusal):
            return False
        for wrapped in planned:
            change = resized_manifest(wrapped.kind, wrapped.api_version, wrapped.manifest, pods)
            if change is None:
                continue
            ref = await link.discovery.resource_for(wrapped.api_version, wrapped.kind)
            try:
                await verbs.merge_patch(link.conn, ref, wrapped.name, change,
                                        namespace=rec.namespace)
            except NotFound:
                continue  # not created yet: it is created at the admitted size
            except ApiError as err:
                metrics.count_api_error(link.name, err.reason or type(err).__name__)
                raise
        return True

    def created(self, rec: AppWrapperRecord) -> list[tuple[str, str, str]]:
        """(apiVersion, kind, name) of what the current dispatch created: as recorded at
        dispatch, or (for a dispatch persisted before mcad recorded it) as planned."""
        recorded = rec.components()
        if recorded:
            return recorded
        planned = self.plan(rec)
        return [] if isinstance(planned, Refusal) else [
            (w.api_version, w.kind, w.name) for w in planned]

    async def clear(self, rec: AppWrapperRecord) -> int | None:
        """Delete every wrapped object of the AppWrapper on its cluster (one GET and, when
        it is ours and not already going, one DELETE per object) and return how many
        objects and pods are still there: 0 when everything is gone, None when the
        cluster cannot be reached or does not answer."""
        link = self.usable_link(rec.cluster)
        if link is None or not link.health.ready:
            return None
        assert link.conn is not None and link.discovery is not None
        link.forget_items(rec.uid)  # what goes now, mcad deletes
        left = len(link.pods_of(rec.uid))
        try:
            for api_version, kind, name in self.created(rec):
                try:
                    ref = await link.discovery.resource_for(api_version, kind)
                    existing = await verbs.get(link.conn, ref, name, namespace=rec.namespace,
                                               timeout=CLEAR_TIMEOUT_S, attempts=CLEAR_ATTEMPTS)
                except (NotFound, UnknownKind):
                    continue
                if not is_ours(existing, uid=rec.uid):
                    continue
                left += 1
                if not (existing.get("metadata") or {}).get("deletionTimestamp"):
                    await verbs.delete(link.conn, ref, name, namespace=rec.namespace,
                                       propagation="Background", timeout=CLEAR_TIMEOUT_S,
                                       attempts=CLEAR_ATTEMPTS)
        except ApiError as err:
            metrics.count_api_error(link.name, err.reason or type(err).__name__)
            return None
        return left

    async def force_delete_pods(self, rec: AppWrapperRecord) -> None:
        link = self.usable_link(rec.cluster)
        if link is None or link.conn is None:
            return
        for pod in link.pods_of(rec.uid):
            meta = pod["metadata"]
            try:
                await verbs.delete(link.conn, refs.PODS, meta["name"],
                                   namespace=meta["namespace"], grace_seconds=0)
            except ApiError:
                continue
        log.info("force-deleted the pods of %s at %s", rec.key, utcnow())
