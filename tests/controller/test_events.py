"""The Event sender's queue (``controller/events.py``): Normal Events hold only a share of
it, so a drain's Dispatched and PodsReady Events neither crowd out the Warnings people
look for nor leave a long queue to post after the last dispatch."""

from __future__ import annotations

from typing import Any, cast

import pytest

from mcad.controller.events import EventSender
from mcad.gateway.connection import Connection
from tests.metrics.sample import sample


def aw(name: str) -> dict[str, Any]:
    return {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"}}


def dropped() -> float:
    return sample("mcad_events_dropped_total") or 0.0


@pytest.mark.asyncio
async def test_normal_events_hold_only_their_share_and_warnings_still_find_room() -> None:
    sender = EventSender(cast(Connection, None), size=10, normal=3)
    before = dropped()
    for i in range(5):
        sender.send(aw(f"a{i}"), reason="Dispatched", message="dispatched to spoke-1")
    assert dropped() - before == 2  # a3 and a4: the Normal share (3) was full
    for i in range(8):
        sender.send(aw(f"w{i}"), reason="Requeuing", message="pods failed", warning=True)
    assert dropped() - before == 3  # w7: the whole queue (10) was full
    posted = [await sender.next() for _ in range(4)]
    assert [w.involved["name"] for w in posted] == ["a0", "a1", "a2", "w0"]
    # Taking Normal Events out gives their share back; a Warning's slot is the queue's.
    sender.send(aw("b0"), reason="PodsReady", message="1 of 1 pods ready")
    sender.send(aw("b1"), reason="PodsReady", message="1 of 1 pods ready")
    sender.send(aw("b2"), reason="PodsReady", message="1 of 1 pods ready")
    sender.send(aw("b3"), reason="PodsReady", message="1 of 1 pods ready")
    assert dropped() - before == 4  # b3: three Normal Events wait again
    rest = [(await sender.next()).involved["name"] for _ in range(9)]
    assert rest == ["w1", "w2", "w3", "w4", "w5", "w6", "b0", "b1", "b2"]
