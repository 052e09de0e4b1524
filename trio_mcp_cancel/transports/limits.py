"""Typed, shared settings of the transports (httpx's ``Limits`` / ``Timeout`` style).

:class:`ConnectionLimits` bounds what one client connection may hold and is
taken by every transport (stdio, WebSocket, memory, HTTP) and the test
client, so the same concept has the same name everywhere.
:class:`HttpLimits` holds what only HTTP has: request heads, body
deadlines and legacy sessions.  Both are frozen and validated when built,
so a bad value fails where it is written, not on the first request.
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias

import attrs

from .._core.registry import USE_CONFIG, UseConfig

__all__ = ["DEFAULT_CONNECTION_LIMITS", "DEFAULT_HTTP_LIMITS", "ConnectionLimits", "HttpLimits"]


def _at_least_one(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be an int >= 1, not {value!r}")


def _non_negative_int(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"{attribute.name} must be an int >= 0, not {value!r}")


def _seconds(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A positive number of seconds, or ``None`` (no limit)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{attribute.name} must be seconds > 0 or None, not {value!r}")


#: A grace period override: seconds, ``None`` (never hard-cancel) or ``USE_CONFIG``.
_GracePeriod: TypeAlias = float | UseConfig | None


def _grace(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None or value is USE_CONFIG:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{attribute.name} must be seconds >= 0, None or USE_CONFIG")


@attrs.frozen(kw_only=True)
class ConnectionLimits:
    """What one client connection (or legacy HTTP session) may hold, on every transport.

    The defaults are safe for a server exposed to clients it does not
    control; raise one where a trusted client needs more.
    """

    max_concurrent_calls: int = attrs.field(default=64, validator=_at_least_one)
    """Cancellable calls one connection runs at once; more are refused
    (``-31429``; legacy ``-32001``) at once (never queued: a queue turns a
    flood into a hang).
    64 is far above what a model's host runs in parallel."""
    max_message_size: int = attrs.field(default=1 << 20, validator=_at_least_one)
    """Bytes of one incoming message (a stdio line, a WebSocket message, an
    HTTP request body); a larger one is refused (``-32600``, HTTP ``413``).
    1 MiB holds any tool arguments a model writes and bounds memory per read."""
    max_request_time: float | None = attrs.field(default=None, validator=_seconds)
    """Seconds after which the server cancels a tool call (kind ``"server"``;
    ``subscriptions/listen`` streams are exempt).  ``None``: tools run as long
    as they need, since only the tool knows how long its work takes."""
    write_timeout: float | None = attrs.field(default=30.0, validator=_seconds)
    """Seconds one write to the client may stay pending before the client
    counts as gone (its calls are cancelled, kind ``"disconnect"``): a peer
    that stops reading must not pin tools behind a full pipe forever."""
    max_buffered_bytes: int = attrs.field(default=1 << 20, validator=_non_negative_int)
    """Bytes of notifications (progress, logs, keep-alives) that may wait for
    a slow client behind the write in flight; more counts as gone the same
    way.  Replies are always accepted, so a large result still goes out."""
    keepalive_interval: float | None = attrs.field(default=15.0, validator=_seconds)
    """Seconds between keep-alives on a silent WebSocket or SSE stream, so
    proxies with idle timeouts (often 30-60 s) keep long tool calls open.
    stdio and memory have no proxy between the ends and ignore it."""
    disconnect_grace_period: _GracePeriod = attrs.field(default=USE_CONFIG, validator=_grace)
    """Seconds from the client going away (end of input, a closed socket or
    stream) to the hard cancel of its calls.  ``USE_CONFIG`` (default): the
    registry's ``grace_period``, the same patience as an explicit cancel."""


@attrs.frozen(kw_only=True)
class HttpLimits:
    """What HTTP adds to :class:`ConnectionLimits`: heads, body deadlines, legacy sessions."""

    max_head_size: int = attrs.field(default=16 * 1024, validator=_at_least_one)
    """Bytes of a request's headers; more is ``431``, however the bytes arrive.
    16 KiB matches ``server_config()``'s ``h11_max_incomplete_size`` and
    ``h2_max_header_list_size``: raise them together."""
    body_timeout: float | None = attrs.field(default=10.0, validator=_seconds)
    """Seconds to receive a request body once its head arrived; a client that
    trickles or stalls it gets ``408`` and its connection closed, so slowloris
    bodies cannot hold workers.  MCP bodies are small: 10 s is generous."""
    max_sessions: int = attrs.field(default=10_000, validator=_at_least_one)
    """Legacy sessions in total (each holds a little memory until it ends or
    idles out); at the bound idle sessions make room, busy ones are kept."""
    max_sessions_per_tenant: int = attrs.field(default=100, validator=_at_least_one)
    """Legacy sessions of one principal, or one client address bucket when
    unauthenticated, so one tenant cannot take the whole store.  Over it:
    ``429``."""
    session_idle_timeout: float | None = attrs.field(default=3600.0, validator=_seconds)
    """Seconds after which an idle legacy session expires: clients that vanish
    without a DELETE (most do) must not hold sessions forever."""
    replay_buffer_size: int = attrs.field(default=256 * 1024, validator=_at_least_one)
    """Bytes of recent events each resumable legacy SSE stream keeps for a client
    that reconnects with ``Last-Event-ID`` (the final answer is kept apart, never
    dropped).  An event dropped before any connection took it makes the stream
    unresumable: its call is then cancelled as a disconnect at once."""
    max_retained_stream_bytes: int = attrs.field(default=64 << 20, validator=_at_least_one)
    """Bytes all resumable legacy SSE streams of one app may hold together: replay
    buffers, and answers not yet delivered.  Per-stream bounds alone let memory
    grow with the call rate when clients do not read (each unread answer is held
    for ``write_timeout`` plus ``resume_window``).  Over it, the oldest finished
    stream not yet delivered (or GET stream kept only for a resume) is evicted:
    its connection is closed, its answer lost, a resume of it is ``409``; with
    none left, the stream adding an event keeps less history (as at
    ``replay_buffer_size``).  64 MiB is 256 full replay buffers, far more than
    clients resume at once, and a small, fixed part of a worker's memory."""


#: The defaults, shared (the objects are frozen).
DEFAULT_CONNECTION_LIMITS: Final = ConnectionLimits()
DEFAULT_HTTP_LIMITS: Final = HttpLimits()
