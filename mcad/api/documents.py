"""From a decoded YAML/JSON document to a model, or to sentences saying what is wrong.

Why here and not in the CLI: ``mcad validate`` and the controller (which must explain
in a status condition why it cannot use an object) need the same answers, worded the
same way. Pydantic's errors are precise but read like a parser's; this module turns
each into ``<field path>: <what is wrong>``, with the path in wire names
(``spec.resources.GenericItems[0].custompodresources[0].requests.nvidia.com/gpu``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from mcad.api import appwrapper, appwrapper_v1beta2, quotasubtree, spokecluster
from mcad.api.meta import WireModel, show_value


@dataclass(frozen=True)
class Kind:
    """A kind mcad understands and the apiVersions it accepts for it (``models``: those
    whose model is not ``model``)."""

    model: type[WireModel]
    api_versions: tuple[str, ...]
    models: Mapping[str, type[WireModel]] = field(default_factory=dict)

    def model_for(self, api_version: str) -> type[WireModel]:
        return self.models.get(api_version, self.model)


KINDS: dict[str, Kind] = {
    appwrapper.KIND: Kind(appwrapper.AppWrapper,
                          (appwrapper.API_VERSION, appwrapper_v1beta2.API_VERSION),
                          {appwrapper_v1beta2.API_VERSION: appwrapper_v1beta2.AppWrapper}),
    quotasubtree.KIND: Kind(
        quotasubtree.QuotaSubtree,
        tuple(f"{quotasubtree.GROUP}/{v}" for v in quotasubtree.SERVED_VERSIONS),
    ),
    spokecluster.KIND: Kind(spokecluster.SpokeCluster, (spokecluster.API_VERSION,)),
}


@dataclass(frozen=True)
class Parsed:
    """One document, checked: the model when valid, else the problems."""

    kind: str
    """The document's kind as written ("" when it has none)."""
    name: str
    """metadata.name as written ("" when it has none)."""
    model: WireModel | None = None
    problems: tuple[str, ...] = ()
    """Sentences without the document's name: ``spec.priority: "high" is not a whole number``."""
    notes: tuple[str, ...] = field(default=())
    """Things worth knowing that do not make the document invalid (unknown fields)."""

    @property
    def label(self) -> str:
        """How sentences name the object: ``AppWrapper "train"`` ("" without a kind)."""
        if self.kind and self.name:
            return f'{self.kind} "{self.name}"'
        return self.kind


def parse_object(doc: object) -> Parsed:
    """Check one decoded document against the model of its kind."""
    if not isinstance(doc, Mapping):
        return Parsed("", "", problems=(
            f"the document is a {_shape(doc)}, not a Kubernetes object (a mapping with "
            "apiVersion, kind, metadata and spec)",
        ))
    kind = doc.get("kind")
    metadata = doc.get("metadata")
    name = metadata.get("name", "") if isinstance(metadata, Mapping) else ""
    name = name if isinstance(name, str) else str(name)
    if not isinstance(kind, str) or not kind:
        return Parsed("", name, problems=("the document has no kind; every object names its kind "
                                          "(AppWrapper, QuotaSubtree or SpokeCluster)",))
    known = KINDS.get(kind)
    if known is None:
        return Parsed(kind, name, problems=(
            f"kind {kind} is not one mcad validates (expected {_kinds_list()})",
        ))
    api_version = doc.get("apiVersion")
    if api_version not in known.api_versions:
        shown = show_value(api_version) if api_version is not None else "nothing"
        return Parsed(kind, name, problems=(
            f"apiVersion is {shown}, which is not served for {kind}; use "
            f"{' or '.join(known.api_versions)}",
        ))
    try:
        model = known.model_for(str(api_version)).model_validate(doc)
    except ValidationError as err:
        return Parsed(kind, name, problems=tuple(describe_errors(err)))
    problems = []
    compatible = "AppWrapper v1beta2" if api_version == appwrapper_v1beta2.API_VERSION \
        else "MCAD"
    if not name and not (isinstance(metadata, Mapping) and metadata.get("generateName")):
        problems.append("metadata.name: is required")
    notes = tuple(
        f"{path}: is not a field of {kind}; the API server will drop or reject it "
        "(check the spelling)"
        for path in model.unknown_fields()
    ) + tuple(
        f"{path}: accepted for {compatible} compatibility and not acted on ({instead})"
        for path, instead in model.ignored_fields()
    )
    return Parsed(kind, name, model=None if problems else model, problems=tuple(problems),
                  notes=notes)


def describe_errors(err: ValidationError) -> list[str]:
    """Each pydantic error as ``<wire path>: <what is wrong>``, without duplicates."""
    out: list[str] = []
    for detail in err.errors(include_url=False):
        sentence = describe_error(detail)
        if sentence not in out:
            out.append(sentence)
    return out


def describe_error(detail: ErrorDetails) -> str:
    """One pydantic error as ``<wire path>: <what is wrong>``."""
    ctx: dict[str, Any] = dict(detail.get("ctx") or {})
    path = wire_path(detail["loc"])
    subpath = ctx.get("subpath")
    if isinstance(subpath, str) and subpath:
        path = f"{path}.{subpath}" if path else subpath
    message = _message(detail, ctx)
    return f"{path}: {message}" if path else message


def wire_path(loc: tuple[int | str, ...]) -> str:
    """``("spec", "items", 0, "name")`` -> ``spec.items[0].name``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _message(detail: ErrorDetails, ctx: Mapping[str, Any]) -> str:
    kind = detail["type"]
    value = detail.get("input")
    shown = show_value(value)
    if kind == "missing":
        return "is required"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"{shown} is not a whole number"
    if kind in ("float_type", "float_parsing"):
        return f"{shown} is not a number"
    if kind in ("bool_type", "bool_parsing"):
        return f"{shown} is not true or false"
    if kind == "string_type":
        return f"{shown} is not a string"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", '"')
        return f"{shown} is not one of {expected}"
    if kind == "greater_than_equal":
        return f"{shown} is too small; it must be {ctx.get('ge')} or more"
    if kind == "string_too_short":
        return "must not be empty"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"{shown} is not a mapping of fields (key: value)"
    if kind == "list_type":
        return f"{shown} is not a list"
    if kind.startswith("datetime"):
        return f"{shown} is not a date-time such as 2024-01-31T12:00:00Z"
    message = str(detail["msg"])
    message = message.removeprefix("Value error, ")
    return message[:1].lower() + message[1:]


def _shape(doc: object) -> str:
    if isinstance(doc, list):
        return "list"
    if isinstance(doc, str):
        return "string"
    if isinstance(doc, bool):
        return "boolean"
    if isinstance(doc, (int, float)):
        return "number"
    return type(doc).__name__


def _kinds_list() -> str:
    names = sorted(KINDS)
    return ", ".join(names[:-1]) + " or " + names[-1]


class UnreadableFile(ValueError):
    """A file that cannot be read or does not hold YAML; the message is a sentence that
    names it (without a full stop: callers end it as their sentences end)."""


def read_yaml(path: Path, *, what: str) -> tuple[bytes, Any]:
    """The bytes of the file ``path`` and the YAML document they hold.

    ``what`` names the file in ``UnreadableFile``'s sentence, raised when it cannot be
    read or is not YAML: ``the kubeconfig`` gives "the kubeconfig /x is not valid YAML at
    line 3 (...)". The kubeconfig of ``mcad cluster register`` and the configuration of
    ``mcad run`` are read here, so both say the same thing the same way.
    """
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise UnreadableFile(f"cannot read {what} {path}: {err.strerror or err}") from err
    try:
        return raw, yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise UnreadableFile(f"{what} {path} is not valid YAML{yaml_problem(err)}") from err


def yaml_problem(err: yaml.YAMLError) -> str:
    """Where and what a YAML error is, for a sentence: `` at line 3 (found ...)``."""
    mark = getattr(err, "problem_mark", None)
    at = f" at line {mark.line + 1}" if mark is not None else ""
    return f"{at} ({getattr(err, 'problem', None) or err})"
