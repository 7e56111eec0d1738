"""Lease renewals from a thread of their own are not starved by the controller's loop.

With 10,000 AppWrappers queued the leader once lost its Lease twice a minute: its
renewals waited behind the reconcilers' work on the one event loop. Here the
controller's loop is blocked outright (a ``time.sleep`` in the leader's work, far longer
than the renew deadline): renewals from the renewal thread go on, the leader keeps its
Lease and its fence stays open; renewing on the blocked loop instead loses the Lease.
Real time (a few seconds), not the fake loop clock: the point is a second thread.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from mcad.controller.leader import LeaderElector, Timings
from mcad.gateway.connection import Connection
from tests.controller.test_leader import LeaseSlot
from tests.gateway.scripted import ScriptedTransport

pytestmark = pytest.mark.asyncio(loop_scope="function")
FAST = Timings(lease_duration=1.5, renew_deadline=1.0, retry_period=0.1)


async def lead_blocking(elector: LeaderElector, blocked_for: float,
                        seen: dict[str, object]) -> None:
    """The leader's work: block the loop for ``blocked_for`` s, then look at the fence."""
    time.sleep(blocked_for)  # noqa: ASYNC251 - the point: the loop cannot run anything
    try:
        elector.fence()
        seen["fence"] = "open"
    except Exception as err:  # recorded for the assertion
        seen["fence"] = type(err).__name__
    seen["leading"] = elector.leading


async def test_a_blocked_loop_does_not_starve_renewals_from_the_renewal_thread() -> None:
    hub = ScriptedTransport()
    slot = LeaseSlot(hub)

    async def renewer() -> Connection:
        return hub.connection("hub-lease", attempts=1)

    elector = LeaderElector(hub.connection("hub", attempts=1), namespace="mcad-system",
                            identity="a", timings=FAST, renewer=renewer)
    seen: dict[str, object] = {}
    done = asyncio.Event()

    async def lead() -> None:
        await lead_blocking(elector, 2.5, seen)
        done.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(elector.run(lead))
    await asyncio.wait_for(done.wait(), 10)
    renewals = len(hub.sent("PUT"))
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert seen == {"fence": "open", "leading": True}
    assert renewals >= 10  # every 0.1 s through the 2.5 s the loop was blocked
    assert slot.holder == "a"


async def test_on_the_blocked_loop_itself_the_lease_is_lost() -> None:
    hub = ScriptedTransport()
    LeaseSlot(hub)
    elector = LeaderElector(hub.connection("hub", attempts=1), namespace="mcad-system",
                            identity="a", timings=FAST)  # renews on the caller's loop
    seen: dict[str, object] = {}
    done = asyncio.Event()

    async def lead() -> None:
        await lead_blocking(elector, 2.5, seen)
        done.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(elector.run(lead))
    await asyncio.wait_for(done.wait(), 10)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert seen["fence"] == "Fenced"
