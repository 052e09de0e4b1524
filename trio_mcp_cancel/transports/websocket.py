"""MCP over WebSocket (trio-websocket): one connection is one session.

Not a standard MCP transport (MCP defines stdio and Streamable HTTP;
SEP-1288, which proposes WebSocket, is open): the rules below are this
project's own, and docs/reference.md ("WebSocket") states them for clients.

Each connection gets a fresh ``session:ws-<random>`` namespace, so a
``notifications/cancelled`` only reaches requests sent on the same
connection.  Requests run concurrently in the connection's nursery (at most
``max_concurrent_calls``; more are answered with an error, not queued
without bound).  The framing is MCP's stdio rules on a bidirectional
stream (one JSON-RPC message per text frame; cancellation is
``notifications/cancelled``, in both eras), served by the shared
:class:`~trio_mcp_cancel.transports._connection.MessageConnection`.
When the peer closes the socket, or it breaks, every
request still running is cancelled by its private token (kind
``"disconnect"``): the flag at once, the hard cancel ``limits.disconnect_grace_period``
later.  The handler returns only when all of them have finished, so a
closed connection leaves no task and no row behind.

A client that keeps the socket open but stops reading (a zero receive
window, a paused process) is disconnected the same way: tools never wait
on the socket (their messages queue in a bounded outbox, see
:class:`~trio_mcp_cancel.transports._connection.MessageConnection`), and
once one frame has waited ``write_timeout`` seconds to be sent, or
``max_buffered_bytes`` of notifications pile up behind it, the connection's calls are
cancelled (kind ``"disconnect"``) and the TCP connection is closed without
waiting for the peer to take a close frame.

**Shutdown** (``shutdown=`` set, or SIGINT/SIGTERM with
``handle_signals=True``) is HTTP's and stdio's (the shared
:class:`~trio_mcp_cancel.transports._shutdown.Shutdown`): new connections
are refused (``503``), every connection stops reading, its calls in flight
are flagged (kind ``"server"``, reason ``"server shutting down"``) and
hard-cancelled at one deadline for all, each is answered ``-32800`` with the
reason and logged, and then the connection is closed with code 1001 ("going
away"); ``serve_mcp_websocket`` returns within ``graceful_timeout`` of the
trigger, however its clients behave.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from functools import partial
from typing import Final

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    Endpoint,
    WebSocketConnection,
    WebSocketRequest,
    WebSocketServer,
    serve_websocket,
)

from .._auth.resource import OAuthResource, Refusal
from .._auth.tokens import AccessToken
from .._core.registry import USE_CONFIG, Registry, current_registry
from .._protocol.dispatcher import Served
from .._protocol.lifespan import lifespan_served
from .._protocol.registration import Registration
from .._wire import jsonrpc
from .._wire.jsonrpc import JsonRpcError
from ._connection import PEER_GONE, MessageConnection, connection_caller
from ._extensions import extensions_served
from ._shutdown import SHUTDOWN_REASON, Shutdown
from ._startup import require_running
from .auth import Authenticator, authenticate
from .http.oauth import check_scopes
from .http.rules import HttpError, request_headers
from .limits import DEFAULT_CONNECTION_LIMITS, ConnectionLimits

__all__ = ["serve_mcp_websocket"]

logger = logging.getLogger("trio_mcp_cancel.websocket")

#: Seconds a stalled peer gets to take our close frame before the TCP
#: connection is closed under it (it stopped reading, so it rarely does).
_STALLED_CLOSE_TIMEOUT: Final = 0.25
#: Of a shutdown's ``graceful_timeout``, the seconds (at most; half of a shorter
#: one) kept after the hard cancel of the calls still running, for their
#: ``-32800`` to be written and the connections closed (as ``serve()`` over HTTP).
_ANSWER_TIME: Final = 1.0
_SHUTDOWN_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


@attrs.define(eq=False)
class _Closing:
    """One server's shutdown: the shared :class:`Shutdown`, and its connections."""

    shutdown: Shutdown = attrs.field(factory=lambda: Shutdown(log=logger))
    close_by: float = math.inf
    """Connections still serving then are closed (1001) without more waiting."""
    open: int = 0
    """Connection handlers running (the shutdown waits for them to reach 0)."""
    connections: set[MessageConnection] = attrs.field(factory=set)
    """The connections serving now: their calls are the shutdown's calls in flight."""
    idle: trio.Event = attrs.field(factory=trio.Event)

    @property
    def begun(self) -> bool:
        return self.shutdown.at is not None

    @contextlib.contextmanager
    def counted(self) -> Iterator[None]:
        """Count one connection while the block runs (a shutdown waits for none to be left)."""
        self.open += 1
        try:
            yield
        finally:
            self.open -= 1
            if self.open == 0 and self.begun:
                self.idle.set()


async def serve_mcp_websocket(
    server: Served,
    registry: Registry | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    path: str = "/mcp",
    auth: Authenticator | OAuthResource | None = None,
    limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
    shutdown: trio.Event | None = None,
    handle_signals: bool = False,
    graceful_timeout: float = 5.0,
    task_status: trio.TaskStatus[WebSocketServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve *server* over WebSocket until cancelled or shut down; for ``nursery.start``.

    ``task_status.started`` receives the :class:`trio_websocket.WebSocketServer`
    (its ``port`` is the bound port when *port* is 0).  Oversized messages
    close the connection (code 1009), as trio-websocket does.

    *limits* (:class:`~trio_mcp_cancel.server.ConnectionLimits`) apply to
    each connection.  ``write_timeout`` (seconds one frame may wait to be
    sent) and ``max_buffered_bytes`` (progress and log notifications that
    may wait behind the frame being sent) bound what a client that stops
    reading costs: tools never block on its socket, and past either bound it
    is disconnected (its calls cancelled, kind ``"disconnect"``) rather than
    pinning them forever.  Replies, large results included, are always
    accepted; while more than ``max_buffered_bytes`` wait in all, no new
    message is read.  The ping keep-alive (``keepalive_interval``) catches a
    peer that vanished; these catch one that is there but does not read.

    *auth* as on :class:`~trio_mcp_cancel.http.McpHttpApp`: an
    :class:`~trio_mcp_cancel.oauth.OAuthResource` authorizes the upgrade
    request like an HTTP request (``401``/``403``/``503`` with the same
    challenge).  The connection then lasts no longer than its token (closed,
    code 1008, at ``exp``), and a ``tools/call`` of a tool whose scopes the
    token lacks closes it (code 1008, ``insufficient_scope``): a WebSocket
    message has no status to refuse it with.

    **Shutdown.**  Cancelling the call stops at once (connections and their
    calls are cancelled, unanswered).  A graceful shutdown starts when
    *shutdown* is set, or, with ``handle_signals=True``, at the first SIGINT
    or SIGTERM (from the main thread only; a second one stops at once), as
    HTTP's ``serve(handle_signals=True)`` does, and ends within
    *graceful_timeout* seconds (*T*), when this *returns* normally:

    * new connections are refused (``503``), and every open connection
      stops reading;
    * every call in flight is cancelled (kind ``"server"``, reason ``"server
      shutting down"``; a tool sees ``cancelled()`` at once), and one still
      running ``T - min(1, T/2)`` seconds after the trigger (or after the
      grace period, ``limits.disconnect_grace_period``, if sooner) is
      hard-cancelled; each is answered ``-32800`` with the reason and logged;
    * then each connection is closed with code 1001 ("going away"); one
      whose client does not read its answers is closed ``T - min(1, T/2)/2``
      seconds after the trigger at the latest.
    """
    if registry is None:
        registry = current_registry()
    require_running(registry, "serve_mcp_websocket")
    if not 0 < graceful_timeout < math.inf:
        raise ValueError(f"graceful_timeout must be a positive number, not {graceful_timeout!r}")
    closing = _Closing()
    handler = partial(
        _handle,
        server=server,
        registry=registry,
        path=path,
        auth=auth,
        limits=limits,
        closing=closing,
    )
    serving = partial(
        serve_websocket, handler, host, port, None, max_message_size=limits.max_message_size
    )
    async with lifespan_served(server), extensions_served(server):
        if shutdown is None and not handle_signals:
            await serving(task_status=task_status)
            return
        grace = limits.disconnect_grace_period
        if grace is USE_CONFIG:
            grace = registry.config.grace_period
        bound = trio.CancelScope()  # the whole shutdown ends by then
        with bound, contextlib.ExitStack() as stack:
            signals = (
                stack.enter_context(trio.open_signal_receiver(*_SHUTDOWN_SIGNALS))
                if handle_signals
                else None
            )
            async with trio.open_nursery() as nursery:
                task_status.started(await nursery.start(serving))
                triggered = trio.Event()
                nursery.start_soon(_watch_triggers, shutdown, signals, triggered, bound)
                await triggered.wait()
                now = trio.current_time()
                bound.deadline = now + graceful_timeout
                answer_time = min(_ANSWER_TIME, graceful_timeout / 2)
                closing.close_by = now + graceful_timeout - answer_time / 2
                logger.info("WebSocket: shutting down gracefully (up to %gs)", graceful_timeout)
                for connection in closing.connections:
                    closing.shutdown.in_flight.update(connection.channel.exchanges)
                closing.shutdown.begin(grace, within=graceful_timeout - answer_time)
                if closing.open:
                    await closing.idle.wait()
                nursery.cancel_scope.cancel()  # the listeners, and the trigger watcher
        if bound.cancelled_caught and closing.begun:
            logger.warning(
                "WebSocket: still running %gs after the shutdown began; stopped", graceful_timeout
            )


async def _watch_triggers(
    shutdown: trio.Event | None,
    signals: AsyncIterator[int] | None,
    triggered: trio.Event,
    bound: trio.CancelScope,
) -> None:
    """Set *triggered* at *shutdown* or the first signal; a second signal cancels *bound*."""
    async with trio.open_nursery() as nursery:
        if shutdown is not None:

            async def requested() -> None:
                await shutdown.wait()
                if not triggered.is_set():
                    logger.info("WebSocket: shutdown requested")
                triggered.set()

            nursery.start_soon(requested)
        if signals is not None:
            async for signum in signals:
                name = signal.Signals(signum).name
                if triggered.is_set():
                    logger.info("%s received again: stopping now", name)
                    bound.cancel()
                    return
                logger.info("%s received", name)
                triggered.set()


async def _handle(
    request: WebSocketRequest,
    *,
    server: Served,
    registry: Registry,
    path: str,
    auth: Authenticator | OAuthResource | None,
    limits: ConnectionLimits,
    closing: _Closing,
) -> None:
    with closing.counted():
        # An exception escaping a handler would tear down the whole server, so
        # everything but cancellation stops here.
        try:
            if closing.begun:
                await request.reject(503, extra_headers=[(b"retry-after", b"1")])
                return
            if request.path.split("?", 1)[0] != path:
                await request.reject(404)
                return
            try:
                # The HTTP endpoint's head rules: a repeated Authorization or
                # Origin is refused, not read as its last copy.
                headers = request_headers(list(request.headers))
            except HttpError as refused:
                await request.reject(
                    refused.status,
                    extra_headers=[(b"content-type", b"application/json")],
                    body=refused.body(),
                )
                return
            principal = None
            access: AccessToken | None = None
            if isinstance(auth, OAuthResource):
                try:
                    remote = request.remote
                    address = (
                        (str(remote.address), remote.port) if isinstance(remote, Endpoint) else None
                    )
                    access = await auth.authenticate(headers, address)
                except Refusal as refused:
                    body = HttpError(refused.status, str(refused)).body()
                    await request.reject(refused.status, extra_headers=refused.headers(), body=body)
                    return
                principal = access.principal
            elif auth is not None:
                principal = await authenticate(auth, headers)
                if principal is None:
                    await request.reject(401, extra_headers=[(b"www-authenticate", b"Bearer")])
                    return
            subprotocol = "mcp" if "mcp" in request.proposed_subprotocols else None
            ws = await request.accept(subprotocol=subprotocol)
            remote = request.remote
            caller = connection_caller(
                "ws",
                registry,
                max_concurrent_calls=limits.max_concurrent_calls,
                principal=principal,
                client=(str(remote.address), remote.port) if isinstance(remote, Endpoint) else None,
            )
            connection = MessageConnection(
                server,
                caller,
                ws.send_message,
                limits=limits,
                gone=(ConnectionClosed, *PEER_GONE),
            )
            reader = _Reader(ws)
            with trio.CancelScope() as serving:
                forget = closing.shutdown.on_begin(
                    partial(_shut_down, connection, reader, serving, closing)
                )
                closing.connections.add(connection)
                try:
                    async with trio.open_nursery() as nursery:
                        if limits.keepalive_interval is not None:
                            nursery.start_soon(_keepalive, ws, limits.keepalive_interval)
                        nursery.start_soon(_close_when_stalled, ws, connection)
                        incoming = reader.messages()
                        if isinstance(auth, OAuthResource) and access is not None:
                            if access.expires_at is not None:
                                nursery.start_soon(_close_at_expiry, ws, access.expires_at)
                            incoming = _scoped(
                                incoming, ws, auth, server.dispatcher.registration, access
                            )
                        async with contextlib.aclosing(incoming) as messages:
                            await connection.serve(messages)
                        nursery.cancel_scope.cancel()
                finally:
                    closing.connections.discard(connection)
                    forget()
            if closing.begun and not connection.stalled:
                left = max(0.0, closing.close_by - trio.current_time())
                patience = min(_STALLED_CLOSE_TIMEOUT, left)
                await _close(ws, 1001, "going away", patience)
        except (ConnectionClosed, trio.BrokenResourceError):
            pass
        except Exception:
            logger.exception("WebSocket connection failed")


async def _close_at_expiry(ws: WebSocketConnection, expires_at: float) -> None:
    """Close the connection when the token that opened it expires (its calls are cancelled)."""
    await trio.sleep(max(0.0, expires_at - time.time()))
    logger.info("WebSocket token expired; closing the connection")
    await _close(ws, 1008, "token expired", _STALLED_CLOSE_TIMEOUT)


async def _scoped(
    messages: AsyncGenerator[str | bytes, None],
    ws: WebSocketConnection,
    resource: OAuthResource,
    registration: Registration,
    access: AccessToken,
) -> AsyncGenerator[str | bytes, None]:
    """*messages*, until one the token may not send: then the connection is closed (1008)."""
    async with contextlib.aclosing(messages):
        async for raw in messages:
            if registration.tool_scopes or resource.method_scopes:
                try:
                    check_scopes(resource, registration, jsonrpc.decode(raw), access)
                except JsonRpcError:
                    pass  # not JSON, or too deep: the connection answers the error
                except Refusal as refused:
                    logger.info("WebSocket message refused: %s", refused)
                    reason = "insufficient_scope: " + " ".join(refused.missing)
                    await _close(ws, 1008, reason[:120], 1.0)
                    return
            yield raw


async def _keepalive(ws: WebSocketConnection, interval: float) -> None:
    """Ping the peer every *interval*; close the connection when a pong is late.

    A peer that vanished without a close (a sleeping laptop, a dead NAT
    entry) or that stopped reading would otherwise pin its requests until
    TCP gives up; closing ends the read loop, which cancels them (kind
    ``"disconnect"``).  The traffic also keeps proxies from timing out an
    idle connection.
    """
    try:
        while True:
            await trio.sleep(interval)
            with trio.move_on_after(interval) as waited:
                await ws.ping()
            if waited.cancelled_caught:
                logger.info("WebSocket peer answered no ping within %ss; closing", interval)
                await _close(ws, 1011, "keep-alive timeout", interval)
                return
    except ConnectionClosed:
        return  # the read loop sees it too, and ends the connection gracefully


async def _close_when_stalled(ws: WebSocketConnection, connection: MessageConnection) -> None:
    """Close the connection as soon as the peer is found to have stopped reading.

    Its calls are already cancelled; closing the TCP connection now (not
    after the grace period) frees the socket and its buffers at once.
    """
    await connection.wait_stalled()
    logger.info("WebSocket peer stopped reading; closing the connection")
    await _close(ws, 1008, "client stopped reading", _STALLED_CLOSE_TIMEOUT)


async def _close(ws: WebSocketConnection, code: int, reason: str, patience: float) -> None:
    """Close *ws*, giving the peer at most *patience* seconds for the close handshake.

    Not shielded: cancelled (the handler ending, the server stopping), or
    timed out, ``aclose`` still closes the TCP connection under the
    WebSocket, so nothing waits on a peer that does not answer.
    """
    with trio.move_on_after(patience):
        await ws.aclose(code, reason)


def _shut_down(
    connection: MessageConnection, reader: _Reader, serving: trio.CancelScope, closing: _Closing
) -> None:
    """The server is shutting down (its calls are flagged by then): stop reading.

    Like stdio's end of input on a signal: the requests already read are
    still answered (the input is half-closed from now on), the calls are
    answered ``-32800`` with the shutdown's reason, and its tasks end with
    it.  Past ``close_by`` nothing more is waited for.
    """
    connection.half_closed_input = True
    connection.tasks_end_as = (SHUTDOWN_REASON, "server")
    at = closing.shutdown.at
    if at is not None and at < math.inf:
        # Its tasks (and a call dispatched while reading stopped) get no more
        # than the shutdown's one deadline, whatever the connection's grace.
        connection.limits = attrs.evolve(
            connection.limits, disconnect_grace_period=max(0.0, at - trio.current_time())
        )
    reader.stop(partial(_flag_all, connection, closing.shutdown))
    serving.deadline = min(serving.deadline, closing.close_by)


def _flag_all(connection: MessageConnection, shutdown: Shutdown) -> None:
    for exchange in list(connection.channel.exchanges):
        shutdown.flag(exchange)


@attrs.define(eq=False)
class _Reader:
    """The connection's messages until the peer closes it, or a shutdown stops reading.

    The pending read is interrupted by a cancel scope of its own, entered
    only around the read, never across a ``yield`` (as stdio's reader).
    """

    ws: WebSocketConnection
    _stopped: Callable[[], object] | None = None
    _scope: trio.CancelScope | None = None

    def stop(self, then: Callable[[], object]) -> None:
        """Read no more; call *then* when the reading has ended (a call
        dispatched meanwhile is registered by then, so *then* can flag it)."""
        self._stopped = then
        if self._scope is not None:
            self._scope.cancel()

    async def messages(self) -> AsyncGenerator[str | bytes, None]:
        try:
            while self._stopped is None:
                with trio.CancelScope() as scope:
                    self._scope = scope
                    try:
                        message = await self.ws.get_message()
                    finally:
                        self._scope = None
                if scope.cancelled_caught:
                    break  # stopped while waiting: nothing was taken
                yield message
        except ConnectionClosed:
            return
        if self._stopped is not None:
            self._stopped()
