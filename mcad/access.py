"""Who is calling, and what they may do: the questions every door of mcad asks the hub.

Why one module: mcad answers people on two doors, and neither may decide on its own
who is who. ``/metrics`` takes a bearer token, which the hub's TokenReview turns into
a user (controller-runtime's ``WithAuthenticationAndAuthorization`` does the same); the
visibility API (``mcad.visibility``) gets the user from the API server's front proxy.
Either way the hub's SubjectAccessReview says whether that user may do a thing (``get``
on the non-resource URL ``/metrics``; ``list`` AppWrapper rows in a namespace), so RBAC
stays the one place where rights are granted.

Answers are cached for ``ttl`` seconds (a refused token for less), keyed by a digest
of the token, never the token itself; concurrent askers of one question share one
review; the cache is bounded. A hub that does not answer is an error
(``ReviewUnavailable``), never a yes: nothing is granted that the hub did not grant.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import unquote

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mcad.gateway import refs, verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import ApiError

K = TypeVar("K")
V = TypeVar("V")
TTL_S = 30.0
"""How long an answer is kept (RBAC changes show within this)."""
REFUSED_TTL_S = 5.0
"""How long a refused token is remembered (a typo is not punished for long)."""
CACHE_SIZE = 4096
REVIEW_TIMEOUT_S = 5.0


class ReviewUnavailable(Exception):
    """The hub could not be asked who the caller is or what they may do."""


@dataclass(frozen=True, slots=True)
class Caller:
    """A user as the hub authenticated them."""

    user: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Extra attributes (``authentication.kubernetes.io/credential-id`` and the like),
    sorted, as a SubjectAccessReview must repeat them."""

    @classmethod
    def of(cls, user: Mapping[str, Any]) -> Caller:
        """From a TokenReview's ``status.user`` (or the same shape)."""
        extra = user.get("extra") or {}
        return cls(str(user.get("username") or ""), str(user.get("uid") or ""),
                   tuple(str(g) for g in user.get("groups") or ()),
                   tuple(sorted((str(k), tuple(str(v) for v in vs or ()))
                                for k, vs in extra.items())))

    def describe(self) -> str:
        return self.user or "an anonymous caller"


@dataclass(frozen=True, slots=True)
class Question:
    """What a caller wants to do: a verb on a resource (in a namespace, or cluster-wide
    with ``namespace=""``), or on a non-resource path."""

    verb: str
    group: str = ""
    resource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    def attributes(self) -> dict[str, Any]:
        if self.path:
            return {"nonResourceAttributes": {"path": self.path, "verb": self.verb}}
        attrs: dict[str, Any] = {"verb": self.verb, "group": self.group,
                                 "resource": self.resource}
        if self.namespace:
            attrs["namespace"] = self.namespace
        if self.name:
            attrs["name"] = self.name
        return {"resourceAttributes": attrs}


@dataclass
class _Cache(Generic[K, V]):
    """Answers with an expiry, least recently used first out; one review per question
    in flight, whoever else asks meanwhile waits for it."""

    clock: Callable[[], float]
    size: int = CACHE_SIZE
    _kept: OrderedDict[K, tuple[float, V]] = field(default_factory=OrderedDict)
    _asking: dict[K, asyncio.Future[V]] = field(default_factory=dict)

    async def get(self, key: K, ask: Callable[[], Awaitable[tuple[V, float]]]) -> V:
        kept = self._kept.get(key)
        if kept is not None and kept[0] > self.clock():
            self._kept.move_to_end(key)
            return kept[1]
        pending = self._asking.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._asking[key] = future
        try:
            value, ttl = await ask()
        except BaseException as err:
            future.set_exception(err)
            future.exception()  # (retrieved: nobody else may be waiting)
            raise
        finally:
            del self._asking[key]
        future.set_result(value)
        self._kept[key] = (self.clock() + ttl, value)
        self._kept.move_to_end(key)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)
        return value


class Reviews:
    """TokenReviews and SubjectAccessReviews on the hub, cached (see the module)."""

    def __init__(self, hub: Connection, *, ttl: float = TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.hub = hub
        self.ttl = ttl
        self._tokens: _Cache[str, Caller | None] = _Cache(clock)
        self._answers: _Cache[tuple[Caller, Question], bool] = _Cache(clock)

    async def authenticate(self, token: str) -> Caller | None:
        """The user a bearer token belongs to; None when the hub does not know it."""
        digest = hashlib.sha256(token.encode()).hexdigest()

        async def ask() -> tuple[Caller | None, float]:
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {"token": token}}
            answer = await self._create(refs.TOKENREVIEWS, body, "who the token belongs to")
            status = answer.get("status") or {}
            if not status.get("authenticated"):
                return None, min(self.ttl, REFUSED_TTL_S)
            return Caller.of(status.get("user") or {}), self.ttl

        return await self._tokens.get(digest, ask)

    async def allowed(self, caller: Caller, question: Question) -> bool:
        """Whether RBAC (the hub's authorizers) lets ``caller`` do ``question``."""
        async def ask() -> tuple[bool, float]:
            spec: dict[str, Any] = {"user": caller.user, "groups": list(caller.groups),
                                    **question.attributes()}
            if caller.uid:
                spec["uid"] = caller.uid
            if caller.extra:
                spec["extra"] = {k: list(v) for k, v in caller.extra}
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                    "spec": spec}
            answer = await self._create(refs.SUBJECTACCESSREVIEWS, body,
                                        f"whether {caller.describe()} may {question.verb}")
            return bool((answer.get("status") or {}).get("allowed")), self.ttl

        return await self._answers.get((caller, question), ask)

    async def _create(self, ref: refs.ResourceRef, body: dict[str, Any], what: str
                      ) -> dict[str, Any]:
        try:
            return await verbs.create(self.hub, ref, body, fenced=False,
                                      timeout=REVIEW_TIMEOUT_S, attempts=2)
        except ApiError as err:
            raise ReviewUnavailable(f"the hub could not say {what} ({err.message})") from err


# -- the API server's front proxy -----------------------------------------------------------

FRONT_PROXY_CONFIGMAP = ("kube-system", "extension-apiserver-authentication")
"""Where kube-apiserver publishes its request-header settings for aggregated servers."""


@dataclass(frozen=True)
class FrontProxy:
    """How an aggregated API server recognises the API server's proxied requests: the
    client certificate it presents (signed by ``cas``, with a common name among
    ``allowed_names`` when that list is not empty) and the headers that carry the user
    it authenticated. Read from ``kube-system/extension-apiserver-authentication``."""

    ca_pem: bytes
    cas: tuple[x509.Certificate, ...]
    """The request-header CAs."""
    allowed_names: frozenset[str] = frozenset()
    user_headers: tuple[str, ...] = ("X-Remote-User",)
    uid_headers: tuple[str, ...] = ("X-Remote-Uid",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)

    @classmethod
    def of(cls, data: Mapping[str, str]) -> FrontProxy | None:
        """From the ConfigMap's data; None when the API server publishes no request-header
        CA (it was started without the aggregation layer's flags)."""
        pem = (data.get("requestheader-client-ca-file") or "").encode()
        if not pem.strip():
            return None
        cas = tuple(x509.load_pem_x509_certificates(pem))

        def names(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            raw = data.get(key)
            if not raw:
                return default
            try:
                value = json.loads(raw)
            except ValueError:
                return default
            return tuple(str(v) for v in value) if isinstance(value, list) else default

        return cls(pem, cas, frozenset(names("requestheader-allowed-names", ())),
                   names("requestheader-username-headers", cls.user_headers),
                   names("requestheader-uid-headers", cls.uid_headers),
                   names("requestheader-group-headers", cls.group_headers),
                   names("requestheader-extra-headers-prefix", cls.extra_prefixes))

    def verify(self, peer_der: bytes | None, *, now: datetime) -> str | None:
        """None when ``peer_der`` is the front proxy's client certificate; else why not."""
        if not peer_der:
            return "no client certificate: mcad answers only the API server's front proxy"
        try:
            cert = x509.load_der_x509_certificate(peer_der)
        except ValueError:
            return "the client certificate cannot be read"
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            return "the client certificate is not valid now"
        for ca in self.cas:
            try:
                cert.verify_directly_issued_by(ca)
                break
            except (ValueError, TypeError, InvalidSignature):
                continue
        else:
            return "the client certificate is not signed by the hub's request-header CA"
        try:
            usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
            if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
                return "the client certificate is not for client authentication"
        except x509.ExtensionNotFound:
            pass
        names = {str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)}
        if self.allowed_names and not names & self.allowed_names:
            return (f"the client certificate's name {', '.join(sorted(names)) or '(none)'} is "
                    "not among the hub's requestheader-allowed-names")
        return None

    def caller(self, headers: Mapping[str, str], all_of: Callable[[str], list[str]]
               ) -> Caller | None:
        """The user the front proxy authenticated, from its headers (``all_of`` gives
        every value of a header); None when it names none."""
        user = next((headers[h] for h in self.user_headers if headers.get(h)), "")
        if not user:
            return None
        uid = next((headers[h] for h in self.uid_headers if headers.get(h)), "")
        groups = tuple(g for h in self.group_headers for g in all_of(h))
        extra: dict[str, list[str]] = {}
        for name in headers:
            for prefix in self.extra_prefixes:
                if name.lower().startswith(prefix.lower()):
                    key = unquote(name[len(prefix):]).lower()
                    extra.setdefault(key, []).extend(all_of(name))
        return Caller(user, uid, groups,
                      tuple(sorted((k, tuple(v)) for k, v in extra.items())))


async def load_front_proxy(hub: Connection) -> FrontProxy | None:
    """The hub's request-header settings; None when it publishes none (or they cannot
    be read: the caller says so and tries again)."""
    namespace, name = FRONT_PROXY_CONFIGMAP
    answer = await verbs.get(hub, refs.CONFIGMAPS, name, namespace=namespace, attempts=1)
    return FrontProxy.of(answer.get("data") or {})
