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
  its copy and cancels the session's calls;
* a tenant at ``max_sessions_per_tenant`` (counted across workers) makes
  room for a new session by ending its least recently used *idle* one,
  wherever it lives (:meth:`SessionSharing.make_room`): only the worker
  holding a session knows whether it has calls in flight, so when the
  oldest one lives elsewhere its holders are asked over the bus
  (``session.make_room``), and the one that holds an idle one ends it;
  the ``initialize`` is refused (429) only when nobody has an idle one.

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
import secrets
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from ..._core.ratelog import RateLimitedLog
from ..._protocol.admission import too_many_requests
from ..._protocol.calls import RequestCall
from ..._protocol.exchange import Caller, Channel, LegacyState
from ..._wire.jsonrpc import Message
from ...backends.base import Backend, BackendUnavailable, BusMessage, SharedCounters
from .sessions import Session, SessionLimitReached, SessionStore

__all__ = ["SessionSharing", "SessionUnconfirmed", "session_key", "tenant_call_slot"]

logger = logging.getLogger("trio_mcp_cancel.http")


#: Seconds between two attempts to write what failed to reach the backend.
RETRY_INTERVAL: Final = 0.5
#: Ended sessions whose record is still to be deleted (see ``SessionSharing._unended``).
MAX_UNENDED: Final = 10_000
#: How many of a tenant's oldest sessions a worker making room for a new one considers.
EVICT_CANDIDATES: Final = 16
#: Seconds an ``initialize`` at its tenant's cap waits for another worker to end an idle
#: session (the whole wait only when none has one: then it is refused).
EVICT_WAIT: Final = 0.25
#: Requests to make room (from other workers) waiting to be served; more are dropped
#: (the asking worker then refuses its ``initialize``, as when nobody had an idle one).
MAX_ROOM_REQUESTS: Final = 64


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
    store: SessionStore | None = None
    """This worker's sessions (where a session evicted for another worker ends)."""
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
    _log: RateLimitedLog = attrs.field(init=False, factory=lambda: RateLimitedLog(logger))
    """An outage ends many sessions (evictions, expiries): one warning a minute, counted."""
    _rooms: dict[str, trio.Event] = attrs.field(init=False, factory=dict)
    """This worker's ``initialize`` calls waiting for another worker to make room."""
    _asked: trio.MemorySendChannel[BusMessage] = attrs.field(init=False)
    _to_serve: trio.MemoryReceiveChannel[BusMessage] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._asked, self._to_serve = trio.open_memory_channel[BusMessage](MAX_ROOM_REQUESTS)

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
            self._log.log(
                logging.WARNING, "session.end", "session end not shared with other workers: %s", exc
            )

    # -- a tenant at its cap: its least recently used idle session, on any worker ----

    async def make_room(self, session: Session, cap: int) -> bool:
        """End the least recently used idle session of new *session*'s tenant, on any worker.

        Called when the tenant already holds *cap* sessions across every
        worker.  The shared index lists them, least recently refreshed first;
        whether one is idle only the worker holding it knows.  The oldest one
        not busy here decides: held here and idle, it ends here; else its
        holders are asked over the bus (the first holder of an idle one ends
        it), and when nobody did within :data:`EVICT_WAIT`, this worker's own
        oldest idle one ends.  ``True`` when room was made (save again), else
        every session of the tenant is busy (or the backend is away).
        """
        store = self.store
        if not self.shared or store is None:
            return False
        tenant, mine = session.tenant, session_key(session.id)
        try:
            listed = await self.backend.sessions.oldest(tenant, EVICT_CANDIDATES)
        except BackendUnavailable as exc:
            logger.debug("no room made for a new session: %s", exc)
            return False
        candidates = [key for key in listed if key != mine and not self._busy_here(key)]
        if not candidates:
            return False
        if self._idle_here(candidates[0]) is None and self.backend.bus.shared:
            # The oldest lives on another worker (or nowhere any more): ask.
            if await self._ask_for_room(candidates, cap):
                return True
        for key in candidates:
            idle = self._idle_here(key)
            if idle is None:
                continue
            try:
                ended = await self._evict(idle, key, cap)
            except BackendUnavailable as exc:
                logger.debug("no room made for a new session: %s", exc)
                return False
            if ended != -1:
                return True  # ended here, or room was made meanwhile
        return False

    async def _ask_for_room(self, candidates: list[str], cap: int) -> bool:
        """Ask the holders of *candidates* to end the oldest idle one; whether one did."""
        if len(self._rooms) >= MAX_ROOM_REQUESTS:
            return False  # a flood of initialize calls at their cap: not one more wait each
        request = secrets.token_hex(8)
        room = self._rooms[request] = trio.Event()
        message: BusMessage = {
            "type": "session.make_room",
            "sessions": candidates,
            "cap": cap,
            "request": request,
        }
        try:
            await self.backend.bus.publish(message)
            with trio.move_on_after(EVICT_WAIT):
                await room.wait()
        except BackendUnavailable as exc:
            logger.debug("cannot ask other workers to make room: %s", exc)
        finally:
            del self._rooms[request]
        return room.is_set()

    def on_bus(self, message: BusMessage) -> None:
        """Another worker asks for room (``session.make_room``) or made it (``session.room``)."""
        kind, request = message.get("type"), message.get("request")
        if not isinstance(request, str):
            return
        if kind == "session.room":
            room = self._rooms.get(request)
            if room is not None:
                room.set()
        elif kind == "session.make_room":
            try:
                self._asked.send_nowait(message)
            except trio.WouldBlock:
                logger.debug("request to make room dropped: %d waiting", MAX_ROOM_REQUESTS)

    async def _make_room_for_others(self) -> None:
        """Serve other workers' ``session.make_room``: end the first listed idle one held here."""
        async for message in self._to_serve:
            sessions, cap = message.get("sessions"), message.get("cap")
            if not isinstance(sessions, list) or not isinstance(cap, int) or cap < 1:
                continue
            for key in sessions[:EVICT_CANDIDATES]:
                idle = self._idle_here(key) if isinstance(key, str) else None
                if idle is None or not isinstance(key, str):
                    continue
                try:
                    ended = await self._evict(idle, key, cap)
                except BackendUnavailable as exc:
                    logger.debug("no room made for another worker: %s", exc)
                    break
                if ended == 1:
                    try:
                        reply: BusMessage = {"type": "session.room", "request": message["request"]}
                        await self.backend.bus.publish(reply)
                    except BackendUnavailable as exc:
                        logger.debug("room made, not said: %s", exc)  # its put finds the room
                if ended != -1:
                    break

    def _held(self, key: str) -> Session | None:
        session, store = self._by_key.get(key), self.store
        if session is None or store is None or not store.holds(session):
            return None
        return session

    def _busy_here(self, key: str) -> bool:
        session = self._held(key)
        return session is not None and session.busy

    def _idle_here(self, key: str) -> Session | None:
        session = self._held(key)
        return session if session is not None and not session.busy else None

    async def _evict(self, session: Session, key: str, cap: int) -> int:
        """End idle *session* (held here) for a new one of its tenant, if still needed.

        The backend decides atomically (see ``SessionRecords.evict``); ended,
        it ends here and on every other worker holding a copy.
        """
        ended = await self.backend.sessions.evict(key, tenant=session.tenant, cap=cap)
        if ended != 1:
            return ended
        if session.busy:
            # A request reached it during the round trip: a session with calls in
            # flight is never ended.  Its record goes back (the tenant is one over
            # its cap until one of its sessions ends); the room stays made.
            await self.save(session)
            return ended
        store = self.store
        if store is not None:
            store.end(session.id)
        session.channel.cancel_all("session evicted")
        session.streams.close_all()
        self._by_key.pop(key, None)
        self._unsaved.discard(session)
        try:
            await self.backend.bus.publish({"type": "session.end", "session": key})
        except BackendUnavailable as exc:
            self._log.log(
                logging.WARNING, "session.end", "session end not shared with other workers: %s", exc
            )
        return ended

    async def keep_written(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """For as long as the app runs: write what could not reach the backend, and make
        room for other workers' new sessions (:meth:`make_room`)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._make_room_for_others)
            task_status.started()
            await self._keep_written()

    async def _keep_written(self) -> None:
        """Write what could not reach the backend.

        New sessions whose write-through failed are written (else another
        worker, asking the backend, would answer 404 for a live session),
        and records of sessions ended meanwhile are deleted (else they count
        against their tenant's sessions until their TTL), every
        :data:`RETRY_INTERVAL` seconds until the backend takes them.  One at
        a time in the background: no request waits on it.
        """
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
