"""Leader election on a ``coordination.k8s.io`` Lease, as client-go does it.

Why: two replicas give a fast failover, but only one may dispatch. The replica that
holds the Lease ``mcad`` in the controller's namespace runs the controller; the others
serve /healthz, /readyz and /metrics and write nothing. The rules (client-go's
``leaderelection`` with its usual timings):

- a Lease is free when nobody holds it, or when its record has not changed for
  ``lease_duration`` (15 s) *as observed locally* (so the replicas' clocks need not
  agree);
- the leader renews every ``retry_period`` (2 s); if no renewal has succeeded for
  ``renew_deadline`` (10 s) it gives up leadership;
- fencing: ``fence()`` raises once ``renew_deadline`` has passed since the start of the
  last successful renewal, and every write of the controller consults it, so a leader
  that cannot renew has stopped writing 5 s before anybody else may take the Lease;
- ``release()`` (on SIGTERM) empties the holder, so a rolling update hands over in
  one ``retry_period`` rather than a whole ``lease_duration``.

Time comes from an injected monotonic clock; the Lease's own timestamps are written for
people (``kubectl get lease``), never trusted for decisions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mcad import metrics
from mcad.gateway import verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import AlreadyExists, ApiError, Conflict, Fenced, NotFound
from mcad.gateway.refs import LEASES

log = logging.getLogger(__name__)
LEASE_NAME = "mcad"
LEASE_REQUEST_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Timings:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeadershipLost(Exception):
    """The leader could not renew its Lease within the renew deadline."""


def default_identity() -> str:
    """``<pod or host name>_<random>``, unique per process (client-go's convention)."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:8]}"


def micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for the Lease and runs the leader's work while it holds it."""

    def __init__(self, conn: Connection, *, namespace: str, identity: str,
                 name: str = LEASE_NAME, timings: Timings = Timings(),
                 clock: Callable[[], float] | None = None) -> None:
        self.conn = conn
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings
        self.clock = clock or (lambda: asyncio.get_running_loop().time())
        """Monotonic seconds (the event loop's clock unless a test gives another)."""
        self.leading = False
        self.holder = ""
        """Who holds the Lease, as last seen."""
        self._renewed_at = float("-inf")
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = float("-inf")

    # -- fencing ------------------------------------------------------------------------
    def fence(self) -> None:
        """Raise ``Fenced`` unless this replica surely still leads."""
        if not self.leading or self.clock() >= self._renewed_at + self.timings.renew_deadline:
            raise Fenced("this replica is not the leader (or cannot renew its Lease); it "
                         "writes nothing", cluster=self.conn.name)

    # -- the campaign -------------------------------------------------------------------
    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Campaign forever; while leading, run ``lead()``; stop it when the Lease is lost.

        ``lead`` is cancelled on loss and started afresh on the next term, so a term
        never inherits another's in-memory state.
        """
        metrics.report_leader(False)
        while True:
            await self._acquire()
            log.info("became the leader (Lease %s/%s, identity %s)", self.namespace,
                     self.name, self.identity)
            metrics.report_leader(True)
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._keep(), name="lease renewal")
                    group.create_task(lead(), name="leader work")
            except* LeadershipLost:
                log.error("lost the leadership: the Lease %s/%s was not renewed within %.0fs; "
                          "stopped writing, campaigning again", self.namespace, self.name,
                          self.timings.renew_deadline)
            finally:
                self.leading = False
                metrics.report_leader(False)

    async def _acquire(self) -> None:
        logged = ""
        while True:
            if await self._try_acquire_or_renew():
                return
            if self.holder != logged:
                log.info("standing by: the Lease %s/%s is held by %s", self.namespace,
                         self.name, self.holder or "nobody")
                logged = self.holder
            await asyncio.sleep(self.timings.retry_period)

    async def _keep(self) -> None:
        """Renew every retry period; raise ``LeadershipLost`` past the renew deadline."""
        while True:
            await asyncio.sleep(self.timings.retry_period)
            deadline = self._renewed_at + self.timings.renew_deadline
            while not await self._try_acquire_or_renew():
                if self.clock() >= deadline:
                    self.leading = False
                    raise LeadershipLost()
                await asyncio.sleep(min(self.timings.retry_period,
                                        max(0.0, deadline - self.clock())))

    async def _try_acquire_or_renew(self) -> bool:
        started = self.clock()
        now = datetime.now(UTC)
        try:
            lease = await self._request("GET")
        except NotFound:
            lease = None
        except ApiError as err:
            log.debug("reading the Lease failed: %s", err)
            return False
        if lease is None:
            body = self._lease_body({}, now, transitions=0, acquired=now)
            try:
                await self._request("POST", body)
            except (AlreadyExists, Conflict):
                return False
            except ApiError as err:
                log.debug("creating the Lease failed: %s", err)
                return False
            return self._won(started, body["spec"])
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity") or "", spec.get("renewTime"),
                  spec.get("leaseDurationSeconds"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, started
        self.holder = record[0]
        ours = self.holder == self.identity
        duration = float(spec.get("leaseDurationSeconds") or self.timings.lease_duration)
        if self.holder and not ours and started < self._observed_at + duration:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if ours else 1)
        acquired = spec.get("acquireTime") if ours else None
        body = self._lease_body(lease.get("metadata") or {}, now, transitions=transitions,
                                acquired=acquired or now)
        try:
            await self._request("PUT", body)
        except ApiError as err:
            log.debug("renewing the Lease failed: %s", err)
            return False
        return self._won(started, body["spec"])

    def _won(self, started: float, spec: dict[str, Any]) -> bool:
        self._renewed_at = started
        self._observed = (spec["holderIdentity"], spec["renewTime"],
                          spec["leaseDurationSeconds"], spec["leaseTransitions"])
        self._observed_at = started
        self.holder = self.identity
        self.leading = True
        return True

    def _lease_body(self, meta: dict[str, Any], now: datetime, *, transitions: int,
                    acquired: datetime | str) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         **({"resourceVersion": meta["resourceVersion"]}
                            if meta.get("resourceVersion") else {})},
            "spec": {"holderIdentity": self.identity,
                     "leaseDurationSeconds": int(self.timings.lease_duration),
                     "acquireTime": acquired if isinstance(acquired, str)
                     else micro_time(acquired),
                     "renewTime": micro_time(now), "leaseTransitions": transitions},
        }

    async def release(self) -> None:
        """Give the Lease up (on shutdown), so a standby takes over within 2 s."""
        if self.holder != self.identity:
            return
        self.leading = False
        try:
            lease = await self._request("GET")
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = micro_time(datetime.now(UTC))
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1,
                             "renewTime": now, "acquireTime": now}
            await self._request("PUT", lease)
            log.info("released the Lease %s/%s", self.namespace, self.name)
        except ApiError as err:
            log.warning("could not release the Lease (a standby takes over once it expires, "
                        "in %.0fs): %s", self.timings.lease_duration, err)
        finally:
            metrics.report_leader(False)

    async def _request(self, method: str, body: dict[str, Any] | None = None
                       ) -> dict[str, Any]:
        if method == "GET":
            return await verbs.get(self.conn, LEASES, self.name, namespace=self.namespace,
                                   timeout=LEASE_REQUEST_TIMEOUT_S, attempts=1,
                                   fenced=False)
        if method == "POST":
            assert body is not None
            return await verbs.create(self.conn, LEASES, body, namespace=self.namespace,
                                      timeout=LEASE_REQUEST_TIMEOUT_S, attempts=1,
                                   fenced=False)
        assert body is not None
        return await verbs.replace(self.conn, LEASES, body, timeout=LEASE_REQUEST_TIMEOUT_S,
                                   attempts=1, fenced=False)
