"""A circuit breaker for the shared backend: a sans-IO state machine, the clock injected.

Why: with the backend down or hung, every request that touches it would
wait out a timeout (a hung Redis answers nothing, so each call costs the
whole timeout).  After a failure the breaker *opens*: calls on the request
path skip the backend at once and fall back to what a single process can do
(its local quota, a local-only session...).  It lets a *probe* through once
the retry delay has passed; the delay starts at *base_delay* and doubles
with each failed probe up to *max_delay*; any success closes it.

Only the transitions matter to the caller: :meth:`failure` says whether it
opened the breaker and :meth:`success` whether it closed it, so an outage
is reported once when it starts and once when it ends.  A failure that is
not a probe while the breaker is already open (a call that was in flight
when the backend went away) changes nothing: a burst of those must not push
the next probe out to *max_delay*.

No I/O and no Trio here: the owner decides what a probe is and when to
send one (the Redis backend's heartbeat wakes at :attr:`Breaker.retry_at`),
and tests drive it with a fake clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs

__all__ = ["Breaker"]


@attrs.define(eq=False)
class Breaker:
    """Closed (calls go through) or open (calls are skipped until a probe succeeds)."""

    clock: Callable[[], float]
    """Monotonic seconds (Trio's clock in the backend, a fake one in tests)."""
    base_delay: float = 0.5
    """Seconds from opening to the first probe."""
    max_delay: float = 30.0
    """The longest pause between probes, however long the outage."""
    _open: bool = attrs.field(init=False, default=False)
    _failed_probes: int = attrs.field(init=False, default=0)
    _retry_at: float = attrs.field(init=False, default=-math.inf)
    _probing: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        if not 0 < self.base_delay <= self.max_delay:
            raise ValueError("the breaker needs 0 < base_delay <= max_delay")

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def retry_at(self) -> float:
        """When the next probe is due (on :attr:`clock`); ``-inf`` while closed."""
        return self._retry_at if self._open else -math.inf

    @property
    def delay(self) -> float:
        """The pause before the next probe after the failed probes so far."""
        return min(self.max_delay, self.base_delay * 2.0 ** min(self._failed_probes, 64))

    def allow(self) -> bool:
        """Whether an ordinary call may go to the backend now (the breaker is closed)."""
        return not self._open

    def try_probe(self) -> bool:
        """Whether to let one call through as the probe now (open, due, none in flight).

        The caller then reports its outcome with ``probe=True``.
        """
        if not self._open or self._probing or self.clock() < self._retry_at:
            return False
        self._probing = True
        return True

    def failure(self, *, probe: bool = False) -> bool:
        """A call failed or timed out; ``True`` when this opened the breaker."""
        if not self._open:
            self._open = True
            self._failed_probes = 0
            self._probing = False
            self._retry_at = self.clock() + self.delay
            return True
        if probe:
            self._failed_probes += 1
            self._probing = False
            self._retry_at = self.clock() + self.delay
        return False

    def success(self) -> bool:
        """A call succeeded: the backend answers; ``True`` when this closed the breaker."""
        was_open = self._open
        self._open = False
        self._failed_probes = 0
        self._probing = False
        self._retry_at = -math.inf
        return was_open
