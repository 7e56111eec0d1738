"""Wrapped objects mcad must not create: cluster-scoped kinds, other namespaces."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.clusters import Cluster
from e2e.dispatch.conftest import ControllerProcess, condition, create_aw, wait_state

CLUSTER_ROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "mcad-e2e-refused"}, "rules": []}


def pod(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1"}}}]}}


@pytest.mark.parametrize(("items", "want_reason"), [
    pytest.param([pod("fine"), CLUSTER_ROLE], "ClusterScoped", id="cluster-scoped"),
    pytest.param([pod("fine"), pod("elsewhere", namespace="kube-system")], "ForeignNamespace",
                 id="foreign-namespace"),
])
async def test_refused_items_fail_the_appwrapper_and_create_nothing(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
    items: list[dict[str, Any]], want_reason: str,
) -> None:
    hub = clusters["hub"]
    body = {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": "refused"},
            "spec": {"resources": {"GenericItems": [
                {"generictemplate": item, "custompodresources": [
                    {"replicas": 1, "requests": {"cpu": "1"}}]} for item in items]}}}
    await create_aw(hub, aw_namespace, body)
    failed = await wait_state(hub, aw_namespace, "refused", "Failed")
    assert condition(failed, "Failed")["reason"] == want_reason
    assert not failed["status"].get("clusterName")
    for spoke in ("spoke-1", "spoke-2"):
        pods = (await clusters[spoke].core.list_namespaced_pod(aw_namespace)).items
        assert pods == []
        elsewhere = (await clusters[spoke].core.list_namespaced_pod("kube-system")).items
        assert "elsewhere" not in {p.metadata.name for p in elsewhere}
        roles = (await clusters[spoke].api.call_api(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/mcad-e2e-refused", "GET",
            _preload_content=False, auth_settings=["BearerToken"]))
        assert roles.status == 404
