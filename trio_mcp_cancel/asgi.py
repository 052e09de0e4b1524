"""MCP Streamable HTTP as an ASGI application, for hypercorn's Trio worker.

One endpoint (``/mcp`` by default):

* ``POST`` carries one JSON-RPC message.  Notifications (including
  ``notifications/cancelled``) are answered ``202``; ``tools/call`` is
  answered with an SSE stream (``text/event-stream``: progress
  notifications, then the response) once the tool reports progress, else
  (and always with ``json_response=True``) with one JSON body; other requests with one JSON body.
* ``DELETE`` ends the session and cancels its running requests.
* ``GET`` is ``405``: this server opens no standalone stream.

**Disconnect is cancellation.**  While a ``tools/call`` runs, a task in the
request's own nursery waits on ``receive()``.  hypercorn reports a closed
connection there as ``http.disconnect`` within a millisecond (a ``send()``
to a gone client silently does nothing, so sending cannot detect it).  The
request is then cancelled by its private token (kind ``"disconnect"``): the
flag is set at once, and ``stream_cancel_timeout`` later its cancel scope
is cancelled.

Scoping follows :mod:`trio_mcp_cancel.scope`: the verified session, else the
principal from the ``auth`` hook, else the client address, so a
``notifications/cancelled`` only reaches the caller's own requests.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from typing import Any, Final
from urllib.parse import urlsplit

import trio

from . import jsonrpc
from .auth import Authenticator, authenticate, header_map
from .context import current_registry
from .jsonrpc import INVALID_REQUEST, JsonRpcError, Message
from .registry import USE_CONFIG, Registry, UseConfig
from .scope import scope_for
from .server import (
    SUPPORTED_PROTOCOL_VERSIONS,
    Caller,
    Exchange,
    McpServer,
    too_many_requests,
)
from .sessions import Session, SessionStore

__all__ = ["McpHttpApp"]

logger = logging.getLogger("trio_mcp_cancel.asgi")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_LOCAL_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
_SESSION_HEADER: Final = b"mcp-session-id"
#: How long a disconnect watcher may outlive its response (see ``_call_tool``).
_WATCHER_LINGER: Final = 1.0


class _HttpError(Exception):
    """An answer other than 200, with a JSON-RPC error body."""

    def __init__(
        self, status: int, message: str, code: int = INVALID_REQUEST, headers: Any = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers: list[tuple[bytes, bytes]] = list(headers)


class _ClientGone(Exception):
    """The client disconnected while we were reading its request."""


class McpHttpApp:
    """The ASGI application; see the module docstring.

    Parameters:
        server: the tools and MCP methods.
        registry: the cancellation registry; ``None`` uses the one of the
            enclosing ``open_registry()`` at request time.
        path: the MCP endpoint.
        sessions: issue ``Mcp-Session-Id`` on ``initialize`` and require it
            afterwards (``400`` when missing, ``404`` when unknown).
        auth: an :data:`~trio_mcp_cancel.auth.Authenticator`; when set,
            unauthenticated requests get ``401``.
        json_response: answer ``tools/call`` with one JSON body instead of
            an SSE stream (no progress; a ``silent`` cancel still answers
            ``-32800``, because an HTTP response must carry something).
        stream_cancel_timeout: seconds from a disconnect to the hard
            cancel; default: the registry's grace period.
        max_body_size: larger bodies get ``413`` before they are read.
        allowed_origins: ``Origin`` values accepted (``403`` otherwise, the
            DNS-rebinding guard MCP asks for).  ``None``: no ``Origin``
            header, or a localhost one.
        max_concurrent_requests: cancellable tool calls one session may run
            at once; more are answered with error ``-32001``.
        max_request_time: seconds after which a tool call is cancelled by
            the server (kind ``"server"``, the flag and then the grace
            period); ``None``: no limit.
    """

    def __init__(
        self,
        server: McpServer,
        registry: Registry | None = None,
        *,
        path: str = "/mcp",
        sessions: bool = True,
        auth: Authenticator | None = None,
        json_response: bool = False,
        stream_cancel_timeout: float | UseConfig | None = USE_CONFIG,
        max_body_size: int = 1 << 20,
        allowed_origins: Collection[str] | None = None,
        max_sessions: int = 10_000,
        session_idle_timeout: float | None = 3600.0,
        max_concurrent_requests: int = 64,
        max_request_time: float | None = None,
    ) -> None:
        self.server = server
        self._registry = registry
        self.path = path
        self.sessions = SessionStore(max_sessions, session_idle_timeout) if sessions else None
        self.auth = auth
        self.json_response = json_response
        self.stream_cancel_timeout = stream_cancel_timeout
        self.max_concurrent_requests = max_concurrent_requests
        self.max_request_time = max_request_time
        self.max_body_size = max_body_size
        self.allowed_origins = None if allowed_origins is None else frozenset(allowed_origins)

    @property
    def registry(self) -> Registry:
        return self._registry if self._registry is not None else current_registry()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = header_map(scope["headers"])
        try:
            if scope["path"] != self.path:
                raise _HttpError(404, "Not Found")
            self._check_origin(headers)
            principal = await self._principal(headers)
            method = scope["method"]
            if method == "POST":
                await self._post(scope, receive, send, headers, principal)
            elif method == "DELETE":
                self._delete(headers, principal)
                await _respond(send, 204, b"")
            else:
                raise _HttpError(405, "Method Not Allowed", headers=[(b"allow", b"POST, DELETE")])
        except _HttpError as exc:
            body = jsonrpc.encode(jsonrpc.error_message(None, exc.code, str(exc)))
            await _respond(send, exc.status, body, exc.headers)
        except _ClientGone:
            return

    def _check_origin(self, headers: dict[str, str]) -> None:
        origin = headers.get("origin")
        if origin is None:
            return
        if self.allowed_origins is not None:
            allowed = origin in self.allowed_origins
        else:
            allowed = (urlsplit(origin).hostname or "") in _LOCAL_HOSTS
        if not allowed:
            raise _HttpError(403, "Forbidden: Origin not allowed")

    async def _principal(self, headers: dict[str, str]) -> str | None:
        if self.auth is None:
            return None
        principal = await authenticate(self.auth, headers)
        if principal is None:
            raise _HttpError(401, "Unauthorized", headers=[(b"www-authenticate", b"Bearer")])
        return principal

    def _session(
        self, headers: dict[str, str], principal: str | None, *, required: bool
    ) -> Session | None:
        if self.sessions is None:
            return None
        session_id = headers.get("mcp-session-id")
        if session_id is None:
            if required:
                raise _HttpError(400, "Bad Request: Mcp-Session-Id header is required")
            return None
        session = self.sessions.get(session_id, principal, trio.current_time())
        if session is None:
            raise _HttpError(404, "Session not found")
        return session

    def _delete(self, headers: dict[str, str], principal: str | None) -> None:
        session = self._session(headers, principal, required=True)
        if session is None:
            raise _HttpError(405, "Sessions are disabled", headers=[(b"allow", b"POST")])
        assert self.sessions is not None
        self.sessions.end(session.id)
        self._cancel_session(session, "session terminated")

    def _cancel_session(self, session: Session, reason: str) -> None:
        for exchange in list(session.exchanges):
            exchange.cancel(reason, kind="server")

    async def _post(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[str, str],
        principal: str | None,
    ) -> None:
        accept = headers.get("accept", "")
        wildcard = "*/*" in accept
        if not (wildcard or ("application/json" in accept and "text/event-stream" in accept)):
            raise _HttpError(406, "Not Acceptable: accept application/json and text/event-stream")
        content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            raise _HttpError(415, "Unsupported Media Type: expected application/json")
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in SUPPORTED_PROTOCOL_VERSIONS:
            raise _HttpError(400, f"Bad Request: unsupported MCP-Protocol-Version {version[:40]!r}")
        body = await self._read_body(headers, receive)
        try:
            parsed = jsonrpc.classify(jsonrpc.decode(body))
        except JsonRpcError as exc:
            await _respond(send, 400, jsonrpc.encode(exc.to_message()))
            return
        session: Session | None = None
        if not (isinstance(parsed, jsonrpc.Request) and parsed.method == "initialize"):
            session = self._session(headers, principal, required=True)
        elif self.sessions is not None:
            # initialize always starts a new session, whatever header it carries.
            session, evicted = self.sessions.create(principal, trio.current_time())
            for old in evicted:
                self._cancel_session(old, "session evicted")
        # The scope names the session by its public id: scopes end up in
        # events and logs, and the session id itself is a credential.
        public_id = session.public_id if session else None
        caller = Caller(
            scope_for(session_id=public_id, principal=principal, client=scope.get("client")),
            self.registry,
            public_id,
            principal,
        )
        extra = [(_SESSION_HEADER, session.id.encode())] if session else []
        if not isinstance(parsed, jsonrpc.Request):
            if isinstance(parsed, jsonrpc.Notification):
                self.server.notify(parsed, caller)
            await _respond(send, 202, b"", extra)
            return
        if not self.server.tracks(parsed):
            reply = await self.server.respond(parsed, caller, allow_silence=False)
            assert reply is not None
            await _respond(send, 200, jsonrpc.encode(reply), extra, json=True)
            return
        if session is not None and len(session.exchanges) >= self.max_concurrent_requests:
            await _respond(
                send, 200, jsonrpc.encode(too_many_requests(parsed.id)), extra, json=True
            )
            return
        sse = not self.json_response and ("text/event-stream" in accept or wildcard)
        await self._call_tool(parsed, caller, session, receive, send, extra, sse=sse)

    async def _read_body(self, headers: dict[str, str], receive: Receive) -> bytes:
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_size):
            raise _HttpError(413, "Payload Too Large")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_size:
                raise _HttpError(413, "Payload Too Large")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _call_tool(
        self,
        request: jsonrpc.Request,
        caller: Caller,
        session: Session | None,
        receive: Receive,
        send: Send,
        extra: list[tuple[bytes, bytes]],
        *,
        sse: bool,
    ) -> None:
        stream = _SseStream(send, extra) if sse else None
        exchange = Exchange(progress=stream.send_message if stream else None)
        if session is not None:
            session.exchanges.add(exchange)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_disconnect, receive, exchange)
                reply = await self.server.respond(request, caller, exchange, allow_silence=sse)
                if reply is not None and (stream is None or not stream.started):
                    # Nothing was streamed yet: one JSON body is simpler for the client.
                    await _respond(send, 200, jsonrpc.encode(reply), extra, json=True)
                else:
                    assert stream is not None
                    await stream.close(reply)
                # ASGI answers receive() with http.disconnect once the response
                # is sent, so the watcher ends by itself, which is cheaper than
                # cancelling it.  The deadline covers a server that never does.
                nursery.cancel_scope.deadline = trio.current_time() + _WATCHER_LINGER
        finally:
            if session is not None:
                session.exchanges.discard(exchange)

    async def _watch_disconnect(self, receive: Receive, exchange: Exchange) -> None:
        """Cancel the exchange when its client goes (and at ``max_request_time``).

        The time limit is a timeout on this same wait, so it costs no task.
        The ``http.disconnect`` that ASGI delivers once the response is sent
        comes after the tool finished, when cancelling the exchange does
        nothing.
        """
        deadline = trio.current_time() + (
            math.inf if self.max_request_time is None else self.max_request_time
        )
        while True:
            with trio.move_on_at(deadline):
                if (await receive())["type"] == "http.disconnect":
                    break
                continue  # trailing body chunks; the body was already read whole
            deadline = math.inf
            exchange.cancel("request time limit reached", kind="server")
        exchange.cancel("client disconnected", grace=self.stream_cancel_timeout)


class _SseStream:
    """A ``text/event-stream`` response, started lazily by its first event.

    A call that streams nothing before its response is answered with one
    JSON body instead (the server may choose either), so only calls that
    report progress pay for a stream.
    """

    def __init__(self, send: Send, extra: list[tuple[bytes, bytes]]) -> None:
        self._send = send
        self._extra = extra
        self.started = False

    async def _start(self) -> None:
        if not self.started:
            self.started = True
            headers = [
                (b"content-type", b"text/event-stream"),
                (b"cache-control", b"no-cache, no-transform"),
                *self._extra,
            ]
            await self._send({"type": "http.response.start", "status": 200, "headers": headers})

    async def send_message(self, message: Message) -> None:
        await self._start()
        event = b"event: message\ndata: " + jsonrpc.encode(message) + b"\n\n"
        await self._send({"type": "http.response.body", "body": event, "more_body": True})

    async def close(self, final: Message | None) -> None:
        if final is not None:
            await self.send_message(final)
        await self._start()
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    extra: Any = (),
    *,
    json: bool | None = None,
) -> None:
    headers = [(b"content-length", str(len(body)).encode()), *extra]
    if json or (json is None and body):
        headers.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
