"""The shared exchange types: who calls, what they hold open, and one request's stream.

A transport describes each message it hands the dispatcher with a
:class:`Caller` (who is calling, and the registry their ids live in) and,
for a request, an :class:`Exchange` (how to reach the request's own stream,
and how to cancel exactly this request when that stream goes away).  A
:class:`Channel` is what a client holds open across requests (a legacy
HTTP session or a stream connection).  These types are the vocabulary every
layer shares, so they depend on nothing above the kernel.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import attrs

from .._core.events import CancelKind
from .._core.registry import USE_CONFIG, Registry, UseConfig
from .._core.request import TrackedRequest
from .._core.validation import RequestId
from .._wire.jsonrpc import Message
from .client_table import ClientRequests
from .subscriptions import ResourceSubscriptions

__all__ = ["CLIENT_KINDS", "Caller", "Channel", "Exchange", "LegacyState", "SendMessage"]

SendMessage = Callable[[Message], Awaitable[None]]

#: Cancel kinds that come from the client: after one, nothing more is sent
#: for the request (MCP's cancellation rules).
CLIENT_KINDS: Final = frozenset({"client", "disconnect"})

#: Task creations a channel remembers, so a ``notifications/cancelled`` the
#: client sent before it read the ``CreateTaskResult`` still stops the task.
_LATE_CANCELS_KEPT: Final = 64


@attrs.define(eq=False)
class LegacyState:
    """What a legacy ``initialize`` negotiated, for the rest of its session."""

    protocol_version: str
    client_capabilities: Mapping[str, Any]
    client_info: Mapping[str, Any] | None = None
    log_level: str | None = None
    """Set by ``logging/setLevel``; ``None`` sends every level."""


@attrs.define(eq=False)
class Channel:
    """What one client holds open across requests: a legacy HTTP session or a
    stream connection (stdio, WebSocket, memory).  Modern HTTP has none.

    It bounds how many calls the client runs at once, and knows them all so
    that ending the channel cancels them.
    """

    max_concurrent_calls: int = 64
    exchanges: set[Exchange] = attrs.field(factory=set)
    legacy: LegacyState | None = None
    """Set by ``initialize``: this channel speaks the legacy era."""
    ordered: bool = False
    """Messages arrive in order (one stream), so a cancel of a request that is
    not running refers to one that already ended, never to one still on its
    way: no early cancel is kept (see ``RegistryConfig.early_cancel_ttl``)."""
    # Invariant: an id in ``late_cancels`` belongs to a request already answered (the
    # dispatcher forgets it when a new request reuses the id); at most 64 are kept.
    late_cancels: dict[RequestId, Callable[[], object]] = attrs.field(factory=dict)
    """The latest requests whose answer started work that outlives them (a
    ``tools/call`` answered with a task), and how to stop that work: a client
    that cancels such a request (racing its answer) ignores the answer, so
    what it never saw is stopped too.  A new request with the same id forgets
    the entry (the dispatcher does)."""
    notifications: bool = False
    """The transport delivers server notifications to this client outside any request
    (the legacy HTTP GET stream), so ``initialize`` promises ``listChanged``/``subscribe``."""
    resource_subscriptions: ResourceSubscriptions = attrs.field(factory=ResourceSubscriptions)
    """Legacy ``resources/subscribe``: the URIs whose ``notifications/resources/updated``
    the client's GET stream carries (bounded by the server's ``limits.subscriptions``;
    the transport clears it when the channel ends, giving their bytes back)."""
    client_requests: ClientRequests = attrs.field(factory=ClientRequests)
    """Server-to-client requests (``ctx.elicit``, legacy era) waiting for answers."""

    def on_late_cancel(self, request_id: RequestId, stop: Callable[[], object]) -> None:
        """Call *stop* if the client cancels *request_id* after it was answered
        (see :attr:`late_cancels`; the oldest entries beyond a bound are forgotten)."""
        self.late_cancels.pop(request_id, None)
        self.late_cancels[request_id] = stop
        while len(self.late_cancels) > _LATE_CANCELS_KEPT:
            del self.late_cancels[next(iter(self.late_cancels))]

    def cancel_all(
        self,
        reason: str,
        *,
        kind: CancelKind = "server",
        grace_period: float | UseConfig | None = USE_CONFIG,
    ) -> None:
        """Cancel every call still running on this channel."""
        for exchange in list(self.exchanges):
            exchange.cancel(reason, kind=kind, grace_period=grace_period)


@attrs.define(eq=False)
class Caller:
    """Who is calling: the namespace their ids live in, and the registry to use.

    ``session_id`` is a name for the session that is safe to show (over HTTP,
    not the ``Mcp-Session-Id`` secret itself).  ``tenant`` is who the
    server-wide admission policy counts the call against: the principal when
    authenticated, else the client's address bucket (``ip:...``); ``None``
    (stdio, tests): only the server-wide cap applies.
    """

    namespace: str
    registry: Registry
    channel: Channel | None = None
    principal: str | None = None
    session_id: str | None = None
    tenant: str | None = None
    network_transport: str | None = attrs.field(default=None, kw_only=True)
    """How the bytes travel, for telemetry (``network.transport``): ``pipe`` (stdio),
    ``tcp`` (HTTP, WebSocket); ``None`` in memory."""
    network_protocol: str | None = attrs.field(default=None, kw_only=True)
    """The application protocol under MCP (``network.protocol.name``): ``http``,
    ``websocket``; ``None`` for stdio and in memory."""


@attrs.define(eq=False)
class Exchange:
    """One request/response exchange as the transport sees it.

    ``send`` writes a request-related notification (progress, log) on the
    request's own stream (``None``: the transport cannot stream, and they are
    dropped).  ``request`` is set once the tool runs, so the transport can
    cancel exactly this request (by its private token) when its stream goes
    away; a cancel that comes before the tool started is kept and applied
    when it starts.
    """

    send: SendMessage | None = None
    request: TrackedRequest | None = None
    close_stream: Callable[[], bool] | None = None
    """Ends the connection carrying the request's stream without ending the stream
    (a resumable legacy HTTP stream: the client resumes it); ``None``: not possible."""
    _registry: Registry | None = None
    _pending: tuple[str, CancelKind, float | UseConfig | None] | None = None
    _on_lost: list[Callable[[], object]] | None = None  # made by the first when_lost()

    def when_lost(self, callback: Callable[[], object]) -> None:
        """Call *callback* if this exchange's answer is never delivered (see :meth:`lost`).

        A ``tools/call`` that created a task registers here: a client that
        never saw the ``CreateTaskResult`` cannot poll or cancel the task,
        so nobody would ever stop it.
        """
        if self._on_lost is None:
            self._on_lost = []
        self._on_lost.append(callback)

    def lost(self) -> None:
        """The answer was not delivered: the client cancelled first, or its stream went away.

        Called by the dispatcher (a silenced answer) and by the transport (a
        stream closed, or a write that never completed); idempotent.
        """
        callbacks, self._on_lost = self._on_lost, None
        for callback in callbacks or ():
            callback()

    def cancel(
        self,
        reason: str,
        *,
        kind: CancelKind = "disconnect",
        grace_period: float | UseConfig | None = USE_CONFIG,
    ) -> None:
        """Cancel this exchange's request server-side, now or as soon as it starts."""
        if self.request is not None and self._registry is not None:
            self._registry.cancel_request(
                self.request, reason, kind=kind, grace_period=grace_period
            )
        elif self._pending is None:
            self._pending = (reason, kind, grace_period)

    def attach(self, request: TrackedRequest, registry: Registry) -> None:
        """The request started running: apply a cancel that came before it."""
        self.request = request
        self._registry = registry
        if self._pending is not None:
            reason, kind, grace_period = self._pending
            self.cancel(reason, kind=kind, grace_period=grace_period)

    @property
    def cancel_kind(self) -> CancelKind | None:
        """Who cancelled this request, if anybody did."""
        if self.request is not None and self.request.cancellation is not None:
            return self.request.cancellation.kind
        return None if self._pending is None else self._pending[1]

    @property
    def silenced(self) -> bool:
        """The client cancelled: nothing more may be sent for this request."""
        request = self.request  # cancel_kind inline: asked once per answered call
        if request is not None and request.cancellation is not None:
            return request.cancellation.kind in CLIENT_KINDS
        return self._pending is not None and self._pending[1] in CLIENT_KINDS

    async def notify(self, message: Message) -> None:
        """Send a request-related notification, unless the client cancelled."""
        if self.send is not None and not self.silenced:
            await self.send(message)
