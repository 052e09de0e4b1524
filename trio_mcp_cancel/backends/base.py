"""The backend protocols: what server processes share, and how they reach each other.

**Always local** (never in a backend): cancel scopes, the in-flight index
and the cancellation rows of the :class:`~trio_mcp_cancel.Registry`.  A
Trio cancel scope cannot leave its process, so a cancellation that arrives
at the wrong process is *forwarded* to the one that runs the request.

**Shared** (in a backend):

* task records (:class:`TaskStore`; the records and their state machine are
  :mod:`.task_records`): ``tasks/get``
  may land on any process;
* legacy sessions (:class:`SessionRecords`): a session created on one worker
  is usable from every worker;
* cancellation requests (:class:`CancelBus`): ``tasks/cancel``, a legacy
  ``notifications/cancelled`` or a session ``DELETE`` reaching one process
  is published to all, and the process running the request applies it
  locally, with the registry's two phases (flag now, hard cancel after the
  grace period);
* per-tenant counters (:class:`SharedCounters`), so a quota cannot be
  bypassed by spreading requests over workers.

:class:`~.memory.MemoryBackend` (:mod:`.memory`) is the default: one
process, nothing to connect to, nothing can fail.
:class:`trio_mcp_cancel.backends.redis.RedisBackend` shares everything
through Redis.  This module holds the protocols only, so that code which
takes a backend (the HTTP app, the task manager) depends on neither.  A backend is a service
(``await nursery.start(backend.run)``); the HTTP app runs it in its ASGI
lifespan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, runtime_checkable

import trio

from .._core.events import EventHub
from .task_records import Clock, TaskRecord, TaskStatus

__all__ = [
    "Backend",
    "BackendError",
    "BackendUnavailable",
    "BusMessage",
    "CancelBus",
    "ReadinessCheck",
    "SessionRecords",
    "SharedCounters",
    "TaskStore",
    "TaskStoreFull",
    "TaskStoreUnavailable",
]

BusMessage = dict[str, Any]
"""A JSON object: ``{"type": "task.cancel" | "notify" | "session.end", ...}``."""


class BackendError(Exception):
    """The root of every error a backend raises for the server to handle.

    One of three roots, by audience: a backend author (a :class:`TaskStore`,
    a :class:`CancelBus`, a token verifier: anything the server calls
    through a protocol) raises these, and the server turns each into its
    answer (a 503, a ``-32603``, a 401...).  Tool code never sees one.
    """


class BackendUnavailable(BackendError):
    """The shared backend cannot be reached; a cross-process operation did not happen."""


class TaskStoreUnavailable(BackendError):
    """The shared store cannot be reached; the operation did not happen.

    Not a :class:`BackendUnavailable`: the server answers the two
    differently (a task request's error, a session's 503), and code that
    catches one must not start catching the other.
    """


class TaskStoreFull(BackendError):
    """No room for a new record: nothing was stored, nothing was evicted.

    ``limit`` says which bound: ``"tasks"``, the tenant already holds *cap*
    unexpired records; ``"task_store"``, the whole store holds *cap* (a
    store never makes room by dropping somebody's unexpired record).
    """

    def __init__(self, cap: int, limit: Literal["tasks", "task_store"] = "tasks") -> None:
        super().__init__(f"too many tasks (max {cap}, {limit})")
        self.cap = cap
        self.limit: Literal["tasks", "task_store"] = limit


class CancelBus(Protocol):
    """Delivers cancellation requests to every other server process.

    ``publish`` raises :class:`BackendUnavailable` when it cannot deliver;
    handlers run synchronously in the bus's task, must not block, and see
    only messages from *other* processes (each message carries its
    ``origin`` instance id).
    """

    shared: bool
    """Whether other processes exist at all (``False``: publishing is a no-op)."""

    async def publish(self, message: BusMessage) -> None: ...

    def subscribe(self, handler: Callable[[BusMessage], object]) -> Callable[[], None]: ...


class SessionRecords(Protocol):
    """Legacy sessions as records every process can read, keyed by a hash of the session id.

    ``shared=False`` (one process): nothing is stored, ``get`` finds nothing.
    Every method may raise :class:`BackendUnavailable`.
    """

    shared: bool

    async def put(
        self,
        key: str,
        record: dict[str, Any],
        ttl: float | None,
        *,
        tenant: str | None = None,
        cap: int | None = None,
    ) -> bool:
        """Store (or refresh) a session; ``False`` when *tenant* already holds
        *cap* live sessions across every process (a new one is then not stored)."""

    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def oldest(self, tenant: str | None, count: int) -> list[str]:
        """Up to *count* keys of *tenant*'s live sessions, least recently refreshed first
        (where a tenant at its cap looks for an idle session to end)."""

    async def evict(self, key: str, *, tenant: str | None, cap: int) -> int:
        """Delete session *key* only while *tenant* still holds *cap* sessions: ``1``
        deleted, ``0`` not needed any more (the tenant is below *cap*), ``-1`` unknown.

        Atomic, so two workers asked to make room for one new session do not
        both end one."""

    async def touch(self, key: str, ttl: float | None, *, tenant: str | None = None) -> None: ...

    async def delete(self, key: str, *, tenant: str | None = None) -> None: ...


class SharedCounters(Protocol):
    """Counters of things in flight summed over every live process, for quotas.

    ``acquire(name, cap)`` takes one unit when the total is below *cap*
    (atomically, across processes) and says whether it did; ``release``
    gives it back.  A process that dies stops counting (its units lapse
    with its liveness), so a crash never leaks quota.  ``shared=False``:
    the process's own limits are all there is, and ``acquire`` always
    succeeds.  Both may raise :class:`BackendUnavailable`.
    """

    shared: bool

    async def acquire(self, name: str, cap: int) -> bool: ...

    async def release(self, name: str) -> None: ...


class TaskStore(Protocol):
    """Where task records live; every method may raise :class:`TaskStoreUnavailable`.

    ``get`` never returns an expired record (expiry is ``created_at +
    ttl_ms``, wall-clock); ``settle`` and ``request_cancel`` are atomic
    read-modify-writes, so concurrent processes see one outcome.
    """

    clock: Clock

    async def create(self, record: TaskRecord, max_per_owner: int | None = None) -> None:
        """Store a new record; once this returns, ``get`` finds it (durable creation).

        Raises :class:`TaskStoreFull` when ``record.quota_key`` (its tenant)
        already holds *max_per_owner* unexpired records (finished ones
        included: they take room until their TTL), or when the store itself
        is full; a store never evicts an unexpired record to make room.
        Expired records may be dropped on the way, at amortised O(log n)
        each: creation never scans the unexpired ones.
        """

    async def get(self, task_id: str) -> TaskRecord | None: ...

    async def settle(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        message: str | None = None,
        input_requests: dict[str, Any] | None = None,
    ) -> TaskRecord | None:
        """Apply :func:`transition`; the record after it (``None``: gone)."""

    async def request_cancel(self, task_id: str) -> TaskRecord | None:
        """Mark a cancel as requested (no-op on a terminal task); the record, or ``None``."""

    async def set_message(self, task_id: str, message: str) -> TaskRecord | None:
        """Set ``statusMessage`` (and ``lastUpdatedAt``) of a task that is not terminal.

        Atomic: a task that settled meanwhile keeps its terminal record.
        The record after the change, ``None`` when nothing changed (gone,
        expired or terminal).
        """

    async def purge(self) -> int:
        """Drop expired records; how many went."""

    async def orphaned(self, record: TaskRecord) -> bool:
        """Whether the process running *record*'s work is gone (it will never settle it)."""


class Backend(Protocol):
    """Everything shared between server processes; see the module docstring."""

    @property
    def instance_id(self) -> str:
        """Unique across processes: names the process that runs a task."""

    @property
    def tasks(self) -> TaskStore: ...

    @property
    def bus(self) -> CancelBus: ...

    @property
    def sessions(self) -> SessionRecords: ...

    @property
    def counters(self) -> SharedCounters: ...

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, serve the bus until cancelled, and close cleanly."""

    def attach_events(self, hub: EventHub) -> Callable[[], None]:
        """Send the backend's events (``backend.unavailable``...) to *hub* too, until
        the returned function is called; the HTTP app attaches its registry's hub."""


@runtime_checkable
class ReadinessCheck(Protocol):
    """Optional for a :class:`Backend`: whether this process can use it now.

    The HTTP app's readiness probe (``/readyz``, see
    :mod:`trio_mcp_cancel.transports.http.health`) asks it at most once a
    second and within a second, whatever the probe rate; a backend without
    it counts as always ready (one process, in memory, cannot fail).
    """

    async def check_ready(self) -> str | None:
        """Why this process should not take new traffic because of the backend
        (unreachable, not running...), or ``None`` when it is usable."""
