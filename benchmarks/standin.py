"""The AppWrapper CRD's conversion webhook, served while no mcad runs in a benchmark.

    python benchmarks/standin.py --address 127.0.0.1:PORT --cert FILE --key FILE

Why it exists: the hub API server keeps one watch cache per served version of a CRD,
and the v1beta2 one (the controller manager's garbage collector and quota monitor
watch AppWrappers at v1beta2, the newest version) converts every AppWrapper written
through the CRD's conversion webhook. When nothing answers that webhook, the cache's
list fails and it lists every stored AppWrapper again from etcd, about once a second,
and fails again: with 1,000 AppWrappers stored and nothing else happening, the hub API
server used 0.059 cores and etcd 0.034, against 0.017 and 0.009 with the webhook
answered. A benchmark that stops mcad (to queue a backlog, or for the ceiling's plain
client) would measure that broken cache, not the hub as installed.

So while mcad is stopped this process answers ``/convert`` in its place, with mcad's own
certificate (Secret ``mcad-webhook-tls``, passed in as files) on mcad's own webhook
address, through mcad's own converter (``mcad.webhook.conversion.review``): the CRD is
never changed, and the API server cannot tell the stand-in from mcad.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
import sys
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcad.api.conversion import CONVERT_PATH
from mcad.webhook.conversion import review


async def serve(host: str, port: int, cert: Path, key: Path) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)

    async def convert(request: web.Request) -> web.Response:
        return web.Response(body=review(await request.read()), content_type="application/json")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post(CONVERT_PATH, convert)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=context).start()
    print(f"serving {CONVERT_PATH} on https://{host}:{port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="HOST:PORT (mcad's webhook address)")
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    args = parser.parse_args()
    host, _, port = args.address.rpartition(":")
    asyncio.run(serve(host, int(port), args.cert, args.key))


if __name__ == "__main__":
    main()
