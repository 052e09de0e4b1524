"""A circuit breaker for the shared backend: a sans-IO state machine, the clock injected.

Why: with the backend down or hung, every request that touches it would
wait out a timeout (a hung Redis answers nothing, so each call costs the
whole timeout).  After a failure the breaker *opens*: calls on the request
path skip the backend at once and fall back to what a single process can do
(its local quota, a session it knows...).  It lets a *probe* through once
the retry delay has passed; the delay starts at *base_delay* and doubles
with each failed probe up to *max_delay*.

**Hysteresis.**  A backend that is slow rather than down (its round trip
near the request path's timeout) or that fails now and then must not make
the breaker flap, each flap costing a failed request and two log lines.
So a probe that succeeds only makes the breaker *half-open*: calls are
still skipped, and the next probe is due at once; it closes after
*close_after* probes in a row succeed, and any failed probe re-opens it
with the next, longer delay.  A breaker that opens again within
*max_delay* seconds of closing keeps its escalation (the delay goes on
growing, up to *max_delay*) instead of starting again from *base_delay*;
only a backend that stayed healthy that long starts from the base again.

Only the transitions matter to the caller: :meth:`failure` says whether it
opened the breaker and :meth:`success` whether it closed it, so an outage
is reported once when it starts and once when it ends.  A failure that is
not a probe while the breaker is already open (a call that was in flight
when the backend went away) changes nothing: a burst of those must not push
the next probe out to *max_delay*; a success that is not a probe (a call
in flight since before it opened) does not count toward closing.

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
    """Closed (calls go through), open, or half-open (both skip calls; probes decide)."""

    clock: Callable[[], float]
    """Monotonic seconds (Trio's clock in the backend, a fake one in tests)."""
    base_delay: float = 0.5
    """Seconds from opening to the first probe."""
    max_delay: float = 30.0
    """The longest pause between probes, however long the outage; also how long
    the breaker must stay closed before a new outage starts from *base_delay*."""
    close_after: int = 3
    """Probes in a row that must succeed to close it (half-open until then)."""
    _open: bool = attrs.field(init=False, default=False)
    _level: int = attrs.field(init=False, default=0)
    """Doublings of *base_delay* in the current delay (failed probes, and flaps)."""
    _successes: int = attrs.field(init=False, default=0)
    """Probes in a row that succeeded since the last failure (half-open when > 0)."""
    _retry_at: float = attrs.field(init=False, default=-math.inf)
    _probing: bool = attrs.field(init=False, default=False)
    _closed_at: float = attrs.field(init=False, default=-math.inf)

    def __attrs_post_init__(self) -> None:
        if not 0 < self.base_delay <= self.max_delay:
            raise ValueError("the breaker needs 0 < base_delay <= max_delay")
        if self.close_after < 1:
            raise ValueError("the breaker needs close_after >= 1")

    @property
    def is_open(self) -> bool:
        """Whether calls are skipped (open or half-open)."""
        return self._open

    @property
    def half_open(self) -> bool:
        """Open, but the last probe(s) succeeded: more must before it closes."""
        return self._open and self._successes > 0

    @property
    def retry_at(self) -> float:
        """When the next probe is due (on :attr:`clock`); ``-inf`` while closed."""
        return self._retry_at if self._open else -math.inf

    @property
    def delay(self) -> float:
        """The pause before the next probe after a failure at the current level."""
        return min(self.max_delay, self.base_delay * 2.0 ** min(self._level, 64))

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
        now = self.clock()
        if not self._open:
            # Opening again soon after closing is a flap: keep escalating.
            self._level = self._level + 1 if now - self._closed_at < self.max_delay else 0
            self._open = True
            self._successes = 0
            self._probing = False
            self._retry_at = now + self.delay
            return True
        if probe:
            self._level += 1
            self._successes = 0
            self._probing = False
            self._retry_at = now + self.delay
        return False

    def success(self, *, probe: bool = False) -> bool:
        """A call succeeded; ``True`` when this closed the breaker.

        While open only a probe counts: *close_after* in a row close it.
        """
        if not self._open:
            return False
        if not probe:
            return False  # in flight since before it opened: proves nothing now
        self._probing = False
        self._successes += 1
        if self._successes < self.close_after:
            self._retry_at = self.clock()  # half-open: the next probe is due at once
            return False
        self._open = False
        self._successes = 0
        self._retry_at = -math.inf
        self._closed_at = self.clock()
        return True
