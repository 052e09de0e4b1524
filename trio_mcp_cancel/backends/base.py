"""The pluggable backend: what server processes share, and how they reach each other.

**Always local** (never in a backend): cancel scopes, the in-flight index
and the cancellation rows of the :class:`~trio_mcp_cancel.Registry`.  A
Trio cancel scope cannot leave its process, so a cancellation that arrives
at the wrong process is *forwarded* to the one that runs the request.

**Shared** (in a backend):

* task records (:class:`~trio_mcp_cancel._core.tasks.TaskStore`): ``tasks/get``
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

:class:`MemoryBackend` is the default: one process, nothing to connect to,
nothing can fail.  :class:`trio_mcp_cancel.backends.redis.RedisBackend`
shares everything through Redis.  A backend is a service
(``await nursery.start(backend.run)``); the HTTP app runs it in its ASGI
lifespan.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, Protocol

import attrs
import trio

from .events import EventHub
from .tasks import MemoryTaskStore, TaskStore

__all__ = [
    "Backend",
    "BackendUnavailable",
    "BusMessage",
    "CancelBus",
    "LocalBus",
    "LocalCounters",
    "LocalSessionRecords",
    "MemoryBackend",
    "SessionRecords",
    "SharedCounters",
]

BusMessage = dict[str, Any]
"""A JSON object: ``{"type": "task.cancel" | "notify" | "session.end", ...}``."""


class BackendUnavailable(Exception):
    """The shared backend cannot be reached; a cross-process operation did not happen."""


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


@attrs.define(eq=False)
class LocalBus:
    """The bus of a single process: there is nobody else to tell."""

    shared: bool = False

    async def publish(self, message: BusMessage) -> None:
        await trio.lowlevel.checkpoint()

    def subscribe(self, handler: Callable[[BusMessage], object]) -> Callable[[], None]:
        return lambda: None


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

    async def touch(self, key: str, ttl: float | None, *, tenant: str | None = None) -> None: ...

    async def delete(self, key: str, *, tenant: str | None = None) -> None: ...


@attrs.define(eq=False)
class LocalSessionRecords:
    """One process: its session store is all there is."""

    shared: bool = False

    async def put(
        self,
        key: str,
        record: dict[str, Any],
        ttl: float | None,
        *,
        tenant: str | None = None,
        cap: int | None = None,
    ) -> bool:
        await trio.lowlevel.checkpoint()
        return True

    async def get(self, key: str) -> dict[str, Any] | None:
        await trio.lowlevel.checkpoint()
        return None

    async def touch(self, key: str, ttl: float | None, *, tenant: str | None = None) -> None:
        await trio.lowlevel.checkpoint()

    async def delete(self, key: str, *, tenant: str | None = None) -> None:
        await trio.lowlevel.checkpoint()


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


@attrs.define(eq=False)
class LocalCounters:
    """One process: its local admission limits already count everything."""

    shared: bool = False

    async def acquire(self, name: str, cap: int) -> bool:
        await trio.lowlevel.checkpoint()
        return True

    async def release(self, name: str) -> None:
        await trio.lowlevel.checkpoint()


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


@attrs.define(eq=False)
class MemoryBackend:
    """One process, in memory: the default backend."""

    tasks: TaskStore = attrs.field(factory=MemoryTaskStore)
    bus: CancelBus = attrs.field(factory=LocalBus)
    sessions: SessionRecords = attrs.field(factory=LocalSessionRecords)
    counters: SharedCounters = attrs.field(factory=LocalCounters)
    instance_id: str = attrs.field(factory=lambda: secrets.token_hex(8))

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started(self)
        await trio.sleep_forever()

    def attach_events(self, hub: EventHub) -> Callable[[], None]:
        """Nothing can fail here, so there are no events to send."""
        return lambda: None
