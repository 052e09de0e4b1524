"""MCP Streamable HTTP as an ASGI application, both eras on one endpoint: the shell.

One endpoint (``/mcp`` by default) serves the modern era (2026-07-28,
:mod:`.modern`: self-contained POSTs, a client cancels by closing the
request's stream; GET and DELETE are ``405``) and the legacy era
(2025-11-25 and older, :mod:`.legacy`: sessions, ``notifications/cancelled``,
DELETE, scale-out forwarding).

This module is the ASGI entry, the lifespan and the routing: it checks a
request's head (:mod:`.rules`, pure functions), reads its body within its
bounds, picks the era, and hands the routed call to :mod:`.answer`, which
admits it once, runs it, and writes its response through
:mod:`.response`'s state machine and :mod:`.writer`.  What a message means
is decided by the dispatch core.  hypercorn's internals are reached only
through :mod:`.hypercorn_compat` (and can be turned off).

**Lifespan.**  The app opens its service nursery (the writers and watchers
of responses that may block) in the ASGI lifespan, and, when it was given
no registry and none is open around the server, its own registry there
too, so ``hypercorn module:app`` works with any number of workers.  A
registry that was given but is not running fails the startup with the
reason.

**Shutdown.**  An ASGI server's graceful shutdown only waits for requests
in flight and then cuts them: the app is not told.  :meth:`McpHttpApp.begin_shutdown`
is how it is told (``serve(handle_signals=True)`` and ``trio-mcp-cancel
run`` call it on SIGINT/SIGTERM): every call in flight is flagged, kind
``"server"``, and answered ``-32800`` with the reason before its connection
closes (see :mod:`.answer`).

**Probes.**  ``/healthz`` and ``/readyz`` (:mod:`.health`) are routed after
the MCP endpoint and before the ``Origin`` check and authentication: an
orchestrator's probe holds no token, and is no MCP call.  Readiness reads
this module's :func:`_not_ready` (the registry, the shutdown) and then the
backend's cached check.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from functools import partial
from typing import Any

import trio

from ..._auth.resource import OAuthResource, Refusal
from ..._auth.tokens import AccessToken
from ..._core.errors import NoRegistry, RegistryClosed
from ..._core.namespace import tenant_for
from ..._core.registry import (
    USE_CONFIG,
    Registry,
    RegistryConfig,
    current_registry,
    open_registry,
)
from ..._protocol.dispatcher import Dispatcher, Served
from ..._protocol.extension import Extension
from ..._protocol.lifespan import LifespanFailed, lifespan_served
from ..._protocol.replay import SharedClaims
from ..._telemetry.server import ServerTelemetry
from ..._wire import jsonrpc
from ..._wire.jsonrpc import JsonRpcError
from ...backends.base import Backend
from .._services import services_served
from ..auth import Authenticator, authenticate
from ..limits import (
    DEFAULT_CONNECTION_LIMITS,
    DEFAULT_HTTP_LIMITS,
    ConnectionLimits,
    HttpLimits,
)
from . import hypercorn_compat, rules
from .answer import Post, Responder, Routed
from .get_stream import GetStreams
from .health import Probes
from .legacy import LegacyEra
from .modern import ModernEra
from .oauth import Expiries, answer_until_expiry, check_scopes, expiry_of, resource_metadata
from .resume import StreamBudget
from .rules import HttpError
from .sessions import Session, SessionStore
from .shared import SessionSharing
from .writer import AsgiSink, Sink

__all__ = ["McpHttpApp"]

logger = logging.getLogger("trio_mcp_cancel.http")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


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
            unauthenticated requests get ``401``.  Or an
            :class:`~trio_mcp_cancel.oauth.OAuthResource`: the MCP
            authorization specification (Protected Resource Metadata served
            at its well-known paths, ``401`` challenges, validated tokens,
            ``403 insufficient_scope``; see :mod:`trio_mcp_cancel.oauth`).
        json_response: answer ``tools/call`` with one JSON body instead of
            an SSE stream (no progress, no keep-alive; a cancelled call is
            answered ``-32800``, because an HTTP response must carry something).
        limits: the :class:`~trio_mcp_cancel.server.ConnectionLimits` of
            every legacy session and modern call, as on the other
            transports: ``max_message_size`` is the largest request body
            (``413`` before it is read), ``max_concurrent_calls`` the
            calls one legacy session runs at once (more: ``429``, the legacy
            refusal ``-32001``), ``max_request_time`` (the client gets ``-32800``),
            ``keepalive_interval`` (SSE comments on a silent call's stream),
            ``write_timeout`` and ``max_buffered_bytes`` (a client that does
            not read its response counts as gone: its call is cancelled,
            kind ``"disconnect"``; the final response is always accepted),
            ``disconnect_grace_period`` (from a disconnect to the hard cancel).
        http_limits: :class:`~trio_mcp_cancel.http.HttpLimits`: request
            heads (``431``; a header that must appear once, such as
            ``Mcp-Session-Id`` or ``Authorization``, sent twice is ``400``),
            the body deadline (``408``; slow heads are bounded by the
            server's keep-alive timeout, see
            :func:`~trio_mcp_cancel.http.server_config`) and the legacy
            session store (see
            :mod:`~trio_mcp_cancel.transports.http.sessions` for who makes
            room: ``429`` for a tenant's bound, ``503`` for the store's).
        allowed_origins: ``Origin`` values accepted (``403`` otherwise, the
            DNS-rebinding guard MCP asks for).  ``None``: no ``Origin``
            header, or a localhost one.
        legacy_disconnect_cancels: whether a legacy client closing its
            stream cancels the call (the modern era always does, at once);
            with resumption on, only once ``resume_window`` passed without
            a resume.  ``False``: the call runs on (within
            ``max_request_time``), and its stream stays resumable.
        resume_window: legacy SSE streams are resumable (SEP-1699: event
            ids, a priming event with ``retry``, ``GET`` with
            ``Last-Event-ID`` replays what the client missed; see
            :mod:`.resume`), and a dropped one is a disconnect only when
            its client has not come back within this many seconds (default
            5; ``MCP_RESUME_WINDOW``).  ``None``: no resumption; a dropped
            stream is a disconnect at once.  The replay buffer of each
            stream is ``http_limits.replay_buffer_size`` bytes, and all
            streams together hold at most
            ``http_limits.max_retained_stream_bytes``.
        backend: what server processes share (task records, cancellation
            requests; see :mod:`trio_mcp_cancel.backends`); ``None``: this
            process only, in memory.  The lifespan runs it.
        hypercorn_fast_paths: use hypercorn's shortcuts (see
            :mod:`.hypercorn_compat`); ``False``: plain ASGI only; ``None``
            (default): on when hypercorn is a release they were checked
            against and ``MCP_HYPERCORN_FAST_PATHS`` does not turn them off.
        health_path, ready_path: the liveness and readiness probes (``GET``/``HEAD``,
            never authenticated, never MCP calls; see :mod:`.health`), off the
            MCP endpoint; ``None`` turns one off.

    A *registry* that is not running when the lifespan starts fails the
    startup (``lifespan.startup.failed``, with the reason), rather than
    answering every call with an error.
    """

    def __init__(
        self,
        server: Served,
        registry: Registry | None = None,
        *,
        registry_config: RegistryConfig | None = None,
        path: str = "/mcp",
        sessions: bool = True,
        auth: Authenticator | OAuthResource | None = None,
        json_response: bool = False,
        allowed_origins: Collection[str] | None = None,
        limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
        http_limits: HttpLimits = DEFAULT_HTTP_LIMITS,
        legacy_disconnect_cancels: bool = True,
        resume_window: float | None = 5.0,
        backend: Backend | None = None,
        hypercorn_fast_paths: bool | None = None,
        health_path: str | None = "/healthz",
        ready_path: str | None = "/readyz",
    ) -> None:
        # Every deployment path that serves this app makes it (hypercorn imports
        # ``module:app`` in each worker), so each gets the guards (see
        # .hypercorn_compat); installed here, not at import, so importing the
        # package patches nothing.  Idempotent.
        hypercorn_compat.install()
        self.server = server
        self.registration = server.dispatcher.registration
        """What the server offers and its settings (its telemetry, its tools' scopes)."""
        self.backend = backend
        if isinstance(backend, SharedClaims):  # a used requestState is used on every worker
            server.dispatcher.runtime.used_states.shared = backend
        self._registry = registry
        self.registry_config = registry_config
        self.path = path
        self.sessions = _sessions(http_limits, self.registration.telemetry) if sessions else None
        self.auth = auth
        self.oauth = auth if isinstance(auth, OAuthResource) else None
        # What a token opened ends at its expiry (see .oauth): one timer for all.
        self._expiries = Expiries() if self.oauth is not None else None
        self.json_response = json_response
        self.limits = limits
        self.http_limits = http_limits
        # Read on every request: kept as plain attributes (one lookup each).
        self.max_message_size = limits.max_message_size
        self.max_head_size = http_limits.max_head_size
        self.body_timeout = http_limits.body_timeout
        self.allowed_origins = None if allowed_origins is None else frozenset(allowed_origins)
        self.legacy_disconnect_cancels = legacy_disconnect_cancels
        if hypercorn_fast_paths is None:
            hypercorn_fast_paths = hypercorn_compat.fast_paths_default()[0]
        self.hypercorn_fast_paths = hypercorn_fast_paths
        self._own_registry: Registry | None = None
        self._started = False
        """Whether a lifespan ever started the app (its registry, given or its own, was there)."""
        self._runs_extensions: list[Extension] = []
        """The extensions whose services the lifespan runs (a shutdown flags their work)."""
        self._sharing = (
            SessionSharing(
                backend,
                http_limits.session_idle_timeout,
                limits.max_concurrent_calls,
                self.sessions,
            )
            if backend is not None
            else None
        )
        self._responder = Responder(
            server,
            backend,
            json_response,
            limits.disconnect_grace_period,
            limits.max_request_time,
            limits.keepalive_interval,
            legacy_disconnect_cancels,
            limits.write_timeout,
            limits.max_buffered_bytes,
            # The one place the app decides which server it is served by.
            hypercorn_compat.HypercornSink if hypercorn_fast_paths else AsgiSink,
            resume_window=_check_window(resume_window),
            replay_limit=http_limits.replay_buffer_size,
            stream_budget=StreamBudget(http_limits.max_retained_stream_bytes),
        )
        self._modern = ModernEra(self._responder)
        self._legacy = LegacyEra(
            self._responder,
            lambda: self.registry,
            self.sessions,
            self._sharing,
            limits.max_concurrent_calls,
        )
        self._get = GetStreams.build(self._responder, self._legacy, self._sharing, backend)
        self.sink: Sink = self._responder.sink
        taken = {path, *(self.oauth.metadata_paths if self.oauth is not None else ())}
        self.probes = Probes.build(
            health_path, ready_path, partial(_not_ready, self), backend, taken=taken
        )

    def begin_shutdown(self, within: float | None = None) -> int:
        """The server is shutting down: cancel every call and task in flight, as stdio does
        (each answered ``-32800``, "server shutting down"; see :meth:`.answer.Shutdown.begin`)."""
        grace = self.limits.disconnect_grace_period
        if grace is USE_CONFIG:  # the registry's, if there is one yet
            known = self._registry is not None or self._own_registry is not None
            grace = self.registry.config.grace_period if known or _registry_around() else within
        return self._responder.shutdown.begin(grace, within, self._runs_extensions)

    @property
    def retained_stream_bytes(self) -> int:
        """Bytes the app's resumable legacy streams hold now (replay buffers and answers
        not yet delivered), bounded by ``http_limits.max_retained_stream_bytes``."""
        return self._responder.stream_budget.held

    @property
    def dispatcher(self) -> Dispatcher:
        """The server's dispatcher, which this app's calls go through."""
        return self._responder.dispatcher

    @property
    def registry(self) -> Registry:
        if self._registry is not None:
            return self._registry
        if self._own_registry is not None:
            return self._own_registry
        return current_registry()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A request is served in this frame, not in a method awaited from here:
        # a call in flight holds every coroutine frame of its await chain.
        kind = scope["type"]
        if kind != "http":
            await self._other(kind, receive, send)
            return
        respond = self.sink.respond
        try:
            try:
                target = len(scope["path"]) + len(scope.get("query_string") or b"")
                headers = rules.request_headers(scope["headers"], self.max_head_size, target)
                if scope["path"] != self.path:
                    if scope["path"] in self.probes.paths:
                        await _discard_body(self, receive)
                        await self.probes.answer(self.sink, send, scope["path"], scope["method"])
                        return
                    if self.oauth is not None and scope["path"] in self.oauth.metadata_paths:
                        await _discard_body(self, receive)
                        await respond(send, *resource_metadata(self.oauth, scope["method"]))
                        return
                    raise HttpError(404, f"Not Found: the MCP endpoint is {self.path}")
                rules.check_origin(headers, self.allowed_origins)
                client = scope.get("client")
                access = None if self.auth is None else await _principal(self, headers, client)
                principal = access.principal if isinstance(access, AccessToken) else access
                method = scope["method"]
                if method == "POST":
                    rules.check_accept(headers)
                    rules.check_content_type(headers)
                    rules.check_content_length(headers, self.max_message_size)
                elif method not in ("DELETE", "GET") or not self._legacy_headers(headers):
                    allow = b"GET, POST, DELETE" if self._legacy_headers(headers) else b"POST"
                    raise HttpError(405, "Method Not Allowed", headers=[(b"allow", allow)])
            except HttpError as exc:
                if exc.status != 413:  # a body declared too large is not waited for
                    await _discard_body(self, receive)
                raise
            if method == "POST":
                # Routed in a frame of its own that is over before the call runs
                # (it holds the body and its reader), answered from this one.
                routed = await self._route(scope, receive, send, headers, principal, access)
                if routed is not None:
                    await _answer(self, routed, receive, send, headers, access)
            elif method == "GET":
                await _discard_body(self, receive)
                tenant = tenant_for(principal, scope.get("client"))
                await self._get.get(headers, principal, tenant, receive, send, expiry_of(access))
            else:
                await _discard_body(self, receive)
                await self._legacy.delete(headers, principal)
                await respond(send, 204, b"")
        except HttpError as exc:
            await respond(send, exc.status, exc.body(), exc.headers)
        except _ClientGone:
            return
        except (NoRegistry, RegistryClosed) as exc:
            if not await _without_registry(self, send, exc):
                raise

    async def _other(self, kind: str, receive: Receive, send: Send) -> None:
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})

    # -- lifespan ------------------------------------------------------------

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """Own the service nursery (and a registry if needed) from startup to shutdown."""
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        problem = "already running" if self._responder.sink.service is not None else None
        problem = problem or _startup_problem(self)
        if problem is not None:
            logger.error("McpHttpApp cannot start: %s", problem)
            await send({"type": "lifespan.startup.failed", "message": problem})
            return
        failed: LifespanFailed | None = None
        try:
            # The backend outlives the services that use it, so a task that
            # is cancelled at shutdown can still record that it failed.
            async with trio.open_nursery() as outer:
                if self._registry is None and not _registry_around():
                    self._own_registry = await outer.start(_run_registry, self.registry_config)
                if self.backend is not None:
                    # Backend events reach the registry's subscribers, from the first one on.
                    outer.start_soon(
                        _unsubscribe_on_exit, self.backend.attach_events(self.registry.events)
                    )
                    await outer.start(self.backend.run)
                    # Before this worker seals any requestState (see replay.py).
                    await self.dispatcher.runtime.used_states.mark_epoch()
                    outer.start_soon(
                        _unsubscribe_on_exit, self.backend.bus.subscribe(self._legacy.on_bus)
                    )
                    await outer.start(self._get.serve_backend, self.backend)
                    if self._sharing is not None:
                        await outer.start(self._sharing.keep_written)
                # The server's lifespan (McpServer(lifespan=...)) is entered before
                # startup completes and left once the server closed its connections.
                async with (
                    lifespan_served(self.server),
                    trio.open_nursery() as service,
                    services_served(self),
                ):
                    await self._start_extensions(service)
                    if self._expiries is not None:
                        await service.start(self._expiries.run)
                    self._responder.sink.service = service
                    self._started = True
                    await send({"type": "lifespan.startup.complete"})
                    while (await receive())["type"] != "lifespan.shutdown":
                        pass
                    self._responder.sink.service = None
                    # Writers still pending belong to connections the server
                    # closed by now (it shuts the lifespan down last).
                    service.cancel_scope.cancel()
                outer.cancel_scope.cancel()
        except* LifespanFailed as group:
            failed = _first_failure(group)
        finally:
            self._responder.sink.service = None
            self._own_registry = None
        if failed is not None:
            # Before startup completed: the server reports it, one sentence, and never serves.
            logger.error("McpHttpApp cannot start: %s", failed)
            await send({"type": "lifespan.startup.failed", "message": str(failed)})
            return
        await send({"type": "lifespan.shutdown.complete"})

    async def _start_extensions(self, service: trio.Nursery) -> None:
        """Run the server's extension services here, on the backend, unless they run already."""
        for extension in self.dispatcher.extensions:
            if extension.running:
                continue
            self._runs_extensions.append(extension)  # a shutdown flags their work
            await service.start(partial(extension.serve, self.backend))

    # -- requests ------------------------------------------------------------

    def _legacy_headers(self, headers: dict[str, str]) -> bool:
        """Whether a GET or DELETE may concern a legacy session (modern: always 405)."""
        return self.sessions is not None and rules.select_era(headers, None) == "legacy"

    async def _route(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[str, str],
        principal: str | None,
        access: str | AccessToken | None = None,
    ) -> Routed | None:
        """Read and decode a POST's body and route it by era (``None``: answered already)."""
        # The usual body is queued already: taken without a scheduling point,
        # and only a body still on its way needs the time limit (a cancel scope).
        reader = _Body(self.max_message_size)
        if reader.take_queued(self.sink, receive):
            body = reader.data()
        else:
            body = await _read_rest(receive, reader, self.body_timeout)
        try:
            message = jsonrpc.decode(body)
        except JsonRpcError as exc:
            await self._responder.sink.respond(send, 400, jsonrpc.encode(exc.to_message()))
            return None
        if self.oauth is not None and isinstance(access, AccessToken):
            try:
                check_scopes(self.oauth, self.registration, message, access)
            except Refusal as refused:
                raise HttpError(refused.status, str(refused), headers=refused.headers()) from None
        client = scope.get("client")
        tenant = tenant_for(principal, client)
        post = Post(send, headers, principal, client, tenant, message, self.registry)
        if rules.select_era(headers, message) == "modern":
            return await self._modern.route(post)
        return await self._legacy.route(post)


def _answer(
    app: McpHttpApp,
    routed: Routed,
    receive: Receive,
    send: Send,
    headers: dict[str, str],
    access: str | AccessToken | None,
) -> Awaitable[None]:
    """Answer *routed*; a call made with an expiring token is cancelled at its expiry.

    Returns the coroutine to await, so a running call holds no frame of this.
    """
    telemetry = app.registration.telemetry
    if telemetry is not None and "traceparent" in headers:
        return _answer_traced(app, telemetry, routed, receive, send, headers, access)
    expiries, responder = app._expiries, app._responder
    if expiries is None:
        return responder.answer(routed, receive, send)
    return answer_until_expiry(responder, expiries, routed, receive, send, access)


async def _answer_traced(
    app: McpHttpApp,
    telemetry: ServerTelemetry,
    routed: Routed,
    receive: Receive,
    send: Send,
    headers: dict[str, str],
    access: str | AccessToken | None,
) -> None:
    with telemetry.http_parent(headers):  # the span's parent, unless _meta has one
        expiries, responder = app._expiries, app._responder
        if expiries is None:
            await responder.answer(routed, receive, send)
        else:
            await answer_until_expiry(responder, expiries, routed, receive, send, access)


def _startup_problem(app: McpHttpApp) -> str | None:
    """Why *app* cannot serve (``None``: it can); checked before startup completes."""
    if app._registry is not None and not app._registry.running:
        return (
            "the registry given to McpHttpApp is not running: open it around the"
            " server (async with open_registry() as registry) or pass none"
        )
    if app._registry is None and _registry_around() and not current_registry().running:
        return "the open_registry() around the server is not running any more"
    return None


def _not_ready(app: McpHttpApp) -> str | None:
    """Why *app* should get no new traffic, from its own state (no I/O; see :mod:`.health`)."""
    if app._responder.shutdown.at is not None:
        return "draining: the server is shutting down"
    if app._started and app.sink.service is None:
        return "stopped: the app's lifespan has ended"
    try:
        running = app.registry.running
    except NoRegistry:
        running = False
    return None if running else "starting: the registry is not running yet"


async def _run_registry(
    config: RegistryConfig | None, *, task_status: trio.TaskStatus[Registry]
) -> None:
    async with open_registry(config) as registry:
        task_status.started(registry)
        await trio.sleep_forever()


def _sessions(http_limits: HttpLimits, telemetry: ServerTelemetry | None) -> SessionStore:
    """The app's legacy session store, reporting each session's end to *telemetry*."""
    return SessionStore(
        http_limits.max_sessions,
        http_limits.session_idle_timeout,
        http_limits.max_sessions_per_tenant,
        on_end=None if telemetry is None else partial(_session_ended, telemetry),
    )


def _session_ended(telemetry: ServerTelemetry, session: Session) -> None:
    """``mcp.server.session.duration`` of a legacy session created on this worker."""
    if session.started is None:
        return
    legacy = session.channel.legacy
    version = None if legacy is None else legacy.protocol_version
    telemetry.session_ended(session.started, version, ("tcp", "http"))


async def _principal(
    app: McpHttpApp, headers: dict[str, str], client: object
) -> str | AccessToken | None:
    """The caller's principal id, or its validated token (``auth`` an OAuthResource)."""
    auth = app.auth
    if auth is None:
        return None
    if isinstance(auth, OAuthResource):
        try:
            return await auth.authenticate(headers, client)
        except Refusal as refused:
            raise HttpError(refused.status, str(refused), headers=refused.headers()) from None
    principal = await authenticate(auth, headers)
    if principal is None:
        raise HttpError(401, "Unauthorized", headers=[(b"www-authenticate", b"Bearer")])
    return principal


async def _discard_body(app: McpHttpApp, receive: Receive) -> None:
    """Read the body of a request refused from its head, and drop it.

    Answering before the body arrived leaves the client sending on a
    stream the server has finished with: HTTP/1.1 then has to close the
    connection, and hypercorn's HTTP/2 forgets the stream while its
    ``DATA`` frames are still on the way (see :mod:`.hypercorn_compat`).
    So the body is read first, within the bounds a body always has:
    ``max_message_size`` bytes and ``body_timeout`` seconds.  A larger or
    slower one is left to the server (its connection is closed, or its
    stream reset).  A request without a body costs one queued message.
    """
    left = app.max_message_size
    with trio.move_on_after(math.inf if app.body_timeout is None else app.body_timeout):
        while True:
            message = app.sink.receive_now(receive) or await receive()
            left -= len(message.get("body", b""))
            if not message.get("more_body", False) or left < 0:
                return


async def _read_rest(receive: Receive, body: _Body, body_timeout: float | None) -> bytes:
    """The rest of a request body still on its way, within *body_timeout* seconds."""
    with trio.move_on_after(math.inf if body_timeout is None else body_timeout):
        while not body.add(await receive()):
            pass
        return body.data()
    raise HttpError(408, "Request Timeout", headers=rules.CLOSE)


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
        if chunk:
            self._size += len(chunk)
            if self._size > self._limit:
                raise rules.too_large(self._limit)
            self._chunks.append(chunk)
        return not message.get("more_body", False)

    def take_queued(self, sink: Sink, receive: Receive) -> bool:
        """Take the messages the server queued already (no scheduling point); ``True``
        once the body is complete.  hypercorn queues an HTTP/1.1 body read at once as
        two messages: the data, then an empty one that ends it."""
        while (message := sink.receive_now(receive)) is not None:
            if self.add(message):
                return True
        return False

    def data(self) -> bytes:
        chunks = self._chunks
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _check_window(window: float | None) -> float | None:
    if window is not None and not (math.isfinite(window) and window >= 0):
        raise ValueError(f"resume_window must be a finite number of seconds >= 0, not {window!r}")
    return window


async def _unsubscribe_on_exit(unsubscribe: Callable[[], None]) -> None:
    """Hold a bus subscription for as long as the lifespan's nursery runs."""
    try:
        await trio.sleep_forever()
    finally:
        unsubscribe()


async def _without_registry(app: McpHttpApp, send: Send, exc: Exception) -> bool:
    """Answer a request that found no registry (503); ``False``: the caller's bug, raise.

    "no registry" (logged with the fix) only when there never was one: the
    app was not started by a lifespan, given none, inside no ``open_registry()``.
    After its lifespan ran, the registry closed with it: shutdown, debug only.
    """
    if app._registry is not None:
        return False  # the registry given was closed under the app
    if not app._started and not _registry_around():
        logger.error(
            "no registry: run the app under an ASGI server with lifespan support,"
            " inside open_registry(), or pass registry="
        )
        await app.sink.respond(send, 503, b"Service Unavailable: no registry")
        return True
    if app._started:
        logger.debug("request after shutdown: %s", exc)
        await app.sink.respond(send, 503, b"Service Unavailable: shutting down")
        return True
    return False


def _registry_around() -> bool:
    """Whether an ``open_registry()`` encloses the calling task."""
    try:
        current_registry()
    except NoRegistry:
        return False
    return True


def _first_failure(group: BaseExceptionGroup[LifespanFailed]) -> LifespanFailed:
    """The lifespan's startup failure inside *group* (nested in the nurseries' groups)."""
    found: BaseException = group
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    assert isinstance(found, LifespanFailed)
    return found
