"""A scripted ``Transport``: each test says what the API server answers, request by request.

Not a fake API server: nothing is stored or validated. A test declares the answers
for the requests it expects (``on``) and the watch streams it wants to feed (``watch``),
and everything above the transport (retries, error mapping, watch streams, the
controller) runs for real on them. Requests nobody scripted are answered 404 and
recorded, so a test can also assert what was *not* sent.

    hub = ScriptedTransport()
    hub.on("GET", "/apis/coordination.k8s.io/v1/namespaces/mcad-system/leases/mcad",
           status(404))
    stream = hub.watch("/api/v1/pods")
    stream.event("ADDED", pod)           # pushed while the test runs
    conn = hub.connection("spoke")
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcad.gateway.connection import Connection
from mcad.gateway.transport import Reply, StreamRefused

Answer = Reply | Exception | Callable[["Request"], "Reply | Awaitable[Reply]"]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    params: dict[str, str]
    body: Any
    headers: dict[str, str]


def reply(status: int = 200, body: Any = None, *, retry_after: str | None = None) -> Reply:
    """An answer with a JSON body (``{}`` when None)."""
    return Reply(status, json.dumps({} if body is None else body).encode(), retry_after)


def status(code: int, reason: str = "", message: str = "") -> Reply:
    """An error answer with a metav1.Status body, as the API server sends them."""
    return reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "code": code, "reason": reason, "message": message or f"HTTP {code}"})


def listing(items: list[dict[str, Any]], version: str = "1") -> Reply:
    return reply(200, {"items": items, "metadata": {"resourceVersion": version}})


def aggregated_discovery(*resources: tuple[str, str, str, bool]) -> tuple[Reply, Reply]:
    """Answers for ``GET /api`` and ``GET /apis`` (aggregated discovery, v2) listing
    ``(apiVersion, kind, plural, namespaced)`` resources."""
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for api_version, kind, plural, namespaced in resources:
        group, _, version = api_version.rpartition("/")
        group_versions = groups.setdefault(group, {})
        group_versions.setdefault(version, []).append({
            "resource": plural, "scope": "Namespaced" if namespaced else "Cluster",
            "responseKind": {"group": group, "version": version, "kind": kind}})

    def listing_of(core: bool) -> Reply:
        return reply(200, {"kind": "APIGroupDiscoveryList",
                           "apiVersion": "apidiscovery.k8s.io/v2", "items": [
                               {"metadata": {"name": group},
                                "versions": [{"version": v, "resources": r}
                                             for v, r in versions.items()]}
                               for group, versions in groups.items() if (group == "") == core]})

    return listing_of(True), listing_of(False)


CORE_KINDS = (("v1", "Pod", "pods", True), ("v1", "Node", "nodes", False),
              ("v1", "Namespace", "namespaces", False), ("v1", "ConfigMap", "configmaps", True))


@dataclass
class Stream:
    """One watch stream to feed: events, raw bytes, a failure, or its end."""

    queue: asyncio.Queue[bytes | Exception | None] = field(default_factory=asyncio.Queue)
    opened: asyncio.Event = field(default_factory=asyncio.Event)

    def event(self, kind: str, obj: Mapping[str, Any]) -> None:
        self.raw(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

    def raw(self, data: bytes) -> None:
        self.queue.put_nowait(data)

    def fail(self, error: Exception) -> None:
        self.queue.put_nowait(error)

    def end(self) -> None:
        self.queue.put_nowait(None)


class ScriptedTransport:
    """Answers from a script; records every request."""

    def __init__(self, host: str = "https://scripted.invalid") -> None:
        self.host = host
        self.requests: list[Request] = []
        self._answers: dict[tuple[str, str], deque[Answer]] = {}
        self._streams: dict[str, deque[Stream]] = {}
        self.live: dict[str, Stream] = {}
        """The stream each path's watch reads now (to break it, or feed it)."""
        self.closed = False

    # -- scripting ----------------------------------------------------------------------
    def on(self, method: str, path: str, *answers: Answer) -> None:
        """Answer ``method path`` with ``answers`` in order; the last one repeats."""
        self._answers.setdefault((method, path), deque()).extend(answers)

    def only(self, method: str, path: str, *answers: Answer) -> None:
        """Answer ``method path`` with ``answers`` instead of whatever was scripted."""
        self._answers[(method, path)] = deque(answers)

    def answers(self, method: str, path: str) -> list[Answer]:
        return list(self._answers.get((method, path), ()))

    def first(self, method: str, path: str, *answers: Answer) -> None:
        """Answer ``method path`` with ``answers`` before whatever was scripted for it."""
        queued = self._answers.setdefault((method, path), deque())
        queued.extendleft(reversed(answers))

    def watch(self, path: str) -> Stream:
        """The next watch of ``path`` reads this stream (streams queue up in order); a
        watch with none scripted gets a quiet one, found in ``live``."""
        stream = Stream()
        self._streams.setdefault(path, deque()).append(stream)
        return stream

    def sent(self, method: str, path: str | None = None) -> list[Request]:
        return [r for r in self.requests
                if r.method == method and (path is None or r.path == path)]

    def connection(self, name: str = "scripted", **options: Any) -> Connection:
        return Connection(name=name, host=self.host, transport=self, **options)

    # -- the Transport protocol ----------------------------------------------------------
    async def send(self, method: str, url: str, *, params: Mapping[str, str],
                   body: bytes | None, headers: Mapping[str, str], timeout: float) -> Reply:
        path = url.removeprefix(self.host)
        request = Request(method, path, dict(params),
                          json.loads(body) if body else None, dict(headers))
        self.requests.append(request)
        await asyncio.sleep(0)
        answers = self._answers.get((method, path))
        if not answers:
            return status(404, "NotFound", f"nothing scripted for {method} {path}")
        answer = answers[0] if len(answers) == 1 else answers.popleft()
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            got = answer(request)
            return await got if inspect.isawaitable(got) else got
        return answer

    async def stream(self, url: str, *, params: Mapping[str, str],
                     headers: Mapping[str, str], read_timeout: float,
                     connect_timeout: float) -> AsyncIterator[bytes]:
        path = url.removeprefix(self.host)
        self.requests.append(Request("WATCH", path, dict(params), None, dict(headers)))
        queued = self._streams.get(path)
        # Nothing (more) scripted: a stream that stays open and says nothing.
        stream = queued.popleft() if queued else Stream()
        self.live[path] = stream
        stream.opened.set()
        while True:
            item = await stream.queue.get()
            if item is None:
                return
            if isinstance(item, Exception):
                raise item
            yield item

    async def close(self) -> None:
        self.closed = True


def refused(code: int, reason: str = "", message: str = "") -> StreamRefused:
    """A watch answered with an error status."""
    return StreamRefused(status(code, reason, message))
