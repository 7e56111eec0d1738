"""Hypothesis strategies for AppWrappers, valid and malformed, for fuzzing.

A valid AppWrapper is drawn first (Jobs, Pods, ConfigMaps and custom kinds, with
custompodresources, priorities, gangs and requeuing), then, most of the time, broken in
one or more places: a value of the wrong type, a number at the edges (huge, negative,
fractional), a quantity no parser should accept (or every parser should), deeply nested
objects, odd Unicode, a field removed. Used by the unit fuzz test, the end-to-end fuzz
through the real hub, and ``benchmarks/fuzz.py``.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

QUANTITIES = ["1", "0", "500m", "1.5", "2Gi", "1e3", "0.000000001", "1Ei", "-1", "1e400",
              "NaN", "", " 1", "1 Gi", "999999999999999999999999Gi", "0x10", "1m", "7Ki",
              "12345678901234567890", "+1", ".5", "5."]
NUMBERS = [0, -1, 1, 2**31, 2**63, 2**64 + 1, 10**30, -(10**30), 1.5, -0.0, 3.14159]
ODD_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)


def resources() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={
        "cpu": st.sampled_from(["1", "500m", "2"]),
        "memory": st.sampled_from(["1Gi", "512Mi"]),
        "nvidia.com/gpu": st.sampled_from(["1", "2", "8"])})


def container() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda requests: {"name": "main", "image": "busybox",
                                       "resources": {"requests": requests}}, resources())


def pod_spec() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda cs: {"restartPolicy": "Never", "containers": cs},
                     st.lists(container(), min_size=1, max_size=2))


def template() -> st.SearchStrategy[dict[str, Any]]:
    job = st.builds(lambda name, pods, spec: {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"parallelism": pods, "completions": pods, "template": {"spec": spec}}},
        NAMES, st.integers(1, 4), pod_spec())
    pod = st.builds(lambda name, spec: {"apiVersion": "v1", "kind": "Pod",
                                        "metadata": {"name": name}, "spec": spec},
                    NAMES, pod_spec())
    config_map = st.builds(lambda name: {"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"name": name}, "data": {"k": "v"}}, NAMES)
    return st.one_of(job, pod, config_map)


def item() -> st.SearchStrategy[dict[str, Any]]:
    plain = st.builds(lambda t: {"generictemplate": t}, template())
    custom = st.builds(lambda name, replicas, requests: {
        "custompodresources": [{"replicas": replicas, "requests": requests}],
        "generictemplate": {"apiVersion": "example.com/v1", "kind": "Widget",
                            "metadata": {"name": name}}},
        NAMES, st.integers(0, 3), resources())
    return st.one_of(plain, plain, custom)


def valid_appwrapper() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda name, priority, items, requeue: {
        "apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
        "metadata": {"name": name},
        "spec": {"priority": priority, "schedulingSpec": {"requeuing": requeue},
                 "resources": {"GenericItems": items}}},
        NAMES, st.integers(-10, 100), st.lists(item(), min_size=1, max_size=3),
        st.fixed_dictionaries({}, optional={
            "timeInSeconds": st.integers(0, 600),
            "growthType": st.sampled_from(["exponential", "linear", "none"])}))


def json_value(depth: int = 3) -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(NUMBERS), ODD_TEXT,
                        st.sampled_from(QUANTITIES))
    if depth <= 0:
        return scalars
    return st.one_of(scalars, st.lists(json_value(depth - 1), max_size=3),
                     st.dictionaries(ODD_TEXT, json_value(depth - 1), max_size=3))


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any, *, remove: bool = False) -> None:
    node = doc
    for key in path[:-1]:
        node = node[key]
    if remove and isinstance(node, dict):
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


def _deep(levels: int) -> Any:
    node: Any = "bottom"
    for _ in range(levels):
        node = {"n": node}
    return node


@st.composite
def appwrapper(draw: st.DrawFn) -> dict[str, Any]:
    """An AppWrapper: valid one time in five, broken in 1-3 places otherwise."""
    doc = copy.deepcopy(draw(valid_appwrapper()))
    if draw(st.integers(0, 4)) == 0:
        return doc
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        how = draw(st.sampled_from(["value", "number", "quantity", "deep", "text", "remove"]))
        value = {"value": lambda: draw(json_value()), "number": lambda: draw(
            st.sampled_from(NUMBERS)), "quantity": lambda: draw(st.sampled_from(QUANTITIES)),
            "deep": lambda: _deep(draw(st.integers(20, 200))),
            "text": lambda: draw(ODD_TEXT), "remove": lambda: None}[how]()
        _set(doc, path, value, remove=how == "remove")
    return doc


FIELD_WORDS = ("spec", "metadata", "ObjectMeta", "apiVersion", "kind", "GenericItems",
               "document", "status", "generictemplate", "quantity", "namespace")


def names_a_field(problem: str) -> bool:
    """True when a problem sentence says where (a field, the item, the document)."""
    return any(word in problem for word in FIELD_WORDS)
