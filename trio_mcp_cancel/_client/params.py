"""``Mcp-Param-*`` headers (SEP-2243): tool arguments an intermediary may route on.

A tool whose input schema marks a property ``"x-mcp-header": "Region"``
wants that argument mirrored in an ``Mcp-Param-Region`` header of a
modern HTTP ``tools/call``; the server refuses (``-32020``) a call whose
header is missing or differs.  The client learns the schemas from
``tools/list`` (kept in a bounded :class:`ToolSchemas`) and writes each
header the way the server reads it (:mod:`..transports.http.rules`):
booleans ``true``/``false``, integral numbers without a fraction, strings
verbatim or ``=?base64?...?=`` when not plain printable ASCII.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import attrs

from .._wire.names import HEADER_PARAM_PREFIX, encode_header_value, header_form

__all__ = ["MAX_TOOL_SCHEMAS", "ToolSchemas", "list_all_tools"]

MAX_TOOL_SCHEMAS = 1000
"""Tool input schemas a client keeps for ``Mcp-Param-*`` headers (the newest)."""


@attrs.define(eq=False)
class ToolSchemas:
    """The ``x-mcp-header`` properties of the tools a server listed, by tool name."""

    limit: int = MAX_TOOL_SCHEMAS
    _headers: dict[str, dict[str, str]] = attrs.field(factory=dict)
    """tool name -> {argument name: header name}."""

    def remember(self, tools: Iterable[Mapping[str, Any]]) -> None:
        for tool in tools:
            name = tool.get("name")
            schema = tool.get("inputSchema")
            properties = schema.get("properties") if isinstance(schema, Mapping) else None
            if not isinstance(name, str) or not isinstance(properties, Mapping):
                continue
            marked = {
                prop: spec["x-mcp-header"]
                for prop, spec in properties.items()
                if isinstance(spec, Mapping) and isinstance(spec.get("x-mcp-header"), str)
            }
            self._headers.pop(name, None)
            self._headers[name] = marked
            while len(self._headers) > self.limit:
                del self._headers[next(iter(self._headers))]

    def knows(self, name: str) -> bool:
        return name in self._headers

    def headers(self, name: str, arguments: Mapping[str, Any]) -> dict[str, str]:
        """The ``Mcp-Param-*`` headers of a call of *name* with *arguments*."""
        out: dict[str, str] = {}
        for prop, header in self._headers.get(name, {}).items():
            if prop in arguments and (value := header_form(arguments[prop])) is not None:
                out[HEADER_PARAM_PREFIX + header] = encode_header_value(value)
        return out


async def list_all_tools(
    request: Callable[[str, Mapping[str, Any]], Awaitable[dict[str, Any]]], schemas: ToolSchemas
) -> list[dict[str, Any]]:
    """``tools/list``, every page, through *request*; each page's schemas go to *schemas*."""
    tools: list[dict[str, Any]] = []
    cursor: object = None
    while True:
        result = await request("tools/list", {} if cursor is None else {"cursor": cursor})
        page = [tool for tool in result.get("tools") or [] if isinstance(tool, dict)]
        schemas.remember(page)
        tools.extend(page)
        cursor = result.get("nextCursor")
        if not cursor:
            return tools
