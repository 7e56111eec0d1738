"""Wrapping a plain workload in an AppWrapper: what ``mcad wrap`` prints and
``mcad.client.Client.submit`` creates, from one function.

Why here, below both: the command line and the Python client must wrap a Job the same
way (the same ``custompodresources``, the same refusals), and neither may reach into the
other. The object is kept verbatim, less what the API server wrote (uid,
resourceVersion, status...); its pods are declared from its pod templates by the
dispatcher's own rule (``mcad.core.workload.demand``), so what it will be charged is
there to read before it is submitted. As v1beta2 (``api="v1beta2"``) it is one component
with the ``podSets`` the AppWrapper project would infer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcad.core.life.wrapping import APPWRAPPER_API_VERSION
from mcad.core.workload.demand import (
    DemandError,
    PodTemplate,
    inferred_pod_sets,
    pod_request,
    pod_templates,
)
from mcad.core.workload.resources import EMPTY, ResourceList
from mcad.gateway.refs import APPWRAPPERS_V1BETA2

WRAPPABLE = {
    ("batch", "Job"): "batch/v1",
    ("kubeflow.org", "PyTorchJob"): "kubeflow.org/v1",
    ("jobset.x-k8s.io", "JobSet"): "jobset.x-k8s.io/v1alpha2",
    ("ray.io", "RayCluster"): "ray.io/v1",
    ("apps", "Deployment"): "apps/v1",
}
"""(group, kind) -> the apiVersion named when refusing another kind."""

SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
                 "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds",
                 "ownerReferences")
"""Metadata the API server writes: dropped, so ``kubectl get -o yaml`` output wraps."""

class CannotWrap(Exception):
    """Why the input cannot be wrapped, as the sentence to print."""


def wrap(obj: Mapping[str, Any], *, name: str | None = None, namespace: str | None = None,
         priority: int | None = None, quota: Mapping[str, str] | None = None,
         api: str = "v1beta1") -> dict[str, Any]:
    """The AppWrapper around ``obj`` (as ``api``: v1beta1 or v1beta2), its pods declared
    from its pod templates; ``quota``: its labels."""
    if api == "v1beta2" and priority is not None:
        raise CannotWrap("a v1beta2 AppWrapper has no spec.priority; name a priority class "
                         "with --priority-class (the label kueue.x-k8s.io/priority-class)")
    api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    if (api_version.rpartition("/")[0], kind) not in WRAPPABLE:
        known = ", ".join(f"{k} ({v})" for (_, k), v in WRAPPABLE.items())
        what = f"{kind or 'an object without a kind'} ({api_version or 'no apiVersion'})"
        raise CannotWrap(f"{what} cannot be wrapped by mcad wrap; it wraps {known}")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    own_namespace = meta.get("namespace")
    if namespace and own_namespace and own_namespace != namespace:
        raise CannotWrap(f"the {kind} says namespace {own_namespace} but -n says {namespace}; "
                         "drop one of them")
    namespace = namespace or own_namespace or "default"
    name = name or meta.get("name")
    if not name:
        raise CannotWrap(f"the {kind} has no metadata.name; give the AppWrapper one with "
                         "--name")
    try:
        templates = pod_templates(obj)
    except DemandError as error:
        raise CannotWrap(str(error)) from None
    assert templates is not None  # every wrappable kind is one mcad reads
    template = _as_created(obj, namespace=str(namespace))
    metadata: dict[str, Any] = {"name": str(name), "namespace": str(namespace)}
    if quota:
        metadata["labels"] = dict(quota)
    if api == "v1beta2":
        pod_sets = [p.to_wire() for p in inferred_pod_sets(template) or ()]
        return {"apiVersion": APPWRAPPERS_V1BETA2.api_version, "kind": "AppWrapper",
                "metadata": metadata,
                "spec": {"components": [{"podSets": pod_sets, "template": template}]}}
    declared = [_declaration(t) for t in templates if t.count > 0]
    item: dict[str, Any] = {"generictemplate": template}
    if declared:
        item["custompodresources"] = declared
    spec: dict[str, Any] = {}
    if priority is not None:
        spec["priority"] = priority
    spec["resources"] = {"GenericItems": [item]}
    return {"apiVersion": APPWRAPPER_API_VERSION, "kind": "AppWrapper", "metadata": metadata,
            "spec": spec}


def _as_created(obj: Mapping[str, Any], *, namespace: str) -> dict[str, Any]:
    """The object as it should be created: in the AppWrapper's namespace, without what
    the API server wrote."""
    out = {key: value for key, value in obj.items() if key != "status"}
    meta = {key: value for key, value in (obj.get("metadata") or {}).items()
            if key not in SERVER_FIELDS}
    meta["namespace"] = namespace
    out["metadata"] = meta
    return out


def _declaration(template: PodTemplate) -> dict[str, Any]:
    """One ``custompodresources`` entry: the template's pods, and one pod's requests (as
    the kube-scheduler counts them) and limits."""
    try:
        requests = pod_request(template.spec)
    except DemandError as error:
        raise CannotWrap(f"{template.path}: {error}") from None
    entry: dict[str, Any] = {"replicas": template.count, "requests": requests.to_strings()}
    limits = _pod_limits(template.spec)
    if limits:
        entry["limits"] = limits.to_strings()
    return entry


def _pod_limits(pod_spec: Mapping[str, Any]) -> ResourceList:
    """The sum of the containers' limits, for the resources every container limits (a
    container without a limit leaves the pod unbounded in that resource)."""
    containers = [c for c in pod_spec.get("containers") or [] if isinstance(c, Mapping)]
    each = [ResourceList.parse((c.get("resources") or {}).get("limits")) for c in containers]
    if not each:
        return EMPTY
    names = set(each[0]).intersection(*each[1:])
    total = EMPTY
    for limits in each:
        total = total + limits.only(names)
    return total
