"""The message-stream session shared by stdio, WebSocket and the in-memory transport.

A bidirectional stream of JSON-RPC messages (one connection, one client)
is served the same way whatever frames it: read a message, dispatch it,
run requests concurrently in the connection's nursery, and when the stream
ends cancel everything still running.  A transport only supplies the
framing: an async iterator of incoming texts and a function that writes one.

**Ordering.**  A tracked tool call is started with ``nursery.start``, which
returns once the dispatcher has registered it (see :meth:`McpServer.run`),
so a ``notifications/cancelled`` read right after its request always finds
it.  A request that changes the connection's state (``initialize``,
``logging/setLevel``: the method's ``ordered`` flag) is finished before the
next message is read, so the request after it sees its effect.  Every other
request is spawned with ``start_soon``: nothing can cancel it, so there is
nothing to wait for, and a slow one never blocks the read loop behind it.

**Writes** go through one lock: two tasks must never interleave bytes on a
stream (Trio refuses concurrent ``send_all`` anyway), and a peer that went
away makes writes no-ops rather than errors in the tool.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterable, Awaitable, Callable
from functools import partial

import attrs
import trio

from .._core.namespace import namespace_for
from .._core.registry import USE_CONFIG, Registry, UseConfig
from .._protocol import jsonrpc
from .._protocol.dispatch import Call, Caller, Channel, Exchange, McpServer
from .._protocol.jsonrpc import JsonRpcError, Message

__all__ = ["MessageConnection", "WriteText", "connection_caller"]

logger = logging.getLogger("trio_mcp_cancel.connection")

WriteText = Callable[[str], Awaitable[None]]

#: What writing to a peer that went away raises, per framing.
_GONE: tuple[type[BaseException], ...] = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    BrokenPipeError,
    ConnectionError,
)


def connection_caller(
    kind: str,
    registry: Registry,
    *,
    max_concurrent_requests: int = 64,
    principal: str | None = None,
) -> Caller:
    """The identity of a new connection: a fresh ``session:<kind>-<random>`` namespace.

    One connection is one client, so a ``notifications/cancelled`` reaches
    only the requests sent on it, however its peer authenticated.
    """
    session_id = f"{kind}-{secrets.token_urlsafe(16)}"
    return Caller(
        namespace_for(session_id=session_id),
        registry,
        Channel(max_concurrent_requests=max_concurrent_requests),
        principal,
        session_id,
    )


@attrs.define(eq=False)
class MessageConnection:
    """One client on a message stream; see the module docstring.

    Parameters:
        server: the dispatcher.
        caller: the connection's identity; its ``channel`` (created when
            missing) bounds concurrency and remembers a legacy
            ``initialize``.
        write: writes one encoded message (a line, a WebSocket frame).
        grace: seconds from the stream closing to the hard cancel of what
            still runs (``USE_CONFIG``: the registry's grace period).
        max_request_time: seconds after which the server cancels a call
            itself (kind ``"server"``: the flag, then the grace period).
        gone: exception types that mean "the peer is gone" when writing.
    """

    server: McpServer
    caller: Caller
    write: WriteText
    grace: float | UseConfig | None = USE_CONFIG
    max_request_time: float | None = None
    gone: tuple[type[BaseException], ...] = _GONE
    _lock: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    closed: bool = attrs.field(init=False, default=False)
    """The peer is gone: nothing more is written."""

    def __attrs_post_init__(self) -> None:
        if self.caller.channel is None:
            self.caller.channel = Channel()
        self.caller.channel.ordered = True

    @property
    def channel(self) -> Channel:
        assert self.caller.channel is not None
        return self.caller.channel

    async def send(self, message: Message) -> None:
        """Write one message, or nothing once the peer is gone."""
        if self.closed:
            return
        text = jsonrpc.encode(message).decode("ascii")
        async with self._lock:
            if self.closed:
                return
            try:
                await self.write(text)
            except self.gone:
                self.closed = True

    async def serve(self, incoming: AsyncIterable[str | bytes]) -> None:
        """Serve until *incoming* ends (or raises); then cancel what still runs.

        Returns once every request of the connection has finished (the hard
        cancel bounds how long that takes), so nothing outlives it.
        """
        async with trio.open_nursery() as nursery:
            try:
                async for data in incoming:
                    await self.dispatch(data, nursery)
            finally:
                self.closed = True
                self.channel.cancel_all("connection closed", kind="disconnect", grace=self.grace)

    async def dispatch(self, data: str | bytes, nursery: trio.Nursery) -> None:
        """Handle one incoming message; returns once a request is registered."""
        try:
            message = jsonrpc.decode(data)
        except JsonRpcError as exc:
            await self.send(exc.to_message())
            return
        call = self.server.prepare(message, self.caller)
        if call.notification is not None:
            self.server.notify(call.notification, self.caller)
        elif call.error is not None:
            await self.send(call.error.to_message())
        elif call.request is None:
            return  # a client's response: we send no requests, nothing to match
        elif call.tracked or (call.method is not None and call.method.ordered):
            await nursery.start(self._run, call)
        else:
            nursery.start_soon(self._run, call)

    async def _run(
        self, call: Call, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        exchange = Exchange(send=self.send)
        run = partial(self.server.run, call, self.caller, exchange, task_status=task_status)
        if self.max_request_time is None or not call.tracked:
            reply = await run()
        else:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._time_limit, exchange)
                reply = await run()
                nursery.cancel_scope.cancel()
        if reply is not None:
            await self.send(reply)

    async def _time_limit(self, exchange: Exchange) -> None:
        assert self.max_request_time is not None
        await trio.sleep(self.max_request_time)
        exchange.cancel("request time limit reached", kind="server")
