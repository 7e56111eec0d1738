"""Who is calling (``mcad.access``): the user the front proxy names, with its groups and
extra attributes as kube-apiserver encodes them; the hub's reviews asked once for many
askers and kept for a while (a refused token for less), in a bounded cache; the
request-header settings read as kube-apiserver publishes them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from multidict import CIMultiDict

from mcad.access import Caller, FrontProxy, Question, Reviews
from tests.gateway.scripted import Request, ScriptedTransport, reply
from tests.visibility.frontproxy import Authority, configmap_data

SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
TOKENS = "/apis/authentication.k8s.io/v1/tokenreviews"


def test_the_caller_is_read_from_the_front_proxys_headers() -> None:
    proxy = FrontProxy(b"", ())
    headers = CIMultiDict([("X-Remote-User", "alice"), ("X-Remote-Uid", "u-1"),
                           ("X-Remote-Group", "team-a"),
                           ("X-Remote-Group", "system:authenticated"),
                           ("X-Remote-Extra-Authentication.kubernetes.io%2fcredential-id",
                            "JTI=1"),
                           ("X-Remote-Extra-Scopes", "a"), ("X-Remote-Extra-Scopes", "b")])
    caller = proxy.caller(headers, headers.getall)
    assert caller == Caller("alice", "u-1", ("team-a", "system:authenticated"), (
        ("authentication.kubernetes.io/credential-id", ("JTI=1",)), ("scopes", ("a", "b"))))
    assert proxy.caller(CIMultiDict([("X-Remote-Group", "x")]), lambda _h: []) is None


def test_the_settings_are_read_as_kube_apiserver_publishes_them(tmp_path: Path) -> None:
    assert FrontProxy.of({}) is None  # no aggregation layer: no front proxy to trust
    authority = Authority(tmp_path, "front-proxy-ca")
    proxy = FrontProxy.of(configmap_data(authority.pem, allowed='["a", "b"]'))
    assert proxy is not None
    assert proxy.allowed_names == frozenset({"a", "b"})
    assert proxy.user_headers == ("X-Remote-User",) and len(proxy.cas) == 1


async def test_one_review_for_many_askers_then_kept() -> None:
    hub = ScriptedTransport()
    release = asyncio.Event()

    async def slow(_: Request) -> object:
        await release.wait()
        return reply(201, {"status": {"allowed": True}})

    hub.on("POST", SAR, slow)
    now = [0.0]
    reviews = Reviews(hub.connection("hub"), clock=lambda: now[0])
    alice, question = Caller("alice"), Question(verb="list", group="g", resource="r",
                                                namespace="team-a")
    askers = [asyncio.create_task(reviews.allowed(alice, question)) for _ in range(5)]
    await asyncio.sleep(0.01)
    release.set()
    assert await asyncio.gather(*askers) == [True] * 5
    assert len(hub.sent("POST", SAR)) == 1
    now[0] = 29.0
    assert await reviews.allowed(alice, question)
    assert len(hub.sent("POST", SAR)) == 1
    now[0] = 31.0  # kept 30 s: a changed RoleBinding shows within that
    assert await reviews.allowed(alice, question)
    assert len(hub.sent("POST", SAR)) == 2


async def test_a_refused_token_is_remembered_briefly_and_never_by_its_text() -> None:
    hub = ScriptedTransport()
    hub.on("POST", TOKENS, reply(201, {"status": {"authenticated": False}}))
    now = [0.0]
    reviews = Reviews(hub.connection("hub"), clock=lambda: now[0])
    assert await reviews.authenticate("typo") is None
    assert await reviews.authenticate("typo") is None
    assert len(hub.sent("POST", TOKENS)) == 1
    assert all("typo" not in str(k) for k in reviews._tokens._kept)  # a digest, not the token
    now[0] = 6.0
    assert await reviews.authenticate("typo") is None
    assert len(hub.sent("POST", TOKENS)) == 2


async def test_the_cache_is_bounded() -> None:
    hub = ScriptedTransport()
    hub.on("POST", SAR, reply(201, {"status": {"allowed": False}}))
    reviews = Reviews(hub.connection("hub"))
    reviews._answers.size = 10
    for i in range(25):
        await reviews.allowed(Caller(f"user-{i}"), Question(verb="get", path="/metrics"))
    assert len(reviews._answers._kept) == 10
