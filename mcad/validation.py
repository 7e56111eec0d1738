"""One check of an AppWrapper, shared by ``mcad validate`` and the admission webhook.

Why one place: what the desk says (``mcad validate``), what the API server's admission
says (the webhook) and what the dispatcher does must never disagree. An AppWrapper is
checked against the models the CRD is generated from, its demand is read as the
dispatcher reads it (``mcad.core.workload.demand``), and its wrapped objects are checked as they
would be created (``mcad.core.life.wrapping``: allowed kinds, no cluster-scoped objects, no
other namespace, no ServiceAccount-token Secrets unless allowed, no namespace that
``refusedNamespaces`` or mcad's own refuses: ``mcad.core.placement.namespaces``).

One bound comes first: at most ``MAX_WRAPPED_ITEMS`` items. The webhook checks every
item, builds every manifest and asks the hub about every wrapped kind before it answers
(within the API server's 10 s); the API server takes bodies of 3 MiB, room for tens of
thousands of small items, so without a bound one request could cost that much work for
the webhook and the hub. No AppWrapper anyone runs comes near it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcad.api import appwrapper_v1beta2, components
from mcad.api.appwrapper import AppWrapper
from mcad.api.conversion import kept_facts, to_v1beta1
from mcad.api.documents import parse_object
from mcad.config import RunConfig
from mcad.core.cycle.elastic import ELASTIC_ANNOTATION, elastic_problem
from mcad.core.life.health import policy_problems
from mcad.core.life.wrapping import (
    Refusal,
    WrappedObject,
    wrapped_kinds,
    wrapped_objects,
)
from mcad.core.quota.queues import QUEUE_LABEL
from mcad.core.workload.demand import Demand, DemandError, appwrapper_demand

MAX_WRAPPED_ITEMS = 100
"""The most ``spec.resources.GenericItems`` one AppWrapper may have. A constant, not a
setting: it bounds the admission webhook's work per request (a safety property, like the
API server's own body limit, not a policy to tune), and ``mcad validate`` at a desk with
no configuration must refuse exactly what the webhook refuses. Real AppWrappers wrap one
to a dozen objects (a Job; a RayCluster and its Services; a JobSet and its ConfigMaps)."""


@dataclass
class AppWrapperCheck:
    """What checking one AppWrapper found."""

    problems: list[str] = field(default_factory=list)
    """Sentences, each naming the field (no final period)."""
    notes: list[str] = field(default_factory=list)
    """Worth knowing, not wrong: unknown fields, fields accepted and not acted on."""
    demand: Demand | None = None
    objects: list[WrappedObject] = field(default_factory=list)


def check_appwrapper(doc: Any, *, config: RunConfig, namespace: str = "") -> AppWrapperCheck:
    """Check an AppWrapper as submitted; ``namespace`` is where it is created."""
    out = AppWrapperCheck()
    too_many = _too_many_items(doc)
    if too_many is not None:  # before anything else: the bound is on this check's work too
        out.problems.append(too_many)
        return out
    parsed = parse_object(doc)
    out.problems.extend(parsed.problems)
    out.notes.extend(parsed.notes)
    v1beta2 = isinstance(parsed.model, appwrapper_v1beta2.AppWrapper)
    if parsed.problems or not isinstance(parsed.model, AppWrapper | appwrapper_v1beta2.AppWrapper):
        if not parsed.problems:
            out.problems.append(f"kind {parsed.kind or 'nothing'} is not an AppWrapper")
        return out
    assert isinstance(doc, Mapping)
    if v1beta2:  # what only v1beta2 can get wrong, then the check every AppWrapper gets
        out.problems.extend(components.problems(doc))
        doc = to_v1beta1(doc)
    _v1beta1_check(out, doc, config=config, namespace=namespace)
    if v1beta2:
        out.problems = [components.in_v1beta2_words(p) for p in out.problems]
        out.notes = [components.in_v1beta2_words(n) for n in out.notes]
    return out


def _v1beta1_check(out: AppWrapperCheck, doc: Mapping[str, Any], *, config: RunConfig,
                   namespace: str) -> None:
    spec = doc.get("spec") or {}
    meta = doc.get("metadata") or {}
    facts = kept_facts(meta.get("annotations"))
    labels = meta.get("labels") or {}
    if QUEUE_LABEL in labels and not config.queue_names:
        out.notes.append(f"metadata.labels.{QUEUE_LABEL}: ignored, since the mcad "
                         "configuration maps no queue names to quota (queueNames)")
    elif QUEUE_LABEL in labels and labels[QUEUE_LABEL] not in config.queue_names:
        out.notes.append(f"metadata.labels.{QUEUE_LABEL}: queue {labels[QUEUE_LABEL]!r} is "
                         "not in the configuration's queueNames: it will wait "
                         "(QueueNotFound) until it is")
    try:
        out.demand = appwrapper_demand(spec, pod_sets=facts.demand_pod_sets()
                                       if facts is not None else None)
    except DemandError as err:
        out.problems.append(str(err).rstrip("."))
    annotations = meta.get("annotations") or {}
    if str(annotations.get(ELASTIC_ANNOTATION, "")).lower() == "true" and out.demand:
        problem = elastic_problem(out.demand, wrapped_kinds(spec))
        if problem is not None:
            out.problems.append(f"metadata.annotations: {problem}")
    if isinstance(annotations, Mapping):
        out.problems.extend(f"metadata.annotations: {problem}"
                            for problem in policy_problems(annotations))
    where = namespace or str(meta.get("namespace") or "")
    refused = config.refused_namespace(where) if where else None
    if refused is not None:
        out.problems.append(f"metadata.namespace: {refused.message}")
    planned = wrapped_objects(
        name=str(meta.get("name") or ""), namespace=where,
        uid="", spec=spec, kind_allowed=config.kind_allowed,
        token_secrets_allowed=config.allow_service_account_token_secrets)
    if isinstance(planned, Refusal):
        out.problems.append(planned.message.rstrip("."))
    else:
        out.objects = planned


def _too_many_items(doc: Any) -> str | None:
    """The sentence refusing an AppWrapper of more than ``MAX_WRAPPED_ITEMS`` items (None:
    not more, or not shaped so that it could be counted: the model check says why)."""
    spec = doc.get("spec") if isinstance(doc, Mapping) else None
    resources = spec.get("resources") if isinstance(spec, Mapping) else None
    items = resources.get("GenericItems") if isinstance(resources, Mapping) else \
        spec.get("components") if isinstance(spec, Mapping) else None
    if not isinstance(items, list) or len(items) <= MAX_WRAPPED_ITEMS:
        return None
    where = "spec.resources.GenericItems" if isinstance(resources, Mapping) \
        else "spec.components"
    return (f"{where} has {len(items)} items, more than the "
            f"{MAX_WRAPPED_ITEMS} one AppWrapper may wrap: split the work into several "
            "AppWrappers")
