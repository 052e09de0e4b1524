"""MCP sessions for the HTTP transport: issue, look up, expire, end.

A session id is a credential: it is unguessable (``secrets``), bound to the
principal that created it (presented by another principal it is "unknown",
404, never shared), and never shown; the ``session:`` namespace uses the
session's separate ``public_id``.  Each session is a legacy-era
:class:`Channel`.  The store
is bounded: past ``max_sessions`` the least recently used session is
dropped, and sessions idle for ``idle_timeout`` expire when next looked at.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict

import attrs

from ..._protocol.dispatch import Channel

__all__ = ["Session", "SessionStore"]


@attrs.define(eq=False)
class Session:
    id: str
    """The secret the client presents; never logged, never part of a namespace."""
    principal: str | None
    last_seen: float
    public_id: str = attrs.field(factory=lambda: secrets.token_urlsafe(12))
    """Names the session in its namespace, events and logs without revealing ``id``."""
    channel: Channel = attrs.field(factory=Channel)
    """The session's calls still running (cancelled when it ends), its
    concurrency limit and what ``initialize`` negotiated."""


@attrs.define(eq=False)
class SessionStore:
    max_sessions: int = 10_000
    idle_timeout: float | None = 3600.0
    _sessions: OrderedDict[str, Session] = attrs.field(init=False, factory=OrderedDict)

    def __len__(self) -> int:
        return len(self._sessions)

    def create(
        self, principal: str | None, now: float, channel: Channel
    ) -> tuple[Session, list[Session]]:
        """Issue a new session; return it and any sessions evicted to make room."""
        evicted: list[Session] = []
        while len(self._sessions) >= self.max_sessions:
            evicted.append(self._sessions.popitem(last=False)[1])
        session = Session(secrets.token_urlsafe(24), principal, now, channel=channel)
        self._sessions[session.id] = session
        return session, evicted

    def get(self, session_id: str, principal: str | None, now: float) -> Session | None:
        session = self._sessions.get(session_id)
        if session is None or session.principal != principal:
            return None
        if self.idle_timeout is not None and now - session.last_seen > self.idle_timeout:
            del self._sessions[session_id]
            return None
        session.last_seen = now
        self._sessions.move_to_end(session_id)
        return session

    def end(self, session_id: str) -> Session | None:
        return self._sessions.pop(session_id, None)
