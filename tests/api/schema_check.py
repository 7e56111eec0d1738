"""A small structural-schema validator, so tests can ask "would the API server take this?".

It checks what our generated CRDs use: type, properties (unknown fields are errors, as
kubectl's strict field validation reports them), required, enum, minimum, minLength,
additionalProperties, items, int-or-string with its pattern, preserve-unknown-fields.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float),
}


def schema_errors(value: Any, schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Each way ``value`` breaks ``schema``, as ``path: problem``."""
    here = path or "<root>"
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            yield f"{here}: {value!r} is not an integer or a string"
        elif isinstance(value, str) and "pattern" in schema and not re.match(
                schema["pattern"], value):
            yield f"{here}: {value!r} does not match the quantity pattern"
        return
    kind = schema.get("type")
    if kind is not None:
        ok = isinstance(value, _TYPES[kind]) and not (
            kind in ("integer", "number") and isinstance(value, bool))
        if not ok:
            yield f"{here}: {value!r} is not of type {kind}"
            return
    if "enum" in schema and value not in schema["enum"]:
        yield f"{here}: {value!r} is not one of {schema['enum']}"
    if "minimum" in schema and value < schema["minimum"]:
        yield f"{here}: {value!r} is below {schema['minimum']}"
    if "minLength" in schema and len(value) < schema["minLength"]:
        yield f"{here}: {value!r} is too short"
    if kind == "object":
        if "properties" not in schema and "additionalProperties" not in schema:
            return  # free-form, or metadata (which the API server checks itself)
        for name in schema.get("required", []):
            if name not in value:
                yield f"{here}: {name} is required"
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        for name, sub in value.items():
            where = f"{path}.{name}" if path else name
            if properties is not None and name in properties:
                yield from schema_errors(sub, properties[name], where)
            elif isinstance(additional, dict):
                yield from schema_errors(sub, additional, where)
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                yield f"{where}: unknown field"
    if kind == "array":
        for index, item in enumerate(value):
            yield from schema_errors(item, schema["items"], f"{path}[{index}]")
