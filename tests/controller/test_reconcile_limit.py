"""The reconcile limit through the gateway seam: hub writes answered slowly lower how
many keys the controller's work queue lets its workers take at once, and
``mcad_reconcile_limit`` says so; answered promptly again, they raise it back to
``workers``. A ``Controller`` over a scripted hub, its queue's places taken by hand; the
loop's clock is looptime's, so nothing here waits for real."""

from __future__ import annotations

import asyncio

import pytest

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.inflight import LEAST
from mcad.controller.runner import Controller
from mcad.gateway.connection import Connection
from mcad.gateway.transport import Reply
from tests.controller.seam import Hub
from tests.gateway.scripted import Request, reply

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
WRITE = "/apis/workload.codeflare.dev/v1beta1/namespaces/ns/appwrappers/a/status"


def limit_metric() -> float:
    for line in metrics.render().decode().splitlines():
        if line.startswith("mcad_reconcile_limit "):
            return float(line.split()[1])
    raise AssertionError("mcad_reconcile_limit is not exported")


async def test_slow_hub_writes_lower_the_queue_capacity_and_prompt_ones_raise_it() -> None:
    hub = Hub()
    latency = 0.02

    async def answer(_request: Request) -> Reply:
        await asyncio.sleep(latency)
        return reply(200)

    hub.transport.on("PATCH", WRITE, answer)

    async def no_spoke(_name: str) -> Connection:
        raise AssertionError("no spoke is connected in this test")

    controller = Controller(hub=hub.transport.connection("hub"), connect_hub=no_spoke,
                            config=RunConfig(), workers=32)
    queue = controller.queue
    assert queue.capacity == 32 and limit_metric() == 32
    for i in range(40):
        queue.add(("ns", f"aw-{i}"), urgent=True)
    for _ in range(32):
        await queue.get()  # every place taken: the limit is used

    async def writes(seconds: float) -> None:
        """32 writers in flight, as the workers would be, for ``seconds``."""
        async def writer() -> None:
            end = asyncio.get_running_loop().time() + seconds
            while asyncio.get_running_loop().time() < end:
                await controller.hub.request("PATCH", WRITE, body={})
        await asyncio.gather(*(writer() for _ in range(32)))

    await writes(3.0)  # prompt: the base
    assert queue.capacity == 32
    latency = 0.02 * 32 / 4  # a server that serves 4 at once, shared by 32
    await writes(10.0)
    assert queue.capacity == LEAST and limit_metric() == LEAST
    held = asyncio.ensure_future(queue.get())  # 32 in progress, 8 allowed: none taken
    await asyncio.sleep(0.1)
    assert not held.done()
    latency = 0.02
    await writes(10.0)
    assert queue.capacity == 32 and limit_metric() == 32
    await asyncio.sleep(0.1)
    assert not held.done()  # (still 32 in progress, at the capacity)
    held.cancel()
