"""``requestState`` is single-use: the set of states already used, until they expire.

A sealed state (:mod:`.mrtr`) is bound to its caller, method, target and
arguments, but a bound state could still be sent again by that caller:
a retry that creates a task would create one task per copy.  So the first
retry that carries a valid state *uses* it, before any code of the server
runs, and every later one is refused with ``-32602`` ("used already")
until the state has expired (after which it is refused as expired
anyway).  A retry that fails or is cancelled after that point has spent
its state: the client starts the request over, without ``requestState``.

Each process remembers the states it saw (keyed by the token's MAC, which
names it: tokens have one spelling and carry a nonce) until they expire,
at most *max_entries* of them.  When full it forgets the oldest entry
first (logged, rate-limited): that state, if not yet expired, could then
be used once more, by its own caller with the same arguments only (the
binding still holds), which is the bounded cost of a bounded set.

With a backend that has :class:`SharedClaims` (Redis: ``SET NX`` with the
state's expiry), a state used on one worker is refused on every other.
When the backend cannot answer (or takes longer than *shared_timeout*),
the process's own set decides (local-only, logged rate-limited): an
outage never stops MRTR, and a replay across workers during it is still
bound to its caller.
"""

from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

import attrs
import trio

from .._core.ratelog import RateLimitedLog
from ..backends.base import BackendUnavailable

__all__ = ["SharedClaims", "UsedStates"]

logger = logging.getLogger("trio_mcp_cancel.server")


@runtime_checkable
class SharedClaims(Protocol):
    """A backend that can claim a key once across every process."""

    async def claim_once(self, key: str, ttl: float) -> bool:
        """``True`` the first time *key* is claimed within *ttl* seconds, across processes.

        Raises :class:`~trio_mcp_cancel.backends.base.BackendUnavailable` when it cannot tell.
        """


@attrs.define(eq=False)
class UsedStates:
    """The states used already; see the module docstring."""

    max_entries: int = 65_536
    shared: SharedClaims | None = None
    shared_timeout: float = 0.1
    """Seconds the shared claim may take before this process's own set decides alone:
    a hung backend costs an MRTR retry this much, not the backend's ``op_timeout``."""
    _used: dict[bytes, float] = attrs.field(init=False, factory=dict)
    """Key (the first 16 bytes of the token's MAC) -> expiry, oldest first."""
    _log: RateLimitedLog = attrs.field(init=False, factory=lambda: RateLimitedLog(logger))

    def __len__(self) -> int:
        return len(self._used)

    async def use(self, mac: bytes, expires_at: float, now: float) -> bool:
        """``True`` the first time the state named by *mac* is used, ``False`` after.

        *expires_at* and *now* are on the signer's (wall) clock.
        """
        key = mac[:16]
        self._forget_expired(now)
        if key in self._used:
            await trio.lowlevel.checkpoint()
            return False
        self._remember(key, expires_at)  # before awaiting: a concurrent copy here is refused
        shared = self.shared
        if shared is None:
            await trio.lowlevel.checkpoint()
            return True
        try:
            with trio.fail_after(self.shared_timeout):
                return await shared.claim_once(key.hex(), max(1.0, expires_at - now))
        except (BackendUnavailable, trio.TooSlowError):
            self._log.log(
                logging.WARNING,
                "unshared",
                "requestState: the backend is unavailable; a used state is refused on this"
                " worker only until it is back",
            )
            return True

    def _forget_expired(self, now: float) -> None:
        used = self._used
        while used:
            first = next(iter(used))
            if used[first] >= now:
                return
            del used[first]

    def _remember(self, key: bytes, expires_at: float) -> None:
        if len(self._used) >= self.max_entries:
            del self._used[next(iter(self._used))]
            self._log.log(
                logging.WARNING,
                "full",
                "requestState: %d unexpired states used; forgetting the oldest",
                self.max_entries,
            )
        self._used[key] = expires_at
