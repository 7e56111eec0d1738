"""The leader's memory of how long runs took, kept on the hub.

Owner of the ``RuntimeHistory`` (``mcad.core.life.runhistory``). The lifecycle tells it each
completion it wrote (``completed``: only the reconciler that wrote ``Completed`` calls
it, once per run, so a restart that lists finished AppWrappers again records nothing
twice). The history lives in ConfigMap ``mcad-runtimes`` in mcad's namespace (key
``history.json``): read once when this leader starts, written at most every
``SAVE_EVERY_S`` while something new was recorded, conditionally (its resourceVersion),
so the next leader reads what this one learned. A history that cannot be read is logged
and started anew: estimates then fall back on declared run times and the default, and
nothing else depends on it. The manifests create the ConfigMap (mcad may update only
that one); where it is missing and mcad may create it (a test bed), it does.

Completions recorded before the stored history is read are kept and added to it, so
the first seconds of a term lose nothing.

A ConfigMap holds 1 MiB, and the history at its count bounds with long names takes more
(issue 32). So what is written is the history trimmed to ``HISTORY_BUDGET_BYTES``
(``RuntimeHistory.within``: the namespace holding the most bytes loses its oldest runs
first), in a worker thread (at 20,000 runs the trim takes a fifth of a second), and the
book keeps the trimmed history, so its estimates are the ones the next leader will make.
Should the hub refuse a write anyway (413 or 422: a smaller limit, a policy), that is
logged once and counted (``mcad_runtime_history_refused_total``), and that same body is
not sent again: only a changed history is.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timedelta
from typing import Any

from mcad import metrics
from mcad.controller.records import AppWrapperRecord
from mcad.core.life.runhistory import (
    HISTORY_BUDGET_BYTES,
    MalformedHistory,
    RuntimeEstimate,
    RuntimeHistory,
    RuntimePolicy,
    family_of,
)
from mcad.gateway import verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import AlreadyExists, ApiError, Conflict, NotFound
from mcad.gateway.refs import ResourceRef

log = logging.getLogger(__name__)
CONFIGMAPS = ResourceRef("v1", "ConfigMap", "configmaps", namespaced=True)
NAME = "mcad-runtimes"
KEY = "history.json"
SAVE_EVERY_S = 10.0
REFUSED = (413, 422)
"""What the API server answers to a ConfigMap over its limit (422 Invalid: "Too long"),
or to a request body over its own (413)."""


class RuntimeBook:
    """Completed runs per namespace and family, and what a run is expected to take."""

    def __init__(self, *, hub: Connection, namespace: str, policy: RuntimePolicy) -> None:
        self.hub = hub
        self.namespace = namespace
        self.policy = policy
        self.history = RuntimeHistory()
        self.version = 0
        """Changes whenever the history does (expected run times may have moved)."""
        self.loaded = False
        self._early: list[tuple[str, str, float, datetime]] = []
        self._dirty = False
        self._stored: dict[str, Any] | None = None
        """The ConfigMap as last read or written (its resourceVersion fences writes)."""
        self._refused: str | None = None
        """The last history the hub refused (413/422), never sent again; None once a
        write is taken."""
        self._trim_said = False

    # -- what the controller tells it and asks ---------------------------------------------
    def completed(self, rec: AppWrapperRecord, now: datetime) -> None:
        """``rec``'s run completed at ``now`` (its run time: from its dispatch)."""
        started = rec.dispatched_at()
        if started is None:
            return
        seconds = max(0.0, (now - started).total_seconds())
        run = (rec.namespace, self.family(rec), seconds, now)
        if not self.loaded:
            self._early.append(run)
            return
        self._record(*run)

    def family(self, rec: AppWrapperRecord) -> str:
        return family_of(rec.name, rec.meta.get("labels") or {})

    def expected(self, rec: AppWrapperRecord) -> RuntimeEstimate:
        """How long ``rec``'s run is expected to take, and what that rests on."""
        declared = rec.run_expected()
        return self.history.expected_runtime(
            namespace=rec.namespace, family=self.family(rec),
            declared=timedelta(seconds=declared) if declared is not None else None,
            policy=self.policy)

    def seconds(self, rec: AppWrapperRecord) -> float:
        return self.expected(rec).seconds

    def _record(self, namespace: str, family: str, seconds: float, at: datetime) -> None:
        self.history = self.history.record(namespace, family, seconds, at)
        self.version += 1
        self._dirty = True

    # -- the ConfigMap ------------------------------------------------------------------------
    async def run(self) -> None:
        """Read the stored history, then write it back whenever it grew (a task)."""
        if not self.loaded:
            await self.load()
        while True:
            await asyncio.sleep(SAVE_EVERY_S)
            if self._dirty:
                await self.save()

    async def load(self) -> None:
        try:
            stored = await verbs.get(self.hub, CONFIGMAPS, NAME, namespace=self.namespace)
        except NotFound:
            stored = None
        history = RuntimeHistory()
        if stored is not None:
            self._stored = stored
            text = (stored.get("data") or {}).get(KEY) or ""
            if text:
                try:
                    history = RuntimeHistory.from_dict(json.loads(text))
                except (ValueError, MalformedHistory) as err:
                    log.warning("the runtime history in ConfigMap %s/%s cannot be read (%s); "
                                "starting a new one", self.namespace, NAME, err)
        self.history, self.loaded = history, True
        self.version += 1
        early, self._early = self._early, []
        for run in early:
            self._record(*run)
        runs = sum(len(r) for families in history.runs.values() for r in families.values())
        log.info("runtime history: %d past runs read from ConfigMap %s/%s", runs,
                 self.namespace, NAME)

    async def save(self) -> None:
        """Write the history, trimmed to its budget; on a conflict read the ConfigMap's
        version and try again at the next round (this leader's history is the newer: it
        read the stored one when it started)."""
        history = self.history
        trimmed, text = await asyncio.to_thread(_fitted, history)
        self._dirty = False
        if self.history is not history:
            self._dirty = True  # a run came in meanwhile: the next round writes it
        elif trimmed is not history:
            self.history = trimmed
            self.version += 1
            if not self._trim_said:
                self._trim_said = True
                log.info("the runtime history reached its budget of %d bytes; from now on "
                         "the namespaces holding the most bytes lose their oldest runs",
                         HISTORY_BUDGET_BYTES)
        if text == self._refused:
            return
        data = {KEY: text}
        try:
            if self._stored is None:
                self._stored = await verbs.create(self.hub, CONFIGMAPS, {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": NAME, "namespace": self.namespace,
                                 "labels": {"app.kubernetes.io/part-of": "mcad"}},
                    "data": data}, namespace=self.namespace)
            else:
                body = {**self._stored, "data": data}
                self._stored = await verbs.replace(self.hub, CONFIGMAPS, body)
        except (Conflict, AlreadyExists):
            self._dirty = True
            try:
                self._stored = await verbs.get(self.hub, CONFIGMAPS, NAME,
                                               namespace=self.namespace)
            except ApiError as err:
                log.warning("the runtime history could not be read back: %s", err)
        except ApiError as err:
            if err.status in REFUSED:
                self._refuse(text, err)
                return
            self._dirty = True
            log.warning("the runtime history could not be written to ConfigMap %s/%s: %s",
                        self.namespace, NAME, err)
        else:
            self._refused = None
            metrics.report_runtime_history(len(text))

    def _refuse(self, text: str, err: ApiError) -> None:
        """The hub will not take ``text``: say so once, and never send it again (the next
        history that differs is sent)."""
        metrics.count_runtime_history_refused()
        if self._refused is None:
            log.warning("the hub refused the runtime history (%d bytes) for ConfigMap %s/%s: "
                        "%s; it is not sent again until it changes, and estimates go on "
                        "from the history in memory", len(text), self.namespace, NAME, err)
        else:
            log.debug("the hub refused the runtime history again (%d bytes): %s",
                      len(text), err)
        self._refused = text


def _fitted(history: RuntimeHistory) -> tuple[RuntimeHistory, str]:
    """``history`` within its budget, and its encoded form (run in a worker thread)."""
    trimmed = history.within(HISTORY_BUDGET_BYTES)
    return trimmed, trimmed.encode()
