"""MCP sessions for the HTTP transport: issue, look up, expire, end, bound.

A session id is a credential: it is unguessable (``secrets``), bound to the
principal that created it (presented by another principal it is "unknown",
404, never shared), and never shown; the ``session:`` namespace uses the
session's separate ``public_id``.  Each session is a legacy-era
:class:`Channel`.

**Bounds, and who pays for them.**  Sessions are counted per *tenant* (the
principal, or the client's address bucket when unauthenticated) and in
total.  Making room never touches a session with calls in flight: that
would let one client end another's work by opening sessions in a loop.

* A tenant at ``max_sessions_per_tenant`` makes room by dropping its *own*
  least recently used idle session; when all of its sessions are busy, its
  ``initialize`` is refused (:class:`SessionLimitReached`, ``"tenant"``).
* A full store first drops sessions idle past ``idle_timeout``, then the
  least recently used idle session of the tenant holding the most sessions
  (the biggest consumer pays, so an attacker spread over many address
  buckets evicts its own sessions before anyone else's); when every session
  is busy the ``initialize`` is refused (``"server"``).

Idle sessions expire after ``idle_timeout`` when next looked at (a busy one
never does: a long call keeps its session).

**Which store issued an id.**  An id ends with its store's random ``tag``
(``<secret>.<tag>``), so a store asked for an id it never had can tell
"another process issued this" (another worker without a shared backend,
or this process before a restart) from "unknown", and say so in the 404
instead of a bare "Session not found".  The tag names a process, not a
session: it reveals nothing the client does not already hold.
"""

from __future__ import annotations

import re
import secrets
from collections import OrderedDict
from collections.abc import Callable
from typing import Literal

import attrs

from ..._core.namespace import GLOBAL_NAMESPACE, namespace_for
from ..._protocol.exchange import Channel
from .resume import StreamTable
from .rules import SESSION_ID

__all__ = ["Session", "SessionLimitReached", "SessionStore"]


class SessionLimitReached(Exception):
    """No session can be created without ending one with calls in flight."""

    def __init__(self, limit: Literal["tenant", "server"], cap: int) -> None:
        super().__init__(f"session limit reached ({limit}: {cap})")
        self.limit: Literal["tenant", "server"] = limit
        self.cap = cap


@attrs.define(eq=False)
class Session:
    id: str
    """The secret the client presents; never logged, never part of a namespace."""
    principal: str | None
    last_seen: float
    tenant: str | None = None
    """Who the session counts against (``principal:...``, ``ip:...``)."""
    public_id: str = attrs.field(factory=lambda: secrets.token_urlsafe(12))
    """Names the session in its namespace, events and logs without revealing ``id``."""
    channel: Channel = attrs.field(factory=Channel)
    """The session's calls still running (cancelled when it ends), its
    concurrency limit and what ``initialize`` negotiated."""
    streams: StreamTable = attrs.field(factory=StreamTable)
    """Its resumable SSE streams on this worker (see :mod:`.resume`)."""
    started: float | None = attrs.field(default=None, kw_only=True)
    """When this worker created it (``None``: adopted from another worker, whose
    ``mcp.server.session.duration`` it is)."""
    namespace: str | None = attrs.field(init=False)
    """``session:<public_id>``, worked out once rather than on every POST;
    ``None`` when ``public_id`` cannot name a namespace (one read from a
    shared backend), so the caller's tenant names it instead, as
    :func:`namespace_for` would."""
    header: tuple[bytes, bytes] = attrs.field(init=False)
    """The ``Mcp-Session-Id`` response header, encoded once."""

    @namespace.default
    def _namespace(self) -> str | None:
        namespace = namespace_for(session_id=self.public_id)
        return None if namespace == GLOBAL_NAMESPACE else namespace

    @header.default
    def _header(self) -> tuple[bytes, bytes]:
        return (SESSION_HEADER, self.id.encode())

    @property
    def busy(self) -> bool:
        """It has calls in flight, so nothing but its client or shutdown may end it."""
        return bool(self.channel.exchanges)


#: ``<secret>.<tag>``: 24 random bytes (32 URL-safe characters), a dot, the store's tag.
_TAGGED_ID = re.compile(r"[A-Za-z0-9_-]{32}\.([0-9a-f]{8})")

NOT_FOUND = "Session not found"
NOT_OURS = (
    "Session not found: it was issued by another server process (another worker, or this"
    " one before a restart); without a shared backend (MCP_REDIS_URL) a session lives only"
    " in the process that created it: route each session to its worker, or initialize again"
)


SESSION_HEADER = SESSION_ID.encode()


def _positive(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1")


@attrs.define(eq=False)
class SessionStore:
    max_sessions: int = attrs.field(default=10_000, validator=_positive)
    idle_timeout: float | None = 3600.0
    max_sessions_per_tenant: int = attrs.field(default=100, validator=_positive)
    tag: str = attrs.field(factory=lambda: secrets.token_hex(4))
    """Ends every id this store issues (see the module docstring)."""
    on_end: Callable[[Session], object] | None = attrs.field(default=None, kw_only=True)
    """Called with each session that ends here, however it ends (telemetry)."""
    # Both in least-recently-used-first order.
    _sessions: OrderedDict[str, Session] = attrs.field(init=False, factory=OrderedDict)
    _tenants: dict[str | None, OrderedDict[str, Session]] = attrs.field(init=False, factory=dict)

    def __len__(self) -> int:
        return len(self._sessions)

    def tenant_count(self, tenant: str | None) -> int:
        return len(self._tenants.get(tenant, ()))

    def holds(self, session: Session) -> bool:
        """Whether *session* is one of this store's live sessions (not ended here)."""
        return self._sessions.get(session.id) is session

    def create(
        self, principal: str | None, tenant: str | None, now: float, channel: Channel
    ) -> tuple[Session, list[Session]]:
        """Issue a new session; return it and the idle sessions dropped to make room.

        Raises :class:`SessionLimitReached` when making room would end a
        session with calls in flight.
        """
        session_id = f"{secrets.token_urlsafe(24)}.{self.tag}"
        session = Session(session_id, principal, now, tenant, channel=channel, started=now)
        return session, self.adopt(session, now)

    def adopt(self, session: Session, now: float) -> list[Session]:
        """File *session* (new here, maybe created by another worker) under the same bounds.

        Returns the idle sessions dropped to make room; raises
        :class:`SessionLimitReached` like :meth:`create`.
        """
        tenant = session.tenant
        evicted: list[Session] = []
        own = self._tenants.get(tenant)
        if own is not None and len(own) >= self.max_sessions_per_tenant:
            victim = _least_recent_idle(own)
            if victim is None:
                raise SessionLimitReached("tenant", self.max_sessions_per_tenant)
            evicted.append(self._remove(victim))
        if len(self._sessions) >= self.max_sessions:
            evicted += self._expire(now)
        if len(self._sessions) >= self.max_sessions:
            victim = self._victim(tenant)
            if victim is None:
                raise SessionLimitReached("server", self.max_sessions)
            evicted.append(self._remove(victim))
        session.last_seen = now
        self._sessions[session.id] = session
        self._tenants.setdefault(tenant, OrderedDict())[session.id] = session
        return evicted

    def get(self, session_id: str, principal: str | None, now: float) -> Session | None:
        session = self._sessions.get(session_id)
        if session is None or session.principal != principal:
            return None
        timeout = self.idle_timeout  # inline: every legacy POST looks its session up
        if timeout is not None and now - session.last_seen > timeout and not session.busy:
            self._remove(session)
            return None
        session.last_seen = now
        self._sessions.move_to_end(session_id)
        self._tenants[session.tenant].move_to_end(session_id)
        return session

    def not_found(self, session_id: str, *, shared: bool) -> str:
        """The 404's message for an id :meth:`get` did not find.

        Without a shared backend (*shared* false), a well-formed id with
        another store's tag was issued by another process: say so, and why.
        """
        match = _TAGGED_ID.fullmatch(session_id)
        if shared or match is None or match[1] == self.tag:
            return NOT_FOUND
        return NOT_OURS

    def end(self, session_id: str) -> Session | None:
        session = self._sessions.get(session_id)
        return None if session is None else self._remove(session)

    def _expire(self, now: float) -> list[Session]:
        """Drop idle-expired sessions (the oldest first, stopping at the first live one)."""
        expired = []
        for session in self._sessions.values():
            if self.idle_timeout is None or now - session.last_seen <= self.idle_timeout:
                break
            if not session.busy:
                expired.append(session)
        return [self._remove(session) for session in expired]

    def _victim(self, requester: str | None) -> Session | None:
        """The least recently used idle session of the largest tenant that has one.

        The requesting tenant counts one more (the session it asks for), so
        it pays on a tie rather than the tenant that was there first.
        """
        ranked = sorted(
            self._tenants.items(),
            key=lambda item: len(item[1]) + (item[0] == requester),
            reverse=True,
        )
        for _, sessions in ranked:
            victim = _least_recent_idle(sessions)
            if victim is not None:
                return victim
        return None

    def _remove(self, session: Session) -> Session:
        # However it ends (DELETE, expiry, eviction), its subscriptions' bytes go back.
        session.channel.resource_subscriptions.clear()
        del self._sessions[session.id]
        own = self._tenants[session.tenant]
        del own[session.id]
        if not own:
            del self._tenants[session.tenant]
        if self.on_end is not None:
            self.on_end(session)
        return session


def _least_recent_idle(sessions: OrderedDict[str, Session]) -> Session | None:
    return next((session for session in sessions.values() if not session.busy), None)
