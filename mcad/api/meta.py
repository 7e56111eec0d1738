"""Pieces every mcad wire format shares: object metadata, conditions, selectors, quantities.

Why a module of its own: AppWrapper, QuotaSubtree and SpokeCluster all carry
Kubernetes-standard shapes (``metav1.ObjectMeta``, ``metav1.Condition``,
``metav1.LabelSelector``, resource lists). Declaring them once keeps the three CRDs
generated from these models identical where Kubernetes says they must be, and gives
every quantity the same validation and the same error sentence.

Conventions for every model in ``mcad.api``:

- Python attributes are snake_case; the wire name (case included, e.g. ``Succeeded``,
  ``GenericItems``, ``priorityslope``) is the field's alias. Models accept either.
- ``extra="allow"``: objects written for MCAD v1 may carry fields we do not model; they
  are kept (never a crash on read), and ``unknown_fields()`` lists them so
  ``mcad validate`` can point at typos. The CRDs do not preserve them: the API server
  drops (or, with strict field validation, rejects) fields its schema does not name.
- Attribute docstrings become the CRD's field descriptions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from mcad.core.workload.quantity import QuantityError, parse_quantity

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""The Kubernetes quantity grammar, as the API server's own resource lists declare it."""


class WireModel(BaseModel):
    """Base of every mcad wire model: alias = wire name, tolerant of unknown fields."""

    model_config = ConfigDict(
        populate_by_name=True,
        extra="allow",
        use_attribute_docstrings=True,
        validate_default=False,
    )

    IGNORED: ClassVar[dict[str, str]] = {}
    """Declared fields (by attribute) accepted for MCAD compatibility and not acted on,
    with what to use instead: a value given for one is reported (``ignored_fields``),
    so that a user never believes a field works that does not."""

    def ignored_fields(self, path: str = "") -> Iterator[tuple[str, str]]:
        """``(wire path, what to use instead)`` of every ignored field given a value."""
        fields = type(self).model_fields
        for attr in sorted(self.model_fields_set & self.IGNORED.keys()):
            if getattr(self, attr) is not None:
                yield _join(path, fields[attr].alias or attr), self.IGNORED[attr]
        for attr, info in fields.items():
            yield from _ignored_in(getattr(self, attr), _join(path, info.alias or attr))

    def unknown_fields(self, path: str = "") -> Iterator[str]:
        """Wire paths of fields present in the input that this model does not declare."""
        for name in sorted(self.model_extra or {}):
            yield _join(path, name)
        for attr, info in type(self).model_fields.items():
            value = getattr(self, attr)
            wire = info.alias or attr
            yield from _unknown_in(value, _join(path, wire))


def _unknown_in(value: object, path: str) -> Iterator[str]:
    if isinstance(value, ObjectMeta):
        return  # metadata belongs to the API server; anything there is legitimate
    if isinstance(value, WireModel):
        yield from value.unknown_fields(path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _unknown_in(item, f"{path}[{index}]")


def _ignored_in(value: object, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, ObjectMeta):
        return
    if isinstance(value, WireModel):
        yield from value.ignored_fields(path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _ignored_in(item, f"{path}[{index}]")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def show_value(value: object) -> str:
    """A value as a user wrote it, for error sentences: strings in double quotes."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return json.dumps(value) if isinstance(value, (int, float)) else repr(value)


def field_error(subpath: str, message: str) -> PydanticCustomError:
    """An error for a model validator that points below the validated object.

    Pydantic locates a model validator's error at the model itself; the ``subpath``
    (``children[1].name``) is appended to that location when the error is shown.
    """
    return PydanticCustomError("mcad", message, {"subpath": subpath})


def _validate_quantity(value: Any) -> str | int:
    """Accept what the API server accepts for an int-or-string quantity, unchanged."""
    shown = show_value(value)
    if isinstance(value, float) and not isinstance(value, bool):
        if value.is_integer():
            return int(value)
        raise PydanticCustomError(
            "quantity_fraction",
            "{shown} is a fractional number, which the API server rejects in a resource "
            'list; quote it ("{shown}") or use a suffix such as 500m',
            {"shown": shown},
        )
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise PydanticCustomError(
            "quantity_type", "{shown} is not a quantity (expected a number or a string "
            "such as 500m, 2, 4Gi)", {"shown": shown},
        )
    try:
        nano = parse_quantity(value)
    except QuantityError:
        raise PydanticCustomError(
            "quantity", "{shown} is not a quantity (expected a number with an optional "
            "suffix such as 500m, 2, 1.5, 4Gi, 1e3)", {"shown": shown},
        ) from None
    if nano < 0:
        raise PydanticCustomError(
            "quantity_negative", "{shown} is negative; resource amounts must be zero or more",
            {"shown": shown},
        )
    return value


Quantity = Annotated[
    str | int,
    PlainValidator(_validate_quantity),
    WithJsonSchema({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }),
]
"""A Kubernetes quantity (``8``, ``"500m"``, ``"4Gi"``), kept exactly as written."""

ResourceQuantities = dict[str, Quantity]
"""A resource list on the wire: resource name -> quantity (``cpu: 500m``)."""

FreeForm = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
"""An object kept verbatim, whatever it holds (accepted for compatibility, not read)."""

EmbeddedObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-embedded-resource": True,
                    "x-kubernetes-preserve-unknown-fields": True}),
]
"""A complete Kubernetes object (apiVersion, kind, metadata, ...) kept verbatim."""

Timestamp = Annotated[datetime, WithJsonSchema({"type": "string", "format": "date-time"})]
"""An RFC 3339 time (``metav1.Time``/``MicroTime`` on the wire)."""


class ObjectMeta(WireModel):
    """Standard object metadata; the API server owns its schema."""

    name: str = ""
    generate_name: str = Field("", alias="generateName")
    namespace: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class Condition(WireModel):
    """An observation of one aspect of an object's state (``metav1.Condition``)."""

    type: str
    """Type of the condition in CamelCase, e.g. Ready, Dispatched, QuotaReserved."""
    status: Literal["True", "False", "Unknown"]
    """Status of the condition: True, False or Unknown."""
    reason: str = ""
    """A CamelCase word saying why the condition last changed."""
    message: str = ""
    """A sentence saying what happened and, when something is wrong, what to do."""
    last_transition_time: Timestamp | None = Field(None, alias="lastTransitionTime")
    """When the condition last changed status."""
    observed_generation: int | None = Field(None, alias="observedGeneration", ge=0)
    """The .metadata.generation the condition was set for."""


class LabelSelectorRequirement(WireModel):
    """One requirement of a label selector: key, operator and values."""

    key: str
    """The label key the requirement applies to."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """How the key relates to the values: In, NotIn, Exists or DoesNotExist."""
    values: list[str] = Field(default_factory=list)
    """Values for In and NotIn (non-empty); empty for Exists and DoesNotExist."""

    @model_validator(mode="after")
    def _values_fit_the_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise field_error("values", f"is empty; operator {self.operator} needs at least "
                                        "one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise field_error("values", f"must be empty for operator {self.operator}")
        return self


class LabelSelector(WireModel):
    """A label query (``metav1.LabelSelector``); matchLabels and matchExpressions are ANDed."""

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    """Labels that must all be present with exactly these values."""
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, alias="matchExpressions"
    )
    """Requirements that must all hold."""

    def matches(self, labels: dict[str, str]) -> bool:
        """True when ``labels`` satisfy every requirement (an empty selector matches all)."""
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In" and not (present and labels[req.key] in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True
