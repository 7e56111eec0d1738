"""The controller's process settles its heap once the hub is listed, and only then.

``mcad run`` passes ``mcad.controller.heap.settle`` (``gc.freeze``: what is alive then
stays out of the collector's full passes); called before the AppWrappers are listed it
would leave them in every full pass, called at every relist it would freeze whatever
is alive at each one.
"""

from __future__ import annotations

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
    until,
)

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]


async def test_the_heap_is_settled_once_every_hub_resource_is_listed() -> None:
    hub = Hub()
    hub.add(job_appwrapper("a"))
    settled: list[int] = []
    running: list[Running] = []

    def listed() -> None:  # how many AppWrappers the controller knows at that moment
        settled.append(len(running[0].controller.state.appwrappers))

    runs = run_controller(hub, spoke_transport(), on_listed=listed)
    running.append(await anext(runs))  # (before the controller's task first runs)
    controller = running[0].controller
    try:
        await until("listed", lambda: controller.ready() and settled)
        assert settled == [1]  # once, with the AppWrapper listed
        relists = len(hub.transport.sent("GET", AW_PATH))
        hub.transport.live[AW_PATH].fail(TransportError("connection reset by peer"))
        await until("listed again", lambda: len(hub.transport.sent("GET", AW_PATH)) > relists
                    and controller.ready())
        assert settled == [1]  # not again at a relist
    finally:
        await runs.aclose()


async def test_tune_raises_only_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        heap.tune()
        assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, before[1], before[2])
    finally:
        gc.set_threshold(*before)
