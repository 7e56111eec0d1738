"""A connection to one cluster: kubeconfig in, authenticated JSON requests out.

mcad reads the kubeconfig itself (``mcad.gateway.kubeconfig``) or the pod's in-cluster
service account, and builds the TLS session; only a kubeconfig that needs an exec plugin
or an auth-provider is handed to kubernetes_asyncio's loader, imported then (its package
imports every API model: 36 MB). Requests go as raw JSON through a ``Transport``
(``mcad.gateway.transport``), which is several times faster than the generated models
for the pod and node lists the controller watches, works the same for any wrapped
kind, and is the seam tests replace.

Every request is retried (tenacity) on connection failures, 429 and 5xx, waiting
what Retry-After says when the server says it; other errors are raised at once as
``mcad.gateway.errors`` classes. The bearer token is asked for on every request, so
a rotated service-account token is picked up without a restart. A ``write_fence``
(the leader election's) is consulted before every write: a replica that is no longer
sure to lead cannot change anything, whatever task is still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from sys import intern
from typing import TYPE_CHECKING, Any

import aiohttp
from pydantic_core import from_json, to_json
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from mcad.gateway.errors import (
    RETRYABLE,
    Abandoned,
    ApiError,
    BadKubeconfig,
    BadResponse,
    Unreachable,
    error_for,
)
from mcad.gateway.kubeconfig import SpokeCredentials, load_yaml, parse_trusted, private_dir
from mcad.gateway.kubeconfig import parse as parse_kubeconfig
from mcad.gateway.transport import (
    AiohttpTransport,
    Reply,
    StreamRefused,
    Transport,
    TransportError,
)

if TYPE_CHECKING:
    from kubernetes_asyncio import client as k8s_client

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
REQUEST_TIMEOUT_S = 30.0
RETRY_BUDGET_S = 60.0
"""No retry starts this long after a request's first attempt did."""
ATTEMPTS = 5
MAX_LINE_BYTES = 16 * 1024 * 1024
"""Longest watch event accepted. etcd refuses objects over 1.5 MiB by default, so a line
this long is garbage; anything shorter (a 700 kB AppWrapper) is read whole."""
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

Headers = Callable[[], Awaitable[dict[str, str]]]
WriteFence = Callable[[], None]
"""Raises (``Fenced``) when this process may not write; returns otherwise."""


class _RetryAfterWait(wait_exponential):
    """Exponential backoff, unless the server said how long to wait. ``first_attempt``:
    the number of tenacity's first attempt among all (the first one is made outside
    tenacity, so the backoff goes on from where it was)."""

    def __init__(self, *, multiplier: float, max: float, first_attempt: int = 1) -> None:
        super().__init__(multiplier=multiplier, max=max)
        self.offset = first_attempt - 1

    def after(self, err: BaseException, attempt: int) -> float:
        """The wait after ``err`` ended attempt number ``attempt`` (1 is the first)."""
        if isinstance(err, ApiError) and err.retry_after is not None:
            return min(float(err.retry_after), 30.0)
        return min(float(self.max), float(self.multiplier) * 2.0 ** (attempt - 1))

    def __call__(self, retry_state: Any) -> float:
        outcome = retry_state.outcome
        err = outcome.exception() if outcome is not None and outcome.failed else None
        return self.after(err or Exception(), retry_state.attempt_number + self.offset)


async def _no_headers() -> dict[str, str]:
    return {}


class Connection:
    """Authenticated access to one API server."""

    def __init__(self, *, name: str, host: str, transport: Transport,
                 auth: Headers = _no_headers, attempts: int = ATTEMPTS) -> None:
        self.name = name
        self.host = host.rstrip("/")
        self.transport = transport
        self._auth = auth
        self.attempts = attempts
        self.write_fence: WriteFence | None = None
        self.answered: Callable[[float], None] | None = None
        """Told the round trip (seconds) of every write the server answered, whatever
        the answer (the hub's: the controller's reconcile limit follows it)."""
        self._waiting: dict[asyncio.Timeout, None] = {}
        """The requests waiting for an answer now (their cancel scopes, for ``abandon``)."""
        self._abandoned = ""
        """Why the requests waiting were last given up (``abandon``), for their error."""

    async def close(self) -> None:
        await self.transport.close()

    def abandon(self, reason: str) -> int:
        """Fail every request waiting for an answer now with ``Abandoned`` (not retried),
        and return how many there were; requests sent after this are sent as usual.

        Why: a cluster that stops answering holds each request to it for the whole
        request timeout (30 s, retried for up to a minute), and each holds one of the
        controller's reconcile places meanwhile. Its link finds it unreachable within
        seconds (its probe), and then says so here: the places come free at once, and the
        reconciles go on as for any unanswered request (the link's state decides what
        they do next). Whether the server did the write is unknown, as after a time-out:
        every write here is conditional or idempotent."""
        self._abandoned = reason
        now = asyncio.get_running_loop().time()
        waiting = list(self._waiting)
        for scope in waiting:
            scope.reschedule(now)
        return len(waiting)

    async def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": JSON, **await self._auth()}
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    # -- single requests ----------------------------------------------------------------
    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: Any = None, content_type: str = JSON,
                      timeout: float = REQUEST_TIMEOUT_S, attempts: int | None = None,
                      fenced: bool = True, accept: str = JSON) -> dict[str, Any]:
        """Send one request (retried when that is safe) and return the JSON answer.

        ``attempts`` overrides the connection's retry count; ``fenced=False`` skips the
        write fence (for the Lease itself, which is how a replica becomes the leader).
        The body is encoded once, and the first attempt is a plain call: the retry
        machinery (tenacity) is only entered after a failure worth retrying, since
        almost no request needs it and it cost a sixth of the controller's CPU. It is
        encoded by pydantic_core (compact, UTF-8), four times as fast as ``json``.
        """
        data = None if body is None else to_json(body)
        allowed = attempts or self.attempts
        started = time.monotonic()
        try:
            return await self._once(method, path, params=params, data=data,
                                    content_type=content_type, timeout=timeout,
                                    fenced=fenced, accept=accept)
        except RETRYABLE as first:
            # The budget counts from the first attempt: a request to a server that
            # does not answer gives up after RETRY_BUDGET_S in all, not that much more.
            budget = RETRY_BUDGET_S - (time.monotonic() - started)
            if allowed <= 1 or budget <= 0 or isinstance(first, Abandoned):
                raise
            await asyncio.sleep(_RetryAfterWait(multiplier=0.1, max=5.0).after(first, 1))
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(RETRYABLE) & retry_if_not_exception_type(Abandoned),
            wait=_RetryAfterWait(multiplier=0.1, max=5.0, first_attempt=2),
            stop=stop_after_attempt(allowed - 1) | stop_after_delay(budget),
            reraise=True,
        ):
            with attempt:
                return await self._once(method, path, params=params, data=data,
                                        content_type=content_type, timeout=timeout,
                                        fenced=fenced, accept=accept)
        raise AssertionError("unreachable")  # pragma: no cover - tenacity reraises

    async def _once(self, method: str, path: str, *, params: Mapping[str, str] | None,
                    data: bytes | None, content_type: str, timeout: float, fenced: bool,
                    accept: str) -> dict[str, Any]:
        if fenced and method != "GET" and self.write_fence is not None:
            self.write_fence()
        headers = await self._headers(content_type if data is not None else None)
        headers["Accept"] = accept
        timed = self.answered is not None and method != "GET"
        loop = asyncio.get_running_loop()
        sent = loop.time() if timed else 0.0  # (the loop's clock, monotonic: tests move it)
        scope = asyncio.timeout(None)  # (no deadline of its own: ``abandon`` sets one)
        self._waiting[scope] = None
        try:
            async with scope:
                reply = await self.transport.send(method, self.host + path,
                                                  params=params or {}, body=data,
                                                  headers=headers, timeout=timeout)
        except (TransportError, TimeoutError) as err:
            if scope.expired():
                raise Abandoned(f"no answer from {self.host}, given up when the cluster "
                                f"was found unreachable ({self._abandoned})",
                                cluster=self.name) from err
            if isinstance(err, TimeoutError):
                raise
            raise Unreachable(f"cannot reach {self.host} ({err})", cluster=self.name) from err
        finally:
            del self._waiting[scope]
        if timed and self.answered is not None:
            self.answered(loop.time() - sent)
        answer = _decode(reply)
        if not 200 <= reply.status < 300:
            raise error_for(reply.status, answer, cluster=self.name,
                            retry_after=float(reply.retry_after) if reply.retry_after and
                            reply.retry_after.isdigit() else None)
        return answer

    # -- streams ------------------------------------------------------------------------
    async def stream_lines(self, path: str, *, params: Mapping[str, str],
                           read_timeout: float, shared: bool = True
                           ) -> AsyncIterator[dict[str, Any]]:
        """The JSON lines of a watch response, until the server closes it.

        ``shared=False`` shares keys only, not values: for streams whose objects are
        read and dropped at once (a spoke's pods and Jobs, a few fields kept), whose
        names and uids would only push the kept objects' values out of the decoder's
        string cache.

        Lines are split here, not by aiohttp (whose line reader gives up at 128 KiB, less
        than one large AppWrapper); a line over ``MAX_LINE_BYTES`` or one that is not a
        JSON object ends the stream with ``BadResponse``, which a watch answers by
        relisting, like any other broken stream.
        """
        headers = await self._headers()
        buffer = bytearray()
        try:
            async for chunk in self.transport.stream(
                    self.host + path, params=params, headers=headers,
                    read_timeout=read_timeout, connect_timeout=REQUEST_TIMEOUT_S):
                buffer += chunk
                while True:
                    end = buffer.find(b"\n")
                    if end < 0:
                        break
                    line = bytes(buffer[:end])
                    del buffer[:end + 1]
                    if line.strip():
                        yield self._line(line, shared)
                if len(buffer) > MAX_LINE_BYTES:
                    raise BadResponse(f"a watch event on {self.host} is longer than "
                                      f"{MAX_LINE_BYTES} bytes", cluster=self.name)
            if buffer.strip():
                yield self._line(bytes(buffer), shared)
        except TransportError as err:
            raise Unreachable(f"watch on {self.host} broke ({err})", cluster=self.name) from err
        except StreamRefused as refused:
            raise error_for(refused.reply.status, _decode(refused.reply),
                            cluster=self.name) from None

    def _line(self, line: bytes, shared: bool = True) -> dict[str, Any]:
        try:
            event = loads(line) if shared else _plain(line)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            raise BadResponse(f"a watch event on {self.host} is not a JSON object: "
                              f"{line[:80]!r}", cluster=self.name)
        return event


SHARED_VALUE_CHARS = 63
"""String values up to this long are shared between objects (see ``loads``:
pydantic_core's string cache takes those under 64 bytes of UTF-8; its fallback here
counts characters)."""


def _shared(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = {intern(key): intern(value) if type(value) is str
           and len(value) <= SHARED_VALUE_CHARS else value for key, value in pairs}
    if "managedFields" in out and "resourceVersion" in out:  # an object's metadata
        del out["managedFields"]
    return out


def loads(data: bytes | str) -> Any:
    """JSON from the API server, with its keys and short values shared between objects.

    Why: mcad keeps tens of thousands of objects (AppWrappers, pods, nodes) for as long
    as they live, and every object the API server sends repeats the same keys
    (``apiVersion``, ``lastTransitionTime``...) and values (``True``, ``Running``, a
    cluster's resource names). ``json.loads`` makes a new string for each, every time: a
    dispatched AppWrapper took 20 KB of memory, 12.8 KB with them shared (10,000 decoded
    copies of one, measured with tracemalloc).

    The decoder is pydantic_core's (a dependency already, through pydantic), with its
    string cache: it shares the strings under 64 bytes as it builds them. It was
    ``json.loads`` with a hook that interned each object's keys and values in Python,
    and that hook was the controller's largest single cost in a drain (a 2.3 KB
    AppWrapper event: 68 us with the hook, 13 us here, 18 us with plain ``json.loads``;
    5.4 against 4.4 KB kept per AppWrapper). What pydantic_core refuses and Python
    accepts (an escaped lone surrogate, which Go's encoder never writes) is decoded the
    old way.

    An object's ``metadata.managedFields`` (server-side apply's field ownership, which
    mcad never reads) is dropped: from the object answered, the object of a watch
    event, and each item of a list, wherever their metadata has a ``resourceVersion``
    (what the API server sends), so a user's data with such a key is left alone.
    """
    try:
        value = from_json(data, cache_strings="all")
    except ValueError:
        return json.loads(data, object_pairs_hook=_shared)
    if type(value) is dict:
        _slim(value)
        inner = value.get("object")
        if type(inner) is dict:
            _slim(inner)
        items = value.get("items")
        if type(items) is list:
            for item in items:
                if type(item) is dict:
                    _slim(item)
    return value


def _plain(data: bytes) -> Any:
    """JSON read and dropped at once: keys shared, managed fields kept (see ``loads``)."""
    try:
        return from_json(data, cache_strings="keys")
    except ValueError:
        return json.loads(data)


def _slim(obj: dict[str, Any]) -> None:
    """Drop the managed fields of an API object's metadata."""
    meta = obj.get("metadata")
    if type(meta) is dict and "resourceVersion" in meta:
        meta.pop("managedFields", None)


def _decode(reply: Reply) -> dict[str, Any]:
    """The answer's JSON object; a non-JSON body becomes ``{"message": ...}``."""
    try:
        answer: Any = loads(reply.body) if reply.body else {}
    except ValueError:
        return {"message": reply.body[:200].decode(errors="replace")}
    if isinstance(answer, dict):
        return answer
    return {"items": answer} if isinstance(answer, list) else {}


EXEC_REFRESH_S = 300.0
"""How often a token from an exec credential plugin is fetched again (they usually last
from 15 minutes to an hour)."""


def from_configuration(cfg: k8s_client.Configuration, *, name: str,
                       loader: Any = None) -> Connection:
    """A connection from a loaded kubernetes_asyncio configuration; with the ``loader`` of
    a kubeconfig whose user runs an exec plugin, the plugin is run again every
    ``EXEC_REFRESH_S`` so its short-lived token never expires under mcad."""
    if not str(cfg.host or "").startswith(("https://", "http://")):
        raise BadKubeconfig(f"the kubeconfig's server {cfg.host!r} is not an http(s) URL")
    try:
        session = _session(cfg)
    except (ssl.SSLError, ValueError, OSError) as err:  # bad CA or client certificate data
        reason = getattr(err, "reason", None) or err
        raise BadKubeconfig(f"its TLS certificates are not valid ({reason})") from err

    refreshed = time.monotonic()

    async def auth() -> dict[str, str]:
        nonlocal refreshed
        if loader is not None and time.monotonic() - refreshed > EXEC_REFRESH_S:
            await loader.load_from_exec_plugin()
            cfg.api_key["BearerToken"] = loader.token
            refreshed = time.monotonic()
        token = await cfg.get_api_key_with_prefix("BearerToken")
        if token:
            return {"Authorization": str(token)}
        basic = cfg.get_basic_auth_token() if cfg.username or cfg.password else None
        return {"Authorization": str(basic)} if basic else {}

    transport = AiohttpTransport(session)
    return Connection(name=name, host=str(cfg.host), transport=transport, auth=auth)


def _session(cfg: k8s_client.Configuration) -> aiohttp.ClientSession:
    """The session for a loaded configuration, with its TLS settings as kubernetes_asyncio
    would make them, but without ``trust_env``: with it aiohttp looks for a ~/.netrc in
    a worker thread before every request that has no ``auth`` (all of mcad's: the token
    is a header), which took 4% of the controller's CPU and a thread hop per request
    while a backlog drained; and a proxy for the hub is not read from the environment
    (a kubeconfig's proxy-url is refused for spokes too)."""
    https = str(cfg.host or "").startswith("https://")
    context: ssl.SSLContext | bool = False
    if https:
        context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if cfg.cert_file:
            context.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
        if not cfg.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    # Watch events of large objects exceed aiohttp's default read buffer (etcd allows
    # 1.5 MiB per object), as kubernetes_asyncio notes.
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(
        limit=cfg.connection_pool_maxsize, ssl=context), trust_env=False, read_bufsize=2**21)


async def connect(kubeconfig: Mapping[str, Any] | str | Path, *, name: str,
                  context: str | None = None) -> Connection:
    """A connection from a kubeconfig (a parsed dict, YAML text, or a file path).

    Raises ``BadKubeconfig`` with a sentence when the kubeconfig cannot be used; it
    does not contact the server (a first request will say whether it answers).
    """
    base: Path | None = None
    if isinstance(kubeconfig, Path):
        base = kubeconfig.parent
        try:
            kubeconfig = kubeconfig.read_text()  # noqa: ASYNC240 - a small local file
        except OSError as err:
            raise BadKubeconfig(f"cannot read kubeconfig {kubeconfig}: {err.strerror}") from err
    parsed = load_yaml(kubeconfig) if isinstance(kubeconfig, str) else kubeconfig
    if not isinstance(parsed, dict) or not parsed.get("clusters"):
        raise BadKubeconfig("the kubeconfig has no clusters")
    credentials = parse_trusted(parsed, context=context, base=base)
    if credentials is not None:
        return from_credentials(credentials, name=name)
    # Imported here, not at the top: the Kubernetes client's models take 36 MB and only a
    # kubeconfig that parse_trusted cannot read (exec plugins, ...) needs them.
    from kubernetes_asyncio import client as k8s_client  # noqa: PLC0415
    from kubernetes_asyncio import config as k8s_config  # noqa: PLC0415

    cfg = k8s_client.Configuration()
    try:
        loader = await k8s_config.load_kube_config_from_dict(
            parsed, context=context, client_configuration=cfg,
            temp_file_path=str(private_dir()))
    except Exception as err:  # the loader raises many types for bad input
        raise BadKubeconfig(f"the kubeconfig cannot be used: {type(err).__name__}") from err
    user: Any = getattr(loader, "_user", None)
    runs_exec = user is not None and "exec" in user
    return from_configuration(cfg, name=name, loader=loader if runs_exec else None)


def from_credentials(credentials: SpokeCredentials, *, name: str,
                     auth: Headers | None = None) -> Connection:
    """A connection from checked credentials: their TLS session and their header (or
    ``auth``, asked for on every request)."""
    headers = credentials.headers()

    async def fixed() -> dict[str, str]:
        return dict(headers)

    return Connection(name=name, host=credentials.server,
                      transport=AiohttpTransport(credentials.session()), auth=auth or fixed)


async def connect_spoke(text: str, *, name: str, allow_exec: bool = False) -> Connection:
    """A connection from a spoke's kubeconfig, read as untrusted input
    (``mcad.gateway.kubeconfig``): inline credentials only, an exec plugin only when
    ``allow_exec``. Raises ``BadKubeconfig`` with a sentence that quotes none of it."""
    credentials, doc = parse_kubeconfig(text, allow_exec=allow_exec)
    if credentials.exec_plugin:
        return await connect(doc, name=name)
    return from_credentials(credentials, name=name)


def in_cluster() -> bool:
    """True inside a pod with a mounted service-account token."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and \
        (SERVICE_ACCOUNT_DIR / "token").is_file()


TOKEN_REREAD_S = 60.0
"""How often the in-cluster token file is read again (kubelet rotates it; client-go and
kubernetes_asyncio read it every minute too)."""


def connect_in_cluster(*, name: str) -> Connection:
    """A connection as the pod's service account: the API server from the environment
    kubelet sets, its CA and the token from the mounted files (the token re-read every
    ``TOKEN_REREAD_S`` as kubelet rotates it)."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise BadKubeconfig("the in-cluster service account cannot be used: "
                            "KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set")
    if ":" in host:
        host = f"[{host}]"
    token_file, ca_file = SERVICE_ACCOUNT_DIR / "token", SERVICE_ACCOUNT_DIR / "ca.crt"

    def read_token() -> str:
        try:
            return token_file.read_text().strip()
        except OSError as err:
            raise BadKubeconfig("the in-cluster service account cannot be used: "
                                f"{token_file}: {err.strerror}") from err

    try:
        ca = ca_file.read_text()
    except OSError as err:
        raise BadKubeconfig("the in-cluster service account cannot be used: "
                            f"{ca_file}: {err.strerror}") from err
    token, read_at = read_token(), time.monotonic()

    async def auth() -> dict[str, str]:
        nonlocal token, read_at
        if time.monotonic() - read_at > TOKEN_REREAD_S:
            with contextlib.suppress(BadKubeconfig):  # keep the last one until it is back
                token = read_token()
            read_at = time.monotonic()
        return {"Authorization": f"Bearer {token}"}

    credentials = SpokeCredentials(server=f"https://{host}:{port}", ca_pem=ca, verify=True,
                                   token=token, client_cert_pem=None, client_key_pem=None,
                                   basic=None, exec_plugin=False)
    return from_credentials(credentials, name=name, auth=auth)


def default_kubeconfig_path() -> Path:
    """Where kubectl looks: $KUBECONFIG (first entry), else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG", "")
    first = env.split(os.pathsep)[0] if env else ""
    return Path(first) if first else Path.home() / ".kube" / "config"
