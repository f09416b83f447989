"""The JSON-schema subset a critic template may use, and a validator for replies against it.

vLLM's structured outputs enforce the schema while the model writes; this validator checks the
reply again on our side (a backend without structured outputs, a reply cut by max_tokens, a
grammar backend that skips a keyword), so a reply that does not conform is never scored.
The subset is small on purpose: every keyword a template uses is one this module checks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..exceptions import ConfigurationError

# Keywords a template schema may use; anything else is refused when the template loads.
SUPPORTED_KEYWORDS = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "enum", "minimum", "maximum", "minLength", "maxLength", "description", "title",
})
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")


class SchemaError(ConfigurationError):
    """A template's schema uses something this validator cannot check."""


def check_schema(schema: Any, where: str = "$") -> None:
    """Refuse a schema with keywords or types this validator does not enforce."""
    if not isinstance(schema, Mapping):
        raise SchemaError(f"{where}: a schema must be an object, got {type(schema).__name__}")
    unknown = sorted(set(schema) - SUPPORTED_KEYWORDS)
    if unknown:
        raise SchemaError(f"{where}: unsupported keyword(s) {unknown}; supported: {sorted(SUPPORTED_KEYWORDS)}")
    types = _types(schema)
    if not types:
        raise SchemaError(f"{where}: every schema needs a 'type'")
    for t in types:
        if t not in _TYPES:
            raise SchemaError(f"{where}: unknown type {t!r}")
    if "object" in types:
        props = schema.get("properties")
        if not isinstance(props, Mapping) or not props:
            raise SchemaError(f"{where}: an object needs 'properties'")
        if schema.get("additionalProperties", True) is not False:
            raise SchemaError(f"{where}: objects must set additionalProperties = false (a closed shape)")
        required = schema.get("required", [])
        if not isinstance(required, list) or set(required) - set(props):
            raise SchemaError(f"{where}: 'required' must list names from 'properties'")
        for name, sub in props.items():
            check_schema(sub, f"{where}.{name}")
    if "array" in types:
        if "items" not in schema:
            raise SchemaError(f"{where}: an array needs 'items'")
        check_schema(schema["items"], f"{where}[]")


def validate(value: Any, schema: Mapping[str, Any], where: str = "$") -> list[str]:
    """Every way `value` breaks `schema` (empty when it conforms), each naming its path."""
    types = _types(schema)
    if not any(_is_type(value, t) for t in types):
        return [f"{where}: expected {' or '.join(types)}, got {_type_name(value)}"]
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{where}: {value} is below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{where}: {value} is above the maximum {schema['maximum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            problems.append(f"{where}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{where}: longer than {schema['maxLength']} characters")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{where}: more than {schema['maxItems']} items")
        for index, item in enumerate(value):
            problems += validate(item, schema["items"], f"{where}[{index}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{where}: missing required field {name!r}")
        for name, item in value.items():
            if name not in props:
                problems.append(f"{where}: unexpected field {name!r}")
            else:
                problems += validate(item, props[name], f"{where}.{name}")
    return problems


def subschema(schema: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    """The schema of a dotted field path (`a.b.c`) through object properties, or None."""
    node: Mapping[str, Any] | None = schema
    for key in path.split("."):
        props = node.get("properties") if node is not None else None
        node = props.get(key) if isinstance(props, Mapping) else None
        if node is None:
            return None
    return node


def field_value(value: Any, path: str) -> Any:
    """The value at a dotted path of a conforming reply (KeyError when absent)."""
    for key in path.split("."):
        value = value[key]
    return value


def _types(schema: Mapping[str, Any]) -> list[str]:
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    return list(t) if isinstance(t, list) else []


def _is_type(value: Any, t: str) -> bool:
    if t == "null":
        return value is None
    if t == "boolean":
        return isinstance(value, bool)
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))
    if t == "string":
        return isinstance(value, str)
    if t == "array":
        return isinstance(value, list)
    return isinstance(value, dict)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)
