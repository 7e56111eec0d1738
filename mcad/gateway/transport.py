"""The one seam between mcad and the network: send a request, open a stream.

Why a seam (h11/httpx's shape): everything above it (retries, error mapping, watch
streams, the controller) is decided from status codes and bytes, so tests replace
this class with a scripted one and drive the real code through 403s, 500s, broken
streams and oversized lines without a fake API server. ``AiohttpTransport`` is the
production one: one aiohttp session per cluster, built from the kubeconfig's TLS.

Transports raise ``TransportError`` when no answer came (refused, reset, TLS, time-out)
and return every answer, whatever its status, as a ``Reply``; streams raise
``StreamRefused`` for a non-200 answer so the caller can map it like any other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP answer: status, body and the one header mcad reads (Retry-After)."""

    status: int
    body: bytes
    retry_after: str | None = None


class TransportError(Exception):
    """No answer: the connection failed, was reset, or timed out."""


class StreamRefused(Exception):
    """A stream request answered with a non-200 status."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(f"HTTP {reply.status}")
        self.reply = reply


class Transport(Protocol):
    """What the gateway needs from the network."""

    async def send(self, method: str, url: str, *, params: Mapping[str, str],
                   body: bytes | None, headers: Mapping[str, str],
                   timeout: float) -> Reply:
        """One request and its whole answer."""
        ...

    def stream(self, url: str, *, params: Mapping[str, str], headers: Mapping[str, str],
               read_timeout: float, connect_timeout: float) -> AsyncIterator[bytes]:
        """The body of a long GET (a watch), chunk by chunk, until the server ends it."""
        ...

    async def close(self) -> None:
        ...


class AiohttpTransport:
    """The production transport: an aiohttp session with the cluster's TLS settings."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    async def send(self, method: str, url: str, *, params: Mapping[str, str],
                   body: bytes | None, headers: Mapping[str, str],
                   timeout: float) -> Reply:
        try:
            async with self._session.request(
                method, url, params=dict(params), data=body, headers=dict(headers),
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                return Reply(resp.status, await resp.read(), resp.headers.get("Retry-After"))
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            raise TransportError(f"{type(err).__name__}: {err}") from err

    async def stream(self, url: str, *, params: Mapping[str, str],
                     headers: Mapping[str, str], read_timeout: float,
                     connect_timeout: float) -> AsyncIterator[bytes]:
        try:
            async with self._session.get(
                url, params=dict(params), headers=dict(headers),
                timeout=aiohttp.ClientTimeout(total=None, sock_read=read_timeout,
                                              sock_connect=connect_timeout),
            ) as resp:
                if resp.status != 200:
                    raise StreamRefused(Reply(resp.status, await resp.read()))
                async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
                    yield chunk
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            raise TransportError(f"{type(err).__name__}: {err}") from err

    async def close(self) -> None:
        await self._session.close()
