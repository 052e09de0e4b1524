"""The protocol's constants: versions, error codes, ``_meta`` keys, headers, the Tasks names.

The spellings both ends of MCP must agree on, as this library serves and
sends them: which revisions each era speaks, the JSON-RPC and MCP error
codes (with the admission refusal of each era, and
:func:`too_many_requests_code` to pick it), the modern ``_meta`` envelope
keys, the Streamable HTTP headers, and the Tasks extension's identifier
and statuses.  A transport author or a test matches on these instead of
writing the literals again; nothing here does I/O or holds state.

They live apart from :mod:`trio_mcp_cancel.lowlevel` (the types a
transport is built from) because they are data: a reader looking for a
code or a version finds them all in one list.
"""

from __future__ import annotations

from .._core.validation import MAX_ID_BYTES
from .._protocol.admission import too_many_requests_code
from .._public import fixup_module_metadata
from .._wire.names import (
    HEADER_METHOD,
    HEADER_MISMATCH,
    HEADER_NAME,
    HEADER_PARAM_PREFIX,
    HEADER_PROTOCOL_VERSION,
    HEADER_SESSION_ID,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LATEST_LEGACY_VERSION,
    LATEST_VERSION,
    LEGACY_TOO_MANY_REQUESTS,
    LEGACY_VERSIONS,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
    METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY,
    MODERN_VERSIONS,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    TASK_STATUSES,
    TASKS_EXTENSION,
    TERMINAL_STATUSES,
    TOO_MANY_REQUESTS,
    UNSUPPORTED_PROTOCOL_VERSION,
    Era,
    TaskStatus,
)

__all__ = [
    "HEADER_METHOD",
    "HEADER_MISMATCH",
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
    "MAX_ID_BYTES",
    "META_CLIENT_CAPABILITIES",
    "META_CLIENT_INFO",
    "META_LOG_LEVEL",
    "META_PROTOCOL_VERSION",
    "META_SERVER_INFO",
    "META_SUBSCRIPTION_ID",
    "METHOD_NOT_FOUND",
    "MISSING_CLIENT_CAPABILITY",
    "MODERN_VERSIONS",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "TASKS_EXTENSION",
    "TASK_STATUSES",
    "TERMINAL_STATUSES",
    "TOO_MANY_REQUESTS",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "Era",
    "TaskStatus",
    "too_many_requests_code",
]

fixup_module_metadata(__name__, __all__, globals())
