"""The legacy era (2025-11-25 and older) on the HTTP endpoint: sessions, DELETE, scale-out.

``initialize`` creates a session (``Mcp-Session-Id``), later POSTs carry
it, ``notifications/cancelled`` cancels a request of the same session,
DELETE ends the session and cancels its requests.  A dropped SSE stream
can be resumed (``GET`` + ``Last-Event-ID``, :mod:`.resume`) for
``resume_window`` seconds; one not resumed by then cancels the call, by
default (``legacy_disconnect_cancels``).

With a shared backend (:mod:`.shared`) a session lives on every worker: a
POST may land on another worker than its ``initialize``, a cancel for a
request running elsewhere is forwarded, a DELETE ends the session
everywhere, and :meth:`LegacyEra.on_bus` applies what another worker saw
first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
import trio

from ..._core.errors import NoRegistry
from ..._core.namespace import GLOBAL_NAMESPACE
from ..._core.registry import Registry
from ..._protocol.admission import too_many_sessions
from ..._protocol.calls import ClientResponseCall, NotificationCall, Rejected, RequestCall
from ..._protocol.exchange import Caller, Channel
from ..._wire import jsonrpc
from ...backends.base import BusMessage
from . import rules
from .answer import RETRY_AFTER, Headers, Post, Responder, Routed, Send
from .rules import HttpError
from .sessions import Session, SessionLimitReached, SessionStore
from .shared import SessionSharing, SessionUnconfirmed, session_key

__all__ = ["LegacyEra"]

logger = logging.getLogger("trio_mcp_cancel.http")

_SHARED_METHODS = frozenset({"initialize", "logging/setLevel"})


@attrs.define(eq=False)
class LegacyEra:
    """Legacy POSTs and DELETEs: the sessions (``None``: stateless) and their sharing."""

    responder: Responder
    registry: Callable[[], Registry]
    """The registry now (for what other workers send, outside any request)."""
    sessions: SessionStore | None
    sharing: SessionSharing | None
    max_concurrent_calls: int

    async def route(self, post: Post) -> Routed | None:
        """Find (or, for ``initialize``, start) the session; ``None`` when answered already."""
        session: Session | None = None
        if not rules.is_initialize(post.message):
            if self.sharing is None:  # the common case, without a coroutine
                session = self._unshared_session(post.headers, post.principal)
            else:
                session = await self.session(post.headers, post.principal)
        elif self.sessions is not None:
            session = await self._create(post)
            if session is None:
                return None
        # The namespace names the session by its public id: namespaces end up
        # in events and logs, and the session id itself is a credential.  The
        # session worked it out once; without one (or with a public id that
        # cannot name one) it is the caller's tenant, worked out once per POST
        # by the app, or the global one: what namespace_for gives for them.
        public_id = session.public_id if session else None
        namespace = session.namespace if session else None
        if namespace is None:
            namespace = GLOBAL_NAMESPACE if post.tenant is None else post.tenant
        caller = Caller(
            namespace,
            post.registry,
            session.channel if session else None,
            post.principal,
            public_id,
            post.tenant,
            network_transport="tcp",
            network_protocol="http",
        )
        extra: Headers = [session.header] if session else []
        # The app chose this era because the body carries no modern envelope.
        call = self.responder.prepare(post.message, caller, legacy=True)
        if isinstance(call, NotificationCall):
            await self._notify(call, caller)
        elif isinstance(call, ClientResponseCall) and session is not None:
            await self._answered(call, caller, session)
        if isinstance(call, Rejected):
            # A malformed message is a 400; a request that cannot be served
            # is answered like any other request of its era.
            status = 400 if call.request is None else rules.status_for(call.error.code, "legacy")
            body = jsonrpc.encode(call.error.to_message())
            await self.responder.sink.respond(
                post.send, status, body, extra, json=None if status == 400 else True
            )
            return None
        if not isinstance(call, RequestCall):
            await self.responder.sink.respond(post.send, 202, b"", extra)
            return None
        before = self._share if session is not None and self.sharing is not None else None
        return Routed(call, caller, extra, "legacy", session, before)

    async def _create(self, post: Post) -> Session | None:
        """A new session for ``initialize`` (whatever header it carries); ``None``: refused."""
        assert self.sessions is not None
        channel = Channel(self.max_concurrent_calls, notifications=True)
        try:
            session, evicted = self.sessions.create(
                post.principal, post.tenant, trio.current_time(), channel
            )
        except SessionLimitReached as exc:
            await self.refuse_session(post.send, jsonrpc.request_id_of(post.message), exc)
            return None
        for old in evicted:
            old.channel.cancel_all("session evicted")
            old.streams.close_all()
            if self.sharing is not None:
                await self.sharing.end(old)  # on every worker: it freed a shared place
        return session

    async def _notify(self, call: NotificationCall, caller: Caller) -> None:
        notified = call.notification
        # The dispatcher says whether the cancel may be for another worker.
        if self.responder.notify(notified, caller) and self.sharing is not None:
            await self.sharing.forward_cancel(caller.namespace, notified.params)

    async def _answered(self, call: ClientResponseCall, caller: Caller, session: Session) -> None:
        """The client's answer to a ``ctx.elicit``: to the tool waiting here, or forwarded.

        The tool may run on another worker than the one the answer reached
        (with a shared backend): one that no tool here waits for is
        published on the bus, named by the session's backend key, and
        applied by the worker holding the waiter (an unknown id is dropped).
        """
        if self.responder.dispatcher.respond(call, caller) or self.sharing is None:
            return
        response = call.response
        if response is None or not isinstance(response.id, str) or len(response.id) > 64:
            return  # not an id this server makes: nothing anywhere waits for it
        await self.sharing.forward_response(
            session_key(session.id), response.id, response.result, response.error
        )

    def _unshared_session(self, headers: dict[str, str], principal: str | None) -> Session | None:
        """:meth:`session` without a backend sharing the sessions: it needs no await."""
        sessions = self.sessions
        if sessions is None:
            return None
        session_id = _session_id(headers)
        session = sessions.get(session_id, principal, trio.current_time())
        if session is None:
            raise HttpError(404, sessions.not_found(session_id, shared=False))
        return session

    async def session(self, headers: dict[str, str], principal: str | None) -> Session | None:
        """The session a request names (``None``: sessions are off); ``400``/``404`` else.

        ``503`` with ``Retry-After`` when the session is not held here and the
        shared backend cannot say whether it exists: ``404`` (start over) is
        only for a session the backend says does not exist.
        """
        sessions, sharing = self.sessions, self.sharing
        if sessions is None or sharing is None:
            return self._unshared_session(headers, principal)
        session_id = _session_id(headers)
        session = sessions.get(session_id, principal, trio.current_time())
        if session is None:
            # Maybe another worker's (see .shared).
            try:
                session = await sharing.find(session_id, principal, sessions)
            except SessionUnconfirmed as exc:
                raise HttpError(
                    503,
                    "Session could not be confirmed now (the shared session store is"
                    " unavailable); retry",
                    jsonrpc.INTERNAL_ERROR,
                    RETRY_AFTER,
                ) from exc
        if session is None:
            raise HttpError(404, sessions.not_found(session_id, shared=True))
        await sharing.touch(session)
        return session

    async def delete(self, headers: dict[str, str], principal: str | None) -> None:
        """DELETE: end the session and cancel its requests (on every worker)."""
        session = await self.session(headers, principal)
        assert session is not None and self.sessions is not None
        self.sessions.end(session.id)
        session.channel.cancel_all("session terminated")
        session.streams.close_all()
        if self.sharing is not None:
            await self.sharing.end(session)

    async def _share(self, routed: Routed, send: Send) -> bool:
        """Before answering ``initialize`` or ``logging/setLevel``: share the session.

        Shared before the answer: the next POST may go to another worker.
        ``False`` when the tenant holds its whole quota on other workers
        (the ``initialize`` is refused, answered here).
        """
        request, session = routed.call.request, routed.session
        if session is None or request.method not in _SHARED_METHODS:
            return True
        assert self.sharing is not None and self.sessions is not None
        cap = self.sessions.max_sessions_per_tenant if request.method == "initialize" else None
        if await self.sharing.save(session, cap):
            return True
        # At its cap across workers: its least recently used idle session, wherever it
        # lives, makes room; refused only when every one of them is busy.
        if cap is not None and await self.sharing.make_room(session, cap):
            if await self.sharing.save(session, cap):
                return True
        self.sessions.end(session.id)
        limit = SessionLimitReached("tenant", self.sessions.max_sessions_per_tenant)
        await self.refuse_session(send, request.id, limit)
        return False

    async def refuse_session(self, send: Send, request_id: Any, exc: SessionLimitReached) -> None:
        """Answer an ``initialize`` that would need a busy session's place."""
        logger.warning("initialize refused: %s", exc)
        reply = too_many_sessions(request_id, exc.limit, exc.cap)
        status = 429 if exc.limit == "tenant" else 503
        await self.responder.sink.respond(
            send, status, jsonrpc.encode(reply), RETRY_AFTER, json=True
        )

    def on_bus(self, message: BusMessage) -> None:
        """Apply a legacy cancel, client answer or session end that reached another worker."""
        kind = message.get("type")
        if kind == "notify":
            namespace = message.get("namespace")
            if isinstance(namespace, str) and namespace.startswith("session:"):
                try:
                    registry = self.registry()
                except NoRegistry:  # the app's own registry is gone (shutdown)
                    return
                params = {"requestId": message.get("request_id"), "reason": message.get("reason")}
                notified = jsonrpc.Notification("notifications/cancelled", params)
                self.responder.notify(notified, Caller(namespace, registry))
        elif kind == "client.response" and self.sharing is not None:
            key = message.get("session")
            session = self.sharing.local(key) if isinstance(key, str) else None
            if session is not None:
                response = jsonrpc.ClientResponse(
                    message.get("id"), message.get("result"), message.get("error")
                )
                session.channel.client_requests.resolve(response)
        elif kind in ("session.make_room", "session.room") and self.sharing is not None:
            self.sharing.on_bus(message)
        elif kind == "session.end" and self.sharing is not None and self.sessions is not None:
            key = message.get("session")
            session = self.sharing.local(key) if isinstance(key, str) else None
            if session is not None:
                self.sessions.end(session.id)
                session.channel.cancel_all("session terminated")
                session.streams.close_all()


def _session_id(headers: dict[str, str]) -> str:
    """The ``Mcp-Session-Id`` a legacy request must carry (``400`` without one)."""
    session_id = headers.get(rules.SESSION_ID)
    if session_id is None:
        raise HttpError(
            400, "Bad Request: the Mcp-Session-Id header is missing (initialize returns one)"
        )
    return session_id
