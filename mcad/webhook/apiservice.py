"""The visibility API's registration with the hub's aggregation layer (on the leader only).

The hub's API server reaches an aggregated API through an ``APIService`` naming a
Service, and trusts it through the APIService's ``caBundle`` (mcad's own CA, the one its
webhook certificate comes from); it checks the serving certificate for the name
``<service>.<namespace>.svc``. Two ways, as for the admission webhook:

- **in the cluster** (the manifests, ``--visibility-service mcad-system/mcad-visibility``):
  the APIService and a Service without a selector are the manifests'; mcad keeps the
  caBundle current and, since only the leader can answer (it alone runs the dispatch
  cycle), writes the Service's ``EndpointSlice`` with its own pod address
  (``$POD_IP``), so every request goes to whoever leads now;
- **outside the cluster** (``mcad run --webhook-url`` or ``--visibility-url``): mcad makes
  the Service an ``ExternalName`` of the URL's host, which the API server resolves to
  that host and the APIService's port (one way to reach a controller on loopback), and
  creates or updates the APIService itself.

Writes are conditional on what was read and pass the leader's fence.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from mcad.api.visibility import API_SERVICE, GROUP, VERSION
from mcad.gateway import refs, verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import NotFound

log = logging.getLogger(__name__)
SERVICE = "mcad-visibility"
"""The Service the manifests' APIService names."""
EXTERNAL_SERVICE = "mcad-visibility-external"
"""The ``ExternalName`` Service mcad makes outside the cluster: a name of its own, so that
applying the manifests later never merges into it."""
PORT_NAME = "https"
MANAGED_BY = "mcad.codeflare.dev"


@dataclass(frozen=True)
class VisibilityRegistration:
    """Where the API server reaches the visibility API: the Service (namespace, name),
    and in URL mode the URL it stands for."""

    service: tuple[str, str]
    url: str = ""

    def hosts(self) -> list[str]:
        """The names the serving certificate must carry for the API server."""
        namespace, name = self.service
        return [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]

    @property
    def port(self) -> int:
        parsed = urlparse(self.url)
        return parsed.port or 443 if self.url else 443


def api_service(registration: VisibilityRegistration, ca: bytes) -> dict[str, Any]:
    namespace, name = registration.service
    return {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": API_SERVICE, "labels": {"app.kubernetes.io/name": "mcad"}},
        "spec": {"group": GROUP, "version": VERSION, "groupPriorityMinimum": 100,
                 "versionPriority": 100, "caBundle": base64.b64encode(ca).decode(),
                 "service": {"namespace": namespace, "name": name,
                             "port": registration.port}}}


def external_service(registration: VisibilityRegistration) -> dict[str, Any]:
    namespace, name = registration.service
    host = urlparse(registration.url).hostname or ""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": "mcad"}},
            "spec": {"type": "ExternalName", "externalName": host,
                     "ports": [{"name": PORT_NAME, "port": registration.port,
                                "protocol": "TCP"}]}}


def endpoint_slice(registration: VisibilityRegistration, *, pod_ip: str, port: int,
                   version: str | None = None) -> dict[str, Any]:
    """The leader's address as the Service's one endpoint."""
    namespace, name = registration.service
    family = "IPv6" if ipaddress.ip_address(pod_ip).version == 6 else "IPv4"
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {
        "kubernetes.io/service-name": name,
        "endpointslice.kubernetes.io/managed-by": MANAGED_BY}}
    if version:
        meta["resourceVersion"] = version
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta,
            "addressType": family,
            "endpoints": [{"addresses": [pod_ip], "conditions": {"ready": True}}],
            "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP"}]}


async def ensure(hub: Connection, registration: VisibilityRegistration, ca: bytes, *,
                 pod_ip: str | None, port: int) -> None:
    """The APIService (and its Service or EndpointSlice) as they must be now."""
    if registration.url:
        await _ensure_external_service(hub, registration)
    elif pod_ip:
        await _ensure_slice(hub, registration, pod_ip=pod_ip, port=port)
    await _ensure_api_service(hub, registration, ca)


async def _ensure_api_service(hub: Connection, registration: VisibilityRegistration,
                              ca: bytes) -> None:
    wanted = api_service(registration, ca)
    try:
        current = await verbs.get(hub, refs.APISERVICES, API_SERVICE)
    except NotFound:
        if not registration.url:
            log.warning("the APIService %s does not exist; apply the manifests "
                        "(kubectl apply -k manifests/)", API_SERVICE)
            return
        await verbs.create(hub, refs.APISERVICES, wanted)
        log.info("registered the visibility API %s at %s", API_SERVICE, registration.url)
        return
    spec = current.get("spec") or {}
    if registration.url:
        if {k: spec.get(k) for k in wanted["spec"]} == wanted["spec"]:
            return
        wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await verbs.replace(hub, refs.APISERVICES, wanted)
        log.info("updated the visibility API %s to %s", API_SERVICE, registration.url)
        return
    if spec.get("caBundle") == wanted["spec"]["caBundle"]:
        return
    current.setdefault("spec", {})["caBundle"] = wanted["spec"]["caBundle"]
    await verbs.replace(hub, refs.APISERVICES, current)
    log.info("updated the caBundle of APIService %s", API_SERVICE)


async def _ensure_external_service(hub: Connection,
                                   registration: VisibilityRegistration) -> None:
    wanted = external_service(registration)
    namespace, name = registration.service
    try:
        current = await verbs.get(hub, refs.SERVICES, name, namespace=namespace)
    except NotFound:
        await verbs.create(hub, refs.SERVICES, wanted, namespace=namespace)
        return
    spec = current.get("spec") or {}
    if spec.get("type") == "ExternalName" and \
            spec.get("externalName") == wanted["spec"]["externalName"] and \
            [p.get("port") for p in spec.get("ports") or []] == [registration.port]:
        return
    # Another type (the manifests' ClusterIP, say) cannot simply be updated into an
    # ExternalName: its cluster IP is immutable. The Service is mcad's to remake.
    await verbs.delete(hub, refs.SERVICES, name, namespace=namespace)
    await verbs.create(hub, refs.SERVICES, wanted, namespace=namespace)


async def _ensure_slice(hub: Connection, registration: VisibilityRegistration, *,
                        pod_ip: str, port: int) -> None:
    namespace, name = registration.service
    try:
        current = await verbs.get(hub, refs.ENDPOINTSLICES, name, namespace=namespace)
    except NotFound:
        await verbs.create(hub, refs.ENDPOINTSLICES,
                           endpoint_slice(registration, pod_ip=pod_ip, port=port),
                           namespace=namespace)
        log.info("the visibility Service %s/%s now points at this replica (%s:%d)",
                 namespace, name, pod_ip, port)
        return
    wanted = endpoint_slice(registration, pod_ip=pod_ip, port=port,
                            version=current["metadata"]["resourceVersion"])
    if current.get("endpoints") == wanted["endpoints"] and \
            current.get("ports") == wanted["ports"]:
        return
    await verbs.replace(hub, refs.ENDPOINTSLICES, wanted)
    log.info("the visibility Service %s/%s now points at this replica (%s:%d)",
             namespace, name, pod_ip, port)
