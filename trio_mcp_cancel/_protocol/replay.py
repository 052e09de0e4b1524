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

The process's own set stays authoritative for what it saw, whatever the
backend says or forgets.  When the backend *lost* its data (Redis
``FLUSHALL``, a restart without persistence), it says so for each state
sealed before the loss (the shared set is younger than the state: the
claim answers ``None``), and such a state is refused on every worker
(``-32602``, "start the request over"), so no used state runs a tool a
second time on another worker either.
"""

from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

import attrs
import trio

from .._core.ratelog import RateLimitedLog
from .._wire.jsonrpc import INVALID_PARAMS, JsonRpcError
from ..backends.base import BackendUnavailable

__all__ = ["SharedClaims", "StateEpoch", "UsedStates"]

logger = logging.getLogger("trio_mcp_cancel.server")


@runtime_checkable
class SharedClaims(Protocol):
    """A backend that can claim a key once across every process."""

    async def claim_once(self, key: str, ttl: float, issued_at: float | None = None) -> bool | None:
        """``True`` the first time *key* is claimed within *ttl* seconds, across processes.

        ``None``: the shared set lost its data after *issued_at* (when the
        state was sealed), so whether it was used cannot be told.  Raises
        :class:`~trio_mcp_cancel.backends.base.BackendUnavailable` when it cannot tell.
        """


@runtime_checkable
class StateEpoch(Protocol):
    """A :class:`SharedClaims` backend that can tell a lost used-set (Redis)."""

    async def mark_state_epoch(self) -> None:
        """Note that the shared set begins now, unless it is noted already."""


#: Seconds a worker's start waits to mark the shared set's epoch.
MARK_TIMEOUT = 2.0


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

    async def use(
        self, mac: bytes, expires_at: float, now: float, issued_at: float | None = None
    ) -> bool:
        """``True`` the first time the state named by *mac* is used, ``False`` after.

        *expires_at*, *now* and *issued_at* (when it was sealed) are on the
        signer's (wall) clock.  A state the shared set cannot vouch for (it
        lost its data after *issued_at*) is ``-32602`` here.
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
        ttl = max(1.0, expires_at - now)
        try:
            with trio.fail_after(self.shared_timeout):
                if issued_at is None:
                    claimed = await shared.claim_once(key.hex(), ttl)
                else:
                    claimed = await shared.claim_once(key.hex(), ttl, issued_at)
        except (BackendUnavailable, trio.TooSlowError):
            self._log.log(
                logging.WARNING,
                "unshared",
                "requestState: the backend is unavailable; a used state is refused on this"
                " worker only until it is back",
            )
            return True
        if claimed is None:
            self._log.log(
                logging.WARNING,
                "lost",
                "requestState: the backend lost its used-state set after this state was"
                " sealed; refused (the client starts the request over)",
            )
            raise JsonRpcError(
                INVALID_PARAMS,
                "Invalid params: requestState cannot be confirmed unused (the server's shared"
                " state was lost); start the request over without it",
            )
        return claimed

    async def mark_epoch(self) -> None:
        """At a worker's start, before it seals a state: mark when the shared set began
        (see :class:`StateEpoch`).  A backend that cannot answer is logged, not fatal:
        the first claim marks it then, refusing the states sealed before (once)."""
        shared = self.shared
        if not isinstance(shared, StateEpoch):
            return
        try:
            with trio.fail_after(MARK_TIMEOUT):
                await shared.mark_state_epoch()
        except (BackendUnavailable, trio.TooSlowError):
            logger.warning(
                "requestState: could not mark the shared used-state set's start; states"
                " sealed before the first retry may be refused once"
            )

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
