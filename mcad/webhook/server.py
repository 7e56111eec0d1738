"""The HTTPS server the hub's API server calls, run by every replica (leader or standby).

It serves ``POST /validate-appwrapper`` (AdmissionReview v1), ``POST /convert`` (the
AppWrapper CRD's ConversionReviews: ``mcad.webhook.conversion``) and, mounted beside
them, the aggregated visibility API (``mcad.visibility.api``, under ``/apis``), with the
certificate kept in the Secret ``mcad-webhook-tls`` of mcad's namespace
(``certmanager`` writes it on the leader; every replica reads it every few seconds and
swaps it in without a restart, so a rotation never drops a request). Until a
certificate exists it does not listen, and the API server's ``failurePolicy: Fail``
refuses AppWrappers with its own message rather than admitting them unchecked.

For the aggregated API the server asks for a client certificate (optional: the
admission webhook's caller sends none) and trusts the hub's request-header CA, read
with the certificate from ``kube-system/extension-apiserver-authentication``
(``front_proxy``); the visibility routes then refuse any request whose certificate is
not the front proxy's.

The admission answer is ``mcad.webhook.reviewer.Reviewer``'s: one SubjectAccessReview
per wrapped kind, and never an unchecked AppWrapper admitted.

With ``conversion_address`` the conversion and the admission reviews are also served by
a process of its own (``ConversionProcess``, ``mcad.webhook.conversion_server``: why, in
its docstring), started with each certificate this server loads and started again
within ``RELOAD_EVERY_S`` when it dies; the API server is pointed at it for both
(``certmanager.Registration``), and this server keeps answering both for a
configuration that still points here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import shutil
import ssl
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from mcad.access import FrontProxy, load_front_proxy
from mcad.api.conversion import CONVERT_PATH
from mcad.config import RunConfig
from mcad.gateway import refs, verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import ApiError, NotFound
from mcad.gateway.kubeconfig import load_cert_chain
from mcad.server import ListenError, parse_address
from mcad.webhook import conversion, reviewer
from mcad.webhook.review import mutation, not_a_review, parsed
from mcad.webhook.reviewer import MUTATE_PATH, PATH, Reviewer

log = logging.getLogger(__name__)
SECRET = "mcad-webhook-tls"
RELOAD_EVERY_S = 5.0


@dataclass(frozen=True)
class HubAccess:
    """How the webhooks' own process reaches the hub for its access checks: the
    controller's kubeconfig, or the pod's service account (None)."""

    kubeconfig: Path | None


class ConversionProcess:
    """The webhooks' own process (``mcad.webhook.conversion_server``) on ``address``:
    started with the certificate the webhook server loaded (written to files only this
    user may read), started again when that certificate changes or when the process has
    died, and stopped with the server. With ``reviews`` (the controller's configuration)
    it answers admission reviews too, asking the hub ``kubeconfig`` reaches (the pod's
    service account when None)."""

    STOP_WITHIN_S = 5.0
    LISTEN_WITHIN_S = 30.0

    def __init__(self, address: str, *, reviews: RunConfig | None = None,
                 kubeconfig: Path | None = None) -> None:
        self.address = address
        self.reviews = reviews
        self.kubeconfig = kubeconfig
        self.started = 0
        """How many times a process was started (the first included)."""
        self._proc: asyncio.subprocess.Process | None = None
        self._serving: bytes | None = None
        self._folder: Path | None = None
        self._listened = False

    @property
    def listening(self) -> bool:
        """Whether a process runs and has been seen to accept connections: until then the
        replica is not ready (the Service sends conversions only to ready pods, and the
        API server's conversion call to a port nobody listens on fails the request)."""
        return self._listened and self._proc is not None and self._proc.returncode is None

    async def serve(self, cert: bytes, key: bytes) -> None:
        """Make sure a process serves with ``cert`` and ``key``: nothing to do when one
        runs with them already."""
        proc = self._proc
        if proc is not None and proc.returncode is None and self._serving == cert + key:
            if not self._listened:  # slower than LISTEN_WITHIN_S last round: look again
                await self._until_listening(proc)
            return
        if proc is not None and proc.returncode is not None:
            log.warning("the conversion webhook's process on %s exited with %s; starting "
                        "it again", self.address, proc.returncode)
        await self.stop()
        self._folder = Path(tempfile.mkdtemp(prefix="mcad-conversion-"))  # mode 0700
        paths: tuple[Path, ...] = (self._folder / "tls.crt", self._folder / "tls.key")
        review_args: list[str] = []
        if self.reviews is not None:
            config = self._folder / "config.json"
            paths += (config,)
            review_args = ["--review-config", str(config)]
            if self.kubeconfig is not None:
                review_args += ["--kubeconfig", str(self.kubeconfig.resolve())]
        contents = (cert, key) if self.reviews is None else \
            (cert, key, self.reviews.model_dump_json(by_alias=True).encode())
        for path, data in zip(paths, contents, strict=True):
            path.write_bytes(data)
            path.chmod(0o600)
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mcad.webhook.conversion_server", "--address",
            self.address, "--cert", str(paths[0]), "--key", str(paths[1]),
            "--parent", str(os.getpid()), *review_args)
        self._serving = cert + key
        self.started += 1
        await self._until_listening(self._proc)
        log.info("serving the conversion webhook from process %d on %s", self._proc.pid,
                 self.address)

    async def _until_listening(self, proc: asyncio.subprocess.Process) -> None:
        """Wait (at most ``LISTEN_WITHIN_S``) until ``proc`` accepts a connection on its
        address, or has exited (the next round starts it again)."""
        host, port = parse_address(self.address)
        host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        deadline = asyncio.get_running_loop().time() + self.LISTEN_WITHIN_S
        while proc.returncode is None and asyncio.get_running_loop().time() < deadline:
            try:
                _, writer = await asyncio.open_connection(host, port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            self._listened = True
            return

    async def stop(self) -> None:
        proc, self._proc, self._serving, self._listened = self._proc, None, None, False
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), self.STOP_WITHIN_S)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


class WebhookServer:
    def __init__(self, *, hub: Connection, config: RunConfig, address: str,
                 mounted: Sequence[tuple[str, web.Application]] = (),
                 conversion_address: str | None = None,
                 hub_access: HubAccess | None = None) -> None:
        self.hub = hub
        self.config = config
        self.address = address
        self.mounted = tuple(mounted)
        """Applications served beside the webhook, by path prefix (the visibility API)."""
        self.converter = ConversionProcess(
            conversion_address, reviews=config if hub_access is not None else None,
            kubeconfig=hub_access.kubeconfig if hub_access is not None else None) \
            if conversion_address else None
        """The webhooks' own process, when it has an address (answering admission reviews
        too when it has ``hub_access``)."""
        self._cert_key: tuple[bytes, bytes] | None = None
        self.reviewer = Reviewer(hub=hub, config=config)
        self.ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ssl.minimum_version = ssl.TLSVersion.TLSv1_2
        self.port = 0
        self._loaded: bytes | None = None
        self.front_proxy: FrontProxy | None = None
        """The hub's request-header settings, once read (the mounted API checks them)."""
        self._trusted: set[bytes] = set()
        self._front_proxy_problem = ""
        self.serving = asyncio.Event()
        self._poke = asyncio.Event()
        self._converting = asyncio.Semaphore(conversion.AT_ONCE)
        if self.mounted:
            self.ssl.verify_mode = ssl.CERT_OPTIONAL

    def reload_soon(self) -> None:
        """The certificate was just (re)issued in this process: read it now."""
        self._poke.set()

    async def run(self) -> None:
        """Load the certificate, serve once there is one, and keep it current."""
        host, port = parse_address(self.address)
        app = web.Application(client_max_size=reviewer.MAX_BODY)
        app.router.add_post(PATH, self._handle)
        app.router.add_post(MUTATE_PATH, self._mutate)
        app.router.add_post(CONVERT_PATH, self._convert)
        for prefix, mounted in self.mounted:
            app.add_subapp(prefix, mounted)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        try:
            while True:
                await self._reload()
                if self.mounted:
                    await self._reload_front_proxy()
                if self._loaded is not None and not self.serving.is_set():
                    site = web.TCPSite(runner, host, port, ssl_context=self.ssl)
                    try:
                        await site.start()
                    except OSError as err:
                        raise ListenError(f"cannot listen on {self.address}: "
                                          f"{err.strerror or err}") from err
                    self.port = _bound_port(runner) or port
                    log.info("serving the admission webhook on %s:%d", host, self.port)
                    self.serving.set()
                if self.converter is not None and self._cert_key is not None:
                    try:
                        await self.converter.serve(*self._cert_key)
                    except OSError as err:  # tried again on the next round
                        log.warning("cannot start the conversion webhook's process: %s", err)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._poke.wait(), RELOAD_EVERY_S)
                self._poke.clear()
        finally:
            if self.converter is not None:
                await self.converter.stop()
            await runner.cleanup()

    async def _reload(self) -> None:
        try:
            secret = await verbs.get(self.hub, refs.SECRETS, SECRET,
                                     namespace=self.config.namespace, attempts=1)
        except NotFound:
            return
        except ApiError as err:
            log.debug("reading the webhook certificate failed: %s", err)
            return
        data = secret.get("data") or {}
        if not data.get("tls.crt") or not data.get("tls.key"):
            return
        cert, key = base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"])
        if cert + key == self._loaded:
            return
        try:
            load_cert_chain(self.ssl, cert, key)
        except (ssl.SSLError, OSError) as err:
            log.warning("the webhook certificate in Secret %s/%s cannot be used: %s",
                        self.config.namespace, SECRET, err)
            return
        self._loaded = cert + key
        self._cert_key = cert, key
        log.info("loaded the webhook certificate from Secret %s/%s", self.config.namespace,
                 SECRET)

    async def _reload_front_proxy(self) -> None:
        """Read the hub's request-header CA and trust it for client certificates (a CA
        once trusted stays loaded until a restart; ``FrontProxy.verify`` checks each
        request against the current one)."""
        try:
            found = await load_front_proxy(self.hub)
            problem = "" if found is not None else (
                "the hub publishes no request-header CA (its API server runs without the "
                "aggregation layer's flags): the visibility API answers nobody")
        except ApiError as err:
            found, problem = None, (f"cannot read the hub's request-header CA from "
                                    f"kube-system/extension-apiserver-authentication "
                                    f"({err.message}): the visibility API answers nobody "
                                    "until it can")
        if problem and problem != self._front_proxy_problem:
            log.warning("%s", problem)
        self._front_proxy_problem = problem
        if found is None:
            return
        if found.ca_pem not in self._trusted:
            try:
                self.ssl.load_verify_locations(cadata=found.ca_pem.decode())
            except (ssl.SSLError, ValueError) as err:
                log.warning("the hub's request-header CA cannot be used: %s", err)
                return
            self._trusted.add(found.ca_pem)
            log.info("trusting the hub's request-header CA for the visibility API")
        self.front_proxy = found

    async def _handle(self, request: web.Request) -> web.Response:
        review = parsed(await request.read())  # (bounded by the app's MAX_BODY)
        if review is None:
            return web.json_response(not_a_review())
        return web.json_response(await self.reviewer.answer(review))

    async def _mutate(self, request: web.Request) -> web.Response:
        return web.json_response(mutation(await request.read()))

    async def _convert(self, request: web.Request) -> web.Response:
        """A ConversionReview: read (bounded), converted in a worker thread."""
        too_big = web.Response(status=413, text="the ConversionReview is larger than "
                                                f"{conversion.MAX_BODY} bytes")
        if (request.content_length or 0) > conversion.MAX_BODY:
            return too_big
        body = bytearray()
        async for chunk in request.content.iter_chunked(256 * 1024):
            body += chunk
            if len(body) > conversion.MAX_BODY:
                return too_big
        async with self._converting:
            answer = await asyncio.to_thread(conversion.review, bytes(body))
        return web.Response(body=answer, content_type="application/json")


def _bound_port(runner: web.AppRunner) -> int | None:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return None


def secret_body(namespace: str, data: dict[str, bytes], version: str | None = None
                ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": SECRET, "namespace": namespace}
    if version:
        meta["resourceVersion"] = version
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
