"""MCP Streamable HTTP as an ASGI application, both eras on one endpoint.

One endpoint (``/mcp`` by default) serves:

* **the modern era** (2026-07-28): every POST is self-contained (its
  ``_meta`` envelope, ``MCP-Protocol-Version``, ``Mcp-Method`` and
  ``Mcp-Name`` headers), no session is needed or minted, and **a client
  cancels by closing the request's stream**.  Notifications POSTed on this
  wire (``notifications/cancelled`` included) are acknowledged ``202`` and
  ignored: honouring a client-chosen id would let one anonymous caller
  cancel another's work.  GET and DELETE are ``405``.
* **the legacy era** (2025-11-25 and older): ``initialize`` creates a
  session (``Mcp-Session-Id``), later POSTs carry it, ``notifications/cancelled``
  cancels a request of the same session, DELETE ends the session and
  cancels its requests.  Closing the stream cancels too, by default
  (``legacy_disconnect_cancels``): the 2025 specs advise against it because
  their streams can be resumed, and ours cannot.

Which rules apply to a POST is decided by :mod:`.rules` (pure functions);
what it means is decided by the dispatch core; this module only moves bytes.

A cancellable ``tools/call`` whose client accepts SSE gets its response
head at once and an SSE comment every ``keepalive_interval`` seconds until
its response, so a tool that reports nothing for a while survives client
and proxy read timeouts.  While it runs, a task in the request's own
nursery waits on ``receive()`` for ``http.disconnect`` (hypercorn reports a
closed connection or a reset HTTP/2 stream there; a ``send()`` to a gone
client silently does nothing).  The same wait carries the
``max_request_time`` limit and the keep-alive timer, so a call costs one
extra task at most.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from typing import Any, Final

import attrs
import trio

from ..._core.namespace import namespace_for, stateless
from ..._core.registry import USE_CONFIG, Registry, UseConfig, current_registry
from ..._core.validation import is_valid_request_id
from ..._protocol import jsonrpc
from ..._protocol.dispatch import Call, Caller, Channel, Exchange, McpServer
from ..._protocol.jsonrpc import JsonRpcError, Message
from ..._protocol.versions import Era
from ..auth import Authenticator, authenticate, header_map
from . import rules, sse
from .rules import HttpError
from .sessions import Session, SessionStore

__all__ = ["McpHttpApp"]

logger = logging.getLogger("trio_mcp_cancel.http")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

_SESSION_HEADER: Final = b"mcp-session-id"
#: How long a disconnect watcher may outlive its response (see ``_stream``).
_WATCHER_LINGER: Final = 1.0


class _ClientGone(Exception):
    """The client disconnected while we were reading its request."""


class McpHttpApp:
    """The ASGI application; see the module docstring.

    Parameters:
        server: the tools and MCP methods.
        registry: the cancellation registry; ``None`` uses the one of the
            enclosing ``open_registry()`` at request time.
        path: the MCP endpoint.
        sessions: legacy era: issue ``Mcp-Session-Id`` on ``initialize``
            and require it afterwards (``400`` when missing, ``404`` when
            unknown).  The modern era never uses sessions.
        auth: an :data:`~trio_mcp_cancel.http.Authenticator`; when set,
            unauthenticated requests get ``401``.
        json_response: answer ``tools/call`` with one JSON body instead of
            an SSE stream (no progress, no keep-alive; a cancelled call is
            answered ``-32800``, because an HTTP response must carry something).
        stream_cancel_timeout: seconds from a disconnect to the hard
            cancel; default: the registry's grace period.
        max_body_size: larger bodies get ``413`` before they are read.
        allowed_origins: ``Origin`` values accepted (``403`` otherwise, the
            DNS-rebinding guard MCP asks for).  ``None``: no ``Origin``
            header, or a localhost one.
        max_concurrent_requests: cancellable tool calls one legacy session
            may run at once; more are answered with error ``-32001``.
        max_request_time: seconds after which a tool call is cancelled by
            the server (kind ``"server"``: the flag, then the grace period,
            and the client gets ``-32800``); ``None``: no limit.
        keepalive_interval: seconds between SSE comment keep-alives on a
            silent tool call's stream; ``None``: none.
        legacy_disconnect_cancels: whether a legacy client closing its
            stream cancels the call (the modern era always does).
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
        keepalive_interval: float | None = 15.0,
        legacy_disconnect_cancels: bool = True,
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
        self.keepalive_interval = keepalive_interval
        self.legacy_disconnect_cancels = legacy_disconnect_cancels

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
                raise HttpError(404, "Not Found")
            rules.check_origin(headers, self.allowed_origins)
            principal = await self._principal(headers)
            method = scope["method"]
            if method == "POST":
                await self._post(scope, receive, send, headers, principal)
            elif method == "DELETE" and self._legacy_headers(headers):
                self._delete(headers, principal)
                await _respond(send, 204, b"")
            else:
                allow = b"POST, DELETE" if self._legacy_headers(headers) else b"POST"
                raise HttpError(405, "Method Not Allowed", headers=[(b"allow", allow)])
        except HttpError as exc:
            await _respond(send, exc.status, exc.body(), exc.headers)
        except _ClientGone:
            return

    def _legacy_headers(self, headers: dict[str, str]) -> bool:
        """Whether a GET or DELETE may concern a legacy session (modern: always 405)."""
        return self.sessions is not None and rules.select_era(headers, None) == "legacy"

    async def _principal(self, headers: dict[str, str]) -> str | None:
        if self.auth is None:
            return None
        principal = await authenticate(self.auth, headers)
        if principal is None:
            raise HttpError(401, "Unauthorized", headers=[(b"www-authenticate", b"Bearer")])
        return principal

    def _session(self, headers: dict[str, str], principal: str | None) -> Session | None:
        if self.sessions is None:
            return None
        session_id = headers.get("mcp-session-id")
        if session_id is None:
            raise HttpError(400, "Bad Request: Mcp-Session-Id header is required")
        session = self.sessions.get(session_id, principal, trio.current_time())
        if session is None:
            raise HttpError(404, "Session not found")
        return session

    def _delete(self, headers: dict[str, str], principal: str | None) -> None:
        session = self._session(headers, principal)
        assert session is not None and self.sessions is not None
        self.sessions.end(session.id)
        session.channel.cancel_all("session terminated")

    async def _post(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[str, str],
        principal: str | None,
    ) -> None:
        rules.check_accept(headers)
        rules.check_content_type(headers)
        rules.check_content_length(headers, self.max_body_size)
        body = await self._read_body(receive)
        try:
            message = jsonrpc.decode(body)
        except JsonRpcError as exc:
            await _respond(send, 400, jsonrpc.encode(exc.to_message()))
            return
        post = _Post(send, headers, principal, scope.get("client"), message)
        if rules.select_era(headers, message) == "modern":
            routed = await self._modern(post)
        else:
            routed = await self._legacy(post)
        if routed is not None:
            await self._answer(routed, receive, send)

    async def _modern(self, post: _Post) -> _Routed | None:
        """Check a modern POST; ``None`` when it was answered already."""
        send, headers, message = post.send, post.headers, post.message
        if rules.is_notification(message):
            # No client-to-server notification acts on this wire; see the module docstring.
            await _respond(send, 202, b"")
            return None
        namespace = namespace_for(principal=post.principal, client=post.client)
        caller = Caller(stateless(namespace), self.registry)
        try:
            if not isinstance(message, dict) or "id" not in message:
                raise JsonRpcError(jsonrpc.INVALID_REQUEST, "Invalid Request: expected a request")
            envelope = rules.modern_envelope(headers, message)
        except JsonRpcError as exc:
            if isinstance(message, dict):
                exc.request_id = _valid_id(message.get("id"))
            await _respond_error(send, exc, "modern")
            return None
        call = self.server.prepare(message, caller, envelope=envelope)
        return _Routed(call, caller, [], "modern")

    async def _legacy(self, post: _Post) -> _Routed | None:
        """Find (or, for ``initialize``, start) the session; ``None`` when answered already."""
        send, principal, message = post.send, post.principal, post.message
        session: Session | None = None
        if not rules.is_initialize(message):
            session = self._session(post.headers, principal)
        elif self.sessions is not None:
            # initialize always starts a new session, whatever header it carries.
            channel = Channel(self.max_concurrent_requests)
            session, evicted = self.sessions.create(principal, trio.current_time(), channel)
            for old in evicted:
                old.channel.cancel_all("session evicted")
        # The namespace names the session by its public id: namespaces end up
        # in events and logs, and the session id itself is a credential.
        public_id = session.public_id if session else None
        caller = Caller(
            namespace_for(session_id=public_id, principal=principal, client=post.client),
            self.registry,
            session.channel if session else None,
            principal,
            public_id,
        )
        extra: Headers = [(_SESSION_HEADER, session.id.encode())] if session else []
        call = self.server.prepare(message, caller)
        if call.notification is not None:
            self.server.notify(call.notification, caller)
        if call.request is None and call.error is None:
            await _respond(send, 202, b"", extra)
            return None
        if call.request is None:
            assert call.error is not None
            await _respond(send, 400, jsonrpc.encode(call.error.to_message()), extra)
            return None
        return _Routed(call, caller, extra, "legacy")

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_size:
                raise HttpError(413, "Payload Too Large")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _answer(self, routed: _Routed, receive: Receive, send: Send) -> None:
        call, caller = routed.call, routed.caller
        if call.tracked:
            await self._stream(routed, receive, send)
            return
        reply = await self.server.run(call, caller, Exchange(), allow_silence=False)
        assert reply is not None
        status = 200
        if "error" in reply:
            status = rules.status_for(reply["error"]["code"], routed.era)
        await _respond(send, status, jsonrpc.encode(reply), routed.extra, json=True)

    async def _stream(self, routed: _Routed, receive: Receive, send: Send) -> None:
        """Run a cancellable call, watching its stream; see the module docstring."""
        call, caller, era = routed.call, routed.caller, routed.era
        stream = _Stream(send, routed.extra, not self.json_response)
        exchange = Exchange(send=stream.send_message if stream.sse else None)
        if stream.sse:
            await stream.start()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch, receive, exchange, stream, era)
            reply = await self.server.run(call, caller, exchange, allow_silence=stream.sse)
            await stream.finish(reply)
            # ASGI answers receive() with http.disconnect once the response
            # is sent, so the watcher ends by itself, which is cheaper than
            # cancelling it.  The deadline covers a server that never does.
            nursery.cancel_scope.deadline = trio.current_time() + _WATCHER_LINGER

    async def _watch(self, receive: Receive, exchange: Exchange, stream: _Stream, era: Era) -> None:
        """Wait for the client to go, sending keep-alives and enforcing the time limit.

        The ``http.disconnect`` that ASGI delivers once the response is sent
        comes after the call finished, when cancelling it does nothing.
        """
        now = trio.current_time()
        limit_at = math.inf if self.max_request_time is None else now + self.max_request_time
        interval = self.keepalive_interval if stream.sse else None
        keepalive_at = math.inf if interval is None else now + interval
        while True:
            with trio.move_on_at(min(limit_at, keepalive_at)):
                if (await receive())["type"] == "http.disconnect":
                    break
                continue  # trailing body chunks; the body was already read whole
            now = trio.current_time()
            if now >= limit_at:
                limit_at = math.inf
                exchange.cancel("request time limit reached", kind="server")
            if interval is not None and now >= keepalive_at:
                await stream.keepalive()
                keepalive_at = now + interval
        stream.closed = True
        if era == "modern" or self.legacy_disconnect_cancels:
            exchange.cancel("client disconnected", grace=self.stream_cancel_timeout)
        elif limit_at < math.inf and not stream.finished:
            # The call goes on without its client, but within the time limit.
            await trio.sleep_until(limit_at)
            exchange.cancel("request time limit reached", kind="server")


@attrs.frozen
class _Post:
    """One POST's message and who sent it, once its body is read."""

    send: Send
    headers: dict[str, str]
    principal: str | None
    client: object
    message: object


@attrs.frozen
class _Routed:
    """A request its era's rules accepted: the call, its caller, and the extra headers."""

    call: Call
    caller: Caller
    extra: Headers
    era: Era


class _Stream:
    """The response of one cancellable call: SSE from the first byte, or one JSON body.

    Writes are serialised (progress from the tool and keep-alives from the
    watcher), and once the client is gone (``closed``) nothing more is sent.
    """

    def __init__(self, send: Send, extra: Headers, sse_mode: bool) -> None:
        self._send = send
        self._extra = extra
        self.sse = sse_mode
        self.closed = False
        self._done = False
        self._lock = trio.Lock()

    async def _body(self, data: bytes, *, more: bool = True) -> None:
        async with self._lock:
            if self.closed or self._done:
                return
            self._done = not more
            await self._send({"type": "http.response.body", "body": data, "more_body": more})

    @property
    def finished(self) -> bool:
        """The response was sent whole."""
        return self._done

    async def start(self) -> None:
        headers = [*sse.SSE_HEADERS, *self._extra]
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})

    async def send_message(self, message: Message) -> None:
        await self._body(sse.event(message))

    async def keepalive(self) -> None:
        await self._body(sse.KEEPALIVE)

    async def finish(self, reply: Message | None) -> None:
        """End the response with *reply* (``None``: end an SSE stream without one)."""
        if self.closed:
            return
        if self.sse:
            await self._body(b"" if reply is None else sse.event(reply), more=False)
        else:
            assert reply is not None
            self._done = True
            await _respond(self._send, 200, jsonrpc.encode(reply), self._extra, json=True)


def _valid_id(value: object) -> Any:
    return value if is_valid_request_id(value) else None


async def _respond_error(send: Send, exc: JsonRpcError, era: Era) -> None:
    await _respond(send, rules.status_for(exc.code, era), jsonrpc.encode(exc.to_message()))


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
