"""Attribute, event and instrument names: the MCP semantic conventions, and ours.

The standard names follow OpenTelemetry's semantic conventions for MCP
(``docs/gen-ai/mcp.md``) exactly as the official Python SDK emits them;
what no convention covers (how a cancellation went) is in the project's
own ``mcp_cancel.*`` namespace.  Metric attributes are all drawn from small
fixed sets here (never an id, a session or a principal), so their
cardinality is bounded whatever clients send.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ATTR_CANCEL_CAUSE",
    "ATTR_CANCEL_FLAG_TO_STOP",
    "ATTR_CANCEL_HARD",
    "ATTR_CANCEL_KIND",
    "ATTR_CANCEL_OVERRUN",
    "ATTR_CANCEL_PHASE",
    "ATTR_CANCEL_REASON",
    "ATTR_LIMIT",
    "ATTR_NETWORK_PROTOCOL",
    "ATTR_NETWORK_TRANSPORT",
    "ATTR_RESOURCE_URI",
    "ATTR_SENTRY_CANCELLED_REASON",
    "ATTR_SENTRY_CANCELLED_REQUEST_ID",
    "MAX_ATTRIBUTE_LENGTH",
    "RESOURCE_METHODS",
    "DURATION_BUCKETS",
    "EVENT_FLAG",
    "EVENT_HARD_CANCEL",
    "EVENT_OVERRUN",
    "EVENT_PROCESS_KILLED",
    "EVENT_PROCESS_SIGNALLED",
    "EVENT_STOP",
    "EVENT_TASK_CANCEL",
    "EVENT_THREAD_ABANDONED",
    "INSTRUMENTATION_NAME",
    "OTHER_METHOD",
    "bounded",
    "TIME_LIMIT_REASON",
    "server_cause",
]

#: The tracer and meter name (the distribution's name).
INSTRUMENTATION_NAME: Final = "trio-mcp-cancel"

# Standard attributes the conventions name (set where they apply).
ATTR_RESOURCE_URI: Final = "mcp.resource.uri"
"""The ``uri`` of ``resources/read``, ``resources/subscribe`` and ``resources/unsubscribe``
(spans only: the conventions make it opt-in on metrics, for its cardinality)."""
ATTR_NETWORK_TRANSPORT: Final = "network.transport"
"""``pipe`` (stdio) or ``tcp`` (HTTP, WebSocket); absent in memory (no network at all)."""
ATTR_NETWORK_PROTOCOL: Final = "network.protocol.name"
"""``http`` or ``websocket``; absent for stdio (the conventions' transport table)."""

#: The methods whose ``params.uri`` is a resource's URI (``mcp.resource.uri``).
RESOURCE_METHODS: Final = frozenset(
    {"resources/read", "resources/subscribe", "resources/unsubscribe"}
)

#: ``mcp.method.name`` of a message whose method is not one the server knows (or
#: that has none): the conventions' ``_OTHER``, so a client cannot name spans or
#: metric series at will.
OTHER_METHOD: Final = "_OTHER"

#: The longest string attribute taken from the peer (a URI, a request id, a reason).
MAX_ATTRIBUTE_LENGTH: Final = 1024

# Sentry's MCP conventions name a cancellation's id and reason (they record them
# on the ``notifications/cancelled`` span); set beside the project's own keys, on
# that span and on the span of the request it cancelled.
ATTR_SENTRY_CANCELLED_REQUEST_ID: Final = "mcp.cancelled.request_id"
ATTR_SENTRY_CANCELLED_REASON: Final = "mcp.cancelled.reason"

# The project's own span attributes (set when a request was cancelled).
ATTR_CANCEL_KIND: Final = "mcp_cancel.cancel.kind"
"""Who cancelled: ``client``, ``disconnect`` or ``server``."""
ATTR_CANCEL_CAUSE: Final = "mcp_cancel.cancel.cause"
"""``client``, ``disconnect``, or the server's reason: ``time_limit``,
``session_end``, ``shutdown``, ``limit``, ``internal_error``, ``other``."""
ATTR_CANCEL_REASON: Final = "mcp_cancel.cancel.reason"
"""The reason text (the client's, cut to ``max_reason_length``); spans only."""
ATTR_CANCEL_PHASE: Final = "mcp_cancel.cancel.phase"
"""How far the cancellation had to go: ``flag`` (the tool stopped by
itself), ``hard_cancel`` (the grace period ran out), ``overrun`` (it ran on
past its hard cancel)."""
ATTR_CANCEL_HARD: Final = "mcp_cancel.cancel.hard"
ATTR_CANCEL_FLAG_TO_STOP: Final = "mcp_cancel.cancel.flag_to_stop"
"""Seconds from the flag to the request's end."""
ATTR_CANCEL_OVERRUN: Final = "mcp_cancel.cancel.overrun"
"""Seconds the request ran past its hard cancel (``overrun`` only)."""
ATTR_LIMIT: Final = "mcp_cancel.limit"
"""Which admission limit refused a call: ``server``, ``tenant``, ``channel``,
``listen_server``, ``listen_tenant``."""

# Span events.
EVENT_FLAG: Final = "mcp_cancel.flag"
EVENT_HARD_CANCEL: Final = "mcp_cancel.hard_cancel"
EVENT_OVERRUN: Final = "mcp_cancel.overrun"
EVENT_STOP: Final = "mcp_cancel.stop"
EVENT_THREAD_ABANDONED: Final = "mcp_cancel.thread_abandoned"
EVENT_PROCESS_SIGNALLED: Final = "mcp_cancel.process_signalled"
EVENT_PROCESS_KILLED: Final = "mcp_cancel.process_group_killed"
EVENT_TASK_CANCEL: Final = "mcp_cancel.task_cancel_requested"

#: ``mcp.server.operation.duration``'s advised bucket boundaries (semantic conventions).
DURATION_BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)

#: How the reason of a call cancelled at its OAuth token's expiry begins (HTTP).
TOKEN_EXPIRED: Final = "the access token expired at "

#: How the reason of a call stopped by its own ``time_limit`` begins (the seconds follow).
TIME_LIMIT_REASON: Final = "time limit of "

# The server's own cancel reasons (code constants in the transports) by cause.
_SERVER_CAUSES: Final = {
    "request time limit reached": "time_limit",
    "session terminated": "session_end",
    "session evicted": "session_end",
    "server shutting down": "shutdown",
    "internal error": "internal_error",
}


def server_cause(reason: str | None) -> str:
    """The bounded cause of a server-side cancel, from its reason."""
    if reason is None:
        return "other"
    cause = _SERVER_CAUSES.get(reason)
    if cause is not None:
        return cause
    if reason.startswith(TOKEN_EXPIRED):  # the expiry time follows: one cause for all
        return "token_expired"
    if reason.startswith(TIME_LIMIT_REASON):  # a tool's own limit: the server-wide one's cause
        return "time_limit"
    return "limit" if "limit" in reason else "other"


def bounded(value: object, limit: int = MAX_ATTRIBUTE_LENGTH) -> str:
    """*value* as an attribute string of at most *limit* characters.

    What a peer sends (a resource URI, a request id, a reason) can be of
    any size; an attribute keeps its first *limit* characters, so one
    hostile message never makes a span (or an export) large.
    """
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit]
