"""The cancellation registry: in-flight requests, their cancel scopes, and rows.

A request is a Trio task running inside ``async with reg.tracked(id, scope)``.
Tracking gives it a :class:`trio.CancelScope` of its own and files it under
``(scope, id)``; several tasks may track the same key (clients reuse ids, and
a retry can overlap the original), each with its own entry, so one finishing
leaves the others cancellable.

Cancelling is two-phase.  First the *polled flag* is set on every matching
request (``cancelled()`` turns true, ``checkpoint_cancelled()`` raises), so a
well-behaved tool stops by itself and can tidy up.  Then, ``grace_period``
later, the request's cancel scope is cancelled and the tool sees
``trio.Cancelled`` at its next checkpoint.  The second phase needs no timer
task: it is the cancel scope's own ``deadline``, which Trio enforces, and
which :class:`trio.testing.MockClock` can jump over in tests.

The registry is a service with one background task, the janitor, and so
lives in a nursery: ``async with open_registry() as reg`` or
``await nursery.start(reg.run)``.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from enum import Enum
from types import TracebackType
from typing import Any, Final

import attrs
import trio

from .context import _current_registry, _current_request
from .errors import CancellationLimitReached, RegistryClosed, RequestCancelled
from .events import (
    CancelKind,
    CleanupEvent,
    Event,
    EventHub,
    EvictionEvent,
    HardCancelEvent,
    LimitReachedEvent,
    RequestCancelledEvent,
)
from .scope import GLOBAL_SCOPE
from .table import CancellationTable, Key, Row
from .validation import RequestId, is_valid_request_id, sanitize_reason, validate_request_id

__all__ = [
    "USE_CONFIG",
    "CancelOutcome",
    "UseConfig",
    "Cancellation",
    "Registry",
    "RegistryConfig",
    "TrackedRequest",
    "Tracking",
    "open_registry",
]


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value >= 0:  # also refuses NaN
        raise ValueError(f"{attribute.name} must be >= 0 or None, not {value!r}")


def _positive(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{attribute.name} must be > 0 or None, not {value!r}")


@attrs.frozen(kw_only=True)
class RegistryConfig:
    """Settings of a :class:`Registry`; every one has a safe default."""

    grace_period: float | None = attrs.field(default=5.0, validator=_non_negative)
    """Seconds between the polled flag and the hard cancel.  ``0`` cancels at
    once; ``None`` never hard-cancels (the tool must poll)."""
    max_rows_per_scope: int | None = attrs.field(default=256, validator=_positive)
    """Per-scope quota of cancellation rows; the only bound that rejects."""
    max_rows: int | None = attrs.field(default=10_000, validator=_positive)
    """Global cap; reaching it evicts ``max_rows // 20`` rows.  ``None``: unbounded."""
    max_reason_length: int = attrs.field(default=256, validator=_non_negative)
    """Reasons are cut to this many characters after control characters go."""
    ttl: float = attrs.field(default=300.0, validator=_non_negative)
    """Age after which the janitor removes a cancellation row."""
    cleanup_interval: float | None = attrs.field(default=60.0, validator=_positive)
    """Seconds between janitor passes; ``None`` runs no janitor."""


class UseConfig(Enum):
    """The type of :data:`USE_CONFIG` (an enum, so type checkers know its one value)."""

    token = 0


#: Default for ``grace=`` arguments: use the registry's configured grace period.
USE_CONFIG: Final = UseConfig.token


class CancelOutcome(Enum):
    """What :meth:`Registry.notify_cancelled` did with a client's notification.

    Notifications get no response, so this is for logs, metrics and tests.
    """

    CANCELLED = "cancelled"
    """At least one in-flight request was flagged (or already was)."""
    NOT_IN_FLIGHT = "not_in_flight"
    """No such request in this scope: unknown, finished, or someone else's."""
    LIMIT_REACHED = "limit_reached"
    """The scope is at its quota; nothing was recorded."""
    INVALID_REQUEST_ID = "invalid_request_id"
    """The id was not an int or a short string."""


@attrs.frozen
class Cancellation:
    """Why and how a request was cancelled; the value behind the polled flag."""

    reason: str | None
    kind: CancelKind
    at: float


@attrs.define(eq=False, repr=False)
class TrackedRequest:
    """One tracked request: its key, its private token and its cancel scope.

    ``token`` is private: it is assigned here, never derived from or shown to
    the client, so a server-side cancellation keyed to it cannot be seen or
    cleared by another client that shares the scope and reuses the id.
    """

    request_id: RequestId
    scope: str
    token: int
    cancel_scope: trio.CancelScope
    started_at: float
    registry: Registry
    cancellation: Cancellation | None = None
    _task: weakref.ref[trio.lowlevel.Task] | None = None

    def __repr__(self) -> str:
        state = "cancelled" if self.cancellation is not None else "running"
        return f"<TrackedRequest {self.request_id!r} in {self.scope!r} {state}>"

    @property
    def cancelled(self) -> bool:
        """The polled flag."""
        return self.cancellation is not None

    @property
    def reason(self) -> str | None:
        return None if self.cancellation is None else self.cancellation.reason

    @property
    def task_alive(self) -> bool:
        """Whether the task that tracked this request can still untrack it."""
        task = None if self._task is None else self._task()
        return task is not None and getattr(task.coro, "cr_frame", True) is not None


class Tracking:
    """The ``async with`` behind :meth:`Registry.tracked`.

    A class rather than an ``@asynccontextmanager`` generator because it sits
    on every request's path: entering and leaving it is a handful of dict
    operations plus the cancel scope's own enter and exit.  Neither is a
    checkpoint (like ``open_nursery()``'s entry): tracking never blocks.
    """

    __slots__ = ("_registry", "_request", "_request_id", "_scope", "_token")

    def __init__(self, registry: Registry, request_id: RequestId, scope: str) -> None:
        self._registry = registry
        self._request_id = request_id
        self._scope = scope
        self._request: TrackedRequest | None = None

    async def __aenter__(self) -> TrackedRequest:
        if self._request is not None:
            raise RuntimeError("a tracked() block cannot be entered twice")
        request = self._request = self._registry.track(self._request_id, self._scope)
        request.cancel_scope.__enter__()
        self._token = _current_request.set(request)
        return request

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        request = self._request
        assert request is not None
        try:
            request.cancel_scope.__exit__(exc_type, exc, tb)
        finally:
            _current_request.reset(self._token)
            self._registry.untrack(request)
        if request.cancel_scope.cancelled_caught:
            # Our own scope caught its own Cancelled: the grace period ran out.
            cancellation = request.cancellation
            kind: CancelKind = "server" if cancellation is None else cancellation.kind
            self._registry.events.emit(HardCancelEvent(request.request_id, request.scope, kind))
            raise RequestCancelled(None if cancellation is None else cancellation.reason, kind)
        return False


class Registry:
    """In-flight requests and cancellation rows; see the module docstring.

    Every method is synchronous and must be called from inside ``trio.run``
    (they read Trio's clock).  None of them blocks, so none is a checkpoint.
    """

    def __init__(self, config: RegistryConfig | None = None, **overrides: Any) -> None:
        if config is None:
            config = RegistryConfig(**overrides)
        elif overrides:
            config = attrs.evolve(config, **overrides)
        self.config: Final = config
        self.events: Final = EventHub()
        self._table = CancellationTable(config.max_rows_per_scope, config.max_rows)
        # key -> {token: request}: duplicates of one key each have an entry,
        # and removing one is O(1) however many share the key.
        self._in_flight: dict[Key, dict[int, TrackedRequest]] = {}
        self._by_token: dict[int, TrackedRequest] = {}
        self._tokens = itertools.count(1)
        self._running = False
        self._idle = trio.Event()
        self._idle.set()

    # -- service -----------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running

    async def run(
        self, *, task_status: trio.TaskStatus[Registry] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the registry (its janitor) until cancelled; for ``nursery.start``."""
        if self._running:
            raise RuntimeError("this registry is already running")
        self._running = True
        try:
            task_status.started(self)
            interval = self.config.cleanup_interval
            if interval is None:
                await trio.sleep_forever()
            while True:
                await trio.sleep(interval)
                self.cleanup()
        finally:
            self._running = False

    def subscribe(self, callback: Callable[[Event], object]) -> Callable[[], None]:
        """Shorthand for ``reg.events.subscribe``."""
        return self.events.subscribe(callback)

    # -- tracking ----------------------------------------------------------

    def tracked(self, request_id: RequestId, scope: str = GLOBAL_SCOPE) -> Tracking:
        """Track ``(scope, request_id)`` for an ``async with`` block.

        Inside the block the request is current (see :func:`cancelled`).
        On exit it is untracked, in a ``finally``, however the block ends.
        When the grace period ran out and the request's cancel scope was
        cancelled, the ``trio.Cancelled`` it caught is turned into
        :class:`RequestCancelled`, so the caller cannot mistake an aborted
        request for a finished one.  Cancellation from an enclosing scope
        propagates untouched.
        """
        return Tracking(self, request_id, scope)

    def track(self, request_id: RequestId, scope: str = GLOBAL_SCOPE) -> TrackedRequest:
        """Low-level: file a request for the calling task; pair with :meth:`untrack`.

        The caller must enter ``request.cancel_scope`` itself.  A request
        whose key already holds a cancellation row (recorded by a direct
        :meth:`cancel`) starts out cancelled, with the grace period counted
        from that row's time.  A task that dies without untracking is found
        by :meth:`cleanup`.
        """
        if not self._running:
            raise RegistryClosed("the registry is not running")
        validate_request_id(request_id)
        now = trio.current_time()
        request = TrackedRequest(
            request_id,
            scope,
            next(self._tokens),
            trio.CancelScope(),
            now,
            self,
            None,
            weakref.ref(trio.lowlevel.current_task()),
        )
        key = (scope, request_id)
        siblings = self._in_flight.get(key)
        if siblings is None:
            self._in_flight[key] = {request.token: request}
        else:
            siblings[request.token] = request
        if not self._by_token and self._idle.is_set():
            self._idle = trio.Event()
        self._by_token[request.token] = request
        row = self._table.get(key)
        if row is not None:
            self._flag(
                request, Cancellation(row.reason, "client", row.at), self.config.grace_period
            )
        return request

    def untrack(self, request: TrackedRequest) -> None:
        """Remove *request*; idempotent.  Clears its key's row with the last one."""
        if self._by_token.pop(request.token, None) is None:
            return
        if not self._by_token:
            self._idle.set()
        key = (request.scope, request.request_id)
        siblings = self._in_flight[key]
        del siblings[request.token]
        if not siblings:
            del self._in_flight[key]
            # Read before write: the common, never-cancelled request finds no
            # row and writes nothing.
            if key in self._table:
                self._table.remove(key)

    async def wait_idle(self) -> None:
        """Wait until no request is in flight (for draining on shutdown, and tests).

        A checkpoint even when already idle.
        """
        await trio.lowlevel.checkpoint()
        while self._by_token:
            await self._idle.wait()

    def in_flight(self, request_id: RequestId, scope: str = GLOBAL_SCOPE) -> bool:
        """Whether some task is tracking ``(scope, request_id)`` right now."""
        return is_valid_request_id(request_id) and (scope, request_id) in self._in_flight

    def requests(self) -> list[TrackedRequest]:
        """A snapshot of every in-flight request."""
        return list(self._by_token.values())

    def request_for_token(self, token: int) -> TrackedRequest | None:
        return self._by_token.get(token)

    # -- cancelling --------------------------------------------------------

    def notify_cancelled(
        self, scope: str, request_id: object, reason: object = None
    ) -> CancelOutcome:
        """Handle a client's ``notifications/cancelled`` for *request_id* in *scope*.

        Recorded only when that request is in flight in that scope; ignored
        otherwise, as MCP permits (the request may have finished already,
        or belong to somebody else).  Never raises for bad input: the
        transport has nobody to report an error to.
        """
        if not is_valid_request_id(request_id):
            return CancelOutcome.INVALID_REQUEST_ID
        if (scope, request_id) not in self._in_flight:
            return CancelOutcome.NOT_IN_FLIGHT
        try:
            self.cancel(request_id, reason, scope)
        except CancellationLimitReached:
            return CancelOutcome.LIMIT_REACHED
        return CancelOutcome.CANCELLED

    def cancel(
        self, request_id: RequestId, reason: object = None, scope: str = GLOBAL_SCOPE
    ) -> None:
        """Record a client cancellation of ``(scope, request_id)``, in flight or not.

        In-flight requests with that key are flagged at once and
        hard-cancelled after the grace period; a request tracked later with
        the key starts out cancelled.  Idempotent: the first reason wins.

        Raises :class:`InvalidRequestId` and, when *scope* is at its quota,
        :class:`CancellationLimitReached`.  The global cap never raises.
        """
        validate_request_id(request_id)
        # Refuse a repeat or an over-quota cancel before any work on the reason:
        # a flood of them must stay cheap.
        try:
            if self._table.admit(scope, request_id) is not None:
                return
        except CancellationLimitReached:
            self.events.emit(LimitReachedEvent(request_id, scope))
            raise
        text = sanitize_reason(reason, self.config.max_reason_length)
        row, _, evicted = self._table.insert(scope, request_id, text, trio.current_time())
        if evicted:
            self.events.emit(
                EvictionEvent(len(evicted), tuple(dict.fromkeys(r.scope for r in evicted)))
            )
        cancellation = Cancellation(row.reason, "client", row.at)
        for request in self._in_flight.get((scope, request_id), {}).values():
            self._flag(request, cancellation, self.config.grace_period)
        self.events.emit(RequestCancelledEvent(request_id, scope, row.reason, "client"))

    def cancel_request(
        self,
        request: TrackedRequest | int,
        reason: object = None,
        *,
        kind: CancelKind = "server",
        grace: float | UseConfig | None = USE_CONFIG,
    ) -> bool:
        """Cancel one request from the server side: a dropped stream, a time limit.

        Keyed to the request's private token (a :class:`TrackedRequest` or
        its ``token``), never to ``(scope, id)``, so it touches exactly this
        request.  Returns ``False``, doing nothing, when it is not in flight.
        *grace* overrides the configured grace period (a transport passes its
        ``stream_cancel_timeout`` for disconnects).
        """
        if isinstance(request, TrackedRequest):
            token = request.token
        elif type(request) is int:
            token = request
        else:
            return False
        target = self._by_token.get(token)
        if target is None:
            return False
        if grace is USE_CONFIG:
            grace = self.config.grace_period
        text = sanitize_reason(reason, self.config.max_reason_length)
        first = target.cancellation is None
        self._flag(target, Cancellation(text, kind, trio.current_time()), grace)
        if first:
            self.events.emit(RequestCancelledEvent(target.request_id, target.scope, text, kind))
        return True

    def _flag(
        self, request: TrackedRequest, cancellation: Cancellation, grace: float | None
    ) -> None:
        """Set the polled flag (first cancellation wins) and arm the hard cancel."""
        if request.cancellation is None:
            request.cancellation = cancellation
        if grace is None:
            return
        deadline = cancellation.at + grace
        if deadline <= trio.current_time():
            request.cancel_scope.cancel()
        elif deadline < request.cancel_scope.deadline:
            request.cancel_scope.deadline = deadline

    # -- queries -----------------------------------------------------------

    def cancelled(self, request_id: RequestId, scope: str = GLOBAL_SCOPE) -> bool:
        """Whether ``(scope, request_id)`` has a client cancellation.

        True while a row exists, and also while a flagged request with that
        key is still running after its row was evicted or expired: a flag,
        once set, is never taken back.
        """
        return self._lookup(request_id, scope) is not None

    def reason(self, request_id: RequestId, scope: str = GLOBAL_SCOPE) -> str | None:
        """The recorded reason for ``(scope, request_id)``, or ``None``."""
        found = self._lookup(request_id, scope)
        return None if found is None else found.reason

    def _lookup(self, request_id: RequestId, scope: str) -> Row | Cancellation | None:
        if not is_valid_request_id(request_id):
            return None  # never stored, and 1.0 or True must not match the row of 1
        key = (scope, request_id)
        row = self._table.get(key)
        if row is not None:
            return row
        for request in self._in_flight.get(key, {}).values():
            if request.cancellation is not None and request.cancellation.kind == "client":
                return request.cancellation
        return None

    def clear(self, request_id: RequestId, scope: str = GLOBAL_SCOPE) -> None:
        """Remove the cancellation row of ``(scope, request_id)``; idempotent.

        Flags already set on in-flight requests stay set.
        """
        if not is_valid_request_id(request_id):
            return
        key = (scope, request_id)
        if key in self._table:
            self._table.remove(key)

    def rows(self) -> list[Row]:
        """A snapshot of the cancellation rows, oldest first."""
        return self._table.rows()

    @property
    def row_count(self) -> int:
        return len(self._table)

    @property
    def in_flight_count(self) -> int:
        return len(self._by_token)

    def scope_row_count(self, scope: str) -> int:
        return self._table.scope_size(scope)

    # -- housekeeping ------------------------------------------------------

    def cleanup(self, ttl: float | None = None) -> int:
        """Remove rows older than *ttl* (default: the configured TTL) and the
        in-flight entries of tasks that died without untracking.

        Returns the number of rows removed and emits ``cancellation.cleanup``
        with both counts.
        """
        if ttl is None:
            ttl = self.config.ttl
        removed = len(self._table.expire(trio.current_time() - ttl))
        dead = [request for request in self._by_token.values() if not request.task_alive]
        for request in dead:
            self.untrack(request)
        self.events.emit(CleanupEvent(removed, len(dead)))
        return removed


@asynccontextmanager
async def open_registry(
    config: RegistryConfig | None = None, **overrides: Any
) -> AsyncIterator[Registry]:
    """Run a :class:`Registry` in a nursery of its own for the ``async with`` block.

    Inside the block (and in tasks started from it) the registry is the
    current one, so ``tracked(request)`` needs no ``registry=``.  Leaving
    the block stops the janitor; it does not cancel tracked requests, which
    belong to their own tasks.
    """
    registry = Registry(config, **overrides)
    async with trio.open_nursery() as nursery:
        await nursery.start(registry.run)
        token = _current_registry.set(registry)
        try:
            yield registry
        finally:
            _current_registry.reset(token)
            nursery.cancel_scope.cancel()
