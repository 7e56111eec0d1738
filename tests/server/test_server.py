"""``mcad.server``: /metrics in the Prometheus text format, /healthz while the loop runs,
/readyz following the ``ready`` callable with a sentence when not ready, port 0,
addresses as users type them, and a port in use as a sentence. Real sockets on
127.0.0.1."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from mcad import metrics
from mcad.server import ListenError, bound_port, parse_address, start_server

Start = Callable[..., Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Start]:
    """Start servers on 127.0.0.1:0; yields a starter returning the base URL."""
    runners: list[web.AppRunner] = []

    async def start(ready: Callable[[], bool] = lambda: True) -> str:
        runner = await start_server("127.0.0.1:0", ready=ready)
        runners.append(runner)
        return f"http://127.0.0.1:{bound_port(runner)}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def fetch(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


async def test_metrics_are_served_in_the_prometheus_text_format(serve: Start
                                                                ) -> None:
    cluster = f"spoke-{uuid.uuid4().hex[:8]}"
    metrics.count_dispatch(cluster)
    base = await serve()
    status, content_type, body = await fetch(f"{base}/metrics")
    assert status == 200
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert f'mcad_dispatches_total{{cluster="{cluster}"}} 1.0' in body


async def test_healthz_says_ok(serve: Start) -> None:
    base = await serve(ready=lambda: False)
    assert (await fetch(f"{base}/healthz"))[::2] == (200, "ok")


async def test_readyz_follows_the_ready_callable(serve: Start) -> None:
    state = {"ready": False}
    base = await serve(ready=lambda: state["ready"])
    status, _, body = await fetch(f"{base}/readyz")
    assert status == 503
    assert body.startswith("not ready: ") and body.rstrip().endswith(".")
    state["ready"] = True
    assert (await fetch(f"{base}/readyz"))[::2] == (200, "ready")


async def test_a_failing_readiness_check_is_not_ready_with_a_reason(
    serve: Start
) -> None:
    def broken() -> bool:
        raise RuntimeError("cache gone")

    base = await serve(ready=broken)
    status, _, body = await fetch(f"{base}/readyz")
    assert status == 503
    assert "RuntimeError: cache gone" in body


async def test_two_servers_run_side_by_side(serve: Start) -> None:
    first = await serve()
    second = await serve(ready=lambda: False)
    assert first != second
    assert (await fetch(f"{first}/readyz"))[0] == 200
    assert (await fetch(f"{second}/readyz"))[0] == 503


async def test_cleanup_stops_listening() -> None:
    runner = await start_server("127.0.0.1:0", ready=lambda: True)
    port = bound_port(runner)
    await runner.cleanup()
    with pytest.raises(aiohttp.ClientConnectionError):
        await fetch(f"http://127.0.0.1:{port}/healthz")


async def test_a_port_in_use_is_a_sentence(serve: Start) -> None:
    base = await serve()
    taken = base.removeprefix("http://")
    with pytest.raises(ListenError, match=f"^cannot listen on {taken}: .*free port"):
        await start_server(taken, ready=lambda: True)


@pytest.mark.parametrize(("address", "want"), [
    ("127.0.0.1:8080", ("127.0.0.1", 8080)),
    (":9090", ("0.0.0.0", 9090)),
    ("[::1]:0", ("::1", 0)),
    ("localhost:65535", ("localhost", 65535)),
])
def test_addresses_as_users_write_them(address: str, want: tuple[str, int]) -> None:
    assert parse_address(address) == want


@pytest.mark.parametrize("address", ["8080", "host:", "host:http", "host:65536", "host:-1"])
def test_malformed_addresses_are_a_sentence_with_an_example(address: str) -> None:
    with pytest.raises(ListenError, match=r"is not host:port .* e\.g\. 127\.0\.0\.1:8080"):
        parse_address(address)
