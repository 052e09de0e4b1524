"""A server's shutdown, the same on every transport: flag what runs, answer it, in time.

What stdio does on a signal, HTTP (``McpHttpApp.begin_shutdown``) and
WebSocket (``serve_mcp_websocket(shutdown=...)``) do through this one
piece: every call in flight is cancelled with kind ``"server"`` and the
reason :data:`SHUTDOWN_REASON` (its client reads it in the ``-32800``),
hard-cancelled at one deadline for all, so that its answer is written
while the connection is still open, and the shutdown is logged.  The
transport decides how calls are found (an exchange set, a hook per
connection) and how connections close.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Final

import attrs
import trio

from .._protocol.exchange import Exchange
from .._protocol.extension import Extension

__all__ = ["SHUTDOWN_REASON", "Shutdown"]

logger = logging.getLogger("trio_mcp_cancel.shutdown")

#: The reason of a shutdown's cancel, as stdio gives it: the client reads it in ``-32800``.
SHUTDOWN_REASON: Final = "server shutting down"


def _nothing() -> None:
    pass


@attrs.define(eq=False)
class Shutdown:
    """The cancellable calls of one server in flight, and the shutdown that cancels them."""

    log: logging.Logger = logger
    """Where the shutdown's summary line goes (the transport's logger)."""
    at: float | None = None
    """Set by :meth:`begin`: when calls still running are hard-cancelled
    (``math.inf``: never); ``None`` while not shutting down."""
    in_flight: set[Exchange] = attrs.field(factory=set)
    """The exchanges of the cancellable calls running now (HTTP: ``Responder._stream``
    keeps it; a message connection registers a hook instead, see :meth:`on_begin`)."""
    _hooks: set[Callable[[], object]] = attrs.field(factory=set)
    """What else ends at shutdown (an open GET stream's end), called once."""

    def begin(
        self,
        grace: float | None,
        within: float | None = None,
        extensions: Sequence[Extension] = (),
    ) -> int:
        """Flag every call in flight, and every later one; how many ran.

        What stdio does on a signal: each call's polled flag is set at once
        (kind ``"server"``, reason ``"server shutting down"``), so a tool that
        polls stops and tidies up, and its client is answered ``-32800`` with
        the reason (a call that finishes anyway answers its result); each is
        logged when it stops.  One still running after *grace* seconds
        (``None``: never), or after *within* if that is sooner, is
        hard-cancelled, so that its answer is written before the server
        closes the connection: one deadline for all, so a call that starts
        during the shutdown gets no more time than one that was running.
        The work *extensions* run (those whose services the app runs) is
        flagged the same way (the Tasks extension's tasks settle ``failed``,
        "server shutting down"); open
        GET streams end (their client sees the response finish).
        """
        if within is not None:
            grace = within if grace is None else min(grace, max(0.0, within))
        first = self.at is None
        self.at = math.inf if grace is None else trio.current_time() + grace
        running = list(self.in_flight)
        for exchange in running:
            self.flag(exchange)
        stopping = sum(e.shutdown(SHUTDOWN_REASON, grace_period=grace) for e in extensions)
        if first:
            hooks, self._hooks = self._hooks, set()
            for hook in hooks:
                hook()
        self.log.info(
            "shutting down: %d call(s) and %d task(s) in flight cancelled (kind server)%s",
            len(running),
            stopping,
            "" if grace is None else f", hard-cancelled in {grace:g}s if still running",
        )
        return len(running)

    def flag(self, exchange: Exchange) -> None:
        """Cancel *exchange*'s call for the shutdown (it has begun), by its deadline."""
        at = self.at
        assert at is not None
        grace = None if at == math.inf else max(0.0, at - trio.current_time())
        exchange.cancel(SHUTDOWN_REASON, kind="server", grace_period=grace)

    def on_begin(self, hook: Callable[[], object]) -> Callable[[], None]:
        """Call *hook* once when the shutdown begins (at once if it has); returns
        the function that forgets it (for an open stream that ended first)."""
        if self.at is not None:
            hook()
            return _nothing
        self._hooks.add(hook)
        return partial(self._hooks.discard, hook)
