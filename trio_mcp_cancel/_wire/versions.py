"""MCP protocol eras: the rules that tell them apart and read the modern envelope.

MCP has two eras.  **Legacy** (2025-11-25 and older) negotiates once, in
``initialize``, and keeps the outcome in a session (an HTTP
``Mcp-Session-Id``, or the stdio process).  **Modern** (2026-07-28 and
later) is stateless: every request carries its version, the client's
capabilities and identity in ``params._meta``, and each request is accepted
or refused on its own.  This module holds the rules that tell them apart and
read the modern envelope; it does no I/O.  The names and codes themselves
(versions, ``_meta`` keys, error codes) live in :mod:`.wire`, shared with
the client, and are re-exported here for the server modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from .jsonrpc import JsonRpcError
from .names import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    LATEST_LEGACY_VERSION,
    LATEST_VERSION,
    LEGACY_VERSIONS,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    MISSING_CLIENT_CAPABILITY,
    MODERN_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
    Era,
)

__all__ = [
    "HEADER_MISMATCH",
    "LATEST_LEGACY_VERSION",
    "LATEST_VERSION",
    "LEGACY_VERSIONS",
    "LOG_LEVELS",
    "META_CLIENT_CAPABILITIES",
    "META_CLIENT_INFO",
    "META_LOG_LEVEL",
    "META_PROTOCOL_VERSION",
    "META_SERVER_INFO",
    "MISSING_CLIENT_CAPABILITY",
    "MODERN_VERSIONS",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "Envelope",
    "Era",
    "has_modern_meta",
    "missing_capabilities",
    "negotiate_legacy_version",
    "read_envelope",
    "unsupported_version",
]

#: RFC 5424 severities, least severe first, as MCP logging names them.
LOG_LEVELS: Final = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)


@attrs.frozen
class Envelope:
    """The per-request fields a modern request carries in ``params._meta``."""

    protocol_version: str
    client_capabilities: Mapping[str, Any]
    client_info: Mapping[str, Any] | None = None
    log_level: str | None = None
    """Minimum severity of ``notifications/message`` the client wants for this
    request; ``None``: it wants none at all."""


def _meta(params: Mapping[str, Any]) -> object:
    return params.get("_meta")


def has_modern_meta(params: Mapping[str, Any]) -> bool:
    """Whether a request claims the modern era by its body.

    Any of the envelope keys counts, so that a modern request missing one of
    the required keys is told so (``-32602``) instead of being mistaken for a
    legacy request without a session.
    """
    meta = params.get("_meta")  # not _meta(): asked of every request, twice for legacy ones
    return isinstance(meta, dict) and (
        META_PROTOCOL_VERSION in meta or META_CLIENT_CAPABILITIES in meta
    )


def unsupported_version(requested: object) -> JsonRpcError:
    """``-32022``, with the versions we do serve, so the client can retry."""
    shown = requested[:64] if isinstance(requested, str) else None
    return JsonRpcError(
        UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
        {"supported": list(MODERN_VERSIONS), "requested": shown},
    )


def read_envelope(params: Mapping[str, Any]) -> Envelope:
    """Read and check the modern envelope of one request.

    Raises ``-32602`` when a required key is missing or of the wrong type,
    and ``-32022`` for a version this server does not serve.
    """
    meta = _meta(params)
    if not isinstance(meta, dict):
        raise JsonRpcError(
            INVALID_PARAMS,
            f"Invalid params: params._meta must carry {META_PROTOCOL_VERSION!r}"
            f" and {META_CLIENT_CAPABILITIES!r}",
        )
    missing = [k for k in (META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES) if k not in meta]
    if missing:
        raise JsonRpcError(
            INVALID_PARAMS, f"Invalid params: params._meta is missing {', '.join(missing)}"
        )
    version = meta[META_PROTOCOL_VERSION]
    if not isinstance(version, str):
        raise JsonRpcError(INVALID_PARAMS, "Invalid params: the protocol version must be a string")
    if version not in MODERN_VERSIONS:
        raise unsupported_version(version)
    capabilities = meta[META_CLIENT_CAPABILITIES]
    if not isinstance(capabilities, dict):
        raise JsonRpcError(INVALID_PARAMS, "Invalid params: client capabilities must be an object")
    info = meta.get(META_CLIENT_INFO)
    level = meta.get(META_LOG_LEVEL)
    if level is not None and level not in LOG_LEVELS:
        raise JsonRpcError(INVALID_PARAMS, "Invalid params: unknown log level")
    return Envelope(version, capabilities, info if isinstance(info, dict) else None, level)


def negotiate_legacy_version(requested: object) -> str:
    """The version ``initialize`` answers: the client's, else our newest legacy one."""
    return (
        requested
        if isinstance(requested, str) and requested in LEGACY_VERSIONS
        else LATEST_LEGACY_VERSION
    )


def missing_capabilities(
    declared: Mapping[str, Any], required: Mapping[str, Any]
) -> dict[str, Any]:
    """The part of *required* (a ``ClientCapabilities`` shape) not in *declared*.

    A capability is present when its key is; nested objects (``extensions``,
    ``elicitation.form``) are compared one level down the same way.
    """
    missing: dict[str, Any] = {}
    for key, value in required.items():
        have = declared.get(key)
        if have is None:
            missing[key] = value
        elif isinstance(value, dict) and value and isinstance(have, dict):
            inner = missing_capabilities(have, value)
            if inner:
                missing[key] = inner
    return missing
