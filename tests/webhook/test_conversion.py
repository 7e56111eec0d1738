"""The conversion webhook: a ConversionReview answered with every AppWrapper converted (a
malformed one with a Failure naming what is wrong), served over TLS by any replica (a
standby's server converts as the leader's does: nothing of it needs the controller),
bounded in size; and the leader's CertManager points the CRD's conversion at it (URL mode:
the webhook URL with /convert; Service mode: the Service) and keeps its caBundle."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from mcad.api import appwrapper, appwrapper_v1beta2
from mcad.api.conversion import CONVERSION_SERVICE_PORT, CONVERT_PATH, to_v1beta2
from mcad.config import RunConfig
from mcad.gateway.errors import Conflict
from mcad.webhook import conversion
from mcad.webhook.certmanager import APPWRAPPERS_CRD, CertManager, Registration, configuration
from mcad.webhook.review import MATCH_CONDITIONS, plan_review
from mcad.webhook.server import WebhookServer
from tests.gateway.scripted import Request, ScriptedTransport, reply

CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{APPWRAPPERS_CRD}"
SECRETS = "/api/v1/namespaces/mcad-system/secrets"
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
       "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
STORED = {"apiVersion": appwrapper.API_VERSION, "kind": "AppWrapper",
          "metadata": {"name": "a", "namespace": "team-a"},
          "spec": {"resources": {"GenericItems": [{"generictemplate": JOB}]}},
          "status": {"state": "Pending", "conditions": [
              {"type": "Queued", "status": "True", "reason": "QuotaExceeded", "message": "m"}]}}


def review(objects: list[Any], to: str = appwrapper_v1beta2.API_VERSION) -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "c-1", "desiredAPIVersion": to, "objects": objects}}


def answer(body: bytes) -> dict[str, Any]:
    response: dict[str, Any] = json.loads(body)["response"]
    return response


def test_every_object_is_converted_in_order() -> None:
    second = {**STORED, "metadata": {"name": "b", "namespace": "team-a"}}
    got = answer(conversion.review(json.dumps(review([STORED, second])).encode()))
    assert got["uid"] == "c-1" and got["result"] == {"status": "Success"}
    assert got["convertedObjects"] == [to_v1beta2(STORED), to_v1beta2(second)]
    assert got["convertedObjects"][0]["status"]["phase"] == "Suspended"


@pytest.mark.parametrize(("body", "says"), [
    (b"{", "not JSON"),
    (b"[]", "not a ConversionReview"),
    (json.dumps({"request": {"uid": "c-1"}}).encode(), "no desiredAPIVersion"),
    (json.dumps(review([1])).encode(), "objects[0] is not an object"),
    (json.dumps(review([STORED], to="workload.codeflare.dev/v2")).encode(),
     "AppWrapper team-a/a: cannot convert to 'workload.codeflare.dev/v2'"),
])
def test_what_cannot_be_converted_is_a_failure_that_says_why(body: bytes, says: str) -> None:
    got = answer(conversion.review(body))
    assert got["result"]["status"] == "Failure" and says in got["result"]["message"]
    assert "convertedObjects" not in got


class Hub:
    """The webhook Secret and the AppWrapper CRD, as a scripted hub holds them."""

    def __init__(self, crd: dict[str, Any] | None) -> None:
        self.transport = ScriptedTransport()
        self.secret: dict[str, Any] | None = None
        self.crd = crd
        self.transport.on("GET", f"{SECRETS}/mcad-webhook-tls", self._secret)
        self.transport.on("POST", SECRETS, self._store)
        self.transport.on("GET", CRD_PATH, lambda _r: reply(200, self.crd) if self.crd
                          else reply(404, {"kind": "Status", "reason": "NotFound"}))
        self.transport.on("PUT", CRD_PATH, self._replace)
        for kind in ("validating", "mutating"):
            webhooks = f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations"
            self.transport.on("GET", f"{webhooks}/mcad",
                              reply(404, {"kind": "Status", "reason": "NotFound"}))
            self.transport.on("POST", webhooks, reply(201, {}))

    def _secret(self, _request: Request) -> Any:
        return reply(200, self.secret) if self.secret else \
            reply(404, {"kind": "Status", "reason": "NotFound"})

    def _store(self, request: Request) -> Any:
        self.secret = request.body
        return reply(201, self.secret)

    def _replace(self, request: Request) -> Any:
        self.crd = request.body
        return reply(200, self.crd)


def manifests_crd() -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": APPWRAPPERS_CRD, "resourceVersion": "7"},
            "spec": {"group": "workload.codeflare.dev", "conversion": {
                "strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                                                   "clientConfig": {"service": {
                                                       "namespace": "mcad-system",
                                                       "name": "mcad-webhook",
                                                       "path": CONVERT_PATH,
                                                       "port": CONVERSION_SERVICE_PORT}}}}}}


async def test_url_mode_points_the_crd_at_the_webhook_urls_convert() -> None:
    hub = Hub(manifests_crd())
    registration = Registration(url="https://10.0.0.5:9443/prefix/validate-appwrapper")
    bundle = await CertManager(hub=hub.transport.connection("hub"), namespace="mcad-system",
                               registration=registration).ensure()
    assert hub.crd is not None
    client = hub.crd["spec"]["conversion"]["webhook"]["clientConfig"]
    assert client == {"url": "https://10.0.0.5:9443/prefix/convert",
                      "caBundle": base64.b64encode(bundle.ca_cert).decode()}
    assert hub.crd["metadata"]["resourceVersion"] == "7"  # conditional on what was read
    puts = len(hub.transport.sent("PUT", CRD_PATH))
    await CertManager(hub=hub.transport.connection("hub"), namespace="mcad-system",
                      registration=registration).ensure()
    assert len(hub.transport.sent("PUT", CRD_PATH)) == puts  # current: not written again


async def test_service_mode_writes_the_services_ca_bundle() -> None:
    hub = Hub(manifests_crd())
    registration = Registration(service=("mcad-system", "mcad-webhook"))
    bundle = await CertManager(hub=hub.transport.connection("hub"), namespace="mcad-system",
                               registration=registration).ensure()
    assert hub.crd is not None
    assert hub.crd["spec"]["conversion"]["webhook"]["clientConfig"] == {
        "service": {"namespace": "mcad-system", "name": "mcad-webhook", "path": CONVERT_PATH,
                    "port": 443},
        "caBundle": base64.b64encode(bundle.ca_cert).decode()}


async def test_a_hub_without_the_crd_is_told_so_and_nothing_breaks(
        caplog: pytest.LogCaptureFixture) -> None:
    hub = Hub(None)
    await CertManager(hub=hub.transport.connection("hub"), namespace="mcad-system",
                      registration=Registration(url="https://127.0.0.1:1")).ensure()
    assert "does not exist; apply the CRDs" in caplog.text


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, ssl.SSLContext]]:
    """A replica's TLS server with no controller behind it (a standby's)."""
    hub = Hub(manifests_crd())
    conn = hub.transport.connection("hub")
    bundle = await CertManager(hub=conn, namespace="mcad-system",
                               registration=Registration(url="https://127.0.0.1:1")).ensure()
    server = WebhookServer(hub=conn, config=RunConfig(), address="127.0.0.1:0")
    task = asyncio.create_task(server.run())
    await asyncio.wait_for(server.serving.wait(), 10)
    yield (f"https://127.0.0.1:{server.port}{CONVERT_PATH}",
           ssl.create_default_context(cadata=bundle.ca_cert.decode()))
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_any_replicas_server_converts_over_tls(
        served: tuple[str, ssl.SSLContext]) -> None:
    url, trust = served
    v1beta2 = to_v1beta2(STORED)
    async with aiohttp.ClientSession() as session, session.post(
            url, json=review([v1beta2], to=appwrapper.API_VERSION), ssl=trust) as resp:
        assert resp.status == 200
        got = (await resp.json())["response"]
    assert got["convertedObjects"] == [STORED]


async def test_a_review_larger_than_the_bound_is_refused(
        served: tuple[str, ssl.SSLContext], monkeypatch: pytest.MonkeyPatch) -> None:
    url, trust = served
    monkeypatch.setattr(conversion, "MAX_BODY", 1000)
    big = review([STORED] * 20)
    async with aiohttp.ClientSession() as session, session.post(
            url, json=big, ssl=trust) as resp:
        assert resp.status == 413


async def test_url_mode_brings_an_older_registration_to_both_versions() -> None:
    """An mcad from before v1beta2 registered its admission webhook for v1beta1 only: a
    v1beta2 AppWrapper would be admitted unchecked. The leader replaces the rules."""
    hub = Hub(manifests_crd())
    webhooks = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    registration = Registration(url="https://127.0.0.1:1/validate-appwrapper")
    manager = CertManager(hub=hub.transport.connection("hub"), namespace="mcad-system",
                          registration=registration)
    bundle = await manager.ensure()
    old = configuration(registration, bundle.ca_cert)
    old["webhooks"][0]["rules"][0]["apiVersions"] = ["v1beta1"]
    old["metadata"]["resourceVersion"] = "3"
    hub.transport.only("GET", f"{webhooks}/mcad", reply(200, old))
    hub.transport.on("PUT", f"{webhooks}/mcad", reply(200, {}))
    await manager.ensure()
    (put,) = hub.transport.sent("PUT", f"{webhooks}/mcad")
    assert put.body["webhooks"][0]["rules"][0]["apiVersions"] == ["v1beta1", "v1beta2"]
    assert put.body["webhooks"][0]["matchConditions"] == MATCH_CONDITIONS


def test_the_api_server_is_told_the_reviews_rule_in_both_registrations() -> None:
    """mcad's own configuration (URL mode) and the manifests' (Service mode) send the
    webhook only what it could refuse (``MATCH_CONDITIONS``): one rule, three places."""
    ours = configuration(Registration(url="https://127.0.0.1:1/validate-appwrapper"), b"ca")
    assert ours["webhooks"][0]["matchConditions"] == MATCH_CONDITIONS
    manifests = Path(__file__).resolve().parents[2] / "manifests/base/webhook.yaml"
    (theirs,) = [d for d in yaml.safe_load_all(manifests.read_text())
                 if d and d["kind"] == "ValidatingWebhookConfiguration"]
    assert theirs["webhooks"][0]["matchConditions"] == MATCH_CONDITIONS
    expression = MATCH_CONDITIONS[0]["expression"]
    assert "request.operation != 'UPDATE'" in expression
    assert "object.spec" in expression and "workload.codeflare.dev/v1beta2" in expression


@pytest.mark.parametrize(("change", "reviewed"), [
    ({"metadata": {"finalizers": ["workload.codeflare.dev/finalizer"]}}, False),
    ({"metadata": {"labels": {"team": "a"}}}, False),
    ({"spec": {"priority": 5}}, True),
    ({"metadata": {"annotations": {"workload.codeflare.dev/v1beta2":
                                   '{"managedBy": "someone-else"}'}}}, True),
])
def test_what_the_api_server_skips_is_what_the_review_would_allow(
        change: dict[str, Any], reviewed: bool) -> None:
    """The conditions' rule is ``plan_review``'s: an update they skip is one the review
    allows without a check; one they send can be refused (here, a frozen managedBy)."""
    old = copy.deepcopy(STORED)
    new: dict[str, Any] = copy.deepcopy(STORED)
    for part, fields in change.items():
        new.setdefault(part, {}).update(fields)
    plan = plan_review({"request": {"uid": "u", "operation": "UPDATE", "namespace": "team-a",
                                    "object": new, "oldObject": old}}, config=RunConfig())
    checked = bool(plan.problems or plan.checks)
    assert checked is reviewed


@pytest.mark.looptime
async def test_the_registration_counts_as_done_only_after_a_whole_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``registered`` (what the leader's /readyz waits for) turns true after the first
    ``ensure`` that got through, not after a pass a Conflict cut short."""
    hub = Hub(manifests_crd())
    manager = CertManager(hub=hub.transport.connection("hub"), namespace="mcad-system",
                          registration=Registration(url="https://10.0.0.5:9443/validate"))
    passes: list[str] = []

    async def ensure() -> None:
        passes.append("conflict" if not passes else "done")
        if len(passes) == 1:
            raise Conflict("the CRD changed meanwhile", cluster="hub")

    monkeypatch.setattr(manager, "ensure", ensure)
    task = asyncio.create_task(manager.run())
    await asyncio.sleep(0.5)
    assert (passes, manager.registered) == (["conflict"], False)
    await asyncio.sleep(1)
    assert (passes, manager.registered) == (["conflict", "done"], True)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
