"""Leader election's rules, against a scripted hub holding one Lease: the first replica
creates it and leads; another stands by while the record keeps changing and takes over
once it has not changed for the lease duration as *it* observed it; a leader that cannot
renew stops (and its fence closes) before anybody may take the Lease; release empties
the holder so a standby takes over within one retry period. Loop time is fake."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from mcad import metrics
from mcad.controller.leader import LeaderElector, Timings
from mcad.gateway.errors import Fenced
from mcad.gateway.transport import Reply, TransportError
from tests.gateway.scripted import Request, ScriptedTransport, reply, status

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
LEASES = "/apis/coordination.k8s.io/v1/namespaces/mcad-system/leases"
LEASE = f"{LEASES}/mcad"


class LeaseSlot:
    """The one Lease, with the API server's optimistic concurrency, and an off switch."""

    def __init__(self, hub: ScriptedTransport) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.down = False
        hub.on("GET", LEASE, self.get)
        hub.on("POST", LEASES, self.create)
        hub.on("PUT", LEASE, self.replace)

    def _check(self) -> None:
        if self.down:
            raise TransportError("timed out")

    def get(self, request: Request) -> Reply:
        self._check()
        if self.lease is None:
            return status(404, "NotFound")
        return reply(200, self.lease)

    def create(self, request: Request) -> Reply:
        self._check()
        if self.lease is not None:
            return status(409, "AlreadyExists")
        return self._store(request.body)

    def replace(self, request: Request) -> Reply:
        self._check()
        sent = request.body["metadata"].get("resourceVersion")
        if self.lease is None or sent != self.lease["metadata"]["resourceVersion"]:
            return status(409, "Conflict")
        return self._store(request.body)

    def _store(self, body: dict[str, Any]) -> Reply:
        self.version += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return reply(200, self.lease)

    @property
    def holder(self) -> str:
        return str(((self.lease or {}).get("spec") or {}).get("holderIdentity", ""))


def elector(hub: ScriptedTransport, identity: str) -> LeaderElector:
    """An elector on the test's loop clock (looptime), renewing on the test's loop."""
    return LeaderElector(hub.connection("hub", attempts=1), namespace="mcad-system",
                         identity=identity, timings=Timings(),
                         clock=lambda: asyncio.get_running_loop().time())


async def campaign(who: LeaderElector, terms: list[tuple[str, float]]) -> asyncio.Task[None]:
    loop = asyncio.get_running_loop()

    async def lead() -> None:
        terms.append((who.identity, loop.time()))
        await asyncio.Event().wait()

    return asyncio.create_task(who.run(lead))


async def stop(*tasks: asyncio.Task[None]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_one_leads_the_other_stands_by_and_takes_over_after_expiry() -> None:
    hub = ScriptedTransport()
    slot = LeaseSlot(hub)
    loop = asyncio.get_running_loop()
    terms: list[tuple[str, float]] = []
    a, b = elector(hub, "a"), elector(hub, "b")
    task_a = await campaign(a, terms)
    await asyncio.sleep(1)
    task_b = await campaign(b, terms)
    await asyncio.sleep(60)
    assert [who for who, _ in terms] == ["a"] and slot.holder == "a"
    assert a.leading and not b.leading and b.holder == "a"
    task_a.cancel()  # a dies without releasing (kill -9)
    await asyncio.gather(task_a, return_exceptions=True)
    died = loop.time()
    await asyncio.sleep(30)
    assert [who for who, _ in terms] == ["a", "b"]
    takeover = terms[1][1] - died
    assert 13 <= takeover <= 17 + 2, takeover  # the lease duration, in retry-period steps
    await stop(task_b)


async def test_a_leader_that_cannot_renew_stops_before_the_lease_can_be_taken() -> None:
    hub = ScriptedTransport()
    slot = LeaseSlot(hub)
    loop = asyncio.get_running_loop()
    stopped: list[float] = []
    a = elector(hub, "a")

    async def lead() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            stopped.append(loop.time())

    lost_before = metrics.REGISTRY.get_sample_value("mcad_leadership_lost_total") or 0.0
    task = asyncio.create_task(a.run(lead))
    await asyncio.sleep(5)
    a.fence()  # leading: writes pass
    slot.down = True
    cut = loop.time()
    fenced_at = None
    while fenced_at is None:
        await asyncio.sleep(0.25)
        try:
            a.fence()
        except Fenced:
            fenced_at = loop.time()
    await asyncio.sleep(15)
    assert stopped, "the leader's work was not stopped"
    # Writes stop within the renew deadline of the last renewal, and so does the work:
    # both before a standby could see the lease expire (lease duration after the cut).
    assert fenced_at - cut <= Timings().renew_deadline + 0.3
    assert stopped[0] - cut <= Timings().renew_deadline + Timings().retry_period + 0.3
    assert stopped[0] - cut < Timings().lease_duration
    assert metrics.REGISTRY.get_sample_value("mcad_leadership_lost_total") == lost_before + 1
    slot.down = False
    await asyncio.sleep(10)
    assert a.leading  # campaigned again and won (nobody else is there)
    await stop(task)


async def test_release_hands_over_within_one_retry_period() -> None:
    hub = ScriptedTransport()
    slot = LeaseSlot(hub)
    loop = asyncio.get_running_loop()
    terms: list[tuple[str, float]] = []
    a, b = elector(hub, "a"), elector(hub, "b")
    task_a = await campaign(a, terms)
    await asyncio.sleep(1)
    task_b = await campaign(b, terms)
    await asyncio.sleep(10)
    task_a.cancel()
    await asyncio.gather(task_a, return_exceptions=True)
    await a.release()
    released = loop.time()
    assert slot.holder == ""
    await asyncio.sleep(5)
    assert [who for who, _ in terms] == ["a", "b"]
    assert terms[1][1] - released <= Timings().retry_period + 0.1
    with pytest.raises(Fenced):
        a.fence()
    await stop(task_b)


async def test_a_standby_never_writes_through_the_fence() -> None:
    hub = ScriptedTransport()
    LeaseSlot(hub)
    b = elector(hub, "b")
    with pytest.raises(Fenced, match="not the leader"):
        b.fence()
