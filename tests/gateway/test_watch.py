"""``watch_objects`` over a scripted transport: list, then watch from the list's version;
a 410 relists at once; a broken, oversized or malformed stream is ``StreamBroken`` and
the next list replaces the cache; bookmarks move the version without events."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcad.gateway import watch as watch_module
from mcad.gateway.errors import BadResponse, Forbidden
from mcad.gateway.refs import PODS
from mcad.gateway.transport import TransportError
from mcad.gateway.watch import Changed, Relisted, StreamBroken, WatchEvent, watch_objects
from tests.gateway.scripted import ScriptedTransport, listing, refused, status

PATH = "/api/v1/pods"


def pod(name: str, version: str = "5") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name,
                         "resourceVersion": version}}


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "BACKOFF_MIN_S", 0.001)


async def take(events: AsyncIterator[WatchEvent], n: int) -> list[WatchEvent]:
    out = []
    async with asyncio.timeout(5):
        async for event in events:
            out.append(event)
            if len(out) == n:
                break
    return out


async def test_list_then_watch_from_the_lists_version() -> None:
    transport = ScriptedTransport()
    transport.on("GET", PATH, listing([pod("a")], version="7"))
    stream = transport.watch(PATH)
    stream.event("ADDED", pod("b", "8"))
    events = await take(watch_objects(transport.connection(), PODS), 2)
    assert events == [Relisted([pod("a")]), Changed("ADDED", pod("b", "8"))]
    (watch,) = transport.sent("WATCH")
    assert watch.params["resourceVersion"] == "7"
    assert watch.params["allowWatchBookmarks"] == "true"


async def test_a_410_relists_without_reporting_a_break() -> None:
    transport = ScriptedTransport()
    transport.on("GET", PATH, listing([pod("a")]), listing([pod("b")]))
    transport.watch(PATH).event("ERROR", {"code": 410, "message": "too old"})
    events = await take(watch_objects(transport.connection(), PODS), 2)
    assert events == [Relisted([pod("a")]), Relisted([pod("b")])]


@pytest.mark.parametrize(("breakage", "error"), [
    (b"{not json}\n", BadResponse),
    (b'{"type": "ADDED", "object": [1]}\n', BadResponse),
    (TransportError("reset by peer"), watch_module.ApiError),
    (refused(403, "Forbidden", "forbidden"), Forbidden),
])
async def test_a_broken_stream_is_reported_and_the_next_list_replaces_the_cache(
        breakage: bytes | Exception, error: type[Exception]) -> None:
    transport = ScriptedTransport()
    transport.on("GET", PATH, listing([pod("a")]), listing([pod("b")]))
    stream = transport.watch(PATH)
    if isinstance(breakage, bytes):
        stream.raw(breakage)
    else:
        stream.fail(breakage)
    first, broken, relisted = await take(watch_objects(transport.connection(), PODS), 3)
    assert first == Relisted([pod("a")])
    assert isinstance(broken, StreamBroken) and isinstance(broken.error, error)
    assert relisted == Relisted([pod("b")])


async def test_a_failing_list_is_reported_and_retried() -> None:
    transport = ScriptedTransport()
    transport.on("GET", PATH, status(403, "Forbidden"), listing([pod("a")]))
    broken, relisted = await take(watch_objects(transport.connection(), PODS), 2)
    assert isinstance(broken, StreamBroken) and isinstance(broken.error, Forbidden)
    assert relisted == Relisted([pod("a")])


async def test_bookmarks_move_the_version_silently() -> None:
    transport = ScriptedTransport()
    transport.on("GET", PATH, listing([], version="3"))
    stream = transport.watch(PATH)
    stream.event("BOOKMARK", {"metadata": {"resourceVersion": "40"}})
    stream.end()  # the server ends the watch: re-watch from the bookmark's version
    transport.watch(PATH).event("DELETED", pod("a", "41"))
    events = await take(watch_objects(transport.connection(), PODS), 2)
    assert events == [Relisted([]), Changed("DELETED", pod("a", "41"))]
    assert [w.params["resourceVersion"] for w in transport.sent("WATCH")] == ["3", "40"]


async def test_the_list_is_not_held_while_watching() -> None:
    """The listed objects are the cache's to keep or drop: the watch that follows must not
    hold them (it did, for as long as it ran: every node's whole object, every AppWrapper
    listed at start, long after newer versions replaced them)."""
    transport = ScriptedTransport()
    transport.on("GET", PATH, listing([pod("a")], version="7"))
    transport.watch(PATH).event("ADDED", pod("b", "8"))
    events = watch_objects(transport.connection(), PODS)
    async with asyncio.timeout(5):
        listed = await anext(events)
        assert isinstance(listed, Relisted)
        items = listed.items
        del listed
        assert await anext(events) == Changed("ADDED", pod("b", "8"))
    assert not any(holder is events for holder in gc.get_referrers(items))
    await events.aclose()


async def test_a_plain_watch_decodes_the_same_objects() -> None:
    """``shared=False`` (a spoke's pods and Jobs) shares keys only: the same events, only
    without the values shared (and what pydantic_core refuses, an escaped lone surrogate,
    is decoded by Python's ``json``)."""
    transport = ScriptedTransport()
    transport.on("GET", PATH, listing([pod("a")], version="7"))
    stream = transport.watch(PATH)
    stream.event("MODIFIED", pod("a", "8"))
    odd = pod("a", "9")
    odd["metadata"]["annotations"] = {"note": "\ud800"}
    stream.event("MODIFIED", odd)
    events = await take(watch_objects(transport.connection(), PODS, shared=False), 3)
    assert events == [Relisted([pod("a")]), Changed("MODIFIED", pod("a", "8")),
                      Changed("MODIFIED", odd)]
