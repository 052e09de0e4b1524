"""What client and server share on the wire: names, ``_meta`` keys, codes, header rules.

One home for every spelling both ends must agree on, so the client
(:mod:`trio_mcp_cancel.client`) and the server read it from the same
place and the client never imports a server module.  The server modules
(:mod:`.versions`, :mod:`.jsonrpc`, :mod:`.subscriptions`, the HTTP rules)
import from here.  Data and pure functions only: no I/O, no state, and no
import from the package except the kernel's error code, so anything may
import it.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, Final, Literal
from urllib.parse import urlsplit, urlunsplit

from .._core.errors import REQUEST_CANCELLED

__all__ = [
    "oauth_metadata_urls",
    "header_form",
    "HEADER_MISMATCH",
    "HEADER_METHOD",
    "HEADER_NAME",
    "HEADER_PARAM_PREFIX",
    "HEADER_PROTOCOL_VERSION",
    "HEADER_SESSION_ID",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "LATEST_LEGACY_VERSION",
    "LATEST_VERSION",
    "LEGACY_TOO_MANY_REQUESTS",
    "LEGACY_VERSIONS",
    "META_CLIENT_CAPABILITIES",
    "META_CLIENT_INFO",
    "META_LOG_LEVEL",
    "META_PROTOCOL_VERSION",
    "META_SERVER_INFO",
    "META_SUBSCRIPTION_ID",
    "METHOD_NOT_FOUND",
    "MISSING_CLIENT_CAPABILITY",
    "MODERN_ERRORS",
    "MODERN_VERSIONS",
    "NAME_BEARING",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "TASKS_EXTENSION",
    "TASK_STATUSES",
    "TERMINAL_STATUSES",
    "TOO_MANY_REQUESTS",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "Era",
    "TaskStatus",
    "client_declares_tasks",
    "decode_header_value",
    "encode_header_value",
]

# -- eras and versions ---------------------------------------------------------

Era = Literal["modern", "legacy"]

#: Modern revisions served statelessly, newest first.
MODERN_VERSIONS: Final = ("2026-07-28",)
#: Legacy revisions served through ``initialize``, oldest first.
LEGACY_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_VERSION: Final = MODERN_VERSIONS[0]
LATEST_LEGACY_VERSION: Final = LEGACY_VERSIONS[-1]

# -- the modern ``_meta`` envelope and other ``_meta`` keys ----------------------

META_PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
#: On a notification sent for a ``subscriptions/listen`` stream: the id of that request.
META_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"

# -- error codes ---------------------------------------------------------------

#: JSON-RPC 2.0's own codes.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
#: Admission refused (too many requests in flight for the connection, the
#: tenant, the server, or a task quota), in the modern era.  2026-07-28 says
#: new implementations SHOULD NOT use -32000..-32019 (and receivers must not
#: read any meaning into them), -32020..-32099 are the spec's own, and new
#: application codes SHOULD sit outside -32768..-32000.  The official Python
#: and TypeScript (v1) clients use -32001 for their *local* request timeout,
#: so -32001 from the server reads as "timed out".  -31429 is outside every
#: reserved range (429 for HTTP's Too Many Requests); ``data.limit`` says
#: which bound, and HTTP still answers 429 with ``Retry-After``.
TOO_MANY_REQUESTS: Final = -31429
#: The same refusal in the legacy era (2025-11-25 and earlier), unchanged
#: since 0.1: that era has no code policy (JSON-RPC leaves -32000..-32099 to
#: the implementation) and legacy deployments match this code.  Use
#: :func:`~trio_mcp_cancel._protocol.admission.too_many_requests_code` to pick.
LEGACY_TOO_MANY_REQUESTS: Final = -32001
#: 2026-07-28 error codes (renumbered from the draft's -32001/-32003/-32004).
HEADER_MISMATCH: Final = -32020
MISSING_CLIENT_CAPABILITY: Final = -32021
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
#: What only a modern server answers about the era itself: a client that gets
#: one of these is talking to a modern server and must not fall back to legacy.
MODERN_ERRORS: Final = frozenset(
    {HEADER_MISMATCH, MISSING_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION}
)

# -- extensions ------------------------------------------------------------------

#: The Tasks extension (SEP-2663), declared in ``capabilities.extensions``.
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
#: A task in one of these never changes again.
TERMINAL_STATUSES: Final[frozenset[str]] = frozenset({"completed", "failed", "cancelled"})
#: Every status a task can have (the server's stores and the client agree on it).
TASK_STATUSES: Final[frozenset[str]] = frozenset({"working", "input_required"}) | TERMINAL_STATUSES


def client_declares_tasks(capabilities: Mapping[str, Any]) -> bool:
    """Whether client *capabilities* declare the Tasks extension (its value an object)."""
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


# -- Streamable HTTP headers -----------------------------------------------------
# Canonical spellings, as a client sends them; HTTP header names are
# case-insensitive, so a server compares them lower-cased.

HEADER_SESSION_ID: Final = "Mcp-Session-Id"
HEADER_PROTOCOL_VERSION: Final = "MCP-Protocol-Version"
HEADER_METHOD: Final = "Mcp-Method"
HEADER_NAME: Final = "Mcp-Name"
#: ``Mcp-Param-<Name>`` mirrors a tool argument whose schema says ``"x-mcp-header": "<Name>"``.
HEADER_PARAM_PREFIX: Final = "Mcp-Param-"

#: Methods whose name (or uri) is mirrored in the ``Mcp-Name`` header: the key in ``params``.
NAME_BEARING: Final = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    # Tasks extension: lets a load balancer route to the instance holding the task.
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}

_B64: Final = re.compile(r"=\?base64\?(?P<payload>[A-Za-z0-9+/=]*)\?=")


def oauth_metadata_urls(issuer: str) -> list[str]:
    """Where an authorization server's metadata may be, in the order the MCP specification tries.

    RFC 8414 section 3.1 (the well-known segment between the host and the
    issuer's path), then OpenID Connect Discovery (both placements).  The
    resource server's discovery and the client's OAuth provider both use it.
    """
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")

    def at(well_known: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, well_known, "", ""))

    if not path:
        return [
            at("/.well-known/oauth-authorization-server"),
            at("/.well-known/openid-configuration"),
        ]
    return [
        at(f"/.well-known/oauth-authorization-server{path}"),
        at(f"/.well-known/openid-configuration{path}"),
        at(f"{path}/.well-known/openid-configuration"),
    ]


def header_form(value: object) -> str | None:
    """How a primitive argument is written in its ``Mcp-Param-*`` header (``None``: not one).

    The client writes it and the server compares with it, so both use this one.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return value
    return None


def encode_header_value(value: str) -> str:
    """Plain printable ASCII as is, anything else as ``=?base64?...?=`` (MCP's encoding)."""
    if value.isascii() and value.isprintable() and value == value.strip():
        return value
    return "=?base64?" + base64.b64encode(value.encode()).decode("ascii") + "?="


def decode_header_value(value: str | None) -> str | None:
    """A header value as sent: verbatim, or the ``=?base64?...?=`` form decoded.

    A malformed encoded value decodes to ``None``, so it matches nothing.
    """
    if value is None:
        return None
    match = _B64.fullmatch(value)
    if match is None:
        return value
    try:
        raw = base64.b64decode(match.group("payload"), validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
