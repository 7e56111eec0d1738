"""Converting an AppWrapper between v1beta1 (stored) and v1beta2, losing nothing.

Why here, pure: the API server calls the conversion webhook (``mcad.webhook.conversion``)
whenever a client reads or writes a version other than the stored one, for every object
of a list at once; the conversion must be exact (a read-modify-write through v1beta2 must
give back the v1beta1 object mcad wrote, and the other way round), cheap, and the same in
every replica. So it is plain functions of the object, held to that by a property test
(``tests/api/test_conversion.py``).

The spec: a v1beta2 component is a v1beta1 GenericItem's ``generictemplate``. What one
version cannot say travels in an annotation on the object, as compact JSON, and is put
back on the way home:

- on a v1beta1 object, ``workload.codeflare.dev/v1beta2`` holds what only v1beta2 says:
  each component's ``podSets``, ``annotations`` and ``podSetInfos``, ``suspend`` and
  ``managedBy``. mcad reads it (``kept_facts``): an AppWrapper written as v1beta2 counts
  its pods by its podSets, is held out of the queue while suspended, and is left alone
  when another controller manages it. Its presence also says the AppWrapper was written
  as v1beta2 (v1beta2 rules apply, e.g. a component of a kind nobody can read makes no
  pods), unless it says ``"origin": "v1beta1"``;
- on a v1beta2 object, ``workload.codeflare.dev/v1beta1`` holds the v1beta1 spec less
  the templates (priority, schedulingSpec, each item's replicas, custompodresources,
  completionstatus, ...); it is there, ``{}`` at least, for every AppWrapper written as
  v1beta1, unless it says ``"origin": "v1beta2"``.

The status: v1beta2's is derived from the stored one (``mcad.api.v1beta2_status``), and
the stored one is read back from it. For a status that reading back would not give
exactly (none that mcad writes), the other version's status rides in the annotation with
a fingerprint of the status it belongs to, and is used only while that status is
unchanged: mcad's next status write makes the derived one current again.

Both annotations are reserved: a client that sets one has it replaced.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcad.api import appwrapper, appwrapper_v1beta2, v1beta2_status
from mcad.core.workload.demand import DemandError, inferred_pod_sets
from mcad.core.workload.podsets import DeclaredPodSet, PodSetError, declared_from_wire

V1BETA2_KEPT = "workload.codeflare.dev/v1beta2"
"""On a v1beta1 object: what only v1beta2 says (JSON)."""
V1BETA1_KEPT = "workload.codeflare.dev/v1beta1"
"""On a v1beta2 object: what only v1beta1 says (JSON)."""
RESERVED_ANNOTATIONS = (V1BETA2_KEPT, V1BETA1_KEPT)
CONVERT_PATH = "/convert"
"""Where mcad's TLS server answers ConversionReviews (the CRD names it)."""
CONVERSION_SERVICE_PORT = 8443
"""The webhook Service's port for the conversion webhook's own process (the manifests
map it to the container's ``conversion`` port, ``--conversion-address``)."""
MCAD_CONTROLLER = "workload.codeflare.dev/appwrapper-controller"
"""The AppWrapper controller's name in ``spec.managedBy``: mcad runs AppWrappers in its
place, so this name (or none) is mcad's."""
V1BETA1 = appwrapper.API_VERSION
V1BETA2 = appwrapper_v1beta2.API_VERSION


class ConversionError(ValueError):
    """An object that cannot be converted; the message names what is wrong."""


def convert(obj: Mapping[str, Any], api_version: str) -> dict[str, Any]:
    """``obj`` (an AppWrapper in either version) in ``api_version``."""
    have = obj.get("apiVersion")
    if have not in (V1BETA1, V1BETA2):
        raise ConversionError(f"apiVersion {have!r} is not an AppWrapper version mcad serves")
    if api_version not in (V1BETA1, V1BETA2):
        raise ConversionError(f"cannot convert to {api_version!r}: mcad serves {V1BETA1} "
                              f"and {V1BETA2}")
    if have == api_version:
        return dict(obj)
    return to_v1beta2(obj) if api_version == V1BETA2 else to_v1beta1(obj)


# -- v1beta1 -> v1beta2 --------------------------------------------------------------------

def to_v1beta2(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A stored (v1beta1) AppWrapper as v1beta2."""
    meta, kept = _take(obj, V1BETA2_KEPT)
    written_as_v1beta2 = kept is not None and kept.get("origin") != "v1beta1"
    kept = kept or {}
    spec = _mapping(obj.get("spec"))
    resources = _mapping(spec.get("resources"))
    items = [i if isinstance(i, Mapping) else {} for i in _list(resources.get("GenericItems"))]
    extras = [e if isinstance(e, Mapping) else {} for e in _list(kept.get("components"))]
    components = []
    for index, item in enumerate(items):
        component = dict(extras[index]) if index < len(extras) else {}
        component["template"] = item.get("generictemplate")
        components.append(component)
    new_spec: dict[str, Any] = {"components": components}
    for key in ("suspend", "managedBy"):
        if key in kept:
            new_spec[key] = kept[key]
    out_kept: dict[str, Any] = {}
    skeleton = _skeleton(spec)
    if skeleton != _canonical(len(items)):
        out_kept["spec"] = skeleton
    out = _rest_of(obj, api_version=V1BETA2, spec=new_spec)
    if "status" in obj:
        status = _mapping(obj.get("status"))
        restored = _kept_status(kept, status)
        if restored is not None:
            out["status"] = restored.get("is")
        else:
            out["status"] = derived = v1beta2_status.derive(
                status, meta=meta, components=_with_pod_sets(components))
            if v1beta2_status.back(derived) != status:
                out_kept["status"] = {"of": fingerprint(derived), "is": status}
    out["metadata"] = _keep(meta, V1BETA1_KEPT, out_kept,
                            origin="v1beta2" if written_as_v1beta2 else None)
    return out


# -- v1beta2 -> v1beta1 --------------------------------------------------------------------

def to_v1beta1(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A v1beta2 AppWrapper as stored (v1beta1)."""
    meta, kept = _take(obj, V1BETA1_KEPT)
    written_as_v1beta1 = kept is not None and kept.get("origin") != "v1beta2"
    kept = kept or {}
    spec = _mapping(obj.get("spec"))
    components = [c if isinstance(c, Mapping) else {} for c in _list(spec.get("components"))]
    skeleton = kept.get("spec")
    new_spec = copy.deepcopy(dict(skeleton)) if isinstance(skeleton, Mapping) \
        else _canonical(0)
    resources = new_spec.get("resources")
    if not isinstance(resources, dict):
        resources = new_spec["resources"] = {}
    old_items = _list(resources.get("GenericItems"))
    if components or "GenericItems" in resources:
        resources["GenericItems"] = [
            {**(old_items[i] if i < len(old_items) and isinstance(old_items[i], Mapping)
                else {}), "generictemplate": c.get("template")}
            for i, c in enumerate(components)]
    out_kept: dict[str, Any] = {}
    extras = [{k: v for k, v in c.items() if k != "template"} for c in components]
    if any(extras):
        out_kept["components"] = extras
    for key in ("suspend", "managedBy"):
        if key in spec:
            out_kept[key] = spec[key]
    out = _rest_of(obj, api_version=V1BETA1, spec=new_spec)
    if "status" in obj:
        status = _mapping(obj.get("status"))
        restored = _kept_status(kept, status)
        out["status"] = stored = v1beta2_status.back(status) if restored is None \
            else restored.get("is")
        again = v1beta2_status.derive(_mapping(stored), meta=meta,
                                      components=_with_pod_sets(components))
        if again != status:
            out_kept["status"] = {"of": fingerprint(_mapping(stored)), "is": status}
    out["metadata"] = _keep(meta, V1BETA2_KEPT, out_kept,
                            origin="v1beta1" if written_as_v1beta1 else None)
    return out


# -- what mcad reads of the kept annotation ---------------------------------------------

@dataclass(frozen=True, slots=True)
class V1beta2Facts:
    """What a stored AppWrapper's ``workload.codeflare.dev/v1beta2`` annotation says."""

    written_as_v1beta2: bool
    """Created (or last written whole) as v1beta2: v1beta2's rules apply."""
    pod_sets: tuple[tuple[DeclaredPodSet, ...] | None, ...] = ()
    """Each component's declared podSets (None: none declared, or unreadable)."""
    suspend: bool = False
    managed_by: str | None = None

    def demand_pod_sets(self) -> tuple[tuple[DeclaredPodSet, ...] | None, ...] | None:
        """What the demand counts pods by (``mcad.core.workload.demand``): the podSets when it was
        written as v1beta2 or declares some; None: v1beta1's rules."""
        if self.written_as_v1beta2 or any(self.pod_sets):
            return self.pod_sets
        return None

    @property
    def managed_elsewhere(self) -> bool:
        """Another controller runs it (``spec.managedBy`` names one that is not mcad)."""
        return self.managed_by is not None and self.managed_by != MCAD_CONTROLLER


def kept_facts(annotations: Mapping[str, Any] | None) -> V1beta2Facts | None:
    """What the kept annotation says (None: there is none, or it is not JSON: the
    AppWrapper is a v1beta1 one)."""
    kept = _parse((annotations or {}).get(V1BETA2_KEPT))
    if kept is None:
        return None
    pod_sets: list[tuple[DeclaredPodSet, ...] | None] = []
    for extra in _list(kept.get("components")):
        try:
            declared = declared_from_wire((extra or {}).get("podSets")
                                          if isinstance(extra, Mapping) else None)
        except PodSetError:
            declared = ()
        pod_sets.append(declared or None)
    managed_by = kept.get("managedBy")
    return V1beta2Facts(written_as_v1beta2=kept.get("origin") != "v1beta1",
                        pod_sets=tuple(pod_sets), suspend=kept.get("suspend") is True,
                        managed_by=managed_by if isinstance(managed_by, str) else None)


def fingerprint(status: Mapping[str, Any]) -> str:
    """A short digest of a status: a kept status belongs to the status it was kept with."""
    text = json.dumps(status, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- pieces ----------------------------------------------------------------------------

def _rest_of(obj: Mapping[str, Any], *, api_version: str,
             spec: dict[str, Any]) -> dict[str, Any]:
    """``obj`` in ``api_version`` with ``spec``: the fields neither version changes (kind
    and any other), without its metadata and status, which the caller sets."""
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "metadata", "spec",
                                                      "status")}
    out["apiVersion"] = api_version
    out["spec"] = spec
    return out


def _kept_status(kept: Mapping[str, Any], status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The other version's status kept in the annotation (``{"of": ..., "is": ...}``)
    while ``status`` is the one it was kept with; None once mcad wrote another status
    (the derived one is current again) or when none was kept."""
    kept_status = _mapping(kept.get("status"))
    if kept_status and kept_status.get("of") == fingerprint(status):
        return kept_status
    return None


def _keep(meta: dict[str, Any], key: str, kept: dict[str, Any], *,
          origin: str | None) -> dict[str, Any]:
    """``meta`` with what the other version cannot say in the annotation ``key``.

    ``origin``: the object was written in the version it is converted to; then the
    annotation is there only when it keeps something, and says so (``"origin"``). An
    object written in the version it is converted from always has it, ``{}`` at least:
    its presence says where the object came from.
    """
    if origin is not None:
        if not kept:
            return meta
        kept["origin"] = origin
    return _put(meta, key, kept)


def _with_pod_sets(components: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The components with their podSets, declared or else inferred (as v1beta2 shows
    them in componentStatus)."""
    out = []
    for component in components:
        declared = component.get("podSets")
        if not declared:
            template = component.get("template")
            try:
                found = inferred_pod_sets(template) if isinstance(template, Mapping) else None
            except DemandError:
                found = None
            declared = [p.to_wire() for p in found or ()]
        out.append({"template": component.get("template"), "podSets": declared})
    return out


def _skeleton(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The v1beta1 spec less its templates: what v1beta2 cannot say."""
    out = dict(spec)
    resources = spec.get("resources")
    if isinstance(resources, Mapping):
        resources = dict(resources)
        items = resources.get("GenericItems")
        if isinstance(items, list):
            resources["GenericItems"] = [
                {k: v for k, v in i.items() if k != "generictemplate"}
                if isinstance(i, Mapping) else i for i in items]
        out["resources"] = resources
    return out


def _canonical(items: int) -> dict[str, Any]:
    """The skeleton of a spec that is nothing but its templates."""
    return {"resources": {"GenericItems": [{} for _ in range(items)]}}


def _take(obj: Mapping[str, Any], key: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``obj``'s metadata without the annotation ``key``, and what that held."""
    meta = dict(_mapping(obj.get("metadata")))
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping) or key not in annotations:
        return meta, None
    rest = {k: v for k, v in annotations.items() if k not in RESERVED_ANNOTATIONS}
    if rest:
        meta["annotations"] = rest
    else:
        meta.pop("annotations", None)
    return meta, _parse(annotations[key])


def _put(meta: dict[str, Any], key: str, value: Mapping[str, Any]) -> dict[str, Any]:
    annotations = {k: v for k, v in _mapping(meta.get("annotations")).items()
                   if k not in RESERVED_ANNOTATIONS}
    annotations[key] = json.dumps(value, separators=(",", ":"), sort_keys=True)
    return {**meta, "annotations": annotations}


def _parse(text: object) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
