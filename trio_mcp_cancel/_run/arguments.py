"""A tool's arguments from the command line: ``--args JSON`` and ``key=value`` words.

A ``key=value`` value is typed by the property's JSON Schema ``type`` (its
``anyOf``/``oneOf`` branches too, as pydantic writes ``int | None``):
``integer``, ``number``, ``boolean`` and ``string`` are parsed as such, in
the schema's order; anything else (an array, an object, a property the
schema does not name) is read as a JSON literal, and as the plain string
when it is not one.  A value none of the types accepts is a one-line
:class:`~.connect.UsageError` naming the key and the types.  ``key=value``
words are applied after ``--args``, so they override it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .connect import UsageError

__all__ = ["parse_arguments"]

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})

#: Nesting of ``anyOf``/``oneOf`` followed to find a property's types (a hostile
#: schema could nest them without end).
_MAX_DEPTH = 8


def parse_arguments(schema: object, json_args: str | None, words: Sequence[str]) -> dict[str, Any]:
    """The arguments object for ``tools/call``; see the module docstring."""
    arguments: dict[str, Any] = {}
    if json_args is not None:
        try:
            given = json.loads(json_args)
        except ValueError as exc:
            raise UsageError(f"--args is not valid JSON: {exc}") from None
        if not isinstance(given, dict):
            raise UsageError(f"--args must be a JSON object, not {type(given).__name__}")
        arguments.update(given)
    properties = _properties(schema)
    for word in words:
        key, equals, value = word.partition("=")
        if not equals or not key:
            raise UsageError(f"expected key=value, not {word!r}")
        arguments[key] = _typed(key, value, _types(properties.get(key), 0))
    return arguments


def _properties(schema: object) -> Mapping[str, Any]:
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return properties if isinstance(properties, dict) else {}


def _types(prop: object, depth: int) -> list[str]:
    """The JSON types *prop* allows, in its order (empty: unknown)."""
    if not isinstance(prop, dict) or depth > _MAX_DEPTH:
        return []
    kind = prop.get("type")
    types = [kind] if isinstance(kind, str) else [t for t in kind or [] if isinstance(t, str)]
    for combinator in ("anyOf", "oneOf"):
        for branch in prop.get(combinator) or []:
            types.extend(_types(branch, depth + 1))
    return list(dict.fromkeys(types))


def _typed(key: str, value: str, types: list[str]) -> Any:
    if not types or any(t in ("array", "object") for t in types):
        return _json_or_string(value)
    for kind in types:
        parsed = _parse(kind, value)
        if parsed is not _NOT:
            return parsed
    expected = " or ".join(_NAMES.get(t, t) for t in types)
    raise UsageError(f"argument {key}: {value!r} is not {expected}")


_NOT = object()
_NAMES = {"integer": "an integer", "number": "a number", "boolean": "a boolean", "null": "null"}


def _parse(kind: str, value: str) -> Any:
    if kind == "string":
        return value
    if kind == "integer":
        try:
            return int(value)
        except ValueError:
            return _NOT
    if kind == "number":
        try:
            number = float(value)
        except ValueError:
            return _NOT
        return number if math.isfinite(number) else _NOT  # JSON has no inf or NaN
    if kind == "boolean":
        lowered = value.lower()
        return True if lowered in _TRUE else False if lowered in _FALSE else _NOT
    if kind == "null":
        return None if value in ("null", "") else _NOT
    return _json_or_string(value)


def _json_or_string(value: str) -> Any:
    """A JSON literal, else the text itself (the server's validation says what is wrong)."""
    try:
        return json.loads(value, parse_constant=_no_constant)
    except ValueError:
        return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python's json would read NaN and Infinity
