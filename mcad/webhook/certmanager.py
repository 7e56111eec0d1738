"""Keeps the webhook's certificate and registration current (on the leader only).

Why the leader: there is one Secret and one configuration of each webhook for every
replica, and two writers would fight. The leader makes sure, at start and then every
hour, that:

- the Secret ``mcad-webhook-tls`` (in mcad's namespace) holds a CA and a serving
  certificate for the names the API server uses to reach the webhook, renewed a month
  before it expires (``certs.issue``); every replica serves what it holds;
- the ValidatingWebhookConfiguration ``mcad`` and the MutatingWebhookConfiguration
  ``mcad`` (which puts mcad's finalizer on at creation) trust that CA (their
  ``caBundle``). With ``--webhook-url`` mcad creates or updates each whole configuration,
  pointing at that URL; with ``--webhook-service`` (the manifests) the configurations are
  the manifests' and only their caBundle is written;
- the AppWrapper CRD's conversion webhook (``spec.conversion.webhook.clientConfig``)
  calls mcad's ``/convert`` through the same URL's host or Service, trusting that CA;
- the visibility API's APIService trusts it too, and reaches the leader
  (``mcad.webhook.apiservice``).

Writes are conditional on the resourceVersion read (a Conflict is simply retried on the
next round) and go through the leader's write fence.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from mcad.api.conversion import CONVERSION_SERVICE_PORT, CONVERT_PATH
from mcad.controller.clock import utcnow
from mcad.gateway import refs, verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import Conflict, Forbidden, NotFound
from mcad.webhook import apiservice
from mcad.webhook.apiservice import VisibilityRegistration
from mcad.webhook.certs import CertBundle, issue
from mcad.webhook.review import MATCH_CONDITIONS
from mcad.webhook.reviewer import MUTATE_PATH, PATH
from mcad.webhook.server import SECRET, secret_body

log = logging.getLogger(__name__)
NAME = "mcad"
CHECK_EVERY_S = 3600.0
APPWRAPPERS_CRD = "appwrappers.workload.codeflare.dev"


@dataclass(frozen=True)
class Registration:
    """How the API server reaches the webhook: a URL, or a Service (namespace/name)."""

    url: str = ""
    service: tuple[str, str] | None = None
    extra_hosts: tuple[str, ...] = ()
    visibility: VisibilityRegistration | None = None
    """The aggregated visibility API, when this replica serves it."""
    conversion_port: int | None = None
    """Where the webhooks' own process listens (``--conversion-address``): the CRD's
    conversion and the admission webhook then call the URL's host at this port, or the
    Service's port ``CONVERSION_SERVICE_PORT``; None: the webhook's own address."""

    def hosts(self) -> list[str]:
        names: list[str] = []
        for url in (self.url, self.visibility.url if self.visibility else ""):
            host = urlparse(url).hostname if url else None
            if host and host not in names:
                names.append(host)
        if self.service:
            namespace, name = self.service
            names += [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local",
                      f"{name}.{namespace}", name]
        if self.visibility is not None:
            names += [h for h in self.visibility.hosts() if h not in names]
        return [*names, *(h for h in self.extra_hosts if h not in names)]

    @property
    def admission(self) -> bool:
        """Whether the admission webhook is registered (by URL or Service)."""
        return bool(self.url or self.service)

    def client_config(self, ca: bytes) -> dict[str, Any]:
        """Where the API server calls the admission webhook: the URL (at the webhooks'
        own process's port, when there is one), or the Service."""
        return self._client_config(ca, PATH)

    def mutating_client_config(self, ca: bytes) -> dict[str, Any]:
        """Where the API server calls the mutating webhook: as the admission webhook,
        at ``MUTATE_PATH``."""
        return self._client_config(ca, MUTATE_PATH)

    def conversion_client_config(self, ca: bytes) -> dict[str, Any]:
        """Where the API server calls ``/convert``: the webhook URL's path replaced (and
        its port, for the webhooks' own process), or the Service."""
        return self._client_config(ca, CONVERT_PATH)

    def _client_config(self, ca: bytes, path: str) -> dict[str, Any]:
        config: dict[str, Any] = {"caBundle": base64.b64encode(ca).decode()}
        if self.url:
            parsed = urlparse(self.url)
            prefix = parsed.path[:-len(PATH)] if parsed.path.endswith(PATH) else ""
            parsed = parsed._replace(path=prefix + path)
            if self.conversion_port is not None:
                host = f"[{parsed.hostname}]" if ":" in (parsed.hostname or "") \
                    else parsed.hostname
                parsed = parsed._replace(netloc=f"{host}:{self.conversion_port}")
            config["url"] = parsed.geturl()
        elif self.service:
            config["service"] = {"namespace": self.service[0], "name": self.service[1],
                                 "path": path, "port": 443 if self.conversion_port is None
                                 else CONVERSION_SERVICE_PORT}
        return config


def configuration(registration: Registration, ca: bytes) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration mcad registers in URL mode."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": NAME},
        "webhooks": [{
            "name": "appwrappers.workload.codeflare.dev",
            "clientConfig": registration.client_config(ca),
            "rules": [{"apiGroups": ["workload.codeflare.dev"],
                       "apiVersions": ["v1beta1", "v1beta2"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["appwrappers"],
                       "scope": "Namespaced"}],
            "matchConditions": MATCH_CONDITIONS,
            "failurePolicy": "Fail", "sideEffects": "None", "matchPolicy": "Equivalent",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 10}]}


def mutating_configuration(registration: Registration, ca: bytes) -> dict[str, Any]:
    """The MutatingWebhookConfiguration mcad registers in URL mode: its finalizer put on
    at creation (``mcad.webhook.review.with_finalizer``). Creates only; failurePolicy
    Ignore, since nothing is lost without it (the controller puts the finalizer on when
    it first sees the AppWrapper), and a short timeout, so a replica that cannot answer
    costs a create little."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration", "metadata": {"name": NAME},
        "webhooks": [{
            "name": "finalizer.appwrappers.workload.codeflare.dev",
            "clientConfig": registration.mutating_client_config(ca),
            "rules": [{"apiGroups": ["workload.codeflare.dev"],
                       "apiVersions": ["v1beta1", "v1beta2"],
                       "operations": ["CREATE"], "resources": ["appwrappers"],
                       "scope": "Namespaced"}],
            "failurePolicy": "Ignore", "sideEffects": "None", "matchPolicy": "Equivalent",
            "reinvocationPolicy": "Never", "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5}]}


_CONFIGURATIONS = ((refs.VALIDATING_WEBHOOKS, configuration),
                   (refs.MUTATING_WEBHOOKS, mutating_configuration))
"""The two admission webhook configurations mcad keeps: what each is, how it is made."""


class CertManager:
    def __init__(self, *, hub: Connection, namespace: str, registration: Registration,
                 issued: Callable[[], None] = lambda: None, pod_ip: str | None = None,
                 port: Callable[[], int] = lambda: 0) -> None:
        self.hub = hub
        self.namespace = namespace
        self.registration = registration
        self.issued = issued
        """Told when a certificate was written (this process's server reads it at once)."""
        self.pod_ip = pod_ip
        """This replica's pod address (in a cluster): the visibility Service's endpoint."""
        self.port = port
        """The port this replica's TLS server listens on."""
        self.registered = False
        """Whether a whole ``ensure`` has succeeded: the certificate, the webhooks, the
        conversion and the visibility APIService as this replica serves them. Readiness
        waits for it on the leader: before it, a client (or ``kubectl apply`` of the
        manifests) could see the registration of a replica gone, and have it rewritten
        under its feet a moment later."""

    async def run(self) -> None:
        while True:
            try:
                await self.ensure()
            except Conflict:
                await asyncio.sleep(1)
                continue
            self.registered = True
            await asyncio.sleep(CHECK_EVERY_S)

    async def ensure(self) -> CertBundle:
        bundle = await self._ensure_secret()
        if self.registration.admission:
            await self._ensure_registration(bundle.ca_cert)
            await self._ensure_conversion(bundle.ca_cert)
        if self.registration.visibility is not None:
            await apiservice.ensure(self.hub, self.registration.visibility, bundle.ca_cert,
                                    pod_ip=self.pod_ip, port=self.port())
        return bundle

    async def _ensure_secret(self) -> CertBundle:
        try:
            secret: dict[str, Any] | None = await verbs.get(self.hub, refs.SECRETS, SECRET,
                                                            namespace=self.namespace)
        except NotFound:
            secret = None
        data = {k: base64.b64decode(v) for k, v in ((secret or {}).get("data") or {}).items()}
        current = None
        if all(data.get(k) for k in ("ca.crt", "ca.key", "tls.crt", "tls.key")):
            current = CertBundle(data["ca.crt"], data["ca.key"], data["tls.crt"],
                                 data["tls.key"])
        fresh = issue(self.registration.hosts(), utcnow(), current)
        if fresh is None:
            assert current is not None
            return current
        body = secret_body(self.namespace, {"ca.crt": fresh.ca_cert, "ca.key": fresh.ca_key,
                                            "tls.crt": fresh.cert, "tls.key": fresh.key},
                           version=((secret or {}).get("metadata") or {}).get(
                               "resourceVersion"))
        if secret is None:
            await verbs.create(self.hub, refs.SECRETS, body, namespace=self.namespace)
        else:
            await verbs.replace(self.hub, refs.SECRETS, body)
        log.info("issued the webhook's serving certificate for %s",
                 ", ".join(self.registration.hosts()))
        self.issued()
        return fresh

    async def _ensure_registration(self, ca: bytes) -> None:
        for ref, make in _CONFIGURATIONS:
            try:
                await self._ensure_configuration(ref, make, ca)
            except Forbidden as err:
                if ref is refs.VALIDATING_WEBHOOKS:
                    raise
                # An install whose ClusterRole predates the mutating webhook: the
                # finalizer is then the controller's to write, as before it.
                log.warning("cannot keep the %s %s (%s); apply the manifests' ClusterRole "
                            "(kubectl apply -k manifests/)", ref.kind, NAME, err.message)

    async def _ensure_configuration(
            self, ref: refs.ResourceRef,
            make: Callable[[Registration, bytes], dict[str, Any]], ca: bytes) -> None:
        """One webhook configuration: in URL mode made whole; else the manifests', whose
        caBundle is kept current."""
        try:
            current = await verbs.get(self.hub, ref, NAME)
        except NotFound:
            if not self.registration.url:
                log.warning("the %s %s does not exist; apply the manifests (kubectl apply "
                            "-k manifests/)", ref.kind, NAME)
                return
            made = make(self.registration, ca)
            await verbs.create(self.hub, ref, made)
            # The URL the API server will call, each configuration its own path.
            log.info("registered the %s %s at %s", ref.kind, NAME,
                     made["webhooks"][0]["clientConfig"].get("url"))
            return
        if self.registration.url:
            wanted = make(self.registration, ca)
            wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            # (the rules too: an older mcad registered v1beta1 only, and no conditions)
            if [(w.get("clientConfig"), w.get("rules"), w.get("matchConditions"))
                    for w in current.get("webhooks") or []] \
                    != [(w["clientConfig"], w["rules"], w.get("matchConditions"))
                        for w in wanted["webhooks"]]:
                await verbs.replace(self.hub, ref, wanted)
            return
        bundle = base64.b64encode(ca).decode()
        webhooks = current.get("webhooks") or []
        if all((w.get("clientConfig") or {}).get("caBundle") == bundle for w in webhooks):
            return
        for webhook in webhooks:
            webhook.setdefault("clientConfig", {})["caBundle"] = bundle
        await verbs.replace(self.hub, ref, current)
        log.info("updated the caBundle of %s %s", ref.kind, NAME)

    async def _ensure_conversion(self, ca: bytes) -> None:
        """The AppWrapper CRD converts through this replica set's ``/convert``."""
        try:
            crd = await verbs.get(self.hub, refs.CUSTOMRESOURCEDEFINITIONS, APPWRAPPERS_CRD)
        except NotFound:
            log.warning("the CustomResourceDefinition %s does not exist; apply the CRDs "
                        "(kubectl apply -k crds/)", APPWRAPPERS_CRD)
            return
        wanted = self.registration.conversion_client_config(ca)
        conversion = (crd.get("spec") or {}).get("conversion") or {}
        webhook = conversion.get("webhook") or {}
        if conversion.get("strategy") == "Webhook" and webhook.get("clientConfig") == wanted:
            return
        crd.setdefault("spec", {})["conversion"] = {"strategy": "Webhook", "webhook": {
            **webhook, "conversionReviewVersions": webhook.get("conversionReviewVersions")
            or ["v1"], "clientConfig": wanted}}
        await verbs.replace(self.hub, refs.CUSTOMRESOURCEDEFINITIONS, crd)
        log.info("the CustomResourceDefinition %s converts through %s", APPWRAPPERS_CRD,
                 wanted.get("url") or "the Service {}/{}".format(*self.registration.service
                                                               or ("", "")))
