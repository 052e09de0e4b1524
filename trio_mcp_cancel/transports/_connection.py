"""The message-stream session shared by stdio, WebSocket and the in-memory transport.

A bidirectional stream of JSON-RPC messages (one connection, one client)
is served the same way whatever frames it: read a message, dispatch it,
run requests concurrently in the connection's nursery, and when the stream
ends cancel everything still running.  A transport only supplies the
framing: an async iterator of incoming texts and a function that writes one.

**Ordering.**  A tracked tool call is started with ``nursery.start``, which
returns once the dispatcher has registered it (see :meth:`Dispatcher.answer`),
so a ``notifications/cancelled`` read right after its request always finds
it.  A request that changes the connection's state (``initialize``,
``logging/setLevel``: the method's ``ordered`` flag) is finished before the
next message is read, so the request after it sees its effect.  Every other
request is spawned with ``start_soon``: nothing can cancel it, so there is
nothing to wait for, and a slow one never blocks the read loop behind it.

**Writes never wait for the peer.**  :meth:`MessageConnection.send` encodes
the message and appends it to the connection's *outbox*; one writer task
drains it in order, one ``write`` at a time, so two messages never
interleave on the stream, and a tool's ``report_progress`` or a request's
reply never blocks on a client that reads slowly or not at all (a client
that keeps its connection open but stopped reading would otherwise pin the
tool inside its next send, beyond the reach of every cancel that does not
cancel the tool itself).  ``send`` is still a checkpoint, so a tool that
does nothing but report progress lets the writer run.

The outbox is bounded and every write has a deadline.  The message being
written never counts against the bound (so one message of any size always
goes out), and the rule for the rest depends on what can grow without
bound:

* **Notifications** (progress, log messages) are what a tool can produce
  without end, so they carry the bound: a notification that would make the
  notifications waiting behind the message being written exceed
  ``max_buffered_bytes`` stalls the peer.
* **Replies** are always accepted, whatever their size, and are not counted
  with the notifications: there is one per request, and a large final
  result queued behind another request's progress must not make a client
  that reads look stalled.  Instead, while everything waiting behind the
  message being written exceeds ``max_buffered_bytes``, the connection
  reads no new message, so a client that sends requests without reading
  the replies cannot make the outbox grow either.

So a client that does not read costs at most the message being written,
``max_buffered_bytes`` of notifications and the replies of the requests it
had sent.  The peer is **stalled** when a notification overflows as above,
or when one ``write`` does not complete within ``write_timeout`` seconds
(the client stopped reading: a zero receive window, a paused process).

A stalled peer is a disconnected one: what is queued is dropped and nothing
more is written, the read loop stops, every request of the connection is
cancelled (kind ``"disconnect"``: the flag at once, the hard cancel
``grace`` later), and :meth:`~MessageConnection.serve` returns once they
have all finished.  The transport sees :attr:`~MessageConnection.stalled`
(or awaits :meth:`~MessageConnection.wait_stalled`) and closes the
connection without waiting on the peer.  A peer that went away (a write
raises one of ``gone``) makes writes no-ops rather than errors in a tool.

When the incoming stream ends (end of file, a closed socket) every call
still running is cancelled (kind ``"disconnect"``); what was queued before
is still written while the requests wind down, and once they have all
finished the rest gets at most ``write_timeout`` seconds in total.  What is
queued *after* the end depends on what the end means:

* a closed connection (a WebSocket close, the in-memory client closing its
  side) is a peer that reads no more: nothing new is queued;
* a **half-closed** input (``half_closed_input``: stdio's end of file on
  stdin) is the end of the peer's *requests*, not of its reading: MCP's
  stdio shutdown is "close the server's stdin, then wait for it to exit",
  and the host may read stdout until then.  So every request already read
  is still answered (a ``tools/list`` read just before the end of file,
  whose handler had not run yet, answers normally); the calls the end
  cancelled stay silent as the client-side kind ``"disconnect"`` requires.

Cancelling ``serve`` (server shutdown) stops the writer at once.

**Notifications outside requests (legacy era).**  A client that initialized
on the 2025 era has no ``subscriptions/listen``: the connection itself is
its notification stream (what HTTP's GET stream is to a session), so
``initialize`` promises ``listChanged`` and ``resources.subscribe``, and the
server's ``notifications/*/list_changed`` and the updates of the resources
it subscribed to are sent to it unasked, from the same hub and with the
same bounds as a listen stream (one of the dispatcher's listen slots; a
reader too far behind stops getting them, and the outbox bounds the rest).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from functools import partial

import attrs
import trio

from .._core.events import CancelKind
from .._core.namespace import namespace_for, tenant_for
from .._core.registry import Registry
from .._protocol.calls import ClientResponseCall, NotificationCall, Rejected, RequestCall
from .._protocol.dispatcher import Dispatcher, Served
from .._protocol.exchange import Caller, Channel, Exchange
from .._protocol.subscriptions import LegacyFilter
from .._wire import jsonrpc
from .._wire.jsonrpc import JsonRpcError, Message
from ._outbox import Outbox
from .limits import DEFAULT_CONNECTION_LIMITS, ConnectionLimits

__all__ = [
    "PEER_GONE",
    "MessageConnection",
    "WriteText",
    "connection_caller",
]

logger = logging.getLogger("trio_mcp_cancel.connection")

WriteText = Callable[[str], Awaitable[None]]

#: What writing to a peer that went away raises (a framing adds its own, as
#: WebSocket does with ``ConnectionClosed``).
PEER_GONE: tuple[type[BaseException], ...] = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    BrokenPipeError,
    ConnectionError,
)


def connection_caller(
    kind: str,
    registry: Registry,
    *,
    max_concurrent_calls: int = 64,
    principal: str | None = None,
    client: object = None,
) -> Caller:
    """The identity of a new connection: a fresh ``session:<kind>-<random>`` namespace.

    One connection is one client, so a ``notifications/cancelled`` reaches
    only the requests sent on it, however its peer authenticated.  Its
    tenant (for the server-wide admission caps) is the principal, else the
    address bucket of *client* (a ``(host, port)`` pair), else none.
    """
    session_id = f"{kind}-{secrets.token_urlsafe(16)}"
    transport, protocol = _NETWORK.get(kind, (None, None))
    return Caller(
        namespace_for(session_id=session_id),
        registry,
        Channel(max_concurrent_calls=max_concurrent_calls),
        principal,
        session_id,
        tenant_for(principal, client),
        network_transport=transport,
        network_protocol=protocol,
    )


#: ``network.transport`` and ``network.protocol.name`` of each stream transport (the
#: conventions' transport table); the in-memory one has no network to name.
_NETWORK: dict[str, tuple[str | None, str | None]] = {
    "stdio": ("pipe", None),
    "ws": ("tcp", "websocket"),
}


@attrs.define(eq=False)
class MessageConnection:
    """One client on a message stream; see the module docstring.

    Parameters:
        server: the dispatcher.
        caller: the connection's identity; its ``channel`` (created when
            missing) bounds concurrency and remembers a legacy
            ``initialize``.
        write: writes one encoded message (a line, a WebSocket frame).  It
            must be cancellable: a write that outlives ``write_timeout`` is
            cancelled, and the stream is not written to again.
        limits: the connection's :class:`~.limits.ConnectionLimits`; used
            here: ``disconnect_grace_period`` (from the stream closing, or the peer
            stalling, to the hard cancel of what still runs),
            ``max_request_time`` (``subscriptions/listen`` streams are
            exempt), ``write_timeout`` (``None``: then only
            ``max_buffered_bytes`` detects a client that stopped reading)
            and ``max_buffered_bytes`` (notifications that may wait behind
            the message being written, one more stalls the peer; also the
            backlog of everything waiting beyond which no new message is
            read).
        gone: exception types that mean "the peer is gone" when writing.
        half_closed_input: the end of *incoming* is the end of the peer's
            requests only, not of its reading (stdio): replies to requests
            already read are still queued until they have all finished.
        ends_tasks: when the connection has ended, stop the tasks (Tasks
            extension) its namespace owns, with the two phases: nobody can
            reach them any more.  ``False`` when the namespace is shared
            with other connections (the in-memory transport can do that).
    """

    server: Served
    caller: Caller
    write: WriteText
    limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS
    gone: tuple[type[BaseException], ...] = PEER_GONE
    half_closed_input: bool = False
    ends_tasks: bool = True
    tasks_end_as: tuple[str, CancelKind] = ("connection closed", "disconnect")
    """Reason and kind of that stop (a transport shutting down says so)."""
    stalled: bool = attrs.field(init=False, default=False)
    """The peer stopped reading (see the module docstring): close it abruptly."""
    _outbox: Outbox[str] = attrs.field(init=False)
    """Encoded messages not yet written (see :mod:`._outbox`): notifications are
    the bounded items, replies carry their ``Exchange.lost`` as ``on_lost``."""
    _room: trio.lowlevel.ParkingLot = attrs.field(init=False, factory=trio.lowlevel.ParkingLot)
    _stalled_event: trio.Event = attrs.field(init=False, factory=trio.Event)
    _writer: trio.CancelScope = attrs.field(init=False, factory=trio.CancelScope)
    _writing: trio.CancelScope | None = attrs.field(init=False, default=None)
    _reading: trio.CancelScope | None = attrs.field(init=False, default=None)
    _notifier: trio.CancelScope = attrs.field(init=False, factory=trio.CancelScope)
    """Ends the legacy notification pump (see the module docstring) with the requests."""
    _service: trio.Nursery | None = attrs.field(init=False, default=None)
    _pumping: bool = attrs.field(init=False, default=False)
    dispatcher: Dispatcher = attrs.field(init=False)
    """The server's dispatcher (``server.dispatcher``), looked up once per connection."""

    @dispatcher.default
    def _dispatcher_of_server(self) -> Dispatcher:
        return self.server.dispatcher

    def __attrs_post_init__(self) -> None:
        self._outbox = Outbox(self.limits.max_buffered_bytes, self.limits.write_timeout)
        if self.caller.channel is None:
            self.caller.channel = Channel()
        self.caller.channel.ordered = True
        self.caller.channel.notifications = True  # the connection is its notification stream

    @property
    def channel(self) -> Channel:
        assert self.caller.channel is not None
        return self.caller.channel

    @property
    def closed(self) -> bool:
        """Nothing more is queued: the stream ended (and every request, after a
        half-closed input), the peer is gone or stalled."""
        return self._outbox.closed

    @property
    def buffered_bytes(self) -> int:
        """Bytes queued for the peer and not yet written (the oldest message included)."""
        return self._outbox.bytes

    # -- writing -----------------------------------------------------------

    async def send(self, message: Message) -> None:
        """Queue one message for the peer; never waits for the peer.

        Nothing is queued once the connection is closed.  A notification
        that overflows the outbox stalls the peer instead (see the module
        docstring); a reply is always queued.  This is a checkpoint, so
        that a task that does nothing but send lets the writer run.
        """
        self.send_nowait(message)
        await trio.lowlevel.checkpoint()

    def send_nowait(self, message: Message, *, on_lost: Callable[[], object] | None = None) -> None:
        """:meth:`send` without the checkpoint; *on_lost* is called if it is never written."""
        if self.closed:
            if on_lost is not None:
                on_lost()
            return
        text = jsonrpc.encode(message).decode("ascii")
        notification = "id" not in message
        if not self._outbox.put(text, len(text), bounded=notification, on_lost=on_lost):
            self._stall(
                f"more than {self.limits.max_buffered_bytes} bytes of notifications waiting"
            )

    def _backlogged(self) -> bool:
        """More than ``max_buffered_bytes`` wait behind the message being written."""
        return self._outbox.backlogged()

    async def wait_stalled(self) -> None:
        """Return once the peer is found stalled (never, if it does not stall)."""
        await self._stalled_event.wait()

    async def _write_outbox(self) -> None:
        """The writer task: write the outbox in order, each write under its deadline."""
        outbox = self._outbox
        with self._writer:
            while True:
                text = outbox.start_write()
                if text is None:
                    if outbox.ending or self.stalled:
                        return
                    await outbox.wait()
                    continue
                self._writing = scope = trio.CancelScope(deadline=outbox.stall_at)
                try:
                    with scope:
                        await self.write(text)
                except self.gone:
                    outbox.lose()
                    return
                except Exception:
                    # A transport bug; the stream is in an unknown state.
                    logger.exception("%s: writing to the peer failed", self.caller.namespace)
                    outbox.lose()
                    return
                finally:
                    self._writing = None
                if self.stalled:
                    return  # the write was cut short: the stream is not written again
                if scope.cancelled_caught:
                    self._stall(f"no write completed within {self.limits.write_timeout}s")
                    return
                outbox.written()
                self._room.unpark_all()
        if self._writer.cancelled_caught and outbox:
            logger.info(
                "%s: dropped %d unwritten message(s) after the connection ended",
                self.caller.namespace,
                len(outbox),
            )
            outbox.lose()

    def _stall(self, why: str) -> None:
        """The peer stopped reading: treat it as disconnected (see the module docstring)."""
        if self.stalled:
            return
        self.stalled = True
        self._outbox.lose()
        self._room.unpark_all()
        if self._writing is not None:
            self._writing.cancel()
        if self._reading is not None:
            self._reading.cancel()
        self._stalled_event.set()
        logger.info(
            "%s: the client stopped reading (%s); cancelling its requests",
            self.caller.namespace,
            why,
        )
        self.channel.cancel_all(
            "client stopped reading",
            kind="disconnect",
            grace_period=self.limits.disconnect_grace_period,
        )

    def _finish_writing(self) -> None:
        """Every request has finished: write what is left, within ``write_timeout``."""
        self._outbox.end()
        if self.limits.write_timeout is not None:
            self._writer.deadline = min(
                self._writer.deadline, trio.current_time() + self.limits.write_timeout
            )

    # -- reading -----------------------------------------------------------

    async def serve(self, incoming: AsyncIterable[str | bytes]) -> None:
        """Serve until *incoming* ends (or raises) or the peer stalls; then
        cancel what still runs.

        Returns once every request of the connection has finished (the hard
        cancel bounds how long that takes), and the writer with them, so
        nothing outlives it.
        """
        started = trio.current_time()
        failure: str | None = None
        try:
            await self._serve(incoming)
        except trio.Cancelled:
            raise  # the server shutting down: not the session's failure
        except BaseException as exc:
            failure = type(exc).__qualname__
            raise
        finally:
            telemetry = self.dispatcher.registration.telemetry
            if telemetry is not None:
                # mcp.server.session.duration: one connection is one session.
                legacy = self.channel.legacy
                telemetry.session_ended(
                    started,
                    None if legacy is None else legacy.protocol_version,
                    (self.caller.network_transport, self.caller.network_protocol),
                    "peer_stalled" if self.stalled and failure is None else failure,
                )

    async def _serve(self, incoming: AsyncIterable[str | bytes]) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write_outbox)
            self._service = nursery
            try:
                async with trio.open_nursery() as requests:
                    ended = False
                    try:
                        await self._read(aiter(incoming), requests)
                        ended = True
                    finally:
                        if not (ended and self.half_closed_input):
                            self._outbox.close()
                        if not self.stalled:
                            self.channel.cancel_all(
                                "connection closed",
                                kind="disconnect",
                                grace_period=self.limits.disconnect_grace_period,
                            )
                if self.ends_tasks:
                    reason, kind = self.tasks_end_as
                    for extension in self.dispatcher.extensions:
                        await extension.connection_closed(
                            self.caller.namespace,
                            reason,
                            kind=kind,
                            grace_period=self.limits.disconnect_grace_period,
                        )
            finally:
                self._notifier.cancel()
                self._finish_writing()
                self.channel.resource_subscriptions.clear()  # their bytes go back

    async def _notify_legacy(self) -> None:
        """The hub's notifications for a legacy client, unasked (module docstring)."""
        tenant = self.caller.tenant
        if self.dispatcher.admit_notification_stream(tenant) is not None:
            logger.info("listen stream limit reached: no list changes for this connection")
            return
        hub = self.dispatcher.runtime.subscriptions
        listener = hub.open(LegacyFilter(self.channel.resource_subscriptions))
        try:
            with self._notifier:
                async for note in listener.receive:
                    self.send_nowait(jsonrpc.notification_message(note["method"], note["params"]))
                if listener.overflowed:
                    logger.info("a client fell too far behind its notifications; no more sent")
        finally:
            hub.close(listener)
            self.dispatcher.release_notification_stream(tenant)

    async def _read(self, messages: AsyncIterator[str | bytes], nursery: trio.Nursery) -> None:
        """Dispatch incoming messages until they end or the peer stalls.

        Only the wait for the next message is cancelled by a stall, never a
        dispatch half done.  No message is read while the outbox is
        backlogged (see the module docstring).
        """
        while not self.stalled:
            with trio.CancelScope() as self._reading:
                try:
                    while self._backlogged():
                        await self._room.park()
                    data = await anext(messages)
                except StopAsyncIteration:
                    return
                finally:
                    self._reading = None
            if self.stalled:
                return
            await self.dispatch(data, nursery)

    async def dispatch(self, data: str | bytes, nursery: trio.Nursery) -> None:
        """Handle one incoming message; returns once a request is registered."""
        if not self._pumping and self.channel.legacy is not None and self._service is not None:
            self._pumping = True  # initialized as legacy: from now on it hears list changes
            self._service.start_soon(self._notify_legacy)
        try:
            message = jsonrpc.decode(data)
        except JsonRpcError as exc:
            self.dispatcher.refuse(exc, None, self.caller)
            await self.send(exc.to_message())
            return
        call = self.dispatcher.prepare(message, self.caller)
        if isinstance(call, RequestCall):
            exchange = Exchange(send=self.send)
            refused = self.dispatcher.admit(call, self.caller, exchange)  # once, here
            if refused is not None:
                await self.send(refused)
            elif call.tracked or call.method.ordered:
                await nursery.start(self._run, call, exchange)
            else:
                nursery.start_soon(self._run, call, exchange)
        elif isinstance(call, NotificationCall):
            self.dispatcher.notify(call.notification, self.caller)
        elif isinstance(call, Rejected):
            await self.send(call.error.to_message())
        elif isinstance(call, ClientResponseCall):
            self.dispatcher.respond(call, self.caller)  # an answer to a ctx.elicit

    async def _run(
        self,
        call: RequestCall,
        exchange: Exchange,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        run = partial(
            self.dispatcher.answer,
            call,
            self.caller,
            exchange,
            admitted=True,
            task_status=task_status,
        )
        if self.limits.max_request_time is None or not call.tracked or call.long_lived:
            reply = await run()
        else:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._time_limit, exchange)
                reply = await run()
                nursery.cancel_scope.cancel()
        if reply is not None:
            # A reply dropped unwritten (the peer went away) is a lost answer.
            self.send_nowait(reply, on_lost=exchange.lost)
            await trio.lowlevel.checkpoint()

    async def _time_limit(self, exchange: Exchange) -> None:
        assert self.limits.max_request_time is not None
        await trio.sleep(self.limits.max_request_time)
        exchange.cancel("request time limit reached", kind="server")
