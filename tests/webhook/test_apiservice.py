"""The visibility API's registration (``mcad.webhook.apiservice``), against a scripted
hub: in a cluster the leader keeps the manifests' APIService trusting its CA and points
the selector-less Service's EndpointSlice at its own pod (so a new leader takes the
traffic at once); outside, it makes an ExternalName Service of the URL's host (remaking
one of another type, whose cluster IP cannot change) and the APIService with the URL's
port; nothing is written when all is as it should be."""

from __future__ import annotations

import base64
from typing import Any

from mcad.webhook import apiservice
from mcad.webhook.apiservice import VisibilityRegistration
from tests.gateway.scripted import Request, ScriptedTransport, reply, status

API = "/apis/apiregistration.k8s.io/v1/apiservices"
SERVICES = "/api/v1/namespaces/mcad-system/services"
SLICES = "/apis/discovery.k8s.io/v1/namespaces/mcad-system/endpointslices"
CA = b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
IN_CLUSTER = VisibilityRegistration(("mcad-system", "mcad-visibility"))
OUTSIDE = VisibilityRegistration(("mcad-system", "mcad-visibility-external"),
                                 url="https://127.0.0.1:9443")


class Hub:
    """Objects by path; GET, POST, PUT and DELETE as the API server would answer them."""

    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects
        self.transport = ScriptedTransport()
        for path in (API, SERVICES, SLICES):
            self.transport.on("POST", path, self._create(path))
        for path in (f"{API}/v1alpha1.visibility.codeflare.dev",
                     f"{SERVICES}/mcad-visibility-external", f"{SLICES}/mcad-visibility"):
            self.transport.on("GET", path, self._get(path))
            self.transport.on("PUT", path, self._put(path))
            self.transport.on("DELETE", path, self._delete(path))

    def _get(self, path: str) -> Any:
        return lambda _r: reply(200, self.objects[path]) if path in self.objects \
            else status(404, "NotFound")

    def _put(self, path: str) -> Any:
        def put(request: Request) -> Any:
            self.objects[path] = request.body
            return reply(200, request.body)
        return put

    def _delete(self, path: str) -> Any:
        def delete(_: Request) -> Any:
            self.objects.pop(path, None)
            return reply(200, {})
        return delete

    def _create(self, collection: str) -> Any:
        def create(request: Request) -> Any:
            self.objects[f"{collection}/{request.body['metadata']['name']}"] = request.body
            return reply(201, request.body)
        return create

    def writes(self) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.transport.requests if r.method != "GET"]


def manifests_api_service() -> dict[str, Any]:
    return {"metadata": {"name": "v1alpha1.visibility.codeflare.dev", "resourceVersion": "7"},
            "spec": {"group": "visibility.codeflare.dev", "version": "v1alpha1",
                     "service": {"namespace": "mcad-system", "name": "mcad-visibility",
                                 "port": 443}}}


async def test_in_a_cluster_the_leader_trusts_its_ca_and_takes_the_endpoint() -> None:
    hub = Hub({f"{API}/v1alpha1.visibility.codeflare.dev": manifests_api_service()})
    conn = hub.transport.connection("hub")
    await apiservice.ensure(conn, IN_CLUSTER, CA, pod_ip="10.0.0.7", port=9443)
    stored = hub.objects[f"{API}/v1alpha1.visibility.codeflare.dev"]
    assert stored["spec"]["caBundle"] == base64.b64encode(CA).decode()
    assert stored["spec"]["service"]["port"] == 443  # the manifests' Service, untouched
    endpoint = hub.objects[f"{SLICES}/mcad-visibility"]
    assert endpoint["metadata"]["labels"]["kubernetes.io/service-name"] == "mcad-visibility"
    assert endpoint["endpoints"] == [{"addresses": ["10.0.0.7"], "conditions": {"ready": True}}]
    assert endpoint["ports"] == [{"name": "https", "port": 9443, "protocol": "TCP"}]

    # The next leader (another pod) takes the endpoint over; nothing else is written.
    endpoint["metadata"]["resourceVersion"] = "8"
    before = len(hub.writes())
    await apiservice.ensure(conn, IN_CLUSTER, CA, pod_ip="10.0.0.9", port=9443)
    assert hub.writes()[before:] == [f"PUT {SLICES}/mcad-visibility"]
    assert hub.objects[f"{SLICES}/mcad-visibility"]["endpoints"][0]["addresses"] == \
        ["10.0.0.9"]
    before = len(hub.writes())
    await apiservice.ensure(conn, IN_CLUSTER, CA, pod_ip="10.0.0.9", port=9443)
    assert hub.writes()[before:] == []


async def test_outside_a_cluster_mcad_registers_itself_by_an_external_name() -> None:
    hub = Hub({f"{SERVICES}/mcad-visibility-external": {
        "metadata": {"name": "mcad-visibility-external", "namespace": "mcad-system"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.9",
                 "ports": [{"port": 443}]}}})
    conn = hub.transport.connection("hub")
    await apiservice.ensure(conn, OUTSIDE, CA, pod_ip=None, port=9443)
    service = hub.objects[f"{SERVICES}/mcad-visibility-external"]
    assert service["spec"] == {"type": "ExternalName", "externalName": "127.0.0.1",
                               "ports": [{"name": "https", "port": 9443, "protocol": "TCP"}]}
    registered = hub.objects[f"{API}/v1alpha1.visibility.codeflare.dev"]
    assert registered["spec"]["service"] == {"namespace": "mcad-system",
                                             "name": "mcad-visibility-external", "port": 9443}
    assert f"DELETE {SERVICES}/mcad-visibility-external" in hub.writes()
    registered["metadata"]["resourceVersion"] = "3"
    before = len(hub.writes())
    await apiservice.ensure(conn, OUTSIDE, CA, pod_ip=None, port=9443)
    assert hub.writes()[before:] == []


def test_the_certificate_carries_the_names_the_api_server_checks() -> None:
    assert IN_CLUSTER.hosts()[0] == "mcad-visibility.mcad-system.svc"
    assert OUTSIDE.hosts()[0] == "mcad-visibility-external.mcad-system.svc"
    assert (IN_CLUSTER.port, OUTSIDE.port) == (443, 9443)
