"""``trio-mcp-cancel list TARGET``: what a server offers (tools, resources, templates, prompts).

A table for people, ``--json`` for scripts (one object, each list under
its MCP result key).  A server without a feature (``-32601`` for its list
method) lists none of it rather than failing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from .._client.engine import ClientEngine
from .._client.errors import McpError
from .._wire.names import METHOD_NOT_FOUND
from . import connect

__all__ = ["add_parser", "listing", "main"]

#: (title, list method, result key): what ``list`` prints, in order.
_LISTS = (
    ("tools", "tools/list", "tools"),
    ("resources", "resources/list", "resources"),
    ("resource templates", "resources/templates/list", "resourceTemplates"),
    ("prompts", "prompts/list", "prompts"),
)

#: A server that pages forever (a cursor that never ends) is stopped here.
_MAX_PAGES = 1000


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "list",
        help="list a server's tools, resources and prompts",
        description="List the tools, resources, resource templates and prompts of TARGET.",
    )
    connect.add_target_options(parser)


def main(args: argparse.Namespace) -> int:
    async def body() -> int:
        async with connect.open_target(args.target, args.era) as client:
            found = await listing(client)
        print(json.dumps(found, indent=2) if args.json else _table(found))
        return 0

    return connect.run_client_command("list", body)


async def listing(client: ClientEngine) -> dict[str, list[dict[str, Any]]]:
    """Every page of each list, by its MCP result key."""
    return {key: await _every_page(client, method, key) for _, method, key in _LISTS}


async def _every_page(client: ClientEngine, method: str, key: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor: object = None
    for _ in range(_MAX_PAGES):
        try:
            result = await client.request(method, {} if cursor is None else {"cursor": cursor})
        except McpError as exc:
            if exc.code == METHOD_NOT_FOUND:
                return items  # the server has none of these
            raise
        items.extend(item for item in result.get(key) or [] if isinstance(item, dict))
        cursor = result.get("nextCursor")
        if not cursor:
            break
    return items


def _table(found: Mapping[str, list[dict[str, Any]]]) -> str:
    lines: list[str] = []
    for title, _, key in _LISTS:
        items = found[key]
        lines.append(f"{title} ({len(items)})")
        rows = [_row(key, item) for item in items]
        width = max((len(name) for name, _ in rows), default=0)
        lines.extend(f"  {name.ljust(width)}  {rest}".rstrip() for name, rest in rows)
    return "\n".join(lines)


def _row(key: str, item: Mapping[str, Any]) -> tuple[str, str]:
    """(first column, the rest) of one item: its name or URI, then what it takes and is."""
    description = _first_line(item.get("description"))
    if key == "tools":
        return str(item.get("name")), _join(_signature(item.get("inputSchema")), description)
    if key == "resources":
        return str(item.get("uri")), _join(str(item.get("name") or ""), description)
    if key == "resourceTemplates":
        return str(item.get("uriTemplate")), _join(str(item.get("name") or ""), description)
    arguments = [a for a in item.get("arguments") or [] if isinstance(a, dict)]
    names = ", ".join(f"{a.get('name')}{'' if a.get('required') else '?'}" for a in arguments)
    return str(item.get("name")), _join(f"({names})", description)


def _signature(schema: object) -> str:
    """``(city: string, days?: integer)`` from an input schema; ``?`` marks optional."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return "()"
    required = schema.get("required")
    if not isinstance(required, list):
        required = []
    parts = []
    for name, prop in schema["properties"].items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        mark = "" if name in required else "?"
        parts.append(f"{name}{mark}: {kind}" if isinstance(kind, str) else f"{name}{mark}")
    return f"({', '.join(parts)})"


def _first_line(text: object) -> str:
    return text.strip().splitlines()[0] if isinstance(text, str) and text.strip() else ""


def _join(*parts: str) -> str:
    return "  ".join(part for part in parts if part)
