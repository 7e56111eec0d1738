"""mcad's finalizer put on at creation by the mutating webhook
(``mcad.webhook.review.with_finalizer``): why, in its docstring. What must hold: every
create mcad will run gets exactly one finalizer, added in a patch the API server can
apply; nothing else is patched or refused; an AppWrapper another controller manages is
left without it, by the same rule the controller reads the stored object with; both
servers answer it; and the API server is pointed at it, in URL mode and in the
manifests, for creates only, never failing a create."""

from __future__ import annotations

import base64
import copy
import json
import logging
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from mcad.api.appwrapper import FINALIZER
from mcad.api.conversion import MCAD_CONTROLLER, V1BETA1, V1BETA2, V1BETA2_KEPT, convert, kept_facts
from mcad.webhook.certmanager import CertManager, Registration, mutating_configuration
from mcad.webhook.review import NOT_A_REVIEW, mutation, parsed, with_finalizer
from mcad.webhook.reviewer import MUTATE_PATH
from mcad.webhook.server import WebhookServer
from tests.gateway.scripted import reply
from tests.webhook.test_conversion import Hub, manifests_crd
from tests.webhook.test_conversion_process import listening
from tests.webhook.test_webhook import JOB, admission, appwrapper, post

REPO = Path(__file__).resolve().parents[2]


def patched(obj: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """``obj`` after the answer's JSONPatch, applied as the API server applies one (the
    two ``add`` forms the webhook uses)."""
    out = copy.deepcopy(obj)
    if "patch" not in answer:
        return out
    assert answer["patchType"] == "JSONPatch"
    for op in json.loads(base64.b64decode(answer["patch"])):
        assert op["op"] == "add"
        meta = out.setdefault("metadata", {})
        if op["path"] == "/metadata/finalizers":
            assert "finalizers" not in meta  # add on a member that exists would replace it
            meta["finalizers"] = op["value"]
        else:
            assert op["path"] == "/metadata/finalizers/-"
            meta["finalizers"].append(op["value"])
    return out


def v1beta2(managed_by: str | None) -> dict[str, Any]:
    obj = convert(appwrapper(JOB), V1BETA2)
    if managed_by is not None:
        obj["spec"]["managedBy"] = managed_by
    return obj


def test_a_create_gets_the_finalizer_and_is_allowed() -> None:
    answer = with_finalizer(admission(appwrapper(JOB)))["response"]
    assert answer["allowed"] is True and answer["uid"] == "r-1"
    assert patched(appwrapper(JOB), answer)["metadata"]["finalizers"] == [FINALIZER]


def test_finalizers_of_others_are_kept_and_ours_added_once() -> None:
    obj = appwrapper(JOB)
    obj["metadata"]["finalizers"] = ["example.com/keep"]
    answer = with_finalizer(admission(obj))["response"]
    assert patched(obj, answer)["metadata"]["finalizers"] == ["example.com/keep", FINALIZER]
    obj["metadata"]["finalizers"] = [FINALIZER]
    assert "patch" not in with_finalizer(admission(obj))["response"]


@pytest.mark.parametrize("review", [
    admission(appwrapper(JOB), operation="UPDATE", old=appwrapper(JOB)),
    admission(appwrapper(JOB), operation="DELETE"),
    {"request": {"uid": "r-1", "operation": "CREATE", "object": "not an object"}},
    {},
])
def test_anything_but_a_create_of_an_object_is_allowed_untouched(
        review: dict[str, Any]) -> None:
    answer = with_finalizer(review)["response"]
    assert answer["allowed"] is True and "patch" not in answer


def test_finalizers_that_are_not_a_list_are_left_to_the_api_server() -> None:
    obj = appwrapper(JOB)
    obj["metadata"]["finalizers"] = "workload.codeflare.dev/finalizer"
    assert "patch" not in with_finalizer(admission(obj))["response"]


@pytest.mark.parametrize(("obj", "gets_it"), [
    (v1beta2(None), True),
    (v1beta2(MCAD_CONTROLLER), True),
    (v1beta2("kueue.x-k8s.io/multikueue"), False),
    ({**appwrapper(JOB), "metadata": {"name": "aw", "annotations": {
        V1BETA2_KEPT: json.dumps({"managedBy": "kueue.x-k8s.io/multikueue"})}}}, False),
    ({**appwrapper(JOB), "metadata": {"name": "aw", "annotations": {
        V1BETA2_KEPT: json.dumps({"managedBy": MCAD_CONTROLLER})}}}, True),
    ({**appwrapper(JOB), "metadata": {"name": "aw", "annotations": {
        V1BETA2_KEPT: "not json"}}}, True),
])
def test_one_another_controller_manages_is_left_without_it(
        obj: dict[str, Any], gets_it: bool) -> None:
    """mcad never runs it, so its finalizer would hold its deletion for ever."""
    answer = with_finalizer(admission(obj))["response"]
    assert ("patch" in answer) is gets_it


@given(st.one_of(st.none(), st.just(MCAD_CONTROLLER), st.text(max_size=12)))
def test_the_webhook_and_the_controller_agree_on_whose_it_is(managed_by: str | None) -> None:
    """The controller reads the stored (v1beta1) object: what the webhook decides from a
    v1beta2 create is what the controller will read from its stored form."""
    obj = v1beta2(managed_by)
    stored = convert(obj, V1BETA1)
    facts = kept_facts(stored["metadata"].get("annotations"))
    elsewhere = facts is not None and facts.managed_elsewhere
    assert ("patch" in with_finalizer(admission(obj))["response"]) is not elsewhere


def test_url_mode_registers_it_for_creates_where_the_process_listens() -> None:
    registration = Registration(url="https://10.0.0.5:9443/prefix/validate-appwrapper",
                                conversion_port=9444)
    (webhook,) = mutating_configuration(registration, b"ca")["webhooks"]
    assert webhook["clientConfig"]["url"] == "https://10.0.0.5:9444/prefix/mutate-appwrapper"
    assert webhook["rules"][0]["operations"] == ["CREATE"]
    assert webhook["rules"][0]["apiVersions"] == ["v1beta1", "v1beta2"]
    assert webhook["failurePolicy"] == "Ignore"  # a create never fails for want of it


def test_the_manifests_register_it_as_url_mode_does_at_the_processs_port() -> None:
    documents = [d for d in yaml.safe_load_all(
        (REPO / "manifests/base/webhook.yaml").read_text()) if d]
    (theirs,) = [d for d in documents if d["kind"] == "MutatingWebhookConfiguration"]
    (webhook,) = theirs["webhooks"]
    ours = mutating_configuration(Registration(service=("mcad-system", "mcad-webhook"),
                                               conversion_port=9444), b"ca")["webhooks"][0]
    assert webhook["clientConfig"]["service"] == ours["clientConfig"]["service"]
    assert webhook["clientConfig"]["service"]["path"] == MUTATE_PATH
    assert {k: v for k, v in webhook.items() if k != "clientConfig"} == \
        {k: v for k, v in ours.items() if k != "clientConfig"}


async def test_the_leader_registers_both_configurations_in_url_mode(
        caplog: pytest.LogCaptureFixture) -> None:
    hub = Hub(manifests_crd())
    caplog.set_level(logging.INFO, logger="mcad.webhook.certmanager")
    await CertManager(hub=hub.transport.connection("hub"), namespace="mcad-system",
                      registration=Registration(url="https://127.0.0.1:1/validate-appwrapper")
                      ).ensure()
    for kind, path in (("validating", "/validate-appwrapper"), ("mutating", MUTATE_PATH)):
        (made,) = hub.transport.sent(
            "POST", f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations")
        assert made.body["metadata"]["name"] == "mcad"
        # The log names the URL the API server calls for this one, not the other's.
        assert any(r.getMessage().startswith(f"registered the {kind.capitalize()}")
                   and r.getMessage().endswith(f"at https://127.0.0.1:1{path}")
                   for r in caplog.records)


async def test_the_controllers_own_server_answers_it_too(
        served: tuple[Any, str, ssl.SSLContext]) -> None:
    _, url, trust = served
    answer = await post(url.replace("/validate-appwrapper", MUTATE_PATH), trust,
                        admission(appwrapper(JOB)))
    assert patched(appwrapper(JOB), answer)["metadata"]["finalizers"] == [FINALIZER]


async def test_the_webhooks_process_answers_it_without_the_reviews_configuration(
        converting: tuple[WebhookServer, str, ssl.SSLContext]) -> None:
    """It asks nothing of the hub, so the process serves it whether or not it answers the
    validating reviews (this one converts only)."""
    server, url, trust = converting
    await listening(server)
    answer = await post(url.replace("/convert", MUTATE_PATH), trust,
                        admission(appwrapper(JOB)))
    assert patched(appwrapper(JOB), answer)["metadata"]["finalizers"] == [FINALIZER]


@pytest.mark.parametrize("raw", [b"", b"not json", b"\xff\xfe", b"[1]", b'"a review"',
                                 b'{"request": [1]}', b'{"request": {"object": 7}}'])
def test_a_body_that_is_not_a_review_is_allowed_without_a_patch(raw: bytes) -> None:
    """The mutating route never refuses: what it adds, the controller adds itself. Before,
    a body that was not an AdmissionReview got the validating route's 400 refusal (and
    a review whose request was not an object, a 500)."""
    answer = mutation(raw)["response"]
    assert answer == {"uid": "", "allowed": True}


def test_both_routes_read_a_body_alike() -> None:
    review = admission(appwrapper(JOB))
    raw = json.dumps(review).encode()
    assert parsed(raw) == review and mutation(raw) == with_finalizer(review)
    assert parsed(b"[1]") is None and parsed(b"\xff") is None


async def raw_post(url: str, trust: ssl.SSLContext, body: bytes) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, \
            session.post(url, data=body, ssl=trust) as resp:
        return resp.status, (await resp.json())["response"]


async def test_the_controllers_server_refuses_junk_only_on_the_validating_route(
        served: tuple[Any, str, ssl.SSLContext]) -> None:
    _, url, trust = served
    assert await raw_post(url.replace("/validate-appwrapper", MUTATE_PATH), trust,
                          b"junk") == (200, {"uid": "", "allowed": True})
    status, answer = await raw_post(url, trust, b"junk")
    assert status == 200 and answer["allowed"] is False
    assert answer["status"] == {"code": 400, "message": NOT_A_REVIEW, "reason": "Invalid"}


async def test_the_webhooks_process_allows_junk_on_the_mutating_route(
        converting: tuple[WebhookServer, str, ssl.SSLContext]) -> None:
    server, url, trust = converting
    await listening(server)
    assert await raw_post(url.replace("/convert", MUTATE_PATH), trust,
                          b"junk") == (200, {"uid": "", "allowed": True})


async def test_a_clusterrole_without_the_mutating_webhook_only_costs_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """An install whose ClusterRole predates it: the leader keeps the rest current, and
    the controller writes the finalizer, as before."""
    hub = Hub(manifests_crd())
    hub.transport.only("GET", "/apis/admissionregistration.k8s.io/v1/"
                              "mutatingwebhookconfigurations/mcad",
                       reply(403, {"kind": "Status", "reason": "Forbidden",
                                   "message": "cannot get mutatingwebhookconfigurations"}))
    bundle = await CertManager(hub=hub.transport.connection("hub"), namespace="mcad-system",
                               registration=Registration(url="https://127.0.0.1:1")).ensure()
    assert hub.crd is not None and hub.crd["spec"]["conversion"]["webhook"]["clientConfig"][
        "caBundle"] == base64.b64encode(bundle.ca_cert).decode()
    assert "cannot keep the MutatingWebhookConfiguration mcad" in caplog.text
