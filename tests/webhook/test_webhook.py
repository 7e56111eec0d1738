"""The admission webhook: the decision (invalid specs refused with mcad validate's
sentences; one access check per wrapped object, one SubjectAccessReview per kind; at most
100 items, refused with the sentence ``mcad validate`` gives; unchanged specs on UPDATE
pass without checks, so mcad's own finalizer writes are never refused), the certificates
(issued for the names asked, kept while good, renewed when names change or expiry
nears), and the server over TLS with a scripted hub answering its SubjectAccessReviews:
one per kind, at most 8 in flight, every denied object named, a failure refused as 503."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import io
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml
from cryptography import x509

from mcad.api.conversion import to_v1beta1
from mcad.cli.validate import validate
from mcad.config import RunConfig
from mcad.validation import MAX_WRAPPED_ITEMS, check_appwrapper
from mcad.webhook import certs
from mcad.webhook.certmanager import CertManager, Registration
from mcad.webhook.review import (
    REVIEWS_AT_ONCE,
    AccessCheck,
    decide,
    kinds_to_review,
    plan_review,
    plural_of,
)
from mcad.webhook.reviewer import PATH
from mcad.webhook.server import SECRET, WebhookServer
from tests.gateway.scripted import Request, ScriptedTransport, reply, status

NOW = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
ALICE = {"username": "alice", "groups": ["team-a", "system:authenticated"], "uid": "u-1",
         "extra": {"scopes": ["x"]}}


def appwrapper(*templates: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": "aw", "namespace": "team-a"},
            "spec": {"resources": {"GenericItems": [
                {"generictemplate": t} for t in templates]}}}


JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
       "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
           {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}}
CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
              "data": {"a": "b"}}
ROLE_BINDING = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "grab"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "cluster-admin"},
                "subjects": [{"kind": "User", "name": "alice"}]}


def admission(obj: dict[str, Any], *, operation: str = "CREATE",
              old: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "r-1", "operation": operation, "namespace": "team-a",
                        "userInfo": ALICE, "object": obj, "oldObject": old}}


# -- the decision -----------------------------------------------------------------------

def test_each_wrapped_object_is_an_access_check() -> None:
    plan = plan_review(admission(appwrapper(JOB, CONFIG_MAP)), config=RunConfig())
    assert plan.problems == []
    assert plan.checks == [AccessCheck("batch/v1", "Job", "train", "GenericItems[0] Job/train"),
                           AccessCheck("v1", "ConfigMap", "settings",
                                       "GenericItems[1] ConfigMap/settings")]


@pytest.mark.parametrize(("obj", "says"), [
    (appwrapper(ROLE_BINDING), "GenericItems[0] is a RoleBinding"),
    ({**appwrapper(JOB), "spec": {"resources": {"GenericItems": [{"replicas": -1}]}}},
     "GenericItems[0]"),
    ({**appwrapper(JOB), "spec": {"priority": "high", "resources": {"GenericItems": []}}},
     "spec.priority"),
])
def test_an_invalid_spec_is_refused_with_a_sentence_naming_the_field(
        obj: dict[str, Any], says: str) -> None:
    plan = plan_review(admission(obj), config=RunConfig())
    answer = decide(plan, [])["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    assert says in answer["status"]["message"]
    assert plan.checks == []


def test_fields_mcad_never_acted_on_are_admitted_with_a_warning_each() -> None:
    obj = appwrapper(JOB)
    obj["spec"]["schedulingSpec"] = {"dispatchDuration": {"expected": 60, "overrun": False},
                                     "dispatchingWindow": {"start": "x"}}
    plan = plan_review(admission(obj), config=RunConfig())
    answer = decide(plan, [])["response"]
    assert answer["allowed"] is True
    assert answer["warnings"] == [
        "spec.schedulingSpec.dispatchingWindow: accepted for MCAD compatibility and not "
        "acted on (not implemented, by MCAD either)",
        "spec.schedulingSpec.dispatchDuration.overrun: accepted for MCAD compatibility and "
        "not acted on (MCAD's internal flag; limit is enforced)"]
    assert "warnings" not in decide(plan_review(admission(appwrapper(JOB)),
                                                config=RunConfig()), [])["response"]


def test_an_update_that_leaves_the_spec_alone_is_not_checked() -> None:
    obj = appwrapper(ROLE_BINDING)  # not even valid: it was admitted before the webhook
    old = copy.deepcopy(obj)
    obj["metadata"]["finalizers"] = ["workload.codeflare.dev/finalizer"]
    plan = plan_review(admission(obj, operation="UPDATE", old=old), config=RunConfig())
    assert (plan.problems, plan.checks) == ([], [])
    assert decide(plan, [])["response"]["allowed"] is True


def test_an_update_of_the_spec_is_checked_like_a_create() -> None:
    old = appwrapper(JOB)
    plan = plan_review(admission(appwrapper(JOB, CONFIG_MAP), operation="UPDATE", old=old),
                       config=RunConfig())
    assert [c.kind for c in plan.checks] == ["Job", "ConfigMap"]


@pytest.mark.parametrize(("kind", "plural"), [("Job", "jobs"), ("Ingress", "ingresses"),
                                              ("Policy", "policies"), ("Gateway", "gateways")])
def test_plurals_are_guessed_like_kubectl(kind: str, plural: str) -> None:
    assert plural_of(kind) == plural


def config_maps(count: int) -> list[dict[str, Any]]:
    return [{**CONFIG_MAP, "metadata": {"name": f"settings-{i}"}} for i in range(count)]


def widgets(count: int) -> list[dict[str, Any]]:
    """Items of ``count`` kinds (each declares no pods)."""
    return [{"custompodresources": [{"replicas": 0, "requests": {}}],
             "generictemplate": {"apiVersion": "example.com/v1", "kind": f"Widget{i}",
                                 "metadata": {"name": f"w{i}"}}} for i in range(count)]


TOO_MANY = (f"spec.resources.GenericItems has {MAX_WRAPPED_ITEMS + 1} items, more than "
            f"the {MAX_WRAPPED_ITEMS} one AppWrapper may wrap: split the work into several "
            "AppWrappers")


def test_the_cap_on_items_is_100() -> None:
    assert MAX_WRAPPED_ITEMS == 100
    at_cap = appwrapper(JOB, *config_maps(MAX_WRAPPED_ITEMS - 1))
    assert check_appwrapper(at_cap, config=RunConfig(), namespace="team-a").problems == []
    over = appwrapper(JOB, *config_maps(MAX_WRAPPED_ITEMS))
    assert check_appwrapper(over, config=RunConfig(), namespace="team-a").problems == \
        [TOO_MANY]


def test_mcad_validate_and_the_webhook_refuse_too_many_items_with_one_sentence() -> None:
    over = appwrapper(JOB, *config_maps(MAX_WRAPPED_ITEMS))
    plan = plan_review(admission(over), config=RunConfig())
    assert plan.checks == []  # nothing to ask the hub
    answer = decide(plan, [])["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    assert answer["status"]["message"] == f"the AppWrapper is not valid: {TOO_MANY}."
    report = validate(["-"], stdin=io.StringIO(yaml.safe_dump(over)), config=RunConfig())
    assert report.problems == [f'<stdin>: AppWrapper "aw": {TOO_MANY}.']


def test_objects_of_one_kind_are_one_review() -> None:
    plan = plan_review(admission(appwrapper(JOB, *config_maps(MAX_WRAPPED_ITEMS - 1))),
                       config=RunConfig())
    assert len(plan.checks) == MAX_WRAPPED_ITEMS
    assert [(c.kind, c.name) for c in kinds_to_review(plan.checks)] == [
        ("Job", "train"), ("ConfigMap", "settings-0")]


# -- certificates -----------------------------------------------------------------------

def sans(cert: bytes) -> set[str]:
    names = x509.load_pem_x509_certificate(cert).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    return {str(n) for n in names.get_values_for_type(x509.DNSName)} | \
        {str(n) for n in names.get_values_for_type(x509.IPAddress)}


def test_a_bundle_is_issued_kept_and_renewed() -> None:
    bundle = certs.issue(["mcad-webhook.mcad-system.svc", "127.0.0.1"], NOW)
    assert bundle is not None
    assert sans(bundle.cert) == {"mcad-webhook.mcad-system.svc", "127.0.0.1"}
    assert certs.issue(["127.0.0.1"], NOW + dt.timedelta(days=100), bundle) is None
    near_expiry = certs.issue(["127.0.0.1"], NOW + dt.timedelta(days=340), bundle)
    assert near_expiry is not None and near_expiry.ca_cert == bundle.ca_cert
    renamed = certs.issue(["other.example"], NOW, bundle)
    assert renamed is not None and renamed.ca_cert == bundle.ca_cert
    assert sans(renamed.cert) == {"other.example"}
    old_ca = certs.issue(["127.0.0.1"], NOW + dt.timedelta(days=3400), bundle)
    assert old_ca is not None and old_ca.ca_cert != bundle.ca_cert


# -- the server, over TLS ---------------------------------------------------------------

class Hub:
    """A scripted hub: the webhook Secret, discovery, and SubjectAccessReviews answered
    from a table of what alice may create."""

    def __init__(self, allowed: set[str]) -> None:
        self.transport = ScriptedTransport()
        self.allowed = allowed
        self.failing: set[str] = set()
        self.in_flight = self.peak = 0
        self.secret: dict[str, Any] | None = None
        base = "/api/v1/namespaces/mcad-system/secrets"
        self.transport.on("GET", f"{base}/{SECRET}", lambda _r: reply(200, self.secret)
                          if self.secret else status(404, "NotFound"))
        self.transport.on("POST", base, self._store)
        self.transport.on("PUT", f"{base}/{SECRET}", self._store)
        self.transport.on("GET", "/apis/batch/v1", reply(200, {"resources": [
            {"name": "jobs", "kind": "Job", "namespaced": True}]}))
        self.transport.on("GET", "/api/v1", reply(200, {"resources": [
            {"name": "configmaps", "kind": "ConfigMap", "namespaced": True}]}))
        self.transport.on("POST", SAR, self._review)
        for kind in ("validating", "mutating"):
            webhooks = f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations"
            self.transport.on("GET", f"{webhooks}/mcad", status(404))
            self.transport.on("POST", webhooks, reply(201, {}))

    def _store(self, request: Request) -> Any:
        self.secret = request.body
        return reply(200, self.secret)

    async def _review(self, request: Request) -> Any:
        attributes = request.body["spec"]["resourceAttributes"]
        assert request.body["spec"]["user"] == "alice"
        assert request.body["spec"]["groups"] == ALICE["groups"]
        assert attributes["verb"] == "create" and attributes["namespace"] == "team-a"
        assert "name" not in attributes  # a create is authorized by kind, as the API server does
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            for _ in range(20):  # an answer that takes a while: let the others start
                await asyncio.sleep(0)
            if attributes["resource"] in self.failing:
                return status(500, "InternalError", "etcd is away")
            return reply(201, {"status": {"allowed": attributes["resource"] in self.allowed}})
        finally:
            self.in_flight -= 1


@pytest.fixture
async def served() -> AsyncIterator[tuple[Hub, str, ssl.SSLContext]]:
    hub = Hub({"jobs", "appwrappers"})
    conn = hub.transport.connection("hub")
    registration = Registration(url="https://127.0.0.1:1/validate-appwrapper")
    bundle = await CertManager(hub=conn, namespace="mcad-system",
                               registration=registration).ensure()
    server = WebhookServer(hub=conn, config=RunConfig(), address="127.0.0.1:0")
    task = asyncio.create_task(server.run())
    await asyncio.wait_for(server.serving.wait(), 10)
    trust = ssl.create_default_context(cadata=bundle.ca_cert.decode())
    yield hub, f"https://127.0.0.1:{server.port}{PATH}", trust
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def post(url: str, trust: ssl.SSLContext, body: dict[str, Any]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, \
            session.post(url, json=body, ssl=trust) as resp:
        assert resp.status == 200
        answer: dict[str, Any] = (await resp.json())["response"]
        return answer


async def test_the_server_admits_what_the_requester_may_create(
        served: tuple[Hub, str, ssl.SSLContext]) -> None:
    hub, url, trust = served
    answer = await post(url, trust, admission(appwrapper(JOB)))
    assert answer == {"uid": "r-1", "allowed": True}
    assert len(hub.transport.sent("POST", SAR)) == 1


async def test_the_server_refuses_a_wrapped_kind_the_requester_may_not_create(
        served: tuple[Hub, str, ssl.SSLContext]) -> None:
    hub, url, trust = served
    answer = await post(url, trust, admission(appwrapper(JOB, CONFIG_MAP)))
    assert len(hub.transport.sent("POST", SAR)) == 2
    assert answer["allowed"] is False and answer["status"]["code"] == 403
    assert answer["status"]["message"] == (
        "GenericItems[1] ConfigMap/settings: alice may not create configmaps in namespace "
        "team-a, and an AppWrapper may only wrap what its author could create.")


async def test_the_certificate_in_the_secret_carries_the_urls_host(
        served: tuple[Hub, str, ssl.SSLContext]) -> None:
    hub, _, _ = served
    assert hub.secret is not None
    cert = base64.b64decode(hub.secret["data"]["tls.crt"])
    assert "127.0.0.1" in sans(cert)


async def test_every_object_of_a_denied_kind_is_named_after_one_review(
        served: tuple[Hub, str, ssl.SSLContext]) -> None:
    hub, url, trust = served
    answer = await post(url, trust, admission(appwrapper(JOB, *config_maps(30))))
    assert len(hub.transport.sent("POST", SAR)) == 2  # Job, ConfigMap: not 31
    assert answer["allowed"] is False and answer["status"]["code"] == 403
    message = answer["status"]["message"]
    assert message.count("may not create configmaps in namespace team-a") == 30
    assert message.startswith("GenericItems[1] ConfigMap/settings-0: alice may not create")
    assert "GenericItems[30] ConfigMap/settings-29: alice" in message


async def test_reviews_of_many_kinds_run_at_most_eight_at_once(
        served: tuple[Hub, str, ssl.SSLContext]) -> None:
    hub, url, trust = served
    aw = appwrapper(JOB)
    aw["spec"]["resources"]["GenericItems"] += widgets(20)
    hub.allowed |= {f"widget{i}s" for i in range(20)}
    answer = await post(url, trust, admission(aw))
    assert answer == {"uid": "r-1", "allowed": True}
    assert len(hub.transport.sent("POST", SAR)) == 21
    assert hub.peak == REVIEWS_AT_ONCE == 8


async def test_too_many_items_are_refused_before_any_review(
        served: tuple[Hub, str, ssl.SSLContext]) -> None:
    hub, url, trust = served
    answer = await post(url, trust, admission(appwrapper(JOB, *config_maps(MAX_WRAPPED_ITEMS))))
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    assert TOO_MANY in answer["status"]["message"]
    assert hub.transport.sent("POST", SAR) == []


async def test_a_review_the_hub_cannot_answer_refuses_the_appwrapper(
        served: tuple[Hub, str, ssl.SSLContext]) -> None:
    hub, url, trust = served
    aw = appwrapper(JOB, CONFIG_MAP)
    aw["spec"]["resources"]["GenericItems"] += widgets(12)
    hub.failing = {"configmaps", "widget7s"}
    answer = await post(url, trust, admission(aw))
    assert answer["allowed"] is False and answer["status"]["code"] == 503
    # Of the failures, the earliest object's is named.
    assert answer["status"]["message"] == (
        "mcad could not check whether the requester may create GenericItems[1] "
        "ConfigMap/settings (etcd is away); try again")


# -- v1beta2 ---------------------------------------------------------------------------

def v1beta2(*templates: dict[str, Any], pod_sets: list[dict[str, Any]] | None = None,
            managed_by: str | None = None) -> dict[str, Any]:
    components: list[dict[str, Any]] = [{"template": t} for t in templates]
    if pod_sets is not None:
        components[0]["podSets"] = pod_sets
    spec: dict[str, Any] = {"components": components}
    if managed_by is not None:
        spec["managedBy"] = managed_by
    return {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": {"name": "aw", "namespace": "team-a"}, "spec": spec}


def test_a_v1beta2_appwrapper_is_checked_in_its_own_words() -> None:
    plan = plan_review(admission(v1beta2(JOB, CONFIG_MAP)), config=RunConfig())
    assert plan.problems == []
    assert [c.describe for c in plan.checks] == ["components[0] Job/train",
                                                 "components[1] ConfigMap/settings"]
    refused = plan_review(admission(v1beta2(ROLE_BINDING, JOB)), config=RunConfig())
    assert refused.problems == ["components[0] is a RoleBinding (rbac.authorization.k8s.io/v1), "
                                "which the mcad configuration does not allow to wrap: RBAC "
                                "objects must be named in allowedKinds, since one made with "
                                "mcad's rights could grant anything"]


POD_SETS = [{"path": "template.spec.template", "replicas": 1}]


@pytest.mark.parametrize(("old", "new", "says"), [
    (v1beta2(JOB, pod_sets=POD_SETS), v1beta2(JOB), "spec.components[0].podSets: cannot change"),
    (v1beta2(JOB), v1beta2(JOB, managed_by="kueue.x-k8s.io/multikueue"),
     "spec.managedBy: cannot change"),
])
@pytest.mark.parametrize("through", ["v1beta2", "v1beta1"])
def test_podsets_and_managed_by_cannot_change(old: dict[str, Any], new: dict[str, Any],
                                              says: str, through: str) -> None:
    """As in project-codeflare/appwrapper, through either version: written through
    v1beta1, the change is one of the kept annotation."""
    if through == "v1beta1":
        old, new = to_v1beta1(old), to_v1beta1(new)
        assert old["spec"] == new["spec"]  # the spec alone says nothing changed
    plan = plan_review(admission(new, operation="UPDATE", old=old), config=RunConfig())
    (problem,) = plan.problems
    assert problem.startswith(says)
    assert decide(plan, [])["response"]["status"]["code"] == 422
    same = plan_review(admission(old, operation="UPDATE", old=copy.deepcopy(old)),
                       config=RunConfig())
    assert same.problems == []
