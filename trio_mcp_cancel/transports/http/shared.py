"""Legacy sessions and client cancels across server processes: the HTTP app's part.

With a shared backend (:mod:`trio_mcp_cancel.backends.redis`), a legacy
session created by ``initialize`` on one worker is written to the backend
before ``initialize`` is answered, so the client's next POST may land on
any worker: a worker that does not know the session id looks it up there
and *adopts* it (same public id, so the same cancellation namespace; same
principal check; same negotiated version and capabilities).

What cannot be shared is forwarded instead, over the backend's bus:

* a ``notifications/cancelled`` is applied locally and published; the
  worker running that request applies it to its own registry
  (``notify_cancelled``: the flag at once, the hard cancel after the grace
  period; and an early cancel is kept there, for a call still on its way);
* a ``DELETE`` ends the session everywhere: every worker holding it ends
  its copy and cancels the session's calls.

The backend key of a session is a SHA-256 of its id: the id is a
credential, and never leaves the process in clear.  When the backend is
unreachable (or too slow: its breaker is open), sessions known locally
keep working; one this process does not hold gets a retryable ``503``
with ``Retry-After`` (:class:`SessionUnconfirmed`), never the ``404``
that tells a client to start over, which is only for a session the
backend says does not exist; and the cross-worker parts fail: the
outage is reported once, by the backend's ``backend.unavailable`` event
(and its log line); each operation that failed is logged at debug level
only, so an outage cannot flood the log.  A session whose write-through
failed is written in the background as soon as the backend answers
(:meth:`SessionSharing.keep_written`), and so is the deletion of one
ended meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from ..._protocol.admission import too_many_requests
from ..._protocol.calls import RequestCall
from ..._protocol.exchange import Caller, Channel, LegacyState
from ..._protocol.jsonrpc import Message
from ...backends.base import Backend, BackendUnavailable, BusMessage, SharedCounters
from .sessions import Session, SessionLimitReached, SessionStore

__all__ = ["SessionSharing", "SessionUnconfirmed", "session_key", "tenant_call_slot"]

logger = logging.getLogger("trio_mcp_cancel.http")


#: Seconds between two attempts to write what failed to reach the backend.
RETRY_INTERVAL: Final = 0.5
#: Ended sessions whose record is still to be deleted (see ``SessionSharing._unended``).
MAX_UNENDED: Final = 10_000


class SessionUnconfirmed(Exception):
    """A session this process does not hold could not be looked up (the backend is
    slow, down or its breaker open): not "unknown", so never a ``404``, which
    tells the client to start over; the caller answers a retryable ``503``."""


def session_key(session_id: str) -> str:
    """The backend's name for a session: never the secret id itself."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


def _record(session: Session) -> dict[str, Any]:
    legacy = session.channel.legacy
    return {
        "principal": session.principal,
        "tenant": session.tenant,
        "public_id": session.public_id,
        "legacy": None
        if legacy is None
        else {
            "protocol_version": legacy.protocol_version,
            "client_capabilities": dict(legacy.client_capabilities),
            "client_info": None if legacy.client_info is None else dict(legacy.client_info),
            "log_level": legacy.log_level,
        },
    }


def _legacy(data: object) -> LegacyState | None:
    if not isinstance(data, dict) or not isinstance(data.get("protocol_version"), str):
        return None
    capabilities = data.get("client_capabilities")
    info = data.get("client_info")
    level = data.get("log_level")
    return LegacyState(
        data["protocol_version"],
        capabilities if isinstance(capabilities, dict) else {},
        info if isinstance(info, dict) else None,
        level if isinstance(level, str) else None,
    )


@attrs.define(eq=False)
class SessionSharing:
    """Writes sessions through to the backend, adopts them from it, forwards cancels."""

    backend: Backend
    idle_timeout: float | None
    max_concurrent_calls: int
    _by_key: weakref.WeakValueDictionary[str, Session] = attrs.field(
        init=False, factory=weakref.WeakValueDictionary
    )
    _touched: weakref.WeakKeyDictionary[Session, float] = attrs.field(
        init=False, factory=weakref.WeakKeyDictionary
    )
    _unsaved: weakref.WeakSet[Session] = attrs.field(init=False, factory=weakref.WeakSet)
    """Sessions whose write-through failed (backend away): :meth:`keep_written` writes
    them as soon as it answers, so other workers find them (not a 404)."""
    _unended: OrderedDict[str, str | None] = attrs.field(init=False, factory=OrderedDict)
    """Backend keys (and tenants) of sessions ended here whose record could not be
    deleted: deleted by :meth:`keep_written`, so they stop counting against the
    tenant's sessions (at most :data:`MAX_UNENDED`; older ones lapse with their TTL)."""
    _retry: trio.Event = attrs.field(init=False, factory=trio.Event)

    @property
    def shared(self) -> bool:
        return self.backend.sessions.shared

    def local(self, key: str) -> Session | None:
        """The session this process holds under backend key *key*, if any."""
        return self._by_key.get(key)

    async def save(self, session: Session, cap: int | None = None) -> bool:
        """Write *session* through (after ``initialize`` and ``logging/setLevel``).

        With *cap* (a new session), ``False`` when its tenant already holds
        *cap* sessions across every worker: the session is then not shared,
        and the caller refuses it.  When the backend is unreachable the
        session is kept (usable on this worker only) and this is ``True``.
        """
        key = session_key(session.id)
        self._by_key[key] = session
        if not self.shared:
            return True
        try:
            stored = await self.backend.sessions.put(
                key, _record(session), self.idle_timeout, tenant=session.tenant, cap=cap
            )
        except BackendUnavailable as exc:
            logger.debug("session not shared with other workers (yet): %s", exc)
            self._unsaved.add(session)
            self._retry.set()
            return True
        self._unsaved.discard(session)
        if stored:
            self._touched[session] = trio.current_time()
        else:
            self._by_key.pop(key, None)
        return stored

    async def touch(self, session: Session) -> None:
        """Keep the shared record alive while the session is used here (throttled)."""
        if not self.shared or self.idle_timeout is None:
            return
        now = trio.current_time()
        if now - self._touched.get(session, -float("inf")) < self.idle_timeout / 4:
            return
        self._touched[session] = now
        try:
            await self.backend.sessions.touch(
                session_key(session.id), self.idle_timeout, tenant=session.tenant
            )
        except BackendUnavailable as exc:
            logger.debug("session lifetime not refreshed: %s", exc)

    async def find(
        self, session_id: str, principal: str | None, store: SessionStore
    ) -> Session | None:
        """Adopt a session another worker created; ``None`` when unknown (or not the caller's).

        ``None`` only when the backend says so; :class:`SessionUnconfirmed`
        when it cannot say (or the session cannot be held here now).
        """
        if not self.shared:
            return None
        key = session_key(session_id)
        try:
            record = await self.backend.sessions.get(key)
        except BackendUnavailable as exc:
            logger.debug("cannot look up a session of another worker: %s", exc)
            raise SessionUnconfirmed(str(exc)) from exc
        if record is None or record.get("principal") != principal:
            return None
        public_id = record.get("public_id")
        tenant = record.get("tenant")
        if not isinstance(public_id, str) or not (tenant is None or isinstance(tenant, str)):
            return None
        existing = store.get(session_id, principal, trio.current_time())
        if existing is not None:
            return existing  # adopted meanwhile by a concurrent request
        channel = Channel(
            self.max_concurrent_calls, legacy=_legacy(record.get("legacy")), notifications=True
        )
        session = Session(
            session_id, principal, trio.current_time(), tenant, public_id, channel=channel
        )
        try:
            evicted = store.adopt(session, trio.current_time())
        except SessionLimitReached as exc:
            # The session exists; this process has no room for it now.
            raise SessionUnconfirmed(str(exc)) from exc
        for old in evicted:
            old.channel.cancel_all("session evicted")
            old.streams.close_all()
            await self.end(old)
        self._by_key[key] = session
        self._touched[session] = trio.current_time()
        return session

    async def end(self, session: Session) -> None:
        """End *session* on every worker (its local end is the caller's)."""
        key = session_key(session.id)
        self._by_key.pop(key, None)
        if not self.shared:
            return
        self._unsaved.discard(session)
        try:
            await self.backend.sessions.delete(key, tenant=session.tenant)
        except BackendUnavailable as exc:
            logger.debug("session record not deleted yet: %s", exc)
            self._unended[key] = session.tenant
            while len(self._unended) > MAX_UNENDED:
                self._unended.popitem(last=False)
            self._retry.set()
        try:
            await self.backend.bus.publish({"type": "session.end", "session": key})
        except BackendUnavailable as exc:
            logger.warning("session end not shared with other workers: %s", exc)

    async def keep_written(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """For as long as the app runs: write what could not reach the backend.

        New sessions whose write-through failed are written (else another
        worker, asking the backend, would answer 404 for a live session),
        and records of sessions ended meanwhile are deleted (else they count
        against their tenant's sessions until their TTL), every
        :data:`RETRY_INTERVAL` seconds until the backend takes them.  One at
        a time in the background: no request waits on it.
        """
        task_status.started()
        while True:
            await self._retry.wait()
            self._retry = trio.Event()
            while self._unsaved or self._unended:
                for session in list(self._unsaved):
                    await self.save(session)  # no cap: it was admitted already
                    if session in self._unsaved:
                        break  # still away: one attempt per round, not one per session
                for key, tenant in list(self._unended.items()):
                    try:
                        await self.backend.sessions.delete(key, tenant=tenant)
                    except BackendUnavailable:
                        break
                    self._unended.pop(key, None)
                if self._unsaved or self._unended:
                    await trio.sleep(RETRY_INTERVAL)

    async def forward_cancel(self, namespace: str, params: dict[str, Any]) -> None:
        """Publish a client's ``notifications/cancelled`` for the worker running the request."""
        if not self.backend.bus.shared:
            return
        message: BusMessage = {
            "type": "notify",
            "namespace": namespace,
            "request_id": params.get("requestId"),
            "reason": params.get("reason") if isinstance(params.get("reason"), str) else None,
        }
        try:
            await self.backend.bus.publish(message)
        except BackendUnavailable as exc:
            logger.debug("cancel not forwarded to other workers: %s", exc)

    async def forward_response(
        self, key: str, response_id: object, result: object, error: object
    ) -> None:
        """Publish a client's answer to a ``ctx.elicit`` for the worker whose tool waits for it."""
        if not self.backend.bus.shared:
            return
        message: BusMessage = {
            "type": "client.response",
            "session": key,
            "id": response_id,
            "result": result,
            "error": error,
        }
        try:
            await self.backend.bus.publish(message)
        except BackendUnavailable as exc:
            logger.debug("client answer not forwarded to other workers: %s", exc)


@asynccontextmanager
async def tenant_call_slot(
    counters: SharedCounters, call: RequestCall, caller: Caller, cap: int | None
) -> AsyncIterator[Message | None]:
    """Hold one of the tenant's tool-call slots counted over every process.

    A ``subscriptions/listen`` stream takes none: it is not a call, and
    has its own (per-process) bounds in :class:`~.dispatcher.Dispatcher`.

    Yields the refusal (``data.limit == "tenant"``, the era's code) when the
    tenant already runs *cap* calls across the deployment, else ``None``
    for as long as the call runs.  When the backend is unreachable the call
    is admitted on this process's own per-tenant limit alone (reported as a
    ``backend.unavailable`` event): a Redis outage must not stop service.
    """
    tenant, request = caller.tenant, call.request
    if cap is None or tenant is None or call.tool is None or call.long_lived:
        yield None
        return
    name = "calls:" + tenant
    try:
        taken = await counters.acquire(name, cap)
    except BackendUnavailable as exc:
        logger.debug("tenant quota checked locally only: %s", exc)
        yield None
        return
    if not taken:
        yield too_many_requests(request.id, call.era, "tenant", cap)
        return
    try:
        yield None
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(2.0):
            try:
                await counters.release(name)
            except BackendUnavailable as exc:
                logger.debug("tenant quota not released yet (repaired later): %s", exc)
