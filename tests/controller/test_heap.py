"""The controller's process settles its heap once the hub is listed, and only then.

``mcad run`` passes ``mcad.controller.heap.settle`` (``gc.freeze``: what is alive then
stays out of the collector's full passes); called before the AppWrappers are listed it
would leave them in every full pass, called at every relist it would freeze whatever
is alive at each one.
"""

from __future__ import annotations

import asyncio
import gc

import pytest

from mcad.controller import heap
from mcad.gateway.transport import TransportError
from tests.controller.seam import (
    AW_PATH,
    Hub,
    Running,
    job_appwrapper,
    run_controller,
    spoke_transport,
)

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]


async def test_the_heap_is_settled_once_every_hub_resource_is_listed() -> None:
    hub = Hub()
    hub.add(job_appwrapper("a"))
    settled: list[int] = []
    running: list[Running] = []

    def listed() -> None:  # how many AppWrappers the controller knows at that moment
        settled.append(len(running[0].controller.state.appwrappers))

    async for run in run_controller(hub, spoke_transport(), on_listed=listed):
        running.append(run)  # (before the controller's task first runs)
        for _ in range(600):
            if run.controller.ready() and settled:
                break
            await asyncio.sleep(0.1)
        assert settled == [1]  # once, with the AppWrapper listed
        relists = len(hub.transport.sent("GET", AW_PATH))
        hub.transport.live[AW_PATH].fail(TransportError("connection reset by peer"))
        for _ in range(600):
            if len(hub.transport.sent("GET", AW_PATH)) > relists and run.controller.ready():
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the AppWrappers were not listed again")
        assert settled == [1]  # not again at a relist


def test_tune_raises_only_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        heap.tune()
        assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, before[1], before[2])
    finally:
        gc.set_threshold(*before)
