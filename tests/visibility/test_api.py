"""The visibility API on the real TLS server (``WebhookServer`` with the API mounted),
with a scripted hub: only the API server's front proxy is answered (its client
certificate, from the hub's request-header CA, with an allowed name, naming a user);
what a user is answered is what RBAC lets them list (SubjectAccessReviews, scripted
from a table of rights); a dry run of nested aliases is refused with a sentence; the
page runs under a Content-Security-Policy without inline script; the admission webhook
beside it still takes callers without a certificate; a standby says who leads."""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from mcad.access import Reviews
from mcad.config import RunConfig
from mcad.core.cycle.snapshot import CycleResult, Snapshot
from mcad.visibility import api
from mcad.visibility.scope import OTHERS, Scopes
from mcad.webhook.certmanager import CertManager, Registration
from mcad.webhook.reviewer import PATH
from mcad.webhook.server import SECRET, WebhookServer
from tests.gateway.scripted import Request, ScriptedTransport, reply, status
from tests.visibility.frontproxy import Authority, Issued, configmap_data
from tests.visibility.teams import two_teams
from tests.visibility.test_dryrun import LAUGHS

BASE = "/apis/visibility.codeflare.dev/v1alpha1"
SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
RIGHTS = {  # (user, verb, resource, namespace) RBAC grants; namespace "" is cluster-wide
    ("team-b", "list", "pendingappwrappers", "team-b"),
    ("admin", "list", "pendingappwrappers", ""),
    ("admin", "get", "spokeclusters", ""),
}


class Hub:
    """The webhook Secret, the request-header ConfigMap, and SubjectAccessReviews
    answered from ``RIGHTS``."""

    def __init__(self, front_proxy_ca: bytes) -> None:
        self.transport = ScriptedTransport()
        self.secret: dict[str, Any] | None = None
        base = "/api/v1/namespaces/mcad-system/secrets"
        self.transport.on("GET", f"{base}/{SECRET}", lambda _r: reply(200, self.secret)
                          if self.secret else status(404, "NotFound"))
        self.transport.on("POST", base, self._store)
        self.transport.on("GET", CONFIGMAP, reply(200, {"data": configmap_data(front_proxy_ca)}))
        self.transport.on("POST", SAR, self._review)

    def _store(self, request: Request) -> Any:
        self.secret = request.body
        return reply(200, self.secret)

    def _review(self, request: Request) -> Any:
        spec = request.body["spec"]
        attrs = spec["resourceAttributes"]
        right = (spec["user"], attrs["verb"], attrs["resource"], attrs.get("namespace", ""))
        return reply(201, {"status": {"allowed": right in RIGHTS}})


@dataclass
class Served:
    hub: Hub
    url: str
    trust: ssl.SSLContext
    ca_pem: str
    authority: Authority
    tmp: Path
    cycle: list[tuple[Snapshot, CycleResult] | str]

    def context(self, issued: Issued | None) -> ssl.SSLContext:
        """Trusting mcad's CA, presenting ``issued`` as the client certificate."""
        context = ssl.create_default_context(cadata=self.ca_pem)
        if issued is not None:
            context.load_cert_chain(issued.cert, issued.key)
        return context

    async def ask(self, path: str, *, user: str | None = "team-b",
                  issued: Issued | bool | None = True, method: str = "GET",
                  body: bytes | None = None, content_type: str = "application/json",
                  ) -> tuple[int, dict[str, str], Any]:
        cert = self.authority.client("front-proxy-client", "proxy") if issued is True \
            else (issued or None)
        headers = {"Content-Type": content_type}
        if user:
            headers |= {"X-Remote-User": user, "X-Remote-Group": "system:authenticated"}
        async with aiohttp.ClientSession() as session, session.request(
                method, self.url + path, data=body, headers=headers,
                ssl=self.context(cert)) as resp:
            text = await resp.text()
            answer: Any = await resp.json() if resp.content_type == "application/json" \
                else text
            return resp.status, dict(resp.headers), answer


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    authority = Authority(tmp_path, "front-proxy-ca")
    hub = Hub(authority.pem)
    conn = hub.transport.connection("hub")
    bundle = await CertManager(hub=conn, namespace="mcad-system",
                               registration=Registration(extra_hosts=("127.0.0.1",))).ensure()
    cycle: list[tuple[Snapshot, CycleResult] | str] = [two_teams()]
    server: list[WebhookServer] = []
    app = api.application(last=lambda: cycle[0], plan=lambda: None, config=RunConfig(),
                          scopes=Scopes(Reviews(conn)),
                          front_proxy=lambda: server[0].front_proxy)
    server.append(WebhookServer(hub=conn, config=RunConfig(), address="127.0.0.1:0",
                                mounted=[("/apis", app)]))
    task = asyncio.create_task(server[0].run())
    await asyncio.wait_for(server[0].serving.wait(), 10)
    assert server[0].front_proxy is not None
    trust = ssl.create_default_context(cadata=bundle.ca_cert.decode())
    yield Served(hub, f"https://127.0.0.1:{server[0].port}", trust, bundle.ca_cert.decode(),
                 authority, tmp_path, cycle)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def names(listed: dict[str, Any]) -> list[str]:
    return [f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in listed["items"]]


async def test_only_the_front_proxy_is_answered(served: Served) -> None:
    code, _, answer = await served.ask(f"{BASE}/pendingappwrappers", issued=False)
    assert code == 401 and "no client certificate" in answer["message"]
    stranger = Authority(served.tmp, "front-proxy-ca")  # same name, another key
    with pytest.raises(aiohttp.ClientError):  # refused in the TLS handshake itself
        await served.ask(f"{BASE}/pendingappwrappers",
                         issued=stranger.client("front-proxy-client", "stranger"))
    code, _, answer = await served.ask(f"{BASE}/pendingappwrappers",
                                       issued=served.authority.client("mallory", "mallory"))
    assert code == 401 and "requestheader-allowed-names" in answer["message"]
    code, _, answer = await served.ask(f"{BASE}/pendingappwrappers", user=None)
    assert code == 401 and "named no user" in answer["message"]


async def test_a_tenant_is_answered_with_their_namespace_only(served: Served) -> None:
    code, _, listed = await served.ask(f"{BASE}/namespaces/team-b/pendingappwrappers")
    assert code == 200 and listed["kind"] == "PendingAppWrapperList"
    assert names(listed) == ["team-b/small"]
    assert f"held for {OTHERS}" in listed["items"][0]["message"]
    code, _, page = await served.ask(f"{BASE}/views/state")
    assert code == 200
    assert [f"{q['metadata']['namespace']}/{q['metadata']['name']}" for q in page["queue"]] \
        == ["team-b/small"]
    assert page["scope"] == {"everything": False, "namespaces": ["team-b"]}
    assert page["clusters"][0]["nodes"][0]["name"] == "node 1"
    code, _, told = await served.ask(f"{BASE}/namespaces/team-b/explanations/small")
    assert code == 200 and told["kind"] == "Explanation" and "team-a" not in str(told)
    code, _, told = await served.ask(f"{BASE}/namespaces/team-b/explanations/gone")
    assert code == 404 and told["kind"] == "Status" and "is not queued" in told["message"]


async def test_an_administrator_sees_every_namespace_and_the_nodes(served: Served) -> None:
    code, _, page = await served.ask(f"{BASE}/views/state", user="admin")
    assert code == 200 and page["scope"]["everything"] is True
    assert [q["metadata"]["name"] for q in page["queue"]] == ["big", "small"]
    assert page["clusters"][0]["nodes"][0]["name"] == "spoke-1-node-1"
    code, _, listed = await served.ask(f"{BASE}/namespaces/team-b/pendingappwrappers",
                                       user="admin")
    assert "held for team-a/big" in listed["items"][0]["message"]


async def test_someone_without_a_role_sees_an_empty_page(served: Served) -> None:
    code, _, page = await served.ask(f"{BASE}/views/state", user="system:serviceaccount:x:y")
    assert code == 200 and page["queue"] == [] and page["running"] == []
    assert page["quota"] == []


async def test_a_dry_run_of_nested_aliases_is_a_sentence_and_a_good_one_is_answered(
        served: Served) -> None:
    path = f"{BASE}/namespaces/team-b/explanations"
    code, _, refused = await served.ask(path, method="POST", body=LAUGHS.encode(),
                                        content_type="application/yaml")
    assert code == 400 and "anchors or aliases" in refused["message"]
    code, _, refused = await served.ask(path, method="POST", body=b"{}",
                                        content_type="text/plain")
    assert code == 415
    wire = ('{"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper", '
            '"metadata": {"name": "try"}, "spec": {"resources": {"GenericItems": [{'
            '"generictemplate": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},'
            '"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests":'
            ' {"nvidia.com/gpu": "1"}}}]}}}]}}}')
    code, _, told = await served.ask(path, method="POST", body=wire.encode())
    assert code == 201 and told["dryRun"] is True and told["key"] == "team-b/try"
    code, _, refused = await served.ask(path, method="POST", body=b"x" * (2 * 1024 * 1024))
    assert code == 413


async def test_the_page_runs_no_inline_script_and_cannot_be_framed(served: Served) -> None:
    code, headers, page = await served.ask(f"{BASE}/views/page")
    assert code == 200
    policy = headers["Content-Security-Policy"]
    assert "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
    assert "script-src 'self'" in policy
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert re.search(r"<script(?![^>]*\bsrc=)", page) is None  # no inline script
    assert "style=" not in page and "<style" not in page
    code, headers, script = await served.ask(f"{BASE}/views/script")
    assert code == 200 and headers["Content-Type"].startswith("text/javascript")
    assert "style=" not in script  # sizes go through the CSSOM, which the policy allows


async def test_discovery_for_the_aggregator(served: Served) -> None:
    code, _, group = await served.ask("/apis/visibility.codeflare.dev",
                                      user="system:kube-aggregator")
    assert code == 200 and group["kind"] == "APIGroup"
    code, _, listed = await served.ask(BASE, user="system:kube-aggregator")
    assert code == 200 and {r["name"] for r in listed["resources"]} == {
        "pendingappwrappers", "explanations", "views"}


async def test_a_standby_says_who_leads(served: Served) -> None:
    served.cycle[0] = "this replica is on standby; the leader is mcad-0_1234"
    code, _, answer = await served.ask(f"{BASE}/namespaces/team-b/pendingappwrappers")
    assert code == 503 and answer["message"].endswith("the leader is mcad-0_1234")


async def test_the_webhook_beside_it_takes_callers_without_a_certificate(
        served: Served) -> None:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "r-1", "operation": "DELETE", "namespace": "team-a",
                          "userInfo": {"username": "alice"}, "object": None}}
    async with aiohttp.ClientSession() as session, session.post(
            served.url + PATH, json=review, ssl=served.trust) as resp:
        assert resp.status == 200
        assert (await resp.json())["response"]["uid"] == "r-1"

