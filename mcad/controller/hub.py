"""What the controller reads from the hub: AppWrappers, quota trees, spokes, Secrets,
and the priority classes AppWrappers may name.

Informers keep the caches of ``ControllerState``; their handlers only update caches and
say who should look again (the AppWrapper's key to the work queue, the dispatcher for a
cycle, the spoke links for a new kubeconfig). No decision is made and nothing is
written here. An AppWrapper whose v1beta2 ``spec.managedBy`` names another controller
is not mcad's: it gets no record (so no finalizer, no status, no queue place). A
priority class that changes changes the AppWrappers that name it: their records take
their object again, so every cache built from them is built anew. Kueue's
WorkloadPriorityClasses may not be served at all: then none are read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mcad.api.conversion import kept_facts
from mcad.config import RunConfig
from mcad.controller.classes import PriorityClasses
from mcad.controller.dispatcher import Dispatcher
from mcad.controller.informer import Informer
from mcad.controller.records import AppWrapperRecord, key_of
from mcad.controller.state import ControllerState
from mcad.controller.workqueue import WorkQueue
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.quota.forest import QuotaForest, QuotaNodeSpec, nodes_from_subtree
from mcad.core.quota.queues import PRIORITY_CLASS_LABEL
from mcad.gateway import refs
from mcad.gateway.connection import Connection

log = logging.getLogger(__name__)


class HubCache:
    """The hub's informers and what their events do to the controller's state."""

    def __init__(self, *, hub: Connection, state: ControllerState, config: RunConfig,
                 queue: WorkQueue[AppWrapperKey], dispatcher: Dispatcher,
                 spokes_changed: Callable[[], None],
                 on_listed: Callable[[], None] = lambda: None) -> None:
        self.state = state
        self.config = config
        self.ignored_subtrees: set[str] = set()
        self.queue = queue
        self.dispatcher = dispatcher
        self.spokes_changed = spokes_changed
        self.informers = {
            "appwrappers": Informer(hub, refs.APPWRAPPERS, self._on_appwrapper,
                                    keep=_identity),
            "quotasubtrees": Informer(hub, refs.QUOTASUBTREES, self._on_subtree),
            "spokeclusters": Informer(hub, refs.SPOKECLUSTERS,
                                      self._on_spoke_input(self.state.spoke_objects)),
            "secrets": Informer(hub, refs.SECRETS, self._on_spoke_input(self.state.secrets),
                                namespace=config.namespace),
            "priorityclasses": Informer(hub, refs.PRIORITYCLASSES,
                                        self._on_class(self.state.classes.kubernetes),
                                        keep=_class_value, optional=True),
            "workloadpriorityclasses": Informer(
                hub, refs.WORKLOADPRIORITYCLASSES,
                self._on_class(self.state.classes.workload), keep=_class_value,
                optional=True),
        }
        for informer in self.informers.values():
            informer.on_sync = self._on_sync
        self.listed = False
        """Whether every hub resource has been listed once."""
        self.on_listed = on_listed
        """Called once, when they are: ``mcad run`` settles the heap then
        (``mcad.controller.heap.settle``: most of what the controller keeps exists)."""

    def not_synced(self) -> list[str]:
        """The hub resources whose cache is not (or no longer) current."""
        return [name for name, informer in self.informers.items() if not informer.synced]

    def _on_sync(self, synced: bool, error: object) -> None:
        if synced and not self.listed and not self.not_synced():
            self.listed = True
            self.on_listed()
        self.dispatcher.trigger()

    # -- handlers -------------------------------------------------------------------------
    def _on_appwrapper(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        state = self.state
        if kind == "DELETED":
            rec = state.appwrappers.pop(key, None)
            if rec is not None and state.by_uid.get(rec.uid) == key:
                del state.by_uid[rec.uid]
            self.queue.add(key)
            self.dispatcher.trigger()
            return
        rec = state.appwrappers.get(key)
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if (rec is None or not rec.cluster) and _managed_elsewhere(meta):
            if rec is not None:  # (managedBy is immutable: never mcad's to begin with)
                state.appwrappers.pop(key, None)
                state.by_uid.pop(rec.uid, None)
            return
        arrived = False
        if rec is None or (rec.uid and rec.uid != uid):  # new, or deleted and recreated
            if rec is not None:
                state.by_uid.pop(rec.uid, None)
            rec = state.appwrappers[key] = AppWrapperRecord(classes=state.classes)
            arrived = True
        if not rec.observed.take(obj):
            return
        state.by_uid[rec.uid] = key
        self.queue.add(key)
        facts = rec.observed.facts
        if rec.queued or rec.deleting or (facts is not None and facts.suspend):
            # (a running one suspended is taken back by a cycle; one that just arrived
            # may cut the pacing short, when it outranks the queue)
            self.dispatcher.trigger(priority=rec.priority if arrived and rec.queued else None)

    def _on_class(self, values: dict[str, int]) -> Callable[[str, dict[str, Any]], None]:
        """A handler keeping ``values`` (name -> value) of one kind of priority class."""

        def handle(kind: str, obj: dict[str, Any]) -> None:
            name = str((obj.get("metadata") or {}).get("name", ""))
            value = None if kind == "DELETED" else PriorityClasses.value_of(obj)
            if values.get(name) == value and (value is not None or name not in values):
                return
            if value is None:
                values.pop(name, None)
            else:
                values[name] = value
            for rec in self.state.appwrappers.values():
                if (rec.meta.get("labels") or {}).get(PRIORITY_CLASS_LABEL) == name:
                    rec.observed.take(rec.observed.obj)  # what it means changed
                    self.queue.add(rec.key)
            self.dispatcher.trigger()

        return handle

    def _on_subtree(self, kind: str, obj: dict[str, Any]) -> None:
        ident = _ident(obj)
        namespace = (obj.get("metadata") or {}).get("namespace", "")
        if not self.config.reads_quota_from(namespace):
            if kind != "DELETED" and ident not in self.ignored_subtrees:
                log.warning("QuotaSubtree %s is ignored: mcad reads quota trees only from "
                            "namespaces %s (quotaNamespaces)", ident,
                            ", ".join(sorted({self.config.namespace,
                                              *self.config.quota_namespaces})))
            self.ignored_subtrees.add(ident)
            return
        if kind == "DELETED":
            self.state.subtrees.pop(ident, None)
        else:
            known = self.state.subtrees.get(ident)
            self.state.subtrees[ident] = obj
            if known is not None and _quota_part(known) == _quota_part(obj):
                return  # only its status moved (mcad's own usage report): same tree
        nodes: list[QuotaNodeSpec] = []
        problems: list[str] = []
        for name, subtree in sorted(self.state.subtrees.items()):
            try:
                nodes.extend(nodes_from_subtree(subtree))
            except ValueError as err:
                problems.append(f"QuotaSubtree {name}: {err}")
        self.state.forest, more = QuotaForest.build(nodes)
        self.state.quota_problems = problems + more
        for problem in self.state.quota_problems:
            log.warning("quota: %s", problem)
        self.dispatcher.trigger()

    def _on_spoke_input(self, objects: dict[str, dict[str, Any]]
                        ) -> Callable[[str, dict[str, Any]], None]:
        """A handler keeping ``objects`` (name -> object) of one kind the spoke links are
        built from: SpokeClusters, and the Secrets holding their kubeconfigs."""

        def handle(kind: str, obj: dict[str, Any]) -> None:
            name = obj["metadata"]["name"]
            if kind == "DELETED":
                objects.pop(name, None)
            else:
                objects[name] = obj
            self.spokes_changed()

        return handle


def _quota_part(obj: dict[str, Any]) -> tuple[Any, Any]:
    """What a QuotaSubtree contributes to the forest: its spec and its labels."""
    return obj.get("spec"), (obj.get("metadata") or {}).get("labels")


def _ident(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _managed_elsewhere(meta: dict[str, Any]) -> bool:
    facts = kept_facts(meta.get("annotations"))
    return facts is not None and facts.managed_elsewhere


def _class_value(obj: dict[str, Any]) -> dict[str, Any]:
    """What a priority class informer keeps: its name and value."""
    return {"metadata": {"name": (obj.get("metadata") or {}).get("name")},
            "value": obj.get("value")}


def _identity(obj: dict[str, Any]) -> dict[str, Any]:
    """What the AppWrapper informer keeps (the record holds the object itself)."""
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta.get(k) for k in ("name", "namespace", "uid")}}
