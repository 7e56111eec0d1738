"""``Informer`` over a scripted transport: what it keeps is what ``keep`` returns, and
nothing else of a listed object stays alive."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from mcad.controller.informer import Informer
from mcad.gateway.refs import PODS
from tests.gateway.scripted import ScriptedTransport, listing

PATH = "/api/v1/pods"


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name,
                         "resourceVersion": "5"}, "spec": {"nodeName": "n1"}}


async def test_a_listed_object_is_not_held_once_handled_on_a_quiet_watch() -> None:
    """On a resource that stays quiet after its list (nodes without heartbeats), the
    last event was the whole list, and the loop held it: every listed object stayed
    alive beside its slim copy. Only the handler's own reference may remain."""
    transport = ScriptedTransport()
    transport.on("GET", PATH, listing([pod("a"), pod("b")], version="7"))
    stream = transport.watch(PATH)  # opened after the list, then quiet
    handled: list[dict[str, Any]] = []
    synced = asyncio.Event()
    informer = Informer(transport.connection(), PODS, lambda _kind, obj: handled.append(obj),
                        keep=lambda obj: {"name": obj["metadata"]["name"]},
                        on_sync=lambda _synced, _error: synced.set())
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            await synced.wait()
            await stream.opened.wait()
        assert informer.objects == {("ns", "a"): {"name": "a"}, ("ns", "b"): {"name": "b"}}
        gc.collect()
        for obj in handled:
            assert [type(r).__name__ for r in gc.get_referrers(obj)
                    if r is not handled] == []
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
