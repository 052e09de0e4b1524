"""Telemetry-style events: what the registry did, for metrics and audit logs.

Events are delivered synchronously, in the task that caused them, to
callbacks and to Trio memory channels, and are also written to the
``trio_mcp_cancel`` logger.  Delivery never blocks and never spawns a task:
a full channel drops the event (and counts the drop) rather than stall a
request, and a callback that raises is detached and logged, the way
``:telemetry`` detaches a failing handler, so one broken subscriber cannot
break cancellation for everybody.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import ClassVar, Literal, TypeAlias

import attrs
import trio

from .validation import RequestId

__all__ = [
    "BackendEvent",
    "CancelKind",
    "CleanupEvent",
    "Event",
    "EventHub",
    "EvictionEvent",
    "HardCancelEvent",
    "LimitReachedEvent",
    "OverrunEvent",
    "RequestCancelledEvent",
    "RequestStoppedEvent",
    "ThreadAbandonedEvent",
    "attach_events",
]

logger = logging.getLogger("trio_mcp_cancel")

#: Who cancelled: the client's ``notifications/cancelled`` (or a direct
#: :meth:`Registry.notify_cancelled`), the server itself, or a dropped stream.
CancelKind = Literal["client", "server", "disconnect"]


@attrs.frozen
class RequestCancelledEvent:
    """``request.cancelled``: a cancellation was recorded for a request."""

    name: ClassVar[str] = "request.cancelled"
    request_id: RequestId
    namespace: str
    reason: str | None
    kind: CancelKind


@attrs.frozen
class HardCancelEvent:
    """``request.hard_cancelled``: the grace period ran out and the request's
    cancel scope was cancelled under it."""

    name: ClassVar[str] = "request.hard_cancelled"
    request_id: RequestId
    namespace: str
    kind: CancelKind


@attrs.frozen
class RequestStoppedEvent:
    """``request.stopped``: a cancelled request has stopped; how long it took.

    The one event per cancelled request that says how the cancellation
    ended, so it is the one logged at INFO (as a readable line) while
    ``request.cancelled`` and ``request.hard_cancelled`` are logged at DEBUG.
    """

    name: ClassVar[str] = "request.stopped"
    request_id: RequestId
    namespace: str
    kind: CancelKind
    reason: str | None
    after: float
    """Seconds from the cancellation (the polled flag) to the request's end."""
    hard: bool
    """Whether it ran until its hard cancel (the grace period ran out) or past it."""

    def describe(self) -> str:
        """One readable line: which request, who cancelled it and why, how it stopped."""
        by = {"client": "by the client", "server": "by the server", "disconnect": "on disconnect"}
        reason = "no reason given" if self.reason is None else repr(self.reason)
        how = "hard-cancelled" if self.hard else "stopped"
        return (
            f"request {self.request_id!r} in {self.namespace} cancelled {by[self.kind]}"
            f" ({reason}): {how} {self.after:.3f} s after the flag"
        )


@attrs.frozen
class OverrunEvent:
    """``request.overran``: a request is still running ``late_by`` seconds after
    its hard cancel was due.

    The tool shields itself from cancellation (``CancelScope(shield=True)``)
    or runs blocking code that never reaches a checkpoint: Trio semantics,
    but the client's cancellation is not taking effect, so it is reported
    (once per request) rather than left to look like a slow tool.
    """

    name: ClassVar[str] = "request.overran"
    request_id: RequestId
    namespace: str
    kind: CancelKind
    late_by: float


@attrs.frozen
class ThreadAbandonedEvent:
    """``thread.abandoned``: a request was hard-cancelled while its worker thread ran.

    The request ended on time (``abandon_on_cancel``), but Python cannot stop
    a thread: it keeps running until its function returns, holding its CPU,
    memory and slot in the thread limiter.  A sync tool that never looks at
    the flag shows up here.  ``request_id`` and ``namespace`` are ``None``
    for a thread run outside a tracked request.
    """

    name: ClassVar[str] = "thread.abandoned"
    request_id: RequestId | None
    namespace: str | None
    kind: CancelKind
    thread: str
    """The worker thread's name (it names the function)."""


@attrs.frozen
class LimitReachedEvent:
    """``cancellation.limit_reached``: a namespace's quota refused a row."""

    name: ClassVar[str] = "cancellation.limit_reached"
    request_id: RequestId
    namespace: str


@attrs.frozen
class EvictionEvent:
    """``cancellation.evicted``: the global cap evicted a batch of rows."""

    name: ClassVar[str] = "cancellation.evicted"
    evicted: int
    namespaces: tuple[str, ...]


@attrs.frozen
class CleanupEvent:
    """``cancellation.cleanup``: one pass of :meth:`Registry.cleanup`."""

    name: ClassVar[str] = "cancellation.cleanup"
    removed: int
    in_flight_removed: int


@attrs.frozen
class BackendEvent:
    """``backend.unavailable`` / ``backend.recovered``: the shared backend went away or came back.

    While it is away, requests keep running and local cancellation keeps
    working; cross-process operations fail with a clear error.
    """

    name: str
    operation: str
    """What failed (``"publish"``, ``"tasks.get"``, ``"subscribe"``...), or recovered."""
    detail: str


Event: TypeAlias = (
    BackendEvent
    | RequestCancelledEvent
    | RequestStoppedEvent
    | HardCancelEvent
    | OverrunEvent
    | ThreadAbandonedEvent
    | LimitReachedEvent
    | EvictionEvent
    | CleanupEvent
)
Subscriber = Callable[[Event], object]

_LOG_BURST = 10

_LOG_LEVELS: dict[str, int] = {
    # One INFO line per cancelled request, when it stops (it carries kind, reason
    # and how long stopping took); the steps on the way are DEBUG.
    RequestCancelledEvent.name: logging.DEBUG,
    HardCancelEvent.name: logging.DEBUG,
    RequestStoppedEvent.name: logging.INFO,
    OverrunEvent.name: logging.WARNING,
    ThreadAbandonedEvent.name: logging.WARNING,
    LimitReachedEvent.name: logging.WARNING,
    EvictionEvent.name: logging.WARNING,
    CleanupEvent.name: logging.DEBUG,
    "backend.unavailable": logging.WARNING,
    "backend.recovered": logging.INFO,
}


@attrs.define(eq=False)
class EventHub:
    """Fan-out of events to callbacks, memory channels and :mod:`logging`."""

    _callbacks: list[Subscriber] = attrs.field(init=False, factory=list)
    _channels: list[trio.MemorySendChannel[Event]] = attrs.field(init=False, factory=list)
    dropped: int = attrs.field(init=False, default=0)
    """Events a full channel could not take."""
    # name -> [window start, lines logged in it, lines suppressed in it]
    _log_windows: dict[str, list[float]] = attrs.field(init=False, factory=dict)
    _forwards: int = attrs.field(init=False, default=0)
    """Hubs this one forwards to (:func:`attach_events`); they log its events instead."""

    def _log_allowed(self, name: str, level: int) -> bool:
        """Rate-limit warnings a client can trigger at will (a refused flood).

        Subscribers still get every event; only the log is thinned, to
        ``_LOG_BURST`` lines per event name per second, plus one line saying
        how many were suppressed.
        """
        if level < logging.WARNING:
            return True
        now = time.monotonic()
        window = self._log_windows.setdefault(name, [now, 0, 0])
        if now - window[0] >= 1.0:
            if window[2]:
                logger.warning("%s: %d similar lines suppressed", name, int(window[2]))
            window[:] = [now, 0, 0]
        if window[1] < _LOG_BURST:
            window[1] += 1
            return True
        window[2] += 1
        return False

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call *callback* with every event; return a function that unsubscribes."""
        self._callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return unsubscribe

    def open_channel(self, max_buffer_size: float = 1000) -> trio.MemoryReceiveChannel[Event]:
        """Return a receive channel that gets every event from now on.

        Close the receive side when done; the hub notices on the next event
        and forgets the channel.  ``max_buffer_size`` may be ``math.inf``,
        at the cost of unbounded memory if nobody reads.
        """
        if max_buffer_size != math.inf:
            max_buffer_size = int(max_buffer_size)
        send, receive = trio.open_memory_channel[Event](max_buffer_size)
        self._channels.append(send)
        return receive

    def emit(self, event: Event) -> None:
        level = _LOG_LEVELS[event.name]
        if (
            not self._forwards
            and logger.isEnabledFor(level)
            and self._log_allowed(event.name, level)
        ):
            if isinstance(event, EvictionEvent):
                logger.log(
                    level,
                    "%s %d rows from %d namespaces, largest first: %r",
                    event.name,
                    event.evicted,
                    len(event.namespaces),
                    event.namespaces[:5],
                )
            elif isinstance(event, RequestStoppedEvent):
                logger.log(level, "%s", event.describe())
            else:
                logger.log(level, "%s %r", event.name, event)
        for callback in list(self._callbacks):
            try:
                callback(event)
            except Exception:
                logger.exception("event subscriber %r raised; detaching it", callback)
                self._callbacks.remove(callback)
        for channel in list(self._channels):
            try:
                channel.send_nowait(event)
            except trio.WouldBlock:
                self.dropped += 1
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._channels.remove(channel)


def attach_events(source: EventHub, target: EventHub) -> Callable[[], None]:
    """Forward every event of *source* to *target* until the returned function is called.

    A component with a hub of its own (a backend, created before any
    registry exists) is attached to a registry's hub this way, so one
    ``registry.events.subscribe`` sees everything.  While attached, *target* logs
    the events and *source* does not, so each is logged once; subscribers of
    *source* still get them.
    """
    unsubscribe = source.subscribe(target.emit)
    source._forwards += 1
    attached = True

    def detach() -> None:
        nonlocal attached
        if attached:
            attached = False
            unsubscribe()
            source._forwards -= 1

    return detach
