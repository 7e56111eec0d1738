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

Renewals are never starved by the controller's load: given a ``renewer`` (a way to
open a connection), the leader renews from a thread of its own, with its own event loop
and connection, so neither a long dispatch cycle, nor thousands of reconcilers' answers
queued on the controller's loop, nor a busy connection pool can delay a renewal (with
10,000 AppWrappers queued the leader once lost its Lease twice a minute). Every
renewal's delay (from when it was due to when the API server confirmed it) goes to
``mcad_lease_renewal_seconds``.

Time comes from an injected monotonic clock (``time.monotonic``, read from both
threads, unless a test gives another); the Lease's own timestamps are written for people
(``kubectl get lease``), never trusted for decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
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
                 clock: Callable[[], float] | None = None,
                 renewer: Callable[[], Awaitable[Connection]] | None = None) -> None:
        self.conn = conn
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings
        self.clock = clock or time.monotonic
        """Monotonic seconds, readable from any thread (tests give the loop's clock)."""
        self.renewer = renewer
        """Opens the renewal thread's own connection; None: renew on the caller's loop."""
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
                    group.create_task(self._keep() if self.renewer is None
                                      else self._keep_in_thread(self.renewer),
                                      name="lease renewal")
                    group.create_task(lead(), name="leader work")
            except* LeadershipLost:
                metrics.count_leadership_lost()
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

    async def _keep(self, conn: Connection | None = None,
                    stop: asyncio.Event | None = None) -> None:
        """Renew every retry period (on ``conn``: the renewal thread's own); raise
        ``LeadershipLost`` past the renew deadline; return when ``stop`` is set."""
        while True:
            due = self._renewed_at + self.timings.retry_period
            if stop is None:
                await asyncio.sleep(max(0.0, due - self.clock()))
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, due - self.clock()))
                if stop.is_set():
                    return
            deadline = self._renewed_at + self.timings.renew_deadline
            while not await self._try_acquire_or_renew(conn):
                if self.clock() >= deadline:
                    self.leading = False
                    raise LeadershipLost()
                await asyncio.sleep(min(self.timings.retry_period,
                                        max(0.0, deadline - self.clock())))
            metrics.observe_lease_renewal(max(0.0, self.clock() - due))

    async def _keep_in_thread(self, renewer: Callable[[], Awaitable[Connection]]) -> None:
        """``_keep`` on a thread with its own event loop and connection; this task only
        waits for it, and raises ``LeadershipLost`` when the thread does."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[BaseException | None] = loop.create_future()
        started = threading.Event()
        box: dict[str, Any] = {}

        def report(outcome: BaseException | None) -> None:
            if not ended.done():
                ended.set_result(outcome)

        async def in_thread() -> None:
            box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
            started.set()
            conn = await renewer()
            try:
                await self._keep(conn, box["stop"])
            finally:
                await conn.close()

        def main() -> None:
            outcome: BaseException | None = None
            try:
                asyncio.run(in_thread())
            except BaseException as err:  # carried to the controller's loop
                outcome = err
            started.set()
            with contextlib.suppress(RuntimeError):  # the controller's loop is gone too
                loop.call_soon_threadsafe(report, outcome)

        thread = threading.Thread(target=main, name="lease renewal", daemon=True)
        thread.start()
        try:
            outcome = await ended
        finally:
            # However this task ends (the thread ended, or the leader's work did and this
            # task is cancelled), the thread is stopped and joined: no renewal outlives
            # the term. (A cancelled wait also cancels ``ended``, so it is not consulted.)
            await asyncio.to_thread(started.wait)
            if "loop" in box:
                with contextlib.suppress(RuntimeError):  # its loop has ended already
                    box["loop"].call_soon_threadsafe(box["stop"].set)
            await asyncio.to_thread(thread.join)
        if isinstance(outcome, LeadershipLost):
            raise LeadershipLost() from None
        if outcome is not None:
            raise outcome

    async def _try_acquire_or_renew(self, conn: Connection | None = None) -> bool:
        started = self.clock()
        now = datetime.now(UTC)
        try:
            lease = await self._request("GET", conn=conn)
        except NotFound:
            lease = None
        except ApiError as err:
            log.debug("reading the Lease failed: %s", err)
            return False
        if lease is None:
            body = self._lease_body({}, now, transitions=0, acquired=now)
            try:
                await self._request("POST", body, conn=conn)
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
            await self._request("PUT", body, conn=conn)
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

    async def _request(self, method: str, body: dict[str, Any] | None = None, *,
                       conn: Connection | None = None) -> dict[str, Any]:
        conn = conn or self.conn
        if method == "GET":
            return await verbs.get(conn, LEASES, self.name, namespace=self.namespace,
                                   timeout=LEASE_REQUEST_TIMEOUT_S, attempts=1,
                                   fenced=False)
        if method == "POST":
            assert body is not None
            return await verbs.create(conn, LEASES, body, namespace=self.namespace,
                                      timeout=LEASE_REQUEST_TIMEOUT_S, attempts=1,
                                      fenced=False)
        assert body is not None
        return await verbs.replace(conn, LEASES, body, timeout=LEASE_REQUEST_TIMEOUT_S,
                                   attempts=1, fenced=False)
