"""The wrapped objects of an AppWrapper, as they will be created on a cluster.

Before anything is created the whole AppWrapper is checked, so a refusal leaves
nothing half-created: every item must be a named object in the AppWrapper's own
namespace, of a kind the configuration allows and that is not cluster-scoped.
Each object (and every pod template inside it, whatever the kind: Job, JobSet,
PyTorchJob, RayCluster...) is labelled with the AppWrapper's identity and, as MCAD
does, ``resourceName: <object name>``, and its pod templates get the object's labels
too (written over the template's own, as MCAD does); so its pods can be counted and
found by MCAD's selectors, everything can be found again after a restart, and an
object of the same name that is not ours is never mistaken for ours.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcad.core.life.completion import completion_types
from mcad.core.workload.podsets import rewrite_pod_templates

NAME_LABEL = "appwrapper.mcad.ibm.com"
"""MCAD v1's label: the AppWrapper's name, on objects and pod templates."""
WORKLOAD_LABEL = "workload.codeflare.dev/appwrapper"
"""MCAD v2's label: the AppWrapper's name."""
UID_LABEL = "workload.codeflare.dev/appwrapper-uid"
"""The AppWrapper's uid: what tells our objects and pods from same-named others."""
RESOURCE_NAME_LABEL = "resourceName"
"""MCAD v1's label: the wrapped object's own name, on it and its pod templates (left
out when the name is longer than a label value may be: 63 characters)."""
APPWRAPPER_API_VERSION = "workload.codeflare.dev/v1beta1"

# Kinds that are cluster-scoped in every Kubernetes; others are caught by discovery.
CLUSTER_SCOPED = frozenset({
    "Namespace", "Node", "PersistentVolume", "ClusterRole", "ClusterRoleBinding",
    "StorageClass", "PriorityClass", "CustomResourceDefinition", "APIService",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "RuntimeClass",
    "CSIDriver", "CSINode", "VolumeAttachment", "IngressClass", "ClusterQueue",
    "ResourceFlavor", "SpokeCluster",
})
DEFAULT_COMPLETION: dict[tuple[str, str], tuple[str, ...]] = {
    ("batch", "Job"): ("Complete",),
    ("jobset.x-k8s.io", "JobSet"): ("Completed",),
    ("kubeflow.org", "PyTorchJob"): ("Succeeded",),
    ("kubeflow.org", "TFJob"): ("Succeeded",),
    ("kubeflow.org", "MPIJob"): ("Succeeded",),
    ("kubeflow.org", "XGBoostJob"): ("Succeeded",),
    ("kubeflow.org", "PaddleJob"): ("Succeeded",),
    ("ray.io", "RayJob"): ("Complete",),
}
"""(group, kind) -> the condition types that mean a wrapped object of that kind is done,
used when its item gives no ``completionstatus``: a Job is done when *it* says Complete,
not when the pods present at some moment have succeeded (between waves of a Job with
completions > parallelism, or after a failed pod was replaced, the pods mislead). A
RayJob's are the ones ``reported_conditions`` reads off its status."""


def reported_conditions(api_version: str, kind: str, status: object) -> dict[str, str]:
    """A wrapped object's conditions (type -> status), as completion reads them.

    Most kinds say how they end in ``status.conditions``. A RayJob says it in
    ``status.jobDeploymentStatus`` and ``status.jobStatus`` (KubeRay writes no conditions
    on it), read here as the conditions they mean. ``Complete``: its deployment is
    Complete and its Ray job SUCCEEDED. ``Failed``: its deployment Failed (KubeRay's own
    retries, ``backoffLimit``, are spent by then: a Ray job that failed with retries left
    is written as Retrying, and mcad leaves it to KubeRay) or ValidationFailed, or it is
    Complete with a Ray job that did not succeed (STOPPED by hand). A Ray job FAILED under
    a deployment still Running or Retrying is not yet an end."""
    status = status if isinstance(status, Mapping) else {}
    out = {str(c.get("type", "")): str(c.get("status", ""))
           for c in status.get("conditions") or [] if isinstance(c, Mapping)}
    if (api_version.rpartition("/")[0], kind) == ("ray.io", "RayJob"):
        deployment, job = status.get("jobDeploymentStatus"), status.get("jobStatus")
        if deployment == "Complete" and job == "SUCCEEDED":
            out["Complete"] = "True"
        elif deployment in ("Failed", "ValidationFailed") or deployment == "Complete":
            out["Failed"] = "True"
    return out


_SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "managedFields",
                  "generation", "selfLink")


@dataclass(frozen=True, slots=True)
class WrappedObject:
    """One object to create: where it came from and its final manifest."""

    index: int
    api_version: str
    kind: str
    name: str
    manifest: dict[str, Any]
    completion: tuple[str, ...] = ()
    """The item's ``completionstatus`` (or its kind's ``DEFAULT_COMPLETION``): condition
    types that mean it is done."""

    @property
    def describe(self) -> str:
        return f"GenericItems[{self.index}] {self.kind}/{self.name}"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an AppWrapper's objects will not be created (reason is CamelCase)."""

    reason: str
    message: str


def wrapped_kinds(spec: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The (apiVersion, kind) of every object an AppWrapper wraps, sorted, once each."""
    items = (spec.get("resources") or {}).get("GenericItems") or []
    kinds = set()
    for item in items:
        template = item.get("generictemplate") if isinstance(item, Mapping) else None
        if isinstance(template, Mapping) and template.get("apiVersion") and \
                template.get("kind"):
            kinds.add((str(template["apiVersion"]), str(template["kind"])))
    return tuple(sorted(kinds))


def dispatch_digest(spec: Mapping[str, Any]) -> str:
    """A digest of what a dispatch creates and how it is scheduled: the wrapped items and
    the scheduling spec, less what may change while it runs (requeuing, dispatchDuration).
    Priority is left out: it matters only in the queue."""
    scheduling = dict(spec.get("schedulingSpec") or {})
    scheduling.pop("requeuing", None)
    scheduling.pop("dispatchDuration", None)
    canonical = json.dumps({"resources": spec.get("resources"), "scheduling": scheduling},
                           sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def identity_labels(*, name: str, uid: str) -> dict[str, str]:
    return {NAME_LABEL: name, WORKLOAD_LABEL: name, UID_LABEL: uid}


def wrapped_objects(*, name: str, namespace: str, uid: str, spec: Mapping[str, Any],
                    kind_allowed: Callable[[str, str], bool],
                    token_secrets_allowed: bool = False) -> list[WrappedObject] | Refusal:
    """The manifests to create for an AppWrapper, or why none may be created."""
    items = (spec.get("resources") or {}).get("GenericItems") or []
    out: list[WrappedObject] = []
    labels = identity_labels(name=name, uid=uid)
    for index, item in enumerate(items):
        template = item.get("generictemplate") if isinstance(item, Mapping) else None
        if not template:
            continue  # custompodresources alone: a declaration, nothing to create
        where = f"GenericItems[{index}]"
        if not isinstance(template, Mapping):
            return Refusal("InvalidItem", f"{where}.generictemplate is not an object")
        api_version, kind = str(template.get("apiVersion", "")), str(template.get("kind", ""))
        meta = template.get("metadata") or {}
        obj_name = str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
        if not api_version or not kind or not obj_name:
            return Refusal("InvalidItem", f"{where}.generictemplate needs apiVersion, kind "
                                          "and metadata.name")
        if not kind_allowed(api_version, kind):
            why = (": RBAC objects must be named in allowedKinds, since one made with mcad's "
                   "rights could grant anything" if api_version.startswith(
                       "rbac.authorization.k8s.io/") else "")
            return Refusal("KindNotAllowed", f"{where} is a {kind} ({api_version}), which "
                                             f"the mcad configuration does not allow to wrap"
                                             f"{why}")
        if kind == "Secret" and api_version == "v1" and _token_secret(template) and \
                not token_secrets_allowed:
            return Refusal("KindNotAllowed", f"{where} is a Secret of type "
                                             f"{TOKEN_SECRET_TYPE}, which the mcad "
                                             "configuration does not allow to wrap "
                                             "(allowServiceAccountTokenSecrets)")
        if kind in CLUSTER_SCOPED:
            return Refusal("ClusterScoped", f"{where} is a {kind}, which is cluster-scoped; "
                                            "an AppWrapper may only create namespaced objects")
        other = meta.get("namespace")
        if other and namespace and other != namespace:  # "": not known yet (offline)
            return Refusal("ForeignNamespace",
                           f"{where} {kind}/{obj_name} names namespace {other!r}; an "
                           f"AppWrapper may only create objects in its own namespace "
                           f"({namespace!r})")
        # New dicts only where something changes (metadata, and the path to each pod
        # template's labels); the rest is shared with the AppWrapper's spec, which nobody
        # changes: a deep copy of every template was a quarter of the controller's CPU
        # per dispatch at scale.
        manifest = {k: v for k, v in template.items() if k != "status"}
        manifest_meta = {k: v for k, v in (meta if isinstance(meta, Mapping) else {}).items()
                         if k not in _SERVER_FIELDS}
        manifest_meta["namespace"] = namespace
        own = {**labels, **({RESOURCE_NAME_LABEL: obj_name} if len(obj_name) <= 63 else {})}
        object_labels = {**(manifest_meta.get("labels") or {}), **own}
        manifest_meta["labels"] = object_labels
        manifest["metadata"] = manifest_meta
        if "spec" in manifest:
            # As MCAD's addLabelsToPodTemplateField: the template keeps its own labels
            # and the object's labels (its own and mcad's) are written over them, so on
            # a key both set the object's value wins. MCAD's users relied on that: a
            # Deployment whose selector and object labels say app=A while its template
            # says app=B runs under MCAD (the merge makes the template match).
            manifest["spec"] = _with_pod_labels(manifest["spec"], object_labels)
        completion = completion_types(str(item.get("completionstatus") or "")) or \
            DEFAULT_COMPLETION.get((api_version.rpartition("/")[0], kind), ())
        out.append(WrappedObject(index, api_version, kind, obj_name, manifest, completion))
    return out


TOKEN_SECRET_TYPE = "kubernetes.io/service-account-token"


def _token_secret(template: Mapping[str, Any]) -> bool:
    """A Secret the API server would fill with a ServiceAccount's token."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return template.get("type") == TOKEN_SECRET_TYPE or (
        isinstance(annotations, Mapping) and "kubernetes.io/service-account.name" in annotations)


def _with_pod_labels(node: Any, labels: Mapping[str, str]) -> Any:
    """``node`` with ``labels`` written over the labels of every pod template inside it.
    What holds no pod template (containers, volumes, ...) is returned as it is
    (shared); only the dicts and lists on a path to a pod template are new."""
    def label(template: Mapping[str, Any], spec: Any) -> Any:
        pod_meta = dict(template.get("metadata") or {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
        return {**template, "metadata": pod_meta, "spec": spec}

    return rewrite_pod_templates(node, label)


def owned_by(manifest: Mapping[str, Any], *, name: str, uid: str) -> dict[str, Any]:
    """``manifest`` with a controller ownerReference to the AppWrapper ``name``/``uid``
    appended to any the template has, as MCAD sets in single-cluster mode: the garbage
    collector then removes what an AppWrapper made even if its finalizer were removed
    by hand."""
    out = dict(manifest)
    meta = dict(out.get("metadata") or {})
    out["metadata"] = meta
    meta["ownerReferences"] = [*(meta.get("ownerReferences") or []), {
        "apiVersion": APPWRAPPER_API_VERSION, "kind": "AppWrapper", "name": name,
        "uid": uid, "controller": True, "blockOwnerDeletion": True}]
    return out


def for_remote_spoke(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``manifest`` as created on a spoke other than the hub: without ownerReferences.
    An owner named in the template lives on the hub (Kubernetes cannot own across
    clusters), and a spoke's garbage collector deletes an object whose owner it cannot
    find; the uid label and the AppWrapper's finalizer do that job there."""
    meta = manifest.get("metadata") or {}
    if "ownerReferences" not in meta:
        return dict(manifest)
    out = dict(manifest)
    out["metadata"] = {k: v for k, v in meta.items() if k != "ownerReferences"}
    return out


def is_ours(obj: Mapping[str, Any], *, uid: str) -> bool:
    """True when an existing object carries this AppWrapper's uid label."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(UID_LABEL) == uid)
