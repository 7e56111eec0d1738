"""What a v1beta2 AppWrapper's components must satisfy beyond their schema, and mcad's
sentences told in v1beta2's words.

Why beside the models: ``mcad validate`` and the admission webhook check a v1beta2
AppWrapper by converting it to the stored version and running the one check every
AppWrapper gets (``mcad.validation``); what only v1beta2 can get wrong (a podSet whose
path leads nowhere, a declaration that contradicts the template, no pods at all) is
checked here first, as project-codeflare/appwrapper's admission does, and every sentence
is then put in the words the user wrote (``components[0].template``, not
``GenericItems[0].generictemplate``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mcad.api.conversion import V1BETA1, to_v1beta2
from mcad.core.workload.demand import DemandError, inferred_pod_sets
from mcad.core.workload.podsets import PodSetError, declared_from_wire, declared_problems

_WORDS = (
    (re.compile(r"spec\.resources\.GenericItems\[(\d+)\]\.generictemplate"),
     r"spec.components[\1].template"),
    (re.compile(r"spec\.resources\.GenericItems\[(\d+)\]"), r"spec.components[\1]"),
    (re.compile(r"GenericItems\[(\d+)\]\.generictemplate"), r"components[\1].template"),
    (re.compile(r"GenericItems\[(\d+)\]"), r"components[\1]"),
    (re.compile(r"\bgenerictemplate\b"), "template"),
    (re.compile(r"spec\.resources\.GenericItems"), "spec.components"),
)


def in_v1beta2_words(sentence: str) -> str:
    """``sentence`` naming v1beta2's fields where it named v1beta1's."""
    for pattern, words in _WORDS:
        sentence = pattern.sub(words, sentence)
    return sentence


def problems(doc: Mapping[str, Any]) -> list[str]:
    """What is wrong with a v1beta2 AppWrapper's podSets (its schema already checked)."""
    found = doc.get("spec")
    components = found.get("components") if isinstance(found, Mapping) else None
    out: list[str] = []
    pods_anywhere = False
    for index, component in enumerate(components if isinstance(components, list) else ()):
        where = f"spec.components[{index}]"
        template = component.get("template") if isinstance(component, Mapping) else None
        if not isinstance(template, Mapping):
            continue
        try:
            declared = declared_from_wire(component.get("podSets"))
        except PodSetError as err:
            out.append(f"{where}: {err}")
            continue
        try:
            inferred = inferred_pod_sets(template)
        except DemandError as err:
            out.append(f"{where}.template: {in_v1beta2_words(str(err)).rstrip('.')}")
            continue
        out.extend(declared_problems(template, declared, inferred, where=where))
        pods_anywhere |= bool(declared or inferred)
    if not out and not pods_anywhere:
        out.append("spec.components: no component makes pods (no podSets declared, and none "
                   "of a kind whose pods mcad can read); declare the podSets of the "
                   "component that makes them")
    return out


def frozen_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Sentences for what an update changed that v1beta2 keeps fixed once the AppWrapper
    exists: its components' podSets (its pods are counted by them) and ``managedBy``
    (which controller runs it). Either object may be in either version."""
    before, after = _frozen(old), _frozen(new)
    out = []
    for index, (was, now) in enumerate(zip(before[0], after[0], strict=False)):
        if was != now:
            out.append(f"spec.components[{index}].podSets: cannot change once the "
                       "AppWrapper exists (its pods are counted by them); delete it and "
                       "create it again")
    if before[1] != after[1]:
        out.append("spec.managedBy: cannot change once the AppWrapper exists (it says which "
                   "controller runs it); delete it and create it again")
    return out


def _frozen(obj: Mapping[str, Any]) -> tuple[list[list[tuple[str, int]]], object]:
    view = to_v1beta2(obj) if obj.get("apiVersion") == V1BETA1 else obj
    found = view.get("spec")
    spec: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    pod_sets = []
    for component in spec.get("components") or []:
        try:
            declared = declared_from_wire(component.get("podSets")
                                          if isinstance(component, Mapping) else None)
        except PodSetError:
            declared = ()
        pod_sets.append([(p.path, p.replicas) for p in declared])
    return pod_sets, spec.get("managedBy")
