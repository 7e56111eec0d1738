"""A dry run (``mcad explain -f``) that cannot hurt the leader.

A dry run takes an AppWrapper nobody submitted, checks it, adds it to the last cycle's
snapshot as if created now, runs a whole dispatch cycle and a plan of start estimates.
On the leader's event loop, beside the admission webhook and ``/healthz``, that was a
door: a 1.5 kB YAML body of nested aliases (a "billion laughs") held the loop for
seconds, and each POST started a plan in a thread, as many at once as were sent. So:

- the body is read up to ``MAX_BODY_BYTES`` and refused past it (413);
- it must say it is JSON or YAML (``Content-Type``), which a web page cannot send to a
  user's ``kubectl proxy`` without the browser asking first (no cross-site POST);
- YAML anchors and aliases are refused with a sentence before anything is built;
- parsing, checking, the cycle and the plan run in a worker thread, never on the loop;
- one dry run at a time (``Gate``): the next waits up to ``WAIT_S`` for its turn, then
  is answered 429 with a sentence and ``Retry-After``;
- the plan is capped as the periodic one is (``estimates.maxCycles``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from mcad.api.conversion import V1BETA2, to_v1beta1
from mcad.config import RunConfig
from mcad.controller.clock import rfc3339
from mcad.controller.records import AppWrapperRecord
from mcad.core.cycle.decide import dispatch_cycle
from mcad.core.cycle.snapshot import CycleResult, Snapshot
from mcad.core.views.explain import Explanation, explain, with_candidate
from mcad.validation import check_appwrapper

MAX_BODY_BYTES = 1024 * 1024
"""Larger than any AppWrapper the hub stores (etcd's own limit is 1.5 MiB for the whole
object, status included, and a dry run has none)."""
WAIT_S = 2.0
RETRY_AFTER_S = 2
JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")


class Refused(Exception):
    """The dry run is refused: an HTTP status and the sentence that says why."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


class _NoAliases(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors and aliases (whose expansion is the
    "billion laughs"; an AppWrapper never needs them)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise Refused(400, "the body uses YAML anchors or aliases (& or *), which a dry "
                               "run does not accept: write the AppWrapper out in full, or "
                               "send it as JSON")
        return super().compose_node(parent, index)


def parse(body: bytes, content_type: str) -> dict[str, Any]:
    """The AppWrapper in ``body``, or ``Refused`` with a sentence."""
    kind = content_type.split(";", 1)[0].strip().lower()
    try:
        if kind in JSON_TYPES:
            obj = json.loads(body)
        elif kind in YAML_TYPES:
            obj = yaml.load(body, Loader=_NoAliases)
        else:
            raise Refused(415, f"a dry run takes an AppWrapper as application/json or "
                               f"application/yaml, not {kind or 'a body of no type'}")
    except (ValueError, yaml.YAMLError) as err:
        raise Refused(400, f"the body is not valid JSON or YAML: {err}") from None
    except RecursionError:
        raise Refused(400, "the body is nested too deeply to be an AppWrapper") from None
    if not isinstance(obj, dict):
        raise Refused(400, "the body must be one AppWrapper (a JSON or YAML object)")
    return obj


@dataclass(frozen=True)
class Trial:
    """The dry run's cycle: the snapshot with the candidate, its result, the candidate's
    explanation and record (for its own plan)."""

    snapshot: Snapshot
    result: CycleResult
    found: Explanation
    record: AppWrapperRecord


def trial(body: bytes, content_type: str, *, namespace: str, snapshot: Snapshot,
          config: RunConfig, now: datetime) -> Trial:
    """Parse, check and decide the candidate on ``snapshot`` (runs in a worker thread)."""
    obj = parse(body, content_type)
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise Refused(422, "the AppWrapper is not valid: metadata must be an object")
    given = (meta or {}).get("namespace")
    if given not in (None, "", namespace):
        raise Refused(400, f"the AppWrapper names namespace {given!r}, but the dry run was "
                           f"asked in {namespace!r}: leave metadata.namespace out, or ask "
                           "in its namespace")
    checked = check_appwrapper(obj, config=config)
    if checked.problems:
        raise Refused(422, "the AppWrapper is not valid: " + "; ".join(checked.problems))
    if obj.get("apiVersion") == V1BETA2:
        obj = to_v1beta1(obj)  # as the API server would store it
    meta = obj.setdefault("metadata", {})
    meta["namespace"] = namespace
    meta["uid"] = "dry-run"
    meta["creationTimestamp"] = rfc3339(now)
    record = AppWrapperRecord.of(obj)
    trial_snapshot = with_candidate(snapshot, record.core_entry(config))
    decided = dispatch_cycle(trial_snapshot)
    found = explain(trial_snapshot, decided, record.key)
    assert found is not None
    return Trial(trial_snapshot, decided, found, record)


class Gate:
    """One dry run at a time; the next waits a little for its turn, then is refused.

    A flag and an event rather than ``wait_for(lock.acquire())``: on Python 3.11 a
    time-out that races the acquisition can leave such a lock held for ever."""

    def __init__(self, *, wait_s: float = WAIT_S) -> None:
        self.wait_s = wait_s
        self._busy = False
        self._freed = asyncio.Event()

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while self._busy:
            left = deadline - loop.time()
            if left <= 0:
                raise Refused(429, "another dry run is being worked out; the leader does one "
                                   f"at a time: try again in {RETRY_AFTER_S}s",
                              retry_after=RETRY_AFTER_S)
            self._freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._freed.wait(), left)
        self._busy = True
        try:
            yield
        finally:
            self._busy = False
            self._freed.set()
