"""The handlers of the core methods: lifecycle, logging, discovery and tools.

Each takes one :class:`~.calls.HandlerInput` and returns its result (or
raises :class:`~.jsonrpc.JsonRpcError`); :mod:`.methods` binds them into the
method table, next to the features served by :mod:`.surface`.
"""

from __future__ import annotations

from collections.abc import Awaitable
from functools import partial
from typing import Any

from .._wire.jsonrpc import INVALID_PARAMS, JsonRpcError
from .._wire.versions import LEGACY_VERSIONS, LOG_LEVELS, MODERN_VERSIONS, negotiate_legacy_version
from .calls import HandlerInput
from .context import (
    invoke,
    make_context,
    needs_state,
    new_context,
)
from .exchange import LegacyState
from .extension import Extension, ToolCall
from .pagination import page
from .tools import ToolArgumentError, error_result

__all__ = [
    "call_tool",
    "discover",
    "empty",
    "initialize",
    "list_tools",
    "set_level",
]


# -- lifecycle, logging, discovery ----------------------------------------------


async def initialize(h: HandlerInput) -> dict[str, Any]:
    params, server, channel = h.params, h.registration, h.caller.channel
    version = negotiate_legacy_version(params.get("protocolVersion"))
    capabilities = params.get("capabilities")
    info = params.get("clientInfo")
    if channel is not None:
        channel.legacy = LegacyState(
            version,
            capabilities if isinstance(capabilities, dict) else {},
            info if isinstance(info, dict) else None,
        )
    return server.describe(
        {
            "protocolVersion": version,
            "capabilities": server.capabilities(
                "legacy", notifications=channel is not None and channel.notifications
            ),
            "serverInfo": server.server_info,
        }
    )


async def empty(h: HandlerInput) -> dict[str, Any]:
    return {}


async def set_level(h: HandlerInput) -> dict[str, Any]:
    level = h.params.get("level")
    if level not in LOG_LEVELS:
        raise JsonRpcError(INVALID_PARAMS, "Invalid params: unknown log level")
    channel = h.caller.channel
    if channel is not None and channel.legacy is not None:
        channel.legacy.log_level = level
    return {}


async def discover(h: HandlerInput, extensions: tuple[Extension, ...] = ()) -> dict[str, Any]:
    """``server/discover``; *extensions* declare themselves under ``capabilities.extensions``."""
    server, era = h.registration, h.call.era
    versions = list(MODERN_VERSIONS)
    capabilities = server.capabilities(era)
    declared = {}
    for extension in extensions:
        settings = extension.capability(server, era)
        if settings is not None:
            declared[extension.name] = dict(settings)
    if declared:
        capabilities["extensions"] = declared
    if era == "legacy":
        versions += reversed(LEGACY_VERSIONS)
    return server.describe(
        {
            "supportedVersions": versions,
            "capabilities": capabilities,
            "ttlMs": server.list_ttl_ms,
            "cacheScope": "public",
        }
    )


# -- tools ----------------------------------------------------------------------


async def list_tools(h: HandlerInput) -> dict[str, Any]:
    server = h.registration
    tools, more = page("tools", server.list_tools(), h.params, server.page_size)
    result: dict[str, Any] = {"tools": list(tools), **more}
    if h.call.era == "modern":
        result["ttlMs"] = server.list_ttl_ms
        result["cacheScope"] = "public"
    return result


def call_tool(h: HandlerInput, wrappers: tuple[Extension, ...] = ()) -> Awaitable[Any]:
    """``tools/call``: bind the arguments, make the context, run the tool.

    *wrappers*: the server's extensions that wrap tool calls (bound by
    :func:`.methods.method_table`), nested in their order around the call.

    A plain function returning what to await: on the common path (no
    ``requestState``, no wrappers) that is :func:`invoke`'s coroutine, so a
    running call holds no frame of this function (a suspended call's memory).
    """
    tool = h.call.tool
    assert tool is not None
    try:
        arguments = tool.bind(h.params.get("arguments"))
    except ToolArgumentError as exc:
        return _answered(error_result(f"Invalid arguments for tool {tool.name!r}: {exc}"))
    if wrappers or needs_state(h):
        return _call_tool(h, tool.name, arguments, wrappers)
    return invoke(h, new_context(h), arguments)


async def _answered(result: Any) -> Any:
    return result


async def _call_tool(
    h: HandlerInput, name: str, arguments: dict[str, Any], wrappers: tuple[Extension, ...]
) -> Any:
    """:func:`call_tool` with a ``requestState`` to open, or wrappers to run through."""
    ctx = await make_context(h, name)
    if not wrappers:
        return await invoke(h, ctx, arguments)
    tool = h.call.tool
    assert tool is not None
    return await _through(h, ToolCall(tool, arguments, ctx), wrappers, 0)


async def _through(
    h: HandlerInput, call: ToolCall, wrappers: tuple[Extension, ...], index: int
) -> Any:
    """Run *call* through ``wrappers[index:]``, then the tool itself."""
    if index == len(wrappers):
        return await invoke(h, call.ctx, call.arguments)
    return await wrappers[index].call_tool(h, call, partial(_through, h, call, wrappers, index + 1))
