"""The cancellation registry: in-flight requests, their cancel namespaces, and rows.

A request is a Trio task running inside ``async with tracked(id, namespace)``.
Tracking gives it a :class:`trio.CancelScope` of its own and files it under
``(namespace, id)``; several tasks may track the same key (clients reuse ids, and
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

import heapq
import itertools
import math
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from contextvars import ContextVar
from enum import Enum
from types import TracebackType
from typing import Any, Final

import attrs
import trio

from .context import RequestLike, current_request_var
from .errors import CancellationLimitReached, NoRegistry, RegistryClosed, RequestCancelled
from .events import (
    CancelKind,
    CleanupEvent,
    EventHub,
    EvictionEvent,
    HardCancelEvent,
    LimitReachedEvent,
    OverrunEvent,
    RequestCancelledEvent,
    RequestStoppedEvent,
)
from .namespace import GLOBAL_NAMESPACE, is_private
from .request import Cancellation, TrackedRequest, set_flag
from .table import CancellationTable, DueCancels, Key, Row
from .validation import (
    RequestId,
    ValidRequestId,
    is_valid_request_id,
    sanitize_reason,
    validate_request_id,
)

__all__ = [
    "current_registry",
    "track",
    "tracked",
    "untrack",
    "USE_CONFIG",
    "CancelOutcome",
    "UseConfig",
    "Registry",
    "RegistryConfig",
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
    max_rows_per_namespace: int | None = attrs.field(default=256, validator=_positive)
    """Per-namespace quota of cancellation rows; the only bound that rejects."""
    max_rows: int | None = attrs.field(default=10_000, validator=_positive)
    """Global cap; reaching it evicts ``max_rows // 20`` rows.  ``None``: unbounded."""
    max_reason_length: int = attrs.field(default=256, validator=_non_negative)
    """Reasons are cut to this many characters after control characters go."""
    ttl: float = attrs.field(default=300.0, validator=_non_negative)
    """Age after which the janitor removes a cancellation row."""
    cleanup_interval: float | None = attrs.field(default=60.0, validator=_positive)
    """Seconds between janitor passes; ``None`` runs no janitor."""
    early_cancel_ttl: float | None = attrs.field(default=5.0, validator=_non_negative)
    """Seconds a client's cancel of a request that has not started yet is kept
    (legacy HTTP: the cancel's POST can overtake the call's), in session and
    principal namespaces only; ``None``: such cancels are ignored."""
    overrun_margin: float | None = attrs.field(default=1.0, validator=_non_negative)
    """Seconds a request may outlive its hard cancel before a
    ``request.overran`` event (and a warning) reports it: a tool that shields
    itself, or blocks without a checkpoint.  ``None``: no such check."""


class UseConfig(Enum):
    """The type of :data:`USE_CONFIG` (an enum, so type checkers know its one value)."""

    token = 0


#: Default for ``grace_period=`` overrides: use the registry's configured ``grace_period``.
USE_CONFIG: Final = UseConfig.token


class CancelOutcome(Enum):
    """What :meth:`Registry.notify_cancelled` did with a client's notification.

    Notifications get no response, so this is for logs, metrics and tests.
    """

    CANCELLED = "cancelled"
    """At least one in-flight request was flagged (or already was)."""
    NOT_IN_FLIGHT = "not_in_flight"
    """No such request in this namespace: unknown, finished, or someone else's."""
    LIMIT_REACHED = "limit_reached"
    """The namespace is at its quota; nothing was recorded."""
    INVALID_REQUEST_ID = "invalid_request_id"
    """The id was not an int or a short string."""
    PENDING = "pending"
    """Not in flight yet: kept for ``early_cancel_ttl``, applied if it starts."""


class Tracking:
    """The ``async with`` that :func:`tracked` returns.

    Low-level: ``Tracking(registry, request_id, namespace)`` built directly is
    :func:`tracked` for an id that was checked once already, at the edge (the
    dispatcher's, by ``jsonrpc.classify``: *request_id* is a
    :data:`ValidRequestId`, not checked again); anyone else uses :func:`tracked`.

    A class rather than an ``@asynccontextmanager`` generator because it sits
    on every request's path: entering and leaving it is a handful of dict
    operations plus the cancel scope's own enter and exit.  Neither is a
    checkpoint (like ``open_nursery()``'s entry): tracking never blocks.
    """

    __slots__ = ("_namespace", "_registry", "_request", "_request_id", "_token")

    def __init__(self, registry: Registry, request_id: ValidRequestId, namespace: str) -> None:
        self._registry = registry
        self._request_id = request_id
        self._namespace = namespace
        self._request: TrackedRequest | None = None

    async def __aenter__(self) -> TrackedRequest:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self.__exit__(exc_type, exc, tb)
        return False

    # The work of both is synchronous (tracking never blocks): the dispatcher,
    # on every call's path, uses it as a plain ``with`` and saves the two
    # coroutines an ``async with`` makes.

    def __enter__(self) -> TrackedRequest:
        if self._request is not None:
            raise RuntimeError("a tracked() block cannot be entered twice")
        request = self._request = self._registry._track(self._request_id, self._namespace)
        request.cancel_scope.__enter__()
        self._token = current_request_var.set(request)
        return request

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        request = self._request
        assert request is not None
        try:
            request.cancel_scope.__exit__(exc_type, exc, tb)
        finally:
            current_request_var.reset(self._token)
            cancellation = request.cancellation
            if request.cancel_scope.cancelled_caught:
                # Our own scope caught its own Cancelled: the grace period ran out.
                # Reported before _untrack()'s request.stopped, in the order it happened.
                kind: CancelKind = "server" if cancellation is None else cancellation.kind
                self._registry.events.emit(
                    HardCancelEvent(request.request_id, request.namespace, kind)
                )
            self._registry._untrack(request)
        if request.cancel_scope.cancelled_caught:
            raise RequestCancelled(None if cancellation is None else cancellation.reason, kind)
        if exc is None and cancellation is not None and trio.current_time() > request.hard_deadline:
            # The block ran past its hard cancel without seeing it (a shield,
            # or no checkpoint): it was cancelled, whatever it returned.
            raise RequestCancelled(cancellation.reason, cancellation.kind)


def _siblings(
    in_flight: dict[Key, TrackedRequest | dict[int, TrackedRequest]], key: Key
) -> Collection[TrackedRequest]:
    """The requests in flight under *key* (usually one, or none)."""
    entry = in_flight.get(key)
    if entry is None:
        return ()
    if type(entry) is dict:
        return entry.values()
    assert type(entry) is TrackedRequest
    return (entry,)


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
        """The one place to watch events: ``registry.events.subscribe(callback)``
        or ``registry.events.open_channel()`` (a backend's ``events`` alike)."""
        self._table = CancellationTable(config.max_rows_per_namespace, config.max_rows)
        # key -> its request, or {token: request} when duplicates share the key
        # (each has an entry, and removing one is O(1) however many there are).
        # Invariant: a dict here is never empty.  The common case, one request
        # per key, holds no dict of its own: an in-flight call's memory.
        self._in_flight: dict[Key, TrackedRequest | dict[int, TrackedRequest]] = {}
        self._by_token: dict[int, TrackedRequest] = {}
        self._tokens = itertools.count(1)
        # key -> (expires at, row seq) of cancels kept for requests not yet
        # started, in expiry order.
        self._early: OrderedDict[Key, tuple[float, int]] = OrderedDict()
        self._running = False
        # Made by wait_idle only, and set (and dropped) when the last request
        # leaves: a request on its own never creates or sets an Event.
        self._idle: trio.Event | None = None
        # (hard deadline + margin, token) of requests to check for overrun.
        self._overrun_checks: list[tuple[float, int]] = []
        self._due = DueCancels()  # server cancels due later (cancel_at)
        self._wake: trio.CancelScope | None = None

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
            next_cleanup = math.inf if interval is None else trio.current_time() + interval
            while True:
                checks = self._overrun_checks
                first_check = checks[0][0] if checks else math.inf
                with trio.CancelScope(
                    deadline=min(next_cleanup, first_check, self._due.next_at)
                ) as self._wake:
                    await trio.sleep_forever()
                self._wake = None
                now = trio.current_time()
                self._check_overruns(now)
                for token, reason in self._due.pop_due(now):
                    self.cancel_request(token, reason, kind="server")
                if interval is not None and now >= next_cleanup:
                    self.cleanup()
                    next_cleanup = now + interval
        finally:
            self._running = False
            self._wake = None

    def _check_overruns(self, now: float) -> None:
        """Report requests still running ``overrun_margin`` past their hard cancel."""
        margin = self.config.overrun_margin
        checks = self._overrun_checks
        while checks and checks[0][0] <= now:
            _, token = heapq.heappop(checks)
            request = self._by_token.get(token)
            if request is None or request.overran or margin is None:
                continue
            late_by = now - request.hard_deadline
            if late_by < margin:
                continue  # re-armed later by a second cancellation
            request.overran = True
            kind: CancelKind = request.cancellation.kind if request.cancellation else "server"
            self.events.emit(OverrunEvent(request.request_id, request.namespace, kind, late_by))

    def cancel_at(self, request: TrackedRequest, at: float, reason: str) -> None:
        """Cancel *request* server-side at *at* (Trio time), as :meth:`cancel_request` would then.

        A time limit: the polled flag is set at *at* and the hard cancel follows
        the grace period later, both phases as for any server cancel.  No task
        of its own: the janitor wakes for it (so ``MockClock`` jumps to it), and
        nothing is kept once the request has left.  A later call for the same
        request keeps the earlier time.
        """
        if request.token in self._by_token and self._due.add(request.token, at, reason):
            if self._wake is not None and at < self._wake.deadline:
                self._wake.deadline = at

    # -- tracking ----------------------------------------------------------

    def _track(self, request_id: ValidRequestId, namespace: str) -> TrackedRequest:
        if not self._running:
            raise RegistryClosed("the registry is not running")
        now = trio.current_time()
        request = TrackedRequest(
            request_id,
            namespace,
            next(self._tokens),
            trio.CancelScope(),
            now,
            None,
            weakref.ref(trio.lowlevel.current_task()),
            events=self.events,
        )
        key = (namespace, request_id)
        early = None
        if self._early:  # before the key is in flight, so expired ones can go
            self._expire_early(now)
            early = self._early.pop(key, None)
        entry = self._in_flight.get(key)
        if entry is None:
            self._in_flight[key] = request
        elif type(entry) is dict:
            entry[request.token] = request
        else:
            assert type(entry) is TrackedRequest
            self._in_flight[key] = {entry.token: entry, request.token: request}
        self._by_token[request.token] = request
        row = self._table.rows_by_key.get(key)
        if row is not None:
            self._flag(
                request, Cancellation(row.reason, "client", row.at), self.config.grace_period
            )
            if early is not None:  # announced now that it cancels something
                self.events.emit(RequestCancelledEvent(request_id, namespace, row.reason, "client"))
        return request

    def _untrack(self, request: TrackedRequest) -> None:
        """:func:`untrack`: remove *request*; idempotent.  Clears its key's row
        with the last one.  A cancelled request reports how it stopped
        (``request.stopped``)."""
        if self._by_token.pop(request.token, None) is None:
            return
        if self._due.due:
            self._due.discard(request.token)
        cancellation = request.cancellation
        if cancellation is not None:
            now = trio.current_time()
            self.events.emit(
                RequestStoppedEvent(
                    request.request_id,
                    request.namespace,
                    cancellation.kind,
                    cancellation.reason,
                    max(0.0, now - cancellation.at),
                    now >= request.hard_deadline,
                )
            )
        if not self._by_token and self._idle is not None:
            self._idle.set()
            self._idle = None
        key = (request.namespace, request.request_id)
        entry = self._in_flight[key]
        if type(entry) is dict:
            del entry[request.token]
        if entry is request or not entry:
            del self._in_flight[key]
            # Read before write: the common, never-cancelled request finds no
            # row and writes nothing.
            if key in self._table.rows_by_key:
                self._table.remove(key)

    async def wait_idle(self) -> None:
        """Wait until no request is in flight (for draining on shutdown, and tests).

        A checkpoint even when already idle.
        """
        await trio.lowlevel.checkpoint()
        while self._by_token:
            if self._idle is None:
                self._idle = trio.Event()
            await self._idle.wait()

    def in_flight(self, request_id: RequestId, namespace: str = GLOBAL_NAMESPACE) -> bool:
        """Whether some task is tracking ``(namespace, request_id)`` right now."""
        return is_valid_request_id(request_id) and (namespace, request_id) in self._in_flight

    def requests(self) -> list[TrackedRequest]:
        """A snapshot of every in-flight request."""
        return list(self._by_token.values())

    # -- cancelling --------------------------------------------------------

    def notify_cancelled(
        self, namespace: str, request_id: object, reason: object = None, *, keep_early: bool = True
    ) -> CancelOutcome:
        """Handle a client's ``notifications/cancelled`` for *request_id* in *namespace*.

        **The** way to cancel a request from outside (a transport, an admin endpoint,
        a test).  Recorded when it is in flight in *namespace* (the first reason
        wins).  When not, and *keep_early* (separate HTTP POSTs can overtake each
        other), a session or principal namespace keeps it ``early_cancel_ttl`` and
        applies it if the request starts in time (``PENDING``); otherwise it is
        ignored, as MCP permits.  Never raises: bad input is an outcome.
        """
        if not is_valid_request_id(request_id):
            return CancelOutcome.INVALID_REQUEST_ID
        key = (namespace, request_id)
        early = key not in self._in_flight
        ttl = self.config.early_cancel_ttl
        if early and (ttl is None or not is_private(namespace) or not keep_early):
            return CancelOutcome.NOT_IN_FLIGHT
        try:
            if not early:
                self._cancel(request_id, reason, namespace)
                return CancelOutcome.CANCELLED
            # Announced when (if) it starts and is flagged; see _track().
            row = self._record(request_id, reason, namespace)
        except CancellationLimitReached:
            return CancelOutcome.LIMIT_REACHED
        assert ttl is not None
        if row is not None:
            self._expire_early(trio.current_time())
            self._early[key] = (row.at + ttl, row.seq)
        return CancelOutcome.PENDING

    def _expire_early(self, now: float) -> None:
        """Drop kept early cancels whose request never started in time (kept in
        expiry order, one TTL for all: one comparison when nothing is due)."""
        early = self._early
        while early:
            key, (expires_at, seq) = next(iter(early.items()))
            if expires_at > now:
                return
            del early[key]
            row = self._table.get(key)
            if row is not None and row.seq == seq and key not in self._in_flight:
                self._table.remove(key)

    def _cancel(self, request_id: ValidRequestId, reason: object, namespace: str) -> None:
        """:meth:`notify_cancelled` in flight; raises :class:`CancellationLimitReached`."""
        row = self._record(request_id, reason, namespace)
        if row is not None:
            self.events.emit(RequestCancelledEvent(request_id, namespace, row.reason, "client"))

    def _record(self, request_id: ValidRequestId, reason: object, namespace: str) -> Row | None:
        """:meth:`_cancel` without its event; the new row, or ``None`` for a repeat."""
        # Refuse a repeat or an over-quota cancel before any work on the reason:
        # a flood of them must stay cheap.
        try:
            if self._table.admit(namespace, request_id) is not None:
                return None
        except CancellationLimitReached:
            self.events.emit(LimitReachedEvent(request_id, namespace))
            raise
        text = sanitize_reason(reason, self.config.max_reason_length)
        row, _, evicted = self._table.insert(namespace, request_id, text, trio.current_time())
        if evicted:
            for old in evicted if self._early else ():  # its early entry goes with it:
                self._early.pop((old.namespace, old.request_id), None)  # bounded by the rows
            self.events.emit(
                EvictionEvent(len(evicted), tuple(dict.fromkeys(r.namespace for r in evicted)))
            )
        cancellation = Cancellation(row.reason, "client", row.at)
        for request in _siblings(self._in_flight, (namespace, request_id)):
            self._flag(request, cancellation, self.config.grace_period)
        return row

    def cancel_request(
        self,
        request: TrackedRequest | int,
        reason: object = None,
        *,
        kind: CancelKind = "server",
        grace_period: float | UseConfig | None = USE_CONFIG,
    ) -> bool:
        """Cancel one request from the server side: a dropped stream, a time limit.

        Keyed to the request's private token (a :class:`TrackedRequest` or
        its ``token``), never to ``(namespace, id)``, so it touches exactly this
        request.  Returns ``False``, doing nothing, when it is not in flight.
        *grace_period* overrides the configured one (a transport passes its
        ``disconnect_grace_period`` for disconnects).
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
        if grace_period is USE_CONFIG:
            grace_period = self.config.grace_period
        text = sanitize_reason(reason, self.config.max_reason_length)
        first = target.cancellation is None
        self._flag(target, Cancellation(text, kind, trio.current_time()), grace_period)
        if first:
            self.events.emit(RequestCancelledEvent(target.request_id, target.namespace, text, kind))
        return True

    def _flag(
        self, request: TrackedRequest, cancellation: Cancellation, grace: float | None
    ) -> None:
        """Set the polled flag (first cancellation wins) and arm the hard cancel."""
        set_flag(request, cancellation)
        if grace is None:
            return
        deadline = cancellation.at + grace
        if deadline >= request.hard_deadline:
            return
        request.hard_deadline = deadline
        if deadline <= trio.current_time():
            request.cancel_scope.cancel()
        else:
            request.cancel_scope.deadline = deadline
        margin = self.config.overrun_margin
        if margin is not None:
            check_at = deadline + margin
            heapq.heappush(self._overrun_checks, (check_at, request.token))
            if self._wake is not None and check_at < self._wake.deadline:
                self._wake.deadline = check_at

    # -- queries -----------------------------------------------------------

    def client_cancelled(self, request_id: RequestId, namespace: str = GLOBAL_NAMESPACE) -> bool:
        """Whether ``(namespace, request_id)`` has a *client* cancellation (not a
        server or disconnect one: ``cancelled()`` in the request sees any kind).

        True while its row exists, and while a request flagged by it runs on
        after the row was evicted or expired: a flag is never taken back.
        """
        return self._lookup(request_id, namespace) is not None

    def client_reason(self, request_id: RequestId, namespace: str = GLOBAL_NAMESPACE) -> str | None:
        """The reason of the client cancellation of ``(namespace, request_id)``, or ``None``."""
        found = self._lookup(request_id, namespace)
        return None if found is None else found.reason

    def _lookup(self, request_id: RequestId, namespace: str) -> Row | Cancellation | None:
        if not is_valid_request_id(request_id):
            return None  # never stored, and 1.0 or True must not match the row of 1
        key = (namespace, request_id)
        row = self._table.get(key)
        if row is not None:
            return row
        for request in _siblings(self._in_flight, key):
            if request.cancellation is not None and request.cancellation.kind == "client":
                return request.cancellation
        return None

    def clear(self, request_id: RequestId, namespace: str = GLOBAL_NAMESPACE) -> None:
        """Remove the cancellation row of ``(namespace, request_id)``; idempotent.

        Flags already set on in-flight requests stay set.
        """
        if not is_valid_request_id(request_id):
            return
        key = (namespace, request_id)
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

    def namespace_row_count(self, namespace: str) -> int:
        return self._table.namespace_size(namespace)

    # -- housekeeping ------------------------------------------------------

    def cleanup(self, ttl: float | None = None) -> int:
        """Remove rows older than *ttl* (default: the configured TTL) and the
        in-flight entries of tasks that died without untracking; returns the
        rows removed and emits ``cancellation.cleanup`` with both counts."""
        if ttl is None:
            ttl = self.config.ttl
        now = trio.current_time()
        self._expire_early(now)
        removed = len(self._table.expire(now - ttl))
        dead = [request for request in self._by_token.values() if not request.task_alive]
        for request in dead:
            self._untrack(request)
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
        token = current_registry_var.set(registry)
        try:
            yield registry
        finally:
            current_registry_var.reset(token)
            nursery.cancel_scope.cancel()


current_registry_var: ContextVar[Registry] = ContextVar("trio_mcp_cancel.registry")


def current_registry() -> Registry:
    """Return the registry of the innermost enclosing ``open_registry()`` block.

    Raises :class:`NoRegistry` (a ``RuntimeError``) when there is none.
    """
    registry = current_registry_var.get(None)
    if registry is None:
        raise NoRegistry(
            "no registry is running here: use 'async with open_registry() as reg'"
            " or pass registry= explicitly"
        )
    return registry


def tracked(
    request: RequestLike | RequestId,
    namespace: str | None = None,
    *,
    registry: Registry | None = None,
) -> Tracking:
    """Track a request for the duration of an ``async with`` block.

    *request* is either an object with ``request_id`` and ``namespace``
    attributes (a transport's tool context) or a bare id, with *namespace*
    (default ``"global"``).  The registry is *registry*, else the request's
    own ``registry`` attribute, else the one of the enclosing
    ``open_registry()``.

    Untracked on exit however the block ends.  A hard cancel's
    ``trio.Cancelled`` becomes :class:`RequestCancelled`, so an aborted
    request is never mistaken for a finished one; an enclosing scope's
    cancellation propagates untouched.  A bad id raises :class:`InvalidRequestId` here.
    """
    request_id: object = request
    if isinstance(request, (int, str)) or not hasattr(request, "request_id"):
        # An id (anything else than a RequestLike is refused below as a bad id).
        namespace = GLOBAL_NAMESPACE if namespace is None else namespace
    else:
        request_id = request.request_id
        namespace = request.namespace if namespace is None else namespace
        if registry is None:
            registry = getattr(request, "registry", None)
    if registry is None:
        registry = current_registry()
    return Tracking(registry, validate_request_id(request_id), namespace)


def track(
    registry: Registry, request_id: RequestId, namespace: str = GLOBAL_NAMESPACE
) -> TrackedRequest:
    """Low-level: file a request for the calling task in *registry*; pair with :func:`untrack`.

    What :func:`tracked` does on entry, for code that cannot use a block: the
    caller enters ``request.cancel_scope`` itself and publishes nothing in
    the context.  A key that already has a cancellation row starts out
    cancelled (grace period counted from the row's time).  A task that dies
    without untracking is found by :meth:`Registry.cleanup`.
    """
    return registry._track(validate_request_id(request_id), namespace)


def untrack(registry: Registry, request: TrackedRequest) -> None:
    """Low-level: remove a request filed by :func:`track`; idempotent.

    Clears its key's cancellation row with the last request of that key; a
    cancelled request reports how it stopped (``request.stopped``).
    """
    registry._untrack(request)
