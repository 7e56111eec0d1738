"""Topology: what a gang asks of the network between its pods, and where it is pinned.

Why: the workers of one training job talk to each other all the time, and a gang spread
over racks runs slower than one inside a rack (seeds 001, 003 and 004 ask for scheduling
that knows "which nodes are in the same rack"). A data centre is a tree of nested
domains (blocks of racks of nodes), and node labels already say where each node sits,
one label per level, broadest first. That is the convention of Kueue's Topology Aware
Scheduling (KEP 2724, ``Topology.spec.levels``), which mcad follows: a cluster's levels
are an ordered list of node label keys, and a domain is named by the path of label
values from the top (``block-1/rack-2``), since, as Kueue notes, a rack's label need not
be unique across blocks.

What a gang may ask (``TopologyRequest``), one of two, as Kueue's two pod-template
annotations and Volcano's ``networkTopology`` modes (``hard`` / ``soft``) put it:

- **required** level: the whole gang inside one domain of that level, or it waits;
- **preferred** level: as few domains of that level as the free nodes allow, the
  tightest first; it never waits for topology alone.

It is asked in ``schedulingSpec.topology`` (``required: <label key>`` or ``preferred:
<label key>``) or, so that a Kueue TAS user's Job moves unchanged, with Kueue's
annotations ``kueue.x-k8s.io/podset-required-topology`` / ``podset-preferred-topology``
on its pod templates. Kueue places each pod set on its own; mcad places the gang whole,
so the templates' annotations must name one level (a required one wins over preferred
ones), and ``schedulingSpec.topology``, when present, is the only word.

Where a dispatched gang may run (``TopologyPin``): the domains mcad chose for it, told
to the spoke's scheduler as a required node affinity injected into every pod template
(``pinned``), so kube-scheduler (and coscheduling, which gates on the same filters) keep
the pods inside. Kueue TAS gates the pods and assigns nodes itself; mcad names domains
and leaves the binding to the spoke, as it does without topology.

Nothing here knows nodes or clusters (``mcad.core.placement.domains`` does): this module is read by
the demand reader and the capacity model alike.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcad.core.workload.podsets import every_pod_template, rewrite_pod_templates

REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
HOSTNAME = "kubernetes.io/hostname"

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class TopologyError(ValueError):
    """A topology request that cannot be read; one sentence naming where and why."""


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a node label key Kubernetes accepts (None: it is one)."""
    prefix, slash, name = key.rpartition("/")
    if not name or len(name) > 63 or not _NAME.match(name):
        return (f"{key!r} is not a label key (a name of at most 63 letters, digits, '-', "
                "'_' and '.', optionally after a DNS prefix and '/')")
    if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return f"{key!r} has a prefix that is not a DNS subdomain"
    return None


def level_name(key: str) -> str:
    """How sentences call a level: the label key's name (``rack`` for ``example.com/rack``)."""
    return key.rpartition("/")[2]


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """A gang's whole-gang topology wish: ``level`` (a node label key) ``required`` or
    preferred, as said at ``source``."""

    level: str
    required: bool
    source: str
    grows: bool = False
    """Elastic: it may grow later, so it is pinned to whole domains of its level (growth
    then has the room of the domain, not only the nodes it started on)."""

    @property
    def mode(self) -> str:
        return "required" if self.required else "preferred"

    def describe(self) -> str:
        """``required rack (example.com/rack)``."""
        return f"{self.mode} {level_name(self.level)} ({self.level})"


def topology_request(spec: Mapping[str, Any]) -> TopologyRequest | None:
    """What an AppWrapper's ``.spec`` asks (None: nothing). Raises ``TopologyError``."""
    scheduling = spec.get("schedulingSpec") or {}
    asked = scheduling.get("topology") if isinstance(scheduling, Mapping) else None
    if asked is not None:
        return _from_spec(asked)
    return _from_annotations(spec)


def _from_spec(asked: Any) -> TopologyRequest:
    where = "spec.schedulingSpec.topology"
    if not isinstance(asked, Mapping):
        raise TopologyError(f"{where} must be an object with required or preferred")
    required, preferred = asked.get("required"), asked.get("preferred")
    if (required is None) == (preferred is None):
        raise TopologyError(f"{where} must give exactly one of required and preferred "
                            "(a node label key, such as kubernetes.io/hostname)")
    mode, level = ("required", required) if required is not None else ("preferred", preferred)
    return TopologyRequest(_level(level, f"{where}.{mode}"), mode == "required",
                           f"{where}.{mode}")


def _level(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise TopologyError(f"{where} must be a node label key, not {value!r}")
    problem = label_key_problem(value)
    if problem is not None:
        raise TopologyError(f"{where}: {problem}")
    return value


def _from_annotations(spec: Mapping[str, Any]) -> TopologyRequest | None:
    resources = spec.get("resources") or {}
    items = resources.get("GenericItems") if isinstance(resources, Mapping) else None
    asked: dict[str, dict[str, list[str]]] = {REQUIRED_ANNOTATION: {}, PREFERRED_ANNOTATION: {}}
    for index, item in enumerate(items if isinstance(items, list) else ()):
        template = item.get("generictemplate") if isinstance(item, Mapping) else None
        if not isinstance(template, Mapping):
            continue
        meta = template.get("metadata")
        kind = str(template.get("kind", ""))
        name = meta.get("name", "") if isinstance(meta, Mapping) else ""
        where = f"GenericItems[{index}] {kind}/{name}"
        templates = [template] if kind == "Pod" else list(every_pod_template(template.get("spec")))
        for pod_template in templates:
            pod_meta = pod_template.get("metadata") or {}
            annotations = pod_meta.get("annotations") if isinstance(pod_meta, Mapping) else None
            if not isinstance(annotations, Mapping):
                continue
            for annotation, levels in asked.items():
                if annotation in annotations:
                    level = _level(annotations[annotation], f"{where}: the annotation "
                                                           f"{annotation}")
                    levels.setdefault(level, []).append(where)
    for annotation, required in ((REQUIRED_ANNOTATION, True), (PREFERRED_ANNOTATION, False)):
        levels = asked[annotation]
        if len(levels) > 1:
            named = "; ".join(f"{level} on {', '.join(sorted(set(places)))}"
                              for level, places in sorted(levels.items()))
            raise TopologyError(
                f"the pod templates ask for different levels with {annotation} ({named}); "
                "mcad places the whole gang in one domain, so give them one level, or say "
                "it once in spec.schedulingSpec.topology")
        if levels:
            ((level, places),) = levels.items()
            return TopologyRequest(level, required, f"the annotation {annotation} on "
                                                    f"{', '.join(sorted(set(places)))}")
    return None


# -- where a gang runs ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TopologyPin:
    """The domains a dispatched gang may run in: ``levels`` (label keys, broadest first,
    down to the pinned level) and, for each domain, its label values along them."""

    levels: tuple[str, ...]
    domains: tuple[tuple[str, ...], ...]

    def holds(self, labels: Mapping[str, str]) -> bool:
        """True when a node with ``labels`` is inside one of the domains."""
        return any(all(labels.get(key) == value for key, value in zip(self.levels, domain,
                                                                       strict=True))
                   for domain in self.domains)

    def describe(self) -> str:
        """``rack b1/r2`` (``racks b1/r1, b1/r2`` for several); pinned to nodes, ``nodes
        n1, n2 (rack b1/r2)``."""
        if self.levels[-1] == HOSTNAME and len(self.levels) > 1:
            parents = TopologyPin(self.levels[:-1], tuple(sorted({d[:-1] for d in self.domains})))
            nodes = ", ".join(d[-1] for d in self.domains)
            return f"node{'s' if len(self.domains) > 1 else ''} {nodes} ({parents.describe()})"
        name = level_name(self.levels[-1])
        plural = "s" if len(self.domains) > 1 else ""
        return f"{name}{plural} {', '.join('/'.join(d) for d in self.domains)}"

    def to_status(self) -> dict[str, Any]:
        """As ``status.topology`` records it."""
        return {"levels": list(self.levels), "domains": [list(d) for d in self.domains]}

    @classmethod
    def from_status(cls, value: Any) -> TopologyPin | None:
        """Read ``status.topology`` back (None when absent or not of that shape)."""
        if not isinstance(value, Mapping):
            return None
        levels, domains = value.get("levels"), value.get("domains")
        if not isinstance(levels, list) or not levels or not isinstance(domains, list) \
                or not all(isinstance(k, str) for k in levels):
            return None
        out = []
        for domain in domains:
            if not isinstance(domain, list) or len(domain) != len(levels) or \
                    not all(isinstance(v, str) for v in domain):
                return None
            out.append(tuple(domain))
        return cls(tuple(levels), tuple(out)) if out else None

    def node_selector_terms(self) -> list[dict[str, Any]]:
        """The pin as ``nodeSelectorTerms`` (any one term admits a node): one term per
        parent path, the last level ``In`` the pinned values under it."""
        by_parent: dict[tuple[str, ...], list[str]] = {}
        for domain in self.domains:
            by_parent.setdefault(domain[:-1], []).append(domain[-1])
        return [{"matchExpressions": [
            *({"key": key, "operator": "In", "values": [value]}
              for key, value in zip(self.levels[:-1], parent, strict=True)),
            {"key": self.levels[-1], "operator": "In", "values": sorted(values)}]}
            for parent, values in sorted(by_parent.items())]


def pinned(manifest: dict[str, Any], pin: TopologyPin | None) -> dict[str, Any]:
    """``manifest`` with every pod template (a bare Pod's own spec too) kept inside
    ``pin`` by a required node affinity; ``pin`` None: ``manifest`` itself.

    Node affinity the template already has is kept: its terms are combined with the pin's
    (each of its terms AND each of the pin's), so both must hold. Only the dicts on the
    way to a pod spec are new; the rest is shared with ``manifest``, as a plan shares it
    with the spec (``mcad.core.life.wrapping``), so nothing the caller holds is changed.
    """
    if pin is None:
        return manifest
    terms = pin.node_selector_terms()
    spec = manifest.get("spec")
    if manifest.get("kind") == "Pod" and isinstance(spec, Mapping):
        return {**manifest, "spec": _required(spec, terms)}
    changed = rewrite_pod_templates(
        spec, lambda template, inner: {**template, "spec": _required(inner, terms)})
    return manifest if changed is spec else {**manifest, "spec": changed}


def _required(pod_spec: Mapping[str, Any], terms: list[dict[str, Any]]) -> dict[str, Any]:
    """``pod_spec`` whose required node affinity also demands one of ``terms``."""
    affinity = dict(pod_spec.get("affinity") or {})
    node = dict(affinity.get("nodeAffinity") or {})
    required = dict(node.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    existing = required.get("nodeSelectorTerms") or []
    required["nodeSelectorTerms"] = copy.deepcopy(terms) if not existing else [
        {**own, "matchExpressions": [*(own.get("matchExpressions") or []),
                                     *copy.deepcopy(term["matchExpressions"])]}
        for own in existing for term in terms]
    node["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["nodeAffinity"] = node
    return {**pod_spec, "affinity": affinity}
