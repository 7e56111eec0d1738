"""Resources by apiVersion and kind: discovery and the REST paths of any object.

AppWrappers wrap objects of any kind, so the controller cannot know plural names in
advance; it asks the target cluster's discovery API (``/api/v1``,
``/apis/<group>/<version>``) once per group version and caches the answer. A kind
that discovery does not list raises ``UnknownKind``.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from mcad.gateway.connection import Connection
from mcad.gateway.errors import NotFound, UnknownKind


@dataclass(frozen=True, slots=True)
class ResourceRef:
    """Where objects of one kind live on one cluster's API."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def path(self, *, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name)}"
            if subresource:
                base += f"/{subresource}"
        return base


# Kinds the controller itself uses, so they need no discovery round trip.
NAMESPACES = ResourceRef("v1", "Namespace", "namespaces", namespaced=False)
PODS = ResourceRef("v1", "Pod", "pods", namespaced=True)
NODES = ResourceRef("v1", "Node", "nodes", namespaced=False)
SECRETS = ResourceRef("v1", "Secret", "secrets", namespaced=True)
EVENTS = ResourceRef("v1", "Event", "events", namespaced=True)
SUBJECTACCESSREVIEWS = ResourceRef("authorization.k8s.io/v1", "SubjectAccessReview",
                                   "subjectaccessreviews", namespaced=False)
TOKENREVIEWS = ResourceRef("authentication.k8s.io/v1", "TokenReview", "tokenreviews",
                           namespaced=False)
SELFSUBJECTREVIEWS = ResourceRef("authentication.k8s.io/v1", "SelfSubjectReview",
                                 "selfsubjectreviews", namespaced=False)
CONFIGMAPS = ResourceRef("v1", "ConfigMap", "configmaps", namespaced=True)
SERVICES = ResourceRef("v1", "Service", "services", namespaced=True)
ENDPOINTSLICES = ResourceRef("discovery.k8s.io/v1", "EndpointSlice", "endpointslices",
                             namespaced=True)
APISERVICES = ResourceRef("apiregistration.k8s.io/v1", "APIService", "apiservices",
                          namespaced=False)
VALIDATING_WEBHOOKS = ResourceRef("admissionregistration.k8s.io/v1",
                                  "ValidatingWebhookConfiguration",
                                  "validatingwebhookconfigurations", namespaced=False)
MUTATING_WEBHOOKS = ResourceRef("admissionregistration.k8s.io/v1",
                                "MutatingWebhookConfiguration",
                                "mutatingwebhookconfigurations", namespaced=False)
CUSTOMRESOURCEDEFINITIONS = ResourceRef("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                        "customresourcedefinitions", namespaced=False)
PRIORITYCLASSES = ResourceRef("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses",
                              namespaced=False)
WORKLOADPRIORITYCLASSES = ResourceRef("kueue.x-k8s.io/v1beta1", "WorkloadPriorityClass",
                                      "workloadpriorityclasses", namespaced=False)
LEASES = ResourceRef("coordination.k8s.io/v1", "Lease", "leases", namespaced=True)
APPWRAPPERS = ResourceRef("workload.codeflare.dev/v1beta1", "AppWrapper", "appwrappers", True)
APPWRAPPERS_V1BETA2 = ResourceRef("workload.codeflare.dev/v1beta2", "AppWrapper", "appwrappers",
                                  True)
"""AppWrappers as v1beta2 (converted by mcad's webhook); mcad itself reads v1beta1."""
QUOTASUBTREES = ResourceRef("quota.codeflare.dev/v1alpha1", "QuotaSubtree", "quotasubtrees", True)
SPOKECLUSTERS = ResourceRef("cluster.codeflare.dev/v1alpha1", "SpokeCluster", "spokeclusters",
                            False)


AGGREGATED = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
              "application/json")


class Discovery:
    """Per-connection cache of group-version resource lists.

    ``refresh`` reads the whole cluster at once through aggregated discovery (two
    requests: ``/api`` and ``/apis``), so the controller knows which kinds a cluster
    serves before it sends an AppWrapper there; ``kinds`` is that set, None when the
    server does not offer aggregated discovery (then any kind is assumed, and a missing
    one is found at creation time).
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._cache: dict[str, dict[str, ResourceRef]] = {}
        self.kinds: frozenset[tuple[str, str]] | None = None

    async def refresh(self) -> frozenset[tuple[str, str]] | None:
        """Read every served resource; returns (and keeps) the (apiVersion, kind) set."""
        found: dict[str, dict[str, ResourceRef]] = {}
        for path in ("/api", "/apis"):
            listing = await self._conn.request("GET", path, accept=AGGREGATED)
            if listing.get("kind") != "APIGroupDiscoveryList":
                return None  # an older server: per group version, on demand
            for group in listing.get("items") or []:
                name = (group.get("metadata") or {}).get("name") or ""
                for version in group.get("versions") or []:
                    api_version = f"{name}/{version.get('version')}" if name \
                        else str(version.get("version"))
                    kinds = found.setdefault(api_version, {})
                    for r in version.get("resources") or []:
                        kind = (r.get("responseKind") or {}).get("kind")
                        if kind and r.get("resource"):
                            kinds[kind] = ResourceRef(api_version, kind, r["resource"],
                                                      r.get("scope") == "Namespaced")
        self._cache = found
        self.kinds = frozenset((v, k) for v, kinds in found.items() for k in kinds)
        return self.kinds

    async def resource_for(self, api_version: str, kind: str) -> ResourceRef:
        kinds = self._cache.get(api_version)
        if kinds is None or kind not in kinds:
            kinds = await self._load(api_version)
        ref = kinds.get(kind)
        if ref is None:
            raise UnknownKind(f"the cluster serves no kind {kind} in {api_version}",
                              cluster=self._conn.name)
        return ref

    async def _load(self, api_version: str) -> dict[str, ResourceRef]:
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        try:
            listing = await self._conn.request("GET", path)
        except NotFound as err:
            raise UnknownKind(f"the cluster serves no API group version {api_version}",
                              cluster=self._conn.name) from err
        kinds = {
            r["kind"]: ResourceRef(api_version, r["kind"], r["name"], bool(r.get("namespaced")))
            for r in listing.get("resources", []) if "/" not in r.get("name", "/")
        }
        self._cache[api_version] = kinds
        return kinds

    def forget(self) -> None:
        """Drop the cache (after a CRD was installed, say)."""
        self._cache.clear()
