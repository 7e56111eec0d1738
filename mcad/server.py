"""The HTTP endpoints Prometheus and the kubelet poll: ``/metrics``, ``/healthz``, ``/readyz``.

Why a module of its own: ``mcad run`` serves them next to the controller, on the same
event loop, so ``/healthz`` answering proves the loop is not stuck, and ``/readyz``
asks the controller (a ``ready`` callable) whether it has synced and may be sent
work. One function starts a server with all three; ``mcad run`` may start a second
one on another address (``--health-address``) with the same function.

``/readyz`` answers 503 with a sentence when not ready, so ``kubectl describe pod``
shows why the pod is not ready rather than a bare status.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from mcad import metrics

log = logging.getLogger(__name__)


class ListenError(Exception):
    """The server cannot listen on the address given; the message says why."""


Readiness = Callable[[], "bool | tuple[bool, str]"]
"""True/False, or (ready, the sentence that says why or in what role)."""


async def start_server(address: str, *, ready: Readiness,
                       extra: Sequence[web.RouteDef] = ()) -> web.AppRunner:
    """Serve /metrics, /healthz and /readyz on ``address`` ("host:port"; port 0 picks one).

    Returns the running ``AppRunner``; stop it with ``await runner.cleanup()``. Raises
    ``ListenError`` when the address is malformed or cannot be bound.
    """
    host, port = parse_address(address)
    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz(ready))
    app.router.add_routes(extra)
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


def parse_address(address: str) -> tuple[str, int]:
    """ "host:port" (or "[v6]:port", or ":port" for every interface) as (host, port)."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ListenError(f"the address {address!r} is not host:port with a port from 0 to "
                          "65535, e.g. 127.0.0.1:8080 or :8080")
    host = host.removeprefix("[").removesuffix("]") or "0.0.0.0"
    return host, int(port_text)


async def _metrics(request: web.Request) -> web.Response:
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
