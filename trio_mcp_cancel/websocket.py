"""MCP over WebSocket (trio-websocket): one connection is one session.

Each connection gets a fresh ``session:ws-<random>`` scope, so a
``notifications/cancelled`` only reaches requests sent on the same
connection.  Requests run concurrently in the connection's nursery (at most
``max_concurrent_requests``; more are answered with an error, not queued
without bound).  When the peer closes the socket, or it breaks, every
request still running is cancelled by its private token (kind
``"disconnect"``): the flag at once, the hard cancel ``stream_cancel_timeout``
later.  The handler returns only when all of them have finished, so a
closed connection leaves no task and no row behind.
"""

from __future__ import annotations

import logging
import secrets
from functools import partial

import trio
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    WebSocketRequest,
    WebSocketServer,
    serve_websocket,
)

from . import jsonrpc
from .auth import Authenticator, authenticate, header_map
from .context import current_registry
from .jsonrpc import JsonRpcError, Message
from .registry import USE_CONFIG, Registry, UseConfig
from .scope import scope_for
from .server import TOO_MANY_REQUESTS, Caller, Exchange, McpServer, too_many_requests

__all__ = ["TOO_MANY_REQUESTS", "serve_mcp_websocket"]

logger = logging.getLogger("trio_mcp_cancel.websocket")


async def serve_mcp_websocket(
    server: McpServer,
    registry: Registry | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    path: str = "/mcp",
    auth: Authenticator | None = None,
    stream_cancel_timeout: float | UseConfig | None = USE_CONFIG,
    max_message_size: int = 1 << 20,
    max_concurrent_requests: int = 64,
    task_status: trio.TaskStatus[WebSocketServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve *server* over WebSocket until cancelled; for ``nursery.start``.

    ``task_status.started`` receives the :class:`trio_websocket.WebSocketServer`
    (its ``port`` is the bound port when *port* is 0).  Oversized messages
    close the connection (code 1009), as trio-websocket does.
    """
    if registry is None:
        registry = current_registry()
    handler = partial(
        _handle,
        server=server,
        registry=registry,
        path=path,
        auth=auth,
        grace=stream_cancel_timeout,
        limit=max_concurrent_requests,
    )
    await serve_websocket(
        handler,
        host,
        port,
        None,
        max_message_size=max_message_size,
        task_status=task_status,
    )


async def _handle(
    request: WebSocketRequest,
    *,
    server: McpServer,
    registry: Registry,
    path: str,
    auth: Authenticator | None,
    grace: float | UseConfig | None,
    limit: int,
) -> None:
    # An exception escaping a handler would tear down the whole server, so
    # everything but cancellation stops here.
    try:
        if request.path.split("?", 1)[0] != path:
            await request.reject(404)
            return
        principal = None
        if auth is not None:
            principal = await authenticate(auth, header_map(request.headers))
            if principal is None:
                await request.reject(401, extra_headers=[(b"www-authenticate", b"Bearer")])
                return
        subprotocol = "mcp" if "mcp" in request.proposed_subprotocols else None
        ws = await request.accept(subprotocol=subprotocol)
        session_id = "ws-" + secrets.token_urlsafe(16)
        caller = Caller(scope_for(session_id=session_id), registry, session_id, principal)
        await _Connection(ws, server, caller, grace, limit).run()
    except (ConnectionClosed, trio.BrokenResourceError):
        pass
    except Exception:
        logger.exception("WebSocket connection failed")


class _Connection:
    def __init__(
        self,
        ws: WebSocketConnection,
        server: McpServer,
        caller: Caller,
        grace: float | UseConfig | None,
        limit: int,
    ) -> None:
        self.ws = ws
        self.server = server
        self.caller = caller
        self.grace = grace
        self.limit = limit
        self.exchanges: set[Exchange] = set()

    async def send(self, message: Message) -> None:
        """Send, or do nothing if the peer is gone (the read loop notices that)."""
        try:
            await self.ws.send_message(jsonrpc.encode(message).decode("utf-8"))
        except (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            try:
                while True:
                    data = await self.ws.get_message()
                    await self._dispatch(data, nursery)
            except ConnectionClosed:
                pass
            finally:
                for exchange in self.exchanges:
                    exchange.cancel("connection closed", kind="disconnect", grace=self.grace)

    async def _dispatch(self, data: str | bytes, nursery: trio.Nursery) -> None:
        try:
            parsed = jsonrpc.classify(jsonrpc.decode(data))
        except JsonRpcError as exc:
            await self.send(exc.to_message())
            return
        if isinstance(parsed, jsonrpc.Notification):
            self.server.notify(parsed, self.caller)
        elif isinstance(parsed, jsonrpc.Request):
            if parsed.method != "tools/call":
                reply = await self.server.respond(parsed, self.caller)
                if reply is not None:
                    await self.send(reply)
            elif len(self.exchanges) >= self.limit:
                await self.send(too_many_requests(parsed.id))
            else:
                exchange = Exchange(progress=self.send)
                self.exchanges.add(exchange)
                nursery.start_soon(self._call, parsed, exchange)

    async def _call(self, request: jsonrpc.Request, exchange: Exchange) -> None:
        reply: Message | None
        try:
            reply = await self.server.respond(request, self.caller, exchange)
        except Exception:
            # A bug in the server or a tool (a result that is not JSON, say)
            # must fail this request, not the connection and its other requests.
            logger.exception("tools/call %r failed", request.id)
            reply = jsonrpc.error_message(request.id, jsonrpc.INTERNAL_ERROR, "Internal error")
        finally:
            self.exchanges.discard(exchange)
        if reply is not None:
            await self.send(reply)
