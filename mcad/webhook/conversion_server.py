"""The CRD's conversion webhook, and the admission webhook, in a process of their own
(``--conversion-address``).

    python -m mcad.webhook.conversion_server --address HOST:PORT --cert FILE --key FILE
        [--parent PID] [--review-config FILE [--kubeconfig FILE]]

Why a process: the hub API server keeps a watch cache per served version of the
AppWrapper CRD, and the v1beta2 one (the controller manager's garbage collector and
quota monitor watch at v1beta2, kubectl reads it) converts each AppWrapper written, one
call at a time, in order. Served on the controller's event loop, each call waits for
the dispatch cycle that holds the loop: in a 1,000 AppWrapper drain the calls' p99 was
519 ms, the cache converted 790 of the drain's ~3,700 writes while it lasted and the
other ~2,970 in the 9 s after it, the hub API server near a core busy meanwhile, and a
v1beta2 reader saw the drain seconds late. In a process of its own, no cycle stands in
front of a conversion, and no Python thread of the controller's holds its interpreter
lock.

What it serves is ``mcad.webhook.conversion.review``, as the controller's own TLS
server does (which keeps serving ``/convert`` too, for a CRD that still points there),
with the same bounds: a body over ``MAX_BODY`` refused, at most ``AT_ONCE`` read and
converted at a time.

With ``--review-config`` (the controller's configuration, as JSON) it also answers the
admission webhook (``/validate-appwrapper``, ``mcad.webhook.reviewer``), asking the hub
for the SubjectAccessReviews with the controller's own credentials (``--kubeconfig``, or
the pod's service account without it). On the controller's event loop, a review waited
757 ms on average through a 1,000 AppWrapper drain, for an answer the hub gave in
1.5 ms: every ``kubectl create`` of an AppWrapper waited that long while a backlog
drained. It always answers the mutating webhook (``/mutate-appwrapper``, which puts
mcad's finalizer on a new AppWrapper: ``mcad.webhook.review.with_finalizer``), which asks
nothing of anyone.

The certificate is the replica's (Secret ``mcad-webhook-tls``): the controller writes
it to private files and starts this process again when it changes. With ``--parent``
it exits once that process is gone, so it never outlives the controller.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import ssl
from pathlib import Path

from aiohttp import web

from mcad.api.conversion import CONVERT_PATH
from mcad.config import RunConfig
from mcad.gateway.connection import Connection, connect, connect_in_cluster
from mcad.server import parse_address
from mcad.webhook import conversion
from mcad.webhook.review import mutation, not_a_review, parsed
from mcad.webhook.reviewer import MAX_BODY as MAX_REVIEW_BODY
from mcad.webhook.reviewer import MUTATE_PATH, PATH, Reviewer

PARENT_CHECK_S = 1.0
"""How often the parent's presence is checked (``--parent``)."""


async def read_at_most(request: web.Request, limit: int) -> bytes | None:
    """The whole body, or None once it is known to be longer than ``limit`` bytes
    (before reading any of it when its Content-Length says so)."""
    if (request.content_length or 0) > limit:
        return None
    body = bytearray()
    async for chunk in request.content.iter_chunked(256 * 1024):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


async def read_review(request: web.Request) -> bytes | web.Response:
    """An admission request's body, or the 413 that refuses it over ``MAX_REVIEW_BODY``,
    as the controller's own server bounds it (this app's limit is the conversion's,
    64 MiB). What it holds is read by ``mcad.webhook.review`` (``parsed``,
    ``mutation``), as the controller's server reads it."""
    raw = await read_at_most(request, MAX_REVIEW_BODY)
    if raw is None:
        return web.Response(status=413, text="the AdmissionReview is larger than "
                                             f"{MAX_REVIEW_BODY} bytes")
    return raw


async def mutate(request: web.Request) -> web.Response:
    """mcad's finalizer on a new AppWrapper (``mutation``): needs no hub, so it is
    served whether or not this process answers the reviews."""
    raw = await read_review(request)
    if isinstance(raw, web.Response):
        return raw
    return web.json_response(mutation(raw))


async def serve(host: str, port: int, cert: Path, key: Path, *,
                parent: int | None = None, reviews: RunConfig | None = None,
                kubeconfig: Path | None = None) -> None:
    """Answer ConversionReviews on ``host:port`` over TLS until SIGTERM, or until
    ``parent`` is no longer this process's parent; and AdmissionReviews with ``reviews``
    (the controller's configuration), asking the hub that ``kubeconfig`` reaches (the
    pod's service account when None)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)

    at_once = asyncio.Semaphore(conversion.AT_ONCE)

    async def convert(request: web.Request) -> web.Response:
        if (request.content_length or 0) > conversion.MAX_BODY:
            return web.Response(status=413, text="the ConversionReview is larger than "
                                                 f"{conversion.MAX_BODY} bytes")
        async with at_once:  # bodies read (memory held) only AT_ONCE at a time
            body = await request.read()
            return web.Response(body=conversion.review(body), content_type="application/json")

    app = web.Application(client_max_size=conversion.MAX_BODY)
    app.router.add_post(CONVERT_PATH, convert)
    app.router.add_post(MUTATE_PATH, mutate)
    hub: Connection | None = None
    if reviews is not None:
        hub = await connect(kubeconfig, name="hub") if kubeconfig is not None \
            else connect_in_cluster(name="hub")
        reviewer = Reviewer(hub=hub, config=reviews)

        async def review(request: web.Request) -> web.Response:
            raw = await read_review(request)
            if isinstance(raw, web.Response):
                return raw
            body = parsed(raw)
            if body is None:
                return web.json_response(not_a_review())
            return web.json_response(await reviewer.answer(body))

        app.router.add_post(PATH, review)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=context).start()
        stop = asyncio.Event()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        while not stop.is_set():
            if parent is not None and os.getppid() != parent:
                return  # the controller is gone: so is its converter
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PARENT_CHECK_S)
    finally:
        await runner.cleanup()
        if hub is not None:
            await hub.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, metavar="HOST:PORT")
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    parser.add_argument("--parent", type=int, default=None,
                        help="exit once this process is no longer the parent")
    parser.add_argument("--review-config", type=Path, default=None,
                        help="the controller's configuration (JSON): answer admission "
                             "reviews too")
    parser.add_argument("--kubeconfig", type=Path, default=None,
                        help="the hub's kubeconfig for the reviews' access checks "
                             "(default: the pod's service account)")
    args = parser.parse_args()
    host, port = parse_address(args.address)
    reviews = RunConfig.model_validate_json(args.review_config.read_text()) \
        if args.review_config is not None else None
    asyncio.run(serve(host, port, args.cert, args.key, parent=args.parent, reviews=reviews,
                      kubeconfig=args.kubeconfig))


if __name__ == "__main__":
    main()
