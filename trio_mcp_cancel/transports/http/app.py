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

A cancellable ``tools/call`` whose client accepts SSE, and that is still
running when it first suspends (or sends a progress or log message first),
gets its SSE response head at once and an SSE comment every
``keepalive_interval`` seconds until its response, so a tool that reports
nothing for a while survives client and proxy read timeouts.  One that
finishes without ever suspending is answered with one JSON body instead,
like a non-cancellable call (MCP lets the server choose per request; see
``_Stream``).  While it runs, a task in the request's own
nursery waits on ``receive()`` for ``http.disconnect`` (hypercorn reports a
closed connection or a reset HTTP/2 stream there; a ``send()`` to a gone
client silently does nothing).  The same wait carries the
``max_request_time`` limit and the keep-alive timer, so a call costs one
extra task at most.

**Writes never block a request.**  hypercorn writes to the socket inside a
shielded cancel scope: a ``send()`` to a client that stopped reading blocks
until the client reads or the connection closes, and nothing (a cancel, a
time limit, shutdown) can interrupt it; and hypercorn closes the connection
only once the application returned.  So no task that must end on time
calls ``send()``.  Each response's messages are queued in a
:class:`_Writer` (bounded: ``max_buffered_bytes``) and written by a task of
its own in the app's service nursery, opened by the ASGI lifespan.  A
client that leaves a write pending for ``write_timeout``, or lets the queue
overflow, is treated as gone: its call is cancelled (kind
``"disconnect"``), the request returns, and hypercorn closes the
connection, which releases the pending write.  The one exception is a
whole response (one JSON body) that the socket can take at once, checked by
:mod:`.inline` (HTTP/1.1 on hypercorn, room in the kernel's buffers): that
write cannot block, so it is made in the request's own task, without
spawning a writer.

**Lifespan.**  The app opens that service nursery in the ASGI lifespan,
and, when it was given no registry and none is open around the server, its
own registry there too, so ``hypercorn module:app`` works with any number
of workers.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from functools import partial
from typing import Any, Final

import attrs
import trio

from ..._core.errors import RegistryClosed
from ..._core.namespace import namespace_for, stateless, tenant_for
from ..._core.registry import (
    USE_CONFIG,
    Registry,
    RegistryConfig,
    UseConfig,
    current_registry,
    open_registry,
)
from ..._core.validation import is_valid_request_id
from ..._protocol import jsonrpc
from ..._protocol.admission import TOO_MANY_REQUESTS
from ..._protocol.calls import Call, NotificationCall, Rejected, RequestCall
from ..._protocol.dispatcher import Dispatcher
from ..._protocol.exchange import Caller, Channel, Exchange
from ..._protocol.jsonrpc import JsonRpcError, Message
from ..._protocol.mcp_server import McpServerBase
from ..._protocol.replay import SharedClaims
from ..._protocol.versions import Era
from ...backends.base import Backend, BusMessage
from ..auth import Authenticator, authenticate
from . import hypercorn_compat, rules, sse
from .hypercorn_compat import receive_now
from .inline import can_write_now
from .lazy import await_then
from .rules import HttpError
from .sessions import Session, SessionLimitReached, SessionStore
from .shared import SessionSharing, tenant_call_slot

__all__ = ["McpHttpApp"]

logger = logging.getLogger("trio_mcp_cancel.http")

# hypercorn imports ``module:app`` in each worker: every deployment path that
# serves this app gets the guards (see .hypercorn_compat).
hypercorn_compat.install()

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

_SESSION_HEADER: Final = b"mcp-session-id"
#: Room for a whole response's head (status line, headers) next to its body.
_HEAD_ROOM: Final = 1024


class _ClientGone(Exception):
    """The client disconnected while we were reading its request."""


class McpHttpApp:
    """The ASGI application; see the module docstring.

    Parameters:
        server: the tools and MCP methods.
        registry: the cancellation registry; ``None`` uses the one of an
            ``open_registry()`` around the server, else opens one in the ASGI
            lifespan (configured by *registry_config*).
        registry_config: settings of the registry the app opens itself.
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
        max_head_size: bytes of a request's target and headers (as written
            on an HTTP/1.1 wire); larger heads get ``431``, however their
            bytes arrived.  The default is ``server_config()``'s
            ``h11_max_incomplete_size`` and ``h2_max_header_list_size``
            (16 KiB); raise them together.  A header that must appear once
            (``Mcp-Method``, ``Mcp-Name``, ``MCP-Protocol-Version``,
            ``Mcp-Param-*``, ``Mcp-Session-Id``, ``Authorization``,
            ``Content-Type``, ``Content-Length``, ``Origin``) sent twice is a
            ``400``.
        body_timeout: seconds to receive a request body once its head
            arrived; a client that trickles or stalls it gets ``408`` and
            its connection closed.  (Slow heads are bounded by the server's
            keep-alive timeout; see :func:`~trio_mcp_cancel.http.server_config`.)
        allowed_origins: ``Origin`` values accepted (``403`` otherwise, the
            DNS-rebinding guard MCP asks for).  ``None``: no ``Origin``
            header, or a localhost one.
        max_sessions: legacy sessions in total; see
            :mod:`~trio_mcp_cancel.transports.http.sessions` for who makes room.
        max_sessions_per_tenant: legacy sessions of one principal (or one
            client address bucket when unauthenticated).  An ``initialize``
            that cannot be served without ending a busy session is refused:
            ``429`` (the tenant's bound) or ``503`` (the store's).
        session_idle_timeout: seconds after which an idle session expires.
        max_concurrent_requests: cancellable tool calls one legacy session
            may run at once; more are answered ``429`` with error ``-32001``
            (so are calls over the server's own caps, see
            :class:`~trio_mcp_cancel.server.McpServer`).
        max_request_time: seconds after which a tool call is cancelled by
            the server (kind ``"server"``: the flag, then the grace period,
            and the client gets ``-32800``); ``None``: no limit.
            ``subscriptions/listen`` streams are exempt (meant to stay open).
        keepalive_interval: seconds between SSE comment keep-alives on a
            silent tool call's stream; ``None``: none.
        legacy_disconnect_cancels: whether a legacy client closing its
            stream cancels the call (the modern era always does).
        write_timeout: seconds a write to the client may stay pending
            before the client counts as gone (its call is cancelled, kind
            ``"disconnect"``, and the connection closed); ``None``: no limit.
        max_buffered_bytes: response bytes (progress, logs, keep-alives)
            one request may have queued behind a slow client before it
            counts as gone; the final response is always accepted.
        backend: what server processes share (task records, cancellation
            requests; see :mod:`trio_mcp_cancel.backends`); ``None``: this
            process only, in memory.  The lifespan runs it.
    """

    def __init__(
        self,
        server: McpServerBase,
        registry: Registry | None = None,
        *,
        registry_config: RegistryConfig | None = None,
        path: str = "/mcp",
        sessions: bool = True,
        auth: Authenticator | None = None,
        json_response: bool = False,
        stream_cancel_timeout: float | UseConfig | None = USE_CONFIG,
        max_body_size: int = 1 << 20,
        max_head_size: int = rules.MAX_HEAD_BYTES,
        body_timeout: float | None = 10.0,
        allowed_origins: Collection[str] | None = None,
        max_sessions: int = 10_000,
        max_sessions_per_tenant: int = 100,
        session_idle_timeout: float | None = 3600.0,
        max_concurrent_requests: int = 64,
        max_request_time: float | None = None,
        keepalive_interval: float | None = 15.0,
        legacy_disconnect_cancels: bool = True,
        write_timeout: float | None = 30.0,
        max_buffered_bytes: int = 1 << 20,
        backend: Backend | None = None,
    ) -> None:
        self.server = server
        self.dispatcher = Dispatcher.of(server)
        self.backend = backend
        if isinstance(backend, SharedClaims):  # a used requestState is used on every worker
            server.used_states.shared = backend
        self._registry = registry
        self.registry_config = registry_config
        self.path = path
        self.sessions = (
            SessionStore(max_sessions, session_idle_timeout, max_sessions_per_tenant)
            if sessions
            else None
        )
        self.auth = auth
        self.json_response = json_response
        self.stream_cancel_timeout = stream_cancel_timeout
        self.max_concurrent_requests = max_concurrent_requests
        self.max_request_time = max_request_time
        self.max_body_size = max_body_size
        self.max_head_size = max_head_size
        self.body_timeout = body_timeout
        self.allowed_origins = None if allowed_origins is None else frozenset(allowed_origins)
        self.keepalive_interval = keepalive_interval
        self.legacy_disconnect_cancels = legacy_disconnect_cancels
        self.write_timeout = write_timeout
        self.max_buffered_bytes = max_buffered_bytes
        self._own_registry: Registry | None = None
        self._service: trio.Nursery | None = None
        self._sharing = (
            SessionSharing(backend, session_idle_timeout, max_concurrent_requests)
            if backend is not None
            else None
        )

    @property
    def registry(self) -> Registry:
        if self._registry is not None:
            return self._registry
        if self._own_registry is not None:
            return self._own_registry
        return current_registry()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})

    # -- lifespan ------------------------------------------------------------

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """Own the service nursery (and a registry if needed) from startup to shutdown."""
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        if self._service is not None:
            await send({"type": "lifespan.startup.failed", "message": "already running"})
            return
        try:
            # The backend outlives the services that use it, so a task that
            # is cancelled at shutdown can still record that it failed.
            async with trio.open_nursery() as outer:
                if self._registry is None and not _registry_around():
                    self._own_registry = await outer.start(self._run_registry)
                if self.backend is not None:
                    # Backend events reach the registry's subscribers, from the first one on.
                    outer.start_soon(
                        _unsubscribe_on_exit, self.backend.attach_events(self.registry.events)
                    )
                    await outer.start(self.backend.run)
                    outer.start_soon(_unsubscribe_on_exit, self.backend.bus.subscribe(self._on_bus))
                async with trio.open_nursery() as service:
                    await self._start_tasks(service)
                    self._service = service
                    await send({"type": "lifespan.startup.complete"})
                    while (await receive())["type"] != "lifespan.shutdown":
                        pass
                    self._service = None
                    # Writers still pending belong to connections the server
                    # closed by now (it shuts the lifespan down last).
                    service.cancel_scope.cancel()
                outer.cancel_scope.cancel()
        finally:
            self._service = None
            self._own_registry = None
        await send({"type": "lifespan.shutdown.complete"})

    def _on_bus(self, message: BusMessage) -> None:
        """Apply a legacy cancel or session end that reached another worker first."""
        kind = message.get("type")
        if kind == "notify":
            namespace = message.get("namespace")
            if isinstance(namespace, str) and namespace.startswith("session:"):
                try:
                    registry = self.registry
                except RuntimeError:
                    return
                registry.notify_cancelled(
                    namespace, message.get("request_id"), message.get("reason")
                )
        elif kind == "session.end" and self._sharing is not None and self.sessions is not None:
            key = message.get("session")
            session = self._sharing.local(key) if isinstance(key, str) else None
            if session is not None:
                self.sessions.end(session.id)
                session.channel.cancel_all("session terminated")

    async def _start_tasks(self, service: trio.Nursery) -> None:
        """Run the server's task manager here, on the backend, unless it runs already."""
        tasks = self.server.tasks
        if tasks.running:
            return
        backend = self.backend
        if backend is None:
            await service.start(tasks.run)
        else:
            await service.start(
                partial(
                    tasks.run,
                    store=backend.tasks,
                    bus=backend.bus,
                    instance_id=backend.instance_id,
                    counters=backend.counters,
                )
            )

    async def _run_registry(self, *, task_status: trio.TaskStatus[Registry]) -> None:
        async with open_registry(self.registry_config) as registry:
            task_status.started(registry)
            await trio.sleep_forever()

    # -- requests ------------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            try:
                target = len(scope["path"]) + len(scope.get("query_string") or b"")
                headers = rules.request_headers(scope["headers"], self.max_head_size, target)
                if scope["path"] != self.path:
                    raise HttpError(404, "Not Found")
                rules.check_origin(headers, self.allowed_origins)
                principal = await self._principal(headers)
                method = scope["method"]
                if method == "POST":
                    rules.check_accept(headers)
                    rules.check_content_type(headers)
                    rules.check_content_length(headers, self.max_body_size)
                elif method != "DELETE" or not self._legacy_headers(headers):
                    allow = b"POST, DELETE" if self._legacy_headers(headers) else b"POST"
                    raise HttpError(405, "Method Not Allowed", headers=[(b"allow", allow)])
            except HttpError as exc:
                if exc.status != 413:  # a body declared too large is not waited for
                    await self._discard_body(receive)
                raise
            if method == "POST":
                await self._post(scope, receive, send, headers, principal)
            else:
                await self._discard_body(receive)
                await self._delete(headers, principal)
                await self._respond(send, 204, b"")
        except HttpError as exc:
            await self._respond(send, exc.status, exc.body(), exc.headers)
        except _ClientGone:
            return
        except (RuntimeError, RegistryClosed):
            if self._registry is None and self._own_registry is None and not _registry_around():
                # Served without a lifespan and without open_registry(): say so.
                logger.error(
                    "no registry: run the app under an ASGI server with lifespan support,"
                    " inside open_registry(), or pass registry="
                )
                await self._respond(send, 503, b"Service Unavailable: no registry")
                return
            raise

    async def _discard_body(self, receive: Receive) -> None:
        """Read the body of a request refused from its head, and drop it.

        Answering before the body arrived leaves the client sending on a
        stream the server has finished with: HTTP/1.1 then has to close the
        connection, and hypercorn's HTTP/2 forgets the stream while its
        ``DATA`` frames are still on the way (see :mod:`.hypercorn_compat`).
        So the body is read first, within the bounds a body always has:
        ``max_body_size`` bytes and ``body_timeout`` seconds.  A larger or
        slower one is left to the server (its connection is closed, or its
        stream reset).  A request without a body costs one queued message.
        """
        left = self.max_body_size
        with trio.move_on_after(math.inf if self.body_timeout is None else self.body_timeout):
            while True:
                message = receive_now(receive) or await receive()
                left -= len(message.get("body", b""))
                if not message.get("more_body", False) or left < 0:
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

    async def _session(self, headers: dict[str, str], principal: str | None) -> Session | None:
        if self.sessions is None:
            return None
        session_id = headers.get("mcp-session-id")
        if session_id is None:
            raise HttpError(400, "Bad Request: Mcp-Session-Id header is required")
        session = self.sessions.get(session_id, principal, trio.current_time())
        if session is None and self._sharing is not None:
            # Maybe another worker's (see .shared).
            session = await self._sharing.find(session_id, principal, self.sessions)
        if session is None:
            shared = self._sharing is not None
            raise HttpError(404, self.sessions.not_found(session_id, shared=shared))
        if self._sharing is not None:
            await self._sharing.touch(session)
        return session

    async def _delete(self, headers: dict[str, str], principal: str | None) -> None:
        session = await self._session(headers, principal)
        assert session is not None and self.sessions is not None
        self.sessions.end(session.id)
        session.channel.cancel_all("session terminated")
        if self._sharing is not None:
            await self._sharing.end(session)

    async def _post(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[str, str],
        principal: str | None,
    ) -> None:
        body = await self._read_body(receive)
        try:
            message = jsonrpc.decode(body)
        except JsonRpcError as exc:
            await self._respond(send, 400, jsonrpc.encode(exc.to_message()))
            return
        client = scope.get("client")
        post = _Post(send, headers, principal, client, tenant_for(principal, client), message)
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
            await self._respond(send, 202, b"")
            return None
        namespace = namespace_for(principal=post.principal, client=post.client)
        caller = Caller(
            stateless(namespace), self.registry, principal=post.principal, tenant=post.tenant
        )
        try:
            if not isinstance(message, dict) or "id" not in message:
                raise JsonRpcError(jsonrpc.INVALID_REQUEST, "Invalid Request: expected a request")
            envelope = rules.modern_envelope(headers, message)
        except JsonRpcError as exc:
            if isinstance(message, dict):
                exc.request_id = _valid_id(message.get("id"))
            status = rules.status_for(exc.code, "modern")
            await self._respond(send, status, jsonrpc.encode(exc.to_message()))
            return None
        call = self.dispatcher.prepare(message, caller, envelope=envelope)
        if isinstance(call, RequestCall) and call.tool is not None:
            try:  # tools/call: x-mcp-header arguments must match their Mcp-Param-* headers
                params = call.request.params
                rules.check_param_headers(headers, call.tool.input_schema, params.get("arguments"))
            except JsonRpcError as exc:
                exc.request_id = call.request.id
                rejected: Call = Rejected(exc, call.request)
                call = rejected
        if not isinstance(call, RequestCall):
            if isinstance(call, Rejected):
                error = call.error
            else:  # a response (or a notification) carrying an envelope: not a request
                error = JsonRpcError(jsonrpc.INVALID_REQUEST, "Invalid Request: expected a request")
            status = rules.status_for(error.code, "modern")
            await self._respond(send, status, jsonrpc.encode(error.to_message()), json=True)
            return None
        return _Routed(call, caller, [], "modern")

    async def _legacy(self, post: _Post) -> _Routed | None:
        """Find (or, for ``initialize``, start) the session; ``None`` when answered already."""
        send, principal, message = post.send, post.principal, post.message
        session: Session | None = None
        if not rules.is_initialize(message):
            session = await self._session(post.headers, principal)
        elif self.sessions is not None:
            # initialize always starts a new session, whatever header it carries.
            channel = Channel(self.max_concurrent_requests)
            try:
                session, evicted = self.sessions.create(
                    principal, post.tenant, trio.current_time(), channel
                )
            except SessionLimitReached as exc:
                await self._refuse_session(send, message, exc)
                return None
            for old in evicted:
                old.channel.cancel_all("session evicted")
                if self._sharing is not None:
                    await self._sharing.end(old)  # on every worker: it freed a shared place
        # The namespace names the session by its public id: namespaces end up
        # in events and logs, and the session id itself is a credential.
        public_id = session.public_id if session else None
        caller = Caller(
            namespace_for(session_id=public_id, principal=principal, client=post.client),
            self.registry,
            session.channel if session else None,
            principal,
            public_id,
            post.tenant,
        )
        extra: Headers = [(_SESSION_HEADER, session.id.encode())] if session else []
        call = self.dispatcher.prepare(message, caller)
        if isinstance(call, NotificationCall):
            notified = call.notification
            target: Any = notified.params.get("requestId")
            forward = (
                self._sharing is not None
                and notified.method == "notifications/cancelled"
                # Running here, it runs nowhere else: no need to tell the others.
                and not caller.registry.in_flight(target, caller.namespace)
            )
            self.dispatcher.notify(notified, caller)
            if forward and self._sharing is not None:
                await self._sharing.forward_cancel(caller.namespace, notified.params)
        if isinstance(call, Rejected):
            # A malformed message is a 400; a request that cannot be served
            # is answered like any other request of its era.
            status = 400 if call.request is None else rules.status_for(call.error.code, "legacy")
            body = jsonrpc.encode(call.error.to_message())
            await self._respond(send, status, body, extra, json=None if status == 400 else True)
            return None
        if not isinstance(call, RequestCall):
            await self._respond(send, 202, b"", extra)
            return None
        return _Routed(call, caller, extra, "legacy", session)

    async def _refuse_session(self, send: Send, message: object, exc: SessionLimitReached) -> None:
        """Answer an ``initialize`` that would need a busy session's place."""
        request_id = _valid_id(message.get("id")) if isinstance(message, dict) else None
        logger.warning("initialize refused: %s", exc)
        reply = jsonrpc.error_message(
            request_id,
            TOO_MANY_REQUESTS,
            "Too many sessions",
            {"limit": exc.limit, "max": exc.cap},
        )
        status = 429 if exc.limit == "tenant" else 503
        await self._respond(send, status, jsonrpc.encode(reply), _RETRY_AFTER, json=True)

    async def _read_body(self, receive: Receive) -> bytes:
        body = _Body(self.max_body_size)
        # Messages queued already are taken without waiting; only a body
        # still on its way needs the time limit (and its cancel scope).
        while (message := receive_now(receive)) is not None:
            if body.add(message):
                return body.data()
        with trio.move_on_after(math.inf if self.body_timeout is None else self.body_timeout):
            while not body.add(await receive()):
                pass
            return body.data()
        raise HttpError(408, "Request Timeout", headers=[(b"connection", b"close")])

    async def _answer(self, routed: _Routed, receive: Receive, send: Send) -> None:
        backend = self.backend
        if (
            backend is None
            or not backend.counters.shared
            or self.dispatcher.refusal(routed.call, routed.caller)
        ):
            await self._answer_here(routed, receive, send)
            return
        # Scale-out: the per-tenant cap counts the calls of every process.
        cap = self.server.max_calls_per_tenant
        async with tenant_call_slot(backend.counters, routed.call, routed.caller, cap) as refused:
            if refused is not None:
                body = jsonrpc.encode(refused)
                await self._respond(send, 429, body, [*routed.extra, *_RETRY_AFTER], json=True)
                return
            await self._answer_here(routed, receive, send)

    async def _answer_here(self, routed: _Routed, receive: Receive, send: Send) -> None:
        call, caller = routed.call, routed.caller
        refused = self.dispatcher.refusal(call, caller)
        if refused is not None:
            body = jsonrpc.encode(refused)
            await self._respond(send, 429, body, [*routed.extra, *_RETRY_AFTER], json=True)
            return
        if call.tracked:
            await self._stream(routed, receive, send)
            return
        reply = await self.dispatcher.answer(call, caller, Exchange(), allow_silence=False)
        assert reply is not None
        session = routed.session
        if session is not None and self._sharing is not None:
            method = call.request.method
            if method in ("initialize", "logging/setLevel"):
                # Shared before the answer: the next POST may go to another worker.
                assert self.sessions is not None
                cap = self.sessions.max_sessions_per_tenant if method == "initialize" else None
                if not await self._sharing.save(session, cap):
                    # Its tenant holds its whole quota on other workers.
                    self.sessions.end(session.id)
                    limit = SessionLimitReached("tenant", self.sessions.max_sessions_per_tenant)
                    await self._refuse_session(send, {"id": call.request.id}, limit)
                    return
        status = 200
        if "error" in reply:
            status = rules.status_for(reply["error"]["code"], routed.era)
        await self._respond(send, status, jsonrpc.encode(reply), routed.extra, json=True)

    async def _stream(self, routed: _Routed, receive: Receive, send: Send) -> None:
        """Run a cancellable call, watching its stream; see the module docstring.

        Its helper tasks (the disconnect watcher, the writer) run in the
        app's service nursery, so a call that never suspends opens no
        nursery of its own (whose exit is a scheduler pass of its own);
        without a lifespan, the request hosts them in a nursery.
        """
        service = self._service
        if service is not None:
            await self._run_stream(routed, receive, send, service)
            return
        async with trio.open_nursery() as nursery:
            await self._run_stream(routed, receive, send, nursery)

    async def _run_stream(
        self, routed: _Routed, receive: Receive, send: Send, nursery: trio.Nursery
    ) -> None:
        call, caller, era = routed.call, routed.caller, routed.era
        writer = _Writer(send, self.max_buffered_bytes)
        exchange = Exchange()
        stream = _Stream(writer, routed.extra, not self.json_response, exchange, self)
        if stream.sse:
            exchange.send = stream.send_message
        # The writer task starts when the response commits to SSE, or
        # not at all when the whole answer can be written inline.
        stream.start_writer = partial(self._start_writer, writer, nursery)
        watching: list[trio.CancelScope] = []

        def watch() -> None:
            # Still running: commit to SSE now (see _Stream), so a silent
            # call's head and keep-alives reach the client.
            stream.commit()
            # A listen stream is meant to stay open: no max_request_time.
            limited = not call.long_lived
            watching.append(scope := trio.CancelScope())
            nursery.start_soon(self._watch, scope, receive, exchange, stream, era, limited)

        try:
            # The watcher starts when the call first suspends: one that
            # never does cannot be disconnected from mid-way (see lazy.py).
            run = self.dispatcher.answer(call, caller, exchange, allow_silence=stream.sse)
            reply = await await_then(run, watch)
            stream.finish(reply)
            if stream.start_writer is not None:
                # Never committed: one whole response, or nothing (client gone).
                await self._write_whole(writer, send, stream.start_writer)
            await self._drain(writer)
        finally:
            # The call is over: so is the watcher's job (the http.disconnect
            # ASGI reports once the response is sent could only cancel a
            # call that finished).
            for scope in watching:
                scope.cancel()
            if not writer.done:
                writer.abandon()  # cancelled (shutdown): leave the client
            if not (stream.finished and writer.done and not writer.abandoned):
                exchange.lost()  # the answer never reached the client

    async def _watch(
        self,
        scope: trio.CancelScope,
        receive: Receive,
        exchange: Exchange,
        stream: _Stream,
        era: Era,
        limited: bool,
    ) -> None:
        """Watch a call's stream until *scope* is cancelled (its request ended).

        It runs in the service nursery, where an exception would stop the
        whole app: a bug here fails this call only (cancelled, kind
        ``"server"``).
        """
        with scope:
            try:
                await self._watch_stream(receive, exchange, stream, era, limited)
            except Exception:
                logger.exception("the stream watcher of a call failed; cancelling the call")
                exchange.cancel("internal error", kind="server")

    async def _watch_stream(
        self, receive: Receive, exchange: Exchange, stream: _Stream, era: Era, limited: bool
    ) -> None:
        """Wait for the client to go, sending keep-alives and enforcing the time limits."""
        now = trio.current_time()
        limit = self.max_request_time if limited else None
        limit_at = math.inf if limit is None else now + limit
        interval = self.keepalive_interval if stream.sse else None
        keepalive_at = math.inf if interval is None else now + interval
        writer = stream.writer
        while True:
            with trio.CancelScope(deadline=min(limit_at, keepalive_at, writer.stall_at)) as wait:
                writer.wakes = wait
                if (await receive())["type"] == "http.disconnect":
                    break
                continue  # trailing body chunks; the body was already read whole
            now = trio.current_time()
            if now >= writer.stall_at:
                stream.stall("write timeout")
                return
            if now >= limit_at:
                limit_at = math.inf
                exchange.cancel("request time limit reached", kind="server")
            if interval is not None and now >= keepalive_at:
                stream.keepalive()
                keepalive_at = now + interval
        writer.wakes = None
        stream.closed = True
        if era == "modern" or self.legacy_disconnect_cancels:
            exchange.cancel("client disconnected", grace=self.stream_cancel_timeout)
        elif limit_at < math.inf and not stream.finished:
            # The call goes on without its client, but within the time limit.
            await trio.sleep_until(limit_at)
            exchange.cancel("request time limit reached", kind="server")

    # -- writing -------------------------------------------------------------

    def _start_writer(self, writer: _Writer, nursery: trio.Nursery) -> None:
        """Run *writer* in the service nursery (or, without a lifespan, in *nursery*)."""
        writer.timeout = self.write_timeout
        (self._service or nursery).start_soon(writer.run)

    async def _write_whole(
        self, writer: _Writer, send: Send, start_writer: Callable[[], None]
    ) -> None:
        """Write *writer*'s whole response in this task when that cannot block, else start it.

        See :mod:`.inline`: a small response on an HTTP/1.1 socket with room
        to spare is written at once, so the writer task (and its spawn) is
        only needed for a write that could be left pending by the client.
        """
        if self._service is None or can_write_now(send, writer.queued_bytes + _HEAD_ROOM):
            await writer.run()
        else:
            start_writer()

    async def _drain(self, writer: _Writer) -> None:
        """Wait until *writer* wrote everything, or give up on a client that does not read.

        Giving up means returning with the response unfinished; the server
        then closes the connection, which releases the pending write.
        """
        if writer.done and not writer.stalled:
            return
        if writer.stalled:
            writer.abandon()
            return
        timeout = math.inf if self.write_timeout is None else self.write_timeout
        try:
            with trio.move_on_after(timeout):
                await writer.wait_done()
                return
            logger.info("client did not read its response for %ss; closing", self.write_timeout)
        finally:
            if not writer.done:
                writer.abandon()

    async def _respond(
        self,
        send: Send,
        status: int,
        body: bytes,
        extra: Any = (),
        *,
        json: bool | None = None,
    ) -> None:
        """Send a whole response, through a writer (see the module docstring)."""
        writer = _Writer(send, self.max_buffered_bytes)
        writer.put_whole(status, body, extra, json=json)
        service = self._service
        if service is None:
            await writer.run()  # no lifespan: write inline, as an ASGI app usually does
            return
        await self._write_whole(writer, send, partial(self._start_writer, writer, service))
        await self._drain(writer)


class _Body:
    """A request body as its ASGI messages arrive, held to *limit* bytes."""

    __slots__ = ("_chunks", "_limit", "_size")

    def __init__(self, limit: int) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self._limit = limit

    def add(self, message: MutableMapping[str, Any]) -> bool:
        """Take one message; ``True`` once the body is complete."""
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk: bytes = message.get("body", b"")
        self._size += len(chunk)
        if self._size > self._limit:
            raise HttpError(413, "Payload Too Large")
        self._chunks.append(chunk)
        return not message.get("more_body", False)

    def data(self) -> bytes:
        return b"".join(self._chunks)  # one chunk: CPython returns it as is


async def _unsubscribe_on_exit(unsubscribe: Callable[[], None]) -> None:
    """Hold a bus subscription for as long as the lifespan's nursery runs."""
    try:
        await trio.sleep_forever()
    finally:
        unsubscribe()


def _registry_around() -> bool:
    """Whether an ``open_registry()`` encloses the calling task."""
    try:
        current_registry()
    except RuntimeError:
        return False
    return True


@attrs.frozen
class _Post:
    """One POST's message and who sent it, once its body is read."""

    send: Send
    headers: dict[str, str]
    principal: str | None
    client: object
    tenant: str | None
    message: object


@attrs.frozen
class _Routed:
    """A request its era's rules accepted: the call, its caller, and the extra headers."""

    call: RequestCall
    caller: Caller
    extra: Headers
    era: Era
    session: Session | None = None


class _Writer:
    """One response's ASGI messages, queued by the request and written by a task of its own.

    ``put`` never blocks.  The writer task (:meth:`run`) may block forever
    in ``send()`` (see the module docstring); while it is blocked,
    ``stall_at`` says when the client counts as gone, and the request's
    watcher (whose cancel scope is ``wakes``) is woken then.
    """

    __slots__ = (
        "_done",
        "_final",
        "_finished",
        "_head",
        "_limit",
        "_more",
        "_queue",
        "_queued",
        "_send",
        "abandoned",
        "stall_at",
        "stalled",
        "timeout",
        "wakes",
    )

    def __init__(self, send: Send, limit: int) -> None:
        self._send = send
        self._limit = limit
        self._queue: deque[MutableMapping[str, Any]] = deque()
        self._queued = 0
        # Both events are made only when somebody waits: a whole response
        # written inline never needs either.
        self._more: trio.Event | None = None
        self._final = False
        self._head: MutableMapping[str, Any] | None = None
        """The response head while its write is pending."""
        self._finished = False
        self._done: trio.Event | None = None
        self.stall_at = math.inf
        self.stalled = False
        self.abandoned = False
        self.timeout: float | None = None
        self.wakes: trio.CancelScope | None = None

    @property
    def done(self) -> bool:
        """The last message was written, or the writer gave up."""
        return self._finished

    async def wait_done(self) -> None:
        """Wait until :attr:`done`."""
        if not self._finished:
            if self._done is None:
                self._done = trio.Event()
            await self._done.wait()

    def _wake(self) -> None:
        if self._more is not None:
            self._more.set()

    @property
    def queued_bytes(self) -> int:
        """Body bytes queued and not yet written."""
        return self._queued

    def put(self, message: MutableMapping[str, Any], *, final: bool = False) -> bool:
        """Queue *message*; ``False`` when the client is too far behind to take it.

        A message is refused when bytes are already queued and it would take
        them past the limit; the final one never is (it ends the response, and
        the request's own wait bounds how long it may take).
        """
        if self._final or self.abandoned:
            return False
        size = len(message.get("body", b""))
        if not final and self._queued and self._queued + size > self._limit:
            return False
        self._queue.append(message)
        self._queued += size
        self._final = final
        self._wake()
        return True

    def put_whole(
        self, status: int, body: bytes, extra: Any = (), *, json: bool | None = None
    ) -> None:
        """Queue a whole response: its head and its one, final body."""
        self.put(_head(status, body, extra, json=json))
        self.put({"type": "http.response.body", "body": body, "more_body": False}, final=True)

    def close(self) -> None:
        """No more messages: the writer ends once the queue is written."""
        self._final = True
        self._wake()

    def abandon(self) -> None:
        """Write nothing more (the response will not be finished)."""
        self.abandoned = True
        self.close()
        if self._head is not None:
            hypercorn_compat.mark_head_blocked(self._send, self._head)

    async def run(self) -> None:
        try:
            while not self.abandoned:
                if not self._queue:
                    if self._final:
                        return
                    self._more = trio.Event()
                    await self._more.wait()
                    self._more = None
                    continue
                message = self._queue.popleft()
                self._queued -= len(message.get("body", b""))
                if self.timeout is not None:
                    self.stall_at = trio.current_time() + self.timeout
                    wakes = self.wakes
                    if wakes is not None and self.stall_at < wakes.deadline:
                        wakes.deadline = self.stall_at
                if message["type"] == "http.response.start":
                    self._head = message
                await self._send(message)
                self._head = None
                self.stall_at = math.inf
        except Exception:
            # A server may raise once the connection is gone; nothing to deliver to.
            self.abandoned = True
        except BaseException:
            self.abandoned = True  # cancelled (shutdown) before the end: maybe never delivered
            raise
        finally:
            self.stall_at = math.inf
            self._finished = True
            if self._done is not None:
                self._done.set()


class _Stream:
    """The response of one cancellable call: an SSE stream, or one JSON body.

    MCP lets the server pick either for each request.  When the client
    accepts SSE (``sse``), the choice is made lazily: a call that finishes
    before it first suspends, having sent nothing, is answered with one
    ``application/json`` body, like a non-cancellable call (one write, no
    chunked framing); the response commits to SSE (:meth:`commit`, its head
    queued) as soon as the call suspends, sends a progress or log message,
    or must end without an answer (a client-cancelled call ends its stream
    silently: MCP forbids any message after a client's cancel).  Everything
    runs in the request's task or its watcher, so nothing can interleave
    with the decision: once committed, the response stays SSE.

    Messages go through the request's :class:`_Writer`, so neither the tool
    nor the watcher ever waits for the client.  Once the client is gone
    (``closed``) nothing more is queued; a client that falls too far behind
    is treated as gone (:meth:`stall`).
    """

    __slots__ = (
        "_app",
        "_exchange",
        "_extra",
        "closed",
        "committed",
        "finished",
        "sse",
        "start_writer",
        "writer",
    )

    def __init__(
        self, writer: _Writer, extra: Headers, sse_mode: bool, exchange: Exchange, app: McpHttpApp
    ) -> None:
        self.writer = writer
        self._extra = extra
        self.sse = sse_mode
        self._exchange = exchange
        self._app = app
        self.closed = False
        self.committed = False
        """The SSE head was queued: the response is an SSE stream from now on."""
        self.start_writer: Callable[[], None] | None = None
        """Starts the writer task; ``None`` once started (or when the caller starts it)."""
        self.finished = False
        """The response was queued whole."""

    def _body(self, data: bytes, *, more: bool = True) -> None:
        if self.closed or self.finished:
            return
        self.finished = not more
        message = {"type": "http.response.body", "body": data, "more_body": more}
        if not self.writer.put(message, final=not more):
            self.stall("too much unread output")

    def stall(self, why: str) -> None:
        """The client stopped reading: treat it as gone (its call is cancelled)."""
        if self.closed:
            return
        logger.info("client stopped reading its response (%s); disconnecting it", why)
        self.closed = True
        self.writer.stalled = True
        self._exchange.cancel("client stopped reading", grace=self._app.stream_cancel_timeout)

    def commit(self) -> None:
        """Make the response an SSE stream, queueing its head (once; SSE clients only)."""
        if self.committed or not self.sse or self.closed or self.finished:
            return
        self.committed = True
        headers = [*sse.SSE_HEADERS, *self._extra]
        self.writer.put({"type": "http.response.start", "status": 200, "headers": headers})
        start, self.start_writer = self.start_writer, None
        if start is not None:
            start()  # a stream: its writes may block, so a task of their own

    async def send_message(self, message: Message) -> None:
        self.commit()
        self._body(sse.event(message))

    def keepalive(self) -> None:
        self.commit()
        self._body(sse.KEEPALIVE)

    def finish(self, reply: Message | None) -> None:
        """End the response with *reply* (``None``: end an SSE stream without one)."""
        if self.closed:
            self.writer.close()
            return
        if self.sse and (self.committed or reply is None):
            self.commit()
            self._body(b"" if reply is None else sse.event(reply), more=False)
        else:
            assert reply is not None
            self.finished = True
            self.writer.put_whole(200, jsonrpc.encode(reply), self._extra, json=True)


def _valid_id(value: object) -> Any:
    return value if is_valid_request_id(value) else None


def _head(status: int, body: bytes, extra: Any = (), *, json: bool | None = None) -> dict[str, Any]:
    headers = [(b"content-length", str(len(body)).encode()), *extra]
    if json or (json is None and body):
        headers.append((b"content-type", b"application/json"))
    return {"type": "http.response.start", "status": status, "headers": headers}


_RETRY_AFTER: Final[Headers] = [(b"retry-after", b"1")]
