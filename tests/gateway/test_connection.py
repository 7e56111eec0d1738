"""``Connection`` over a scripted transport: watch lines split by mcad (long lines whole,
oversized or non-JSON lines a ``BadResponse``), errors mapped, retries on 5xx only,
the token asked for on every request, and the write fence in front of every write."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from mcad.gateway import connection as conn_module
from mcad.gateway.errors import (
    Abandoned,
    BadResponse,
    Conflict,
    Fenced,
    Forbidden,
    ServerError,
    Unreachable,
)
from mcad.gateway.transport import Reply, TransportError
from tests.gateway.scripted import ScriptedTransport, refused, reply, status

PATH = "/api/v1/pods"


async def lines_of(transport: ScriptedTransport, *chunks: bytes) -> list[dict[str, Any]]:
    stream = transport.watch(PATH)
    for chunk in chunks:
        stream.raw(chunk)
    stream.end()
    conn = transport.connection()
    return [line async for line in conn.stream_lines(PATH, params={}, read_timeout=1)]


async def test_watch_lines_are_split_across_chunks() -> None:
    transport = ScriptedTransport()
    got = await lines_of(transport, b'{"type": "ADD', b'ED", "n": 1}\n{"type"', b': "X"}\n\n',
                         b'{"last": true}')
    assert got == [{"type": "ADDED", "n": 1}, {"type": "X"}, {"last": True}]


async def test_a_700_kb_watch_line_is_read_whole() -> None:
    big = {"type": "ADDED", "object": {"data": "x" * 700_000}}
    raw = json.dumps(big).encode() + b"\n"
    chunks = [raw[i:i + 65536] for i in range(0, len(raw), 65536)]
    assert await lines_of(ScriptedTransport(), *chunks) == [big]


async def test_a_line_longer_than_the_limit_is_a_bad_response(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conn_module, "MAX_LINE_BYTES", 1000)
    with pytest.raises(BadResponse, match="longer than 1000 bytes"):
        await lines_of(ScriptedTransport(), b"x" * 600, b"x" * 600)


@pytest.mark.parametrize("line", [b"not json\n", b"[1, 2]\n", b'"a string"\n'])
async def test_a_line_that_is_not_a_json_object_is_a_bad_response(line: bytes) -> None:
    with pytest.raises(BadResponse, match="not a JSON object"):
        await lines_of(ScriptedTransport(), line)


async def test_a_refused_watch_is_the_mapped_error() -> None:
    transport = ScriptedTransport()
    transport.watch(PATH).fail(refused(403, "Forbidden", "pods is forbidden"))
    conn = transport.connection()
    with pytest.raises(Forbidden, match="pods is forbidden"):
        async for _ in conn.stream_lines(PATH, params={}, read_timeout=1):
            pass


async def test_a_broken_watch_is_unreachable() -> None:
    transport = ScriptedTransport()
    transport.watch(PATH).fail(TransportError("ServerDisconnectedError: reset"))
    with pytest.raises(Unreachable, match="reset"):
        async for _ in transport.connection().stream_lines(PATH, params={}, read_timeout=1):
            pass


async def test_server_errors_are_retried_and_client_errors_are_not() -> None:
    transport = ScriptedTransport()
    transport.on("GET", "/a", status(500), status(503), reply(200, {"ok": 1}))
    transport.on("GET", "/b", status(403, "Forbidden"))
    conn = transport.connection()
    assert await conn.request("GET", "/a") == {"ok": 1}
    assert len(transport.sent("GET", "/a")) == 3
    with pytest.raises(Forbidden):
        await conn.request("GET", "/b")
    assert len(transport.sent("GET", "/b")) == 1


async def test_server_errors_give_up_after_the_attempts() -> None:
    transport = ScriptedTransport()
    transport.on("GET", "/a", status(500))
    with pytest.raises(ServerError):
        await transport.connection(attempts=2).request("GET", "/a")
    assert len(transport.sent("GET", "/a")) == 2


async def test_the_retry_budget_counts_from_the_first_attempt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that never answers: each attempt ends at its timeout (here 0.2 s). With
    a budget of 0.3 s, the second attempt ends past it and no third one starts."""
    monkeypatch.setattr(conn_module, "RETRY_BUDGET_S", 0.3)

    async def times_out(_request: object) -> Reply:
        await asyncio.sleep(0.2)
        raise TransportError("timed out")

    transport = ScriptedTransport()
    transport.on("GET", "/a", times_out)
    with pytest.raises(Unreachable):
        await transport.connection(attempts=10).request("GET", "/a")
    assert len(transport.sent("GET", "/a")) == 2


async def test_conflict_is_not_retried() -> None:
    transport = ScriptedTransport()
    transport.on("PATCH", "/a", status(409, "Conflict"))
    with pytest.raises(Conflict):
        await transport.connection().request("PATCH", "/a", body={})
    assert len(transport.sent("PATCH")) == 1


async def test_the_token_is_asked_for_on_every_request() -> None:
    tokens = iter(["Bearer one", "Bearer two"])

    async def auth() -> dict[str, str]:
        return {"Authorization": next(tokens)}

    transport = ScriptedTransport()
    transport.on("GET", "/a", reply(200))
    conn = transport.connection(auth=auth)
    await conn.request("GET", "/a")
    await conn.request("GET", "/a")
    assert [r.headers["Authorization"] for r in transport.requests] == ["Bearer one",
                                                                         "Bearer two"]


async def test_the_fence_stops_writes_and_lets_reads_through() -> None:
    transport = ScriptedTransport()
    transport.on("GET", "/a", reply(200))
    transport.on("POST", "/a", reply(201))
    conn = transport.connection()

    def fence() -> None:
        raise Fenced("not the leader", cluster="hub")

    conn.write_fence = fence
    await conn.request("GET", "/a")
    with pytest.raises(Fenced):
        await conn.request("POST", "/a", body={})
    assert transport.sent("POST") == []
    await conn.request("POST", "/a", body={}, fenced=False)
    assert len(transport.sent("POST")) == 1


async def test_every_answered_write_is_timed_and_reads_and_unanswered_ones_are_not() -> None:
    """The reconcile limit follows the hub's writes: each answer, a conflict too, is a
    sample; a read is not (it queues differently), nor a write nobody answered."""
    async def broken(_request: object) -> Reply:
        raise TransportError("reset")

    transport = ScriptedTransport()
    transport.on("PATCH", "/a", reply(200), status(409, "Conflict"))
    transport.on("POST", "/b", broken)
    transport.on("GET", "/a", reply(200))
    conn = transport.connection(attempts=1)
    timed: list[float] = []
    conn.answered = timed.append
    await conn.request("PATCH", "/a", body={})
    with pytest.raises(Conflict):
        await conn.request("PATCH", "/a", body={})
    await conn.request("GET", "/a")
    with pytest.raises(Unreachable):
        await conn.request("POST", "/b", body={})
    assert len(timed) == 2 and all(t >= 0 for t in timed)


async def test_abandon_fails_the_requests_waiting_at_once_and_does_not_retry_them() -> None:
    """A cluster found silent: the requests waiting on it end with ``Abandoned`` at the
    moment of ``abandon`` (not after their time-out, and not sent again), whatever the
    retry budget; a request sent afterwards is sent and answered as usual."""
    silent = asyncio.Event()

    async def hangs(_request: object) -> Reply:
        await silent.wait()  # (never set: a server that takes the request and says nothing)
        return reply(201)

    transport = ScriptedTransport()
    transport.on("POST", "/jobs", hangs)
    transport.on("GET", "/readyz", reply(200))
    conn = transport.connection(attempts=5)
    waiting = [asyncio.ensure_future(conn.request("POST", "/jobs", body={}))
               for _ in range(3)]
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiting)
    assert conn.abandon("2 probes failed") == 3
    await asyncio.sleep(0)
    for w in waiting:
        with pytest.raises(Abandoned, match="2 probes failed"):
            await w
    assert len(transport.sent("POST")) == 3  # none sent again
    await conn.request("GET", "/readyz")  # a later request is not given up
    assert conn.abandon("again") == 0
