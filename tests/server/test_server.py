"""``mcad.server``: /metrics in the Prometheus text format, behind a guard that asks who
calls (a bearer token the hub's TokenReview accepts, of a user RBAC allows ``get`` on
/metrics: 401 without one, 403 without the right, each with a sentence; the hub's
answers cached), /healthz while the loop runs, /readyz following the ``ready`` callable
with a sentence when not ready, nothing else on the port, port 0, addresses as users
type them, and a port in use as a sentence. Real sockets on 127.0.0.1."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from mcad import metrics
from mcad.access import Reviews
from mcad.server import (
    ListenError,
    bound_port,
    is_loopback,
    parse_address,
    start_server,
    token_guard,
)
from tests.gateway.scripted import Request, ScriptedTransport, reply, status

Start = Callable[..., Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Start]:
    """Start servers on 127.0.0.1:0; yields a starter returning the base URL."""
    runners: list[web.AppRunner] = []

    async def start(ready: Callable[[], bool] = lambda: True) -> str:
        runner = await start_server("127.0.0.1:0", ready=ready, guard=None)
        runners.append(runner)
        return f"http://127.0.0.1:{bound_port(runner)}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def fetch(url: str, *, token: str | None = None) -> tuple[int, str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as resp:
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
    runner = await start_server("127.0.0.1:0", ready=lambda: True, guard=None)
    port = bound_port(runner)
    await runner.cleanup()
    with pytest.raises(aiohttp.ClientConnectionError):
        await fetch(f"http://127.0.0.1:{port}/healthz")


async def test_a_port_in_use_is_a_sentence(serve: Start) -> None:
    base = await serve()
    taken = base.removeprefix("http://")
    with pytest.raises(ListenError, match=f"^cannot listen on {taken}: .*free port"):
        await start_server(taken, ready=lambda: True, guard=None)


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


# -- who may read /metrics ------------------------------------------------------------------

TOKENS = {"prometheus-token": "system:serviceaccount:monitoring:prometheus-k8s",
          "pod-token": "system:serviceaccount:team-a:default"}
MAY_READ = {"system:serviceaccount:monitoring:prometheus-k8s"}


class RbacHub:
    """TokenReviews from ``TOKENS``, SubjectAccessReviews from ``MAY_READ``."""

    def __init__(self) -> None:
        self.transport = ScriptedTransport()
        self.transport.on("POST", "/apis/authentication.k8s.io/v1/tokenreviews", self._token)
        self.transport.on("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                          self._access)

    def _token(self, request: Request) -> object:
        user = TOKENS.get(request.body["spec"]["token"])
        return reply(201, {"status": {"authenticated": bool(user),
                                      **({"user": {"username": user, "groups": [
                                          "system:serviceaccounts"]}} if user else {})}})

    def _access(self, request: Request) -> object:
        spec = request.body["spec"]
        assert spec["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        return reply(201, {"status": {"allowed": spec["user"] in MAY_READ}})


@pytest.fixture
async def guarded() -> AsyncIterator[tuple[RbacHub, str]]:
    hub = RbacHub()
    runner = await start_server("127.0.0.1:0", ready=lambda: True,
                                guard=token_guard(Reviews(hub.transport.connection("hub"))))
    yield hub, f"http://127.0.0.1:{bound_port(runner)}"
    await runner.cleanup()


async def test_metrics_without_a_token_are_refused_with_a_sentence(
        guarded: tuple[RbacHub, str]) -> None:
    _, base = guarded
    code, _, body = await fetch(f"{base}/metrics")
    assert code == 401 and "needs a bearer token" in body
    code, _, body = await fetch(f"{base}/metrics", token="made-up")
    assert code == 401 and "does not accept this bearer token" in body


async def test_a_token_without_the_right_is_forbidden(guarded: tuple[RbacHub, str]) -> None:
    _, base = guarded
    code, _, body = await fetch(f"{base}/metrics", token="pod-token")
    assert code == 403
    assert body.startswith("system:serviceaccount:team-a:default may not get /metrics")


async def test_a_token_with_the_right_reads_the_metrics_and_is_asked_about_once(
        guarded: tuple[RbacHub, str]) -> None:
    hub, base = guarded
    for _ in range(3):
        code, _, body = await fetch(f"{base}/metrics", token="prometheus-token")
        assert code == 200 and "mcad_" in body
    assert len(hub.transport.sent("POST", "/apis/authentication.k8s.io/v1/tokenreviews")) == 1
    assert len(hub.transport.sent("POST",
                                  "/apis/authorization.k8s.io/v1/subjectaccessreviews")) == 1


async def test_health_needs_no_token_and_nothing_else_is_served(
        guarded: tuple[RbacHub, str]) -> None:
    _, base = guarded
    assert (await fetch(f"{base}/healthz"))[0] == 200
    assert (await fetch(f"{base}/readyz"))[0] == 200
    for path in ("/queue", "/explain", "/ui/", "/ui/state"):
        assert (await fetch(f"{base}{path}", token="prometheus-token"))[0] == 404


async def test_a_hub_that_cannot_answer_is_a_503_never_a_yes() -> None:
    hub = ScriptedTransport()
    hub.on("POST", "/apis/authentication.k8s.io/v1/tokenreviews", status(500))
    runner = await start_server("127.0.0.1:0", ready=lambda: True,
                                guard=token_guard(Reviews(hub.connection("hub"))))
    try:
        code, _, body = await fetch(f"http://127.0.0.1:{bound_port(runner)}/metrics",
                                    token="prometheus-token")
    finally:
        await runner.cleanup()
    assert code == 503 and "the hub could not say who the token belongs to" in body


@pytest.mark.parametrize(("address", "loopback"), [
    ("127.0.0.1:8080", True), ("localhost:8080", True), ("[::1]:8080", True),
    (":8080", False), ("0.0.0.0:8080", False), ("10.0.0.5:8080", False),
])
def test_which_addresses_are_loopback(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback
