"""The HTTP endpoints Prometheus and the kubelet poll: ``/metrics``, ``/healthz``, ``/readyz``.

Why a module of its own: ``mcad run`` serves them next to the controller, on the same
event loop, so ``/healthz`` answering proves the loop is not stuck, and ``/readyz``
asks the controller (a ``ready`` callable) whether it has synced and may be sent
work. One function starts a server with all three; ``mcad run`` may start a second
one on another address (``--health-address``) with the same function.

``/readyz`` answers 503 with a sentence when not ready, so ``kubectl describe pod``
shows why the pod is not ready rather than a bare status.

Nothing else is served on this port, and ``/metrics`` asks who is calling (``guard``):
any pod that reaches the Service can reach the port, and the metrics name clusters,
quota trees and counts per namespace. With ``token_guard`` a caller needs a bearer
token that the hub's TokenReview accepts for a user whom RBAC allows ``get`` on the
non-resource URL ``/metrics`` (controller-runtime's filter does the same; Prometheus'
ServiceAccount in the manifests has that right). Without a token: 401; a token
without the right: 403; each with a sentence. ``/healthz`` and ``/readyz`` stay open:
the kubelet's probes carry no token, and they say nothing about anyone's work.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from mcad import metrics
from mcad.access import Question, Reviews, ReviewUnavailable

log = logging.getLogger(__name__)


class ListenError(Exception):
    """The server cannot listen on the address given; the message says why."""


Readiness = Callable[[], "bool | tuple[bool, str]"]
"""True/False, or (ready, the sentence that says why or in what role)."""
Guard = Callable[[web.Request], Awaitable["web.Response | None"]]
"""Asks who calls: None lets the request through, a response refuses it."""
METRICS_PATH = "/metrics"


async def start_server(address: str, *, ready: Readiness, guard: Guard | None
                       ) -> web.AppRunner:
    """Serve /metrics (behind ``guard``; None: to anyone, for a loopback address),
    /healthz and /readyz on ``address`` ("host:port"; port 0 picks one).

    Returns the running ``AppRunner``; stop it with ``await runner.cleanup()``. Raises
    ``ListenError`` when the address is malformed or cannot be bound.
    """
    host, port = parse_address(address)
    app = web.Application(client_max_size=1024)  # nothing here takes a body

    async def metrics_page(request: web.Request) -> web.Response:
        refused = await guard(request) if guard is not None else None
        return refused if refused is not None else _metrics()

    app.router.add_get(METRICS_PATH, metrics_page)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz(ready))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as err:
        await runner.cleanup()
        raise ListenError(f"cannot listen on {address}: {err.strerror or err}; choose a "
                          "free port or stop the process that uses it") from err
    log.info("serving /metrics, /healthz and /readyz on %s:%d", host, bound_port(runner))
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The TCP port the runner listens on (useful after asking for port 0)."""
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    raise ListenError("the server is not listening on a TCP port")


def is_loopback(address: str) -> bool:
    """Whether ``address`` ("host:port") listens on the loopback interface only."""
    host, _ = parse_address(address)
    return host in ("localhost", "::1") or host.startswith("127.")


def token_guard(reviews: Reviews, *, path: str = METRICS_PATH) -> Guard:
    """A guard that lets through bearer tokens of users RBAC allows ``get`` on ``path``."""
    question = Question(verb="get", path=path)

    async def guard(request: web.Request) -> web.Response | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _refuse(401, f"{path} needs a bearer token (Authorization: Bearer ...) of a "
                                f"user allowed `get` on the non-resource URL {path}; "
                                "Prometheus' ServiceAccount in mcad's manifests has it")
        try:
            caller = await reviews.authenticate(token.strip())
            if caller is None:
                return _refuse(401, "the hub does not accept this bearer token "
                                    "(TokenReview: not authenticated)")
            if not await reviews.allowed(caller, question):
                return _refuse(403, f"{caller.describe()} may not get {path}: grant `get` on "
                                    f"the non-resource URL {path} (a ClusterRole with "
                                    f"nonResourceURLs: [\"{path}\"]) to read mcad's metrics")
        except ReviewUnavailable as err:
            return _refuse(503, f"{err}; try again")
        return None

    return guard


def _refuse(status: int, message: str) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="mcad"'} if status == 401 else {}
    return web.Response(status=status, text=message + "\n", headers=headers)


def parse_address(address: str) -> tuple[str, int]:
    """ "host:port" (or "[v6]:port", or ":port" for every interface) as (host, port)."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ListenError(f"the address {address!r} is not host:port with a port from 0 to "
                          "65535, e.g. 127.0.0.1:8080 or :8080")
    host = host.removeprefix("[").removesuffix("]") or "0.0.0.0"
    return host, int(port_text)


def _metrics() -> web.Response:
    return web.Response(body=metrics.render(), headers={"Content-Type": metrics.CONTENT_TYPE})


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def _readyz(ready: Readiness) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        try:
            answer = ready()
        except Exception as err:
            log.exception("the readiness check failed")
            return web.Response(status=503, text=f"not ready: the readiness check failed "
                                f"({type(err).__name__}: {err}).\n")
        is_ready, why = answer if isinstance(answer, tuple) else (answer, "")
        if is_ready:
            return web.Response(text=why or "ready")
        why = why or ("mcad is still starting (it has not yet read its clusters, quota trees "
                      "and queues)")
        return web.Response(status=503, text=f"not ready: {why}.\n")
    return handle
