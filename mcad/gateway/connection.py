"""A connection to one cluster: kubeconfig in, authenticated JSON requests out.

kubernetes_asyncio reads the kubeconfig (TLS, tokens, client certificates, exec
plugins) and builds the aiohttp session; requests then go as raw JSON on that
session, which is several times faster than the generated models for the pod and
node lists the controller watches, and works the same for any wrapped kind.

Every request is retried (tenacity) on connection failures, 429 and 5xx, waiting
what Retry-After says when the server says it; other errors are raised at once as
``mcad.gateway.errors`` classes.
"""

from __future__ import annotations

import json
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from mcad.gateway.errors import (
    RETRYABLE,
    ApiError,
    BadKubeconfig,
    Unreachable,
    error_for,
)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
REQUEST_TIMEOUT_S = 30.0
ATTEMPTS = 5


class _RetryAfterWait(wait_exponential):
    """Exponential backoff, unless the server said how long to wait."""

    def __call__(self, retry_state: Any) -> float:
        outcome = retry_state.outcome
        if outcome is not None and outcome.failed:
            err = outcome.exception()
            if isinstance(err, ApiError) and err.retry_after is not None:
                return min(float(err.retry_after), 30.0)
        return float(super().__call__(retry_state))


class Connection:
    """Authenticated access to one API server."""

    def __init__(self, *, name: str, api: k8s_client.ApiClient) -> None:
        self.name = name
        self._api = api
        cfg = api.configuration
        self.host: str = str(cfg.host).rstrip("/")
        self._headers: dict[str, str] = {"Accept": JSON}
        token = cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization")
        if token:
            self._headers["Authorization"] = str(token)

    @property
    def _session(self) -> aiohttp.ClientSession:
        session: aiohttp.ClientSession = self._api.rest_client.pool_manager
        return session

    async def close(self) -> None:
        await self._api.close()

    # -- single requests ----------------------------------------------------------------
    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: Any = None, content_type: str = JSON,
                      timeout: float = REQUEST_TIMEOUT_S) -> dict[str, Any]:
        """Send one request (retried when that is safe) and return the JSON answer."""
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(RETRYABLE),
            wait=_RetryAfterWait(multiplier=0.1, max=5.0),
            stop=stop_after_attempt(ATTEMPTS) | stop_after_delay(60),
            reraise=True,
        ):
            with attempt:
                return await self._once(method, path, params=params, body=body,
                                        content_type=content_type, timeout=timeout)
        raise AssertionError("unreachable")  # pragma: no cover - tenacity reraises

    async def _once(self, method: str, path: str, *, params: Mapping[str, str] | None,
                    body: Any, content_type: str, timeout: float) -> dict[str, Any]:
        headers = dict(self._headers)
        data: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        try:
            async with self._session.request(
                method, self.host + path, params=dict(params or {}), data=data,
                headers=headers, timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                raw = await resp.read()
                status = resp.status
                retry_after = resp.headers.get("Retry-After")
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            raise Unreachable(f"cannot reach {self.host} ({type(err).__name__}: {err})",
                              cluster=self.name) from err
        try:
            answer: Any = json.loads(raw) if raw else {}
        except ValueError:
            answer = {"message": raw[:200].decode(errors="replace")}
        if not 200 <= status < 300:
            raise error_for(status, answer if isinstance(answer, dict) else {},
                            cluster=self.name,
                            retry_after=float(retry_after) if retry_after and
                            retry_after.isdigit() else None)
        return answer if isinstance(answer, dict) else {"items": answer}

    # -- streams ------------------------------------------------------------------------
    async def stream_lines(self, path: str, *, params: Mapping[str, str],
                           read_timeout: float) -> AsyncIterator[dict[str, Any]]:
        """The JSON lines of a watch response, until the server closes it."""
        try:
            async with self._session.get(
                self.host + path, params=dict(params), headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_read=read_timeout,
                                              sock_connect=REQUEST_TIMEOUT_S),
            ) as resp:
                if resp.status != 200:
                    raw = await resp.read()
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        body = {}
                    raise error_for(resp.status, body if isinstance(body, dict) else {},
                                    cluster=self.name)
                async for line in resp.content:
                    if line.strip():
                        yield json.loads(line)
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            raise Unreachable(f"watch on {self.host} broke ({type(err).__name__}: {err})",
                              cluster=self.name) from err


async def connect(kubeconfig: Mapping[str, Any] | str | Path, *, name: str,
                  context: str | None = None) -> Connection:
    """A connection from a kubeconfig (a parsed dict, YAML text, or a file path).

    Raises ``BadKubeconfig`` with a sentence when the kubeconfig cannot be used; it
    does not contact the server (a first request will say whether it answers).
    """
    if isinstance(kubeconfig, Path):
        try:
            kubeconfig = kubeconfig.read_text()  # noqa: ASYNC240 - a small local file
        except OSError as err:
            raise BadKubeconfig(f"cannot read kubeconfig {kubeconfig}: {err.strerror}") from err
    if isinstance(kubeconfig, str):
        try:
            parsed = yaml.safe_load(kubeconfig)
        except yaml.YAMLError as err:
            raise BadKubeconfig(f"the kubeconfig is not valid YAML ({err})") from err
    else:
        parsed = kubeconfig
    if not isinstance(parsed, dict) or not parsed.get("clusters"):
        raise BadKubeconfig("the kubeconfig has no clusters")
    cfg = k8s_client.Configuration()
    try:
        await k8s_config.load_kube_config_from_dict(
            parsed, context=context, client_configuration=cfg,
            temp_file_path=tempfile.gettempdir())
    except Exception as err:  # the loader raises many types for bad input
        raise BadKubeconfig(f"the kubeconfig cannot be used: {err}") from err
    if not str(cfg.host or "").startswith(("https://", "http://")):
        raise BadKubeconfig(f"the kubeconfig's server {cfg.host!r} is not an http(s) URL")
    try:
        api = k8s_client.ApiClient(cfg)
    except (ssl.SSLError, ValueError, OSError) as err:  # bad CA or client certificate data
        reason = getattr(err, "reason", None) or err
        raise BadKubeconfig(f"its TLS certificates are not valid ({reason})") from err
    return Connection(name=name, api=api)


def default_kubeconfig_path() -> Path:
    """Where kubectl looks: $KUBECONFIG (first entry), else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG", "")
    first = env.split(os.pathsep)[0] if env else ""
    return Path(first) if first else Path.home() / ".kube" / "config"
