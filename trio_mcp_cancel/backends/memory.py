"""The in-memory backend: one process, nothing to connect to, nothing can fail.

The default of every server.  Each piece implements its protocol from
:mod:`.base` for a single process: the bus has nobody else to tell, session
records and counters defer to the process's own limits, and task records
live in a bounded in-memory store.
"""

from __future__ import annotations

import heapq
import itertools
import secrets
import time
from collections.abc import Callable
from typing import Any, Final

import attrs
import trio

from .._core.events import EventHub
from .base import BusMessage, CancelBus, SessionRecords, SharedCounters, TaskStore, TaskStoreFull
from .task_records import Clock, TaskRecord, TaskStatus, transition

__all__ = [
    "PURGE_BATCH",
    "LocalBus",
    "LocalCounters",
    "LocalSessionRecords",
    "MemoryBackend",
    "MemoryTaskStore",
]


@attrs.define(eq=False)
class LocalBus:
    """The bus of a single process: there is nobody else to tell."""

    shared: bool = False

    async def publish(self, message: BusMessage) -> None:
        await trio.lowlevel.checkpoint()

    def subscribe(self, handler: Callable[[BusMessage], object]) -> Callable[[], None]:
        return lambda: None


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

    async def oldest(self, tenant: str | None, count: int) -> list[str]:
        await trio.lowlevel.checkpoint()
        return []

    async def evict(self, key: str, *, tenant: str | None, cap: int) -> int:
        await trio.lowlevel.checkpoint()
        return -1

    async def touch(self, key: str, ttl: float | None, *, tenant: str | None = None) -> None:
        await trio.lowlevel.checkpoint()

    async def delete(self, key: str, *, tenant: str | None = None) -> None:
        await trio.lowlevel.checkpoint()


@attrs.define(eq=False)
class LocalCounters:
    """One process: its local admission limits already count everything."""

    shared: bool = False

    async def acquire(self, name: str, cap: int) -> bool:
        await trio.lowlevel.checkpoint()
        return True

    async def release(self, name: str) -> None:
        await trio.lowlevel.checkpoint()


#: Expired records dropped between two checkpoints of a purge: a sweep of
#: many records that expired together never holds the event loop for long.
PURGE_BATCH: Final = 256


@attrs.define(eq=False)
class MemoryTaskStore:
    """Task records in this process's memory: the default, for a single process.

    Bounded by *max_tasks*: when every slot holds an unexpired record,
    :meth:`create` raises :class:`TaskStoreFull` (``limit == "task_store"``).
    Nobody's unexpired record is ever evicted to make room: a client that
    floods the store gets refusals, not another client's finished task.

    **Cost.**  Records with a TTL sit in a heap keyed by expiry, so a purge
    pops only what has expired (O(log n) each) and never looks at the
    unexpired ones; per-tenant counts are kept as records come and go, so
    admission is O(1).  :meth:`create` purges first (each record is popped
    once, so creation is amortised O(log n)); a long purge takes a Trio
    checkpoint every :data:`PURGE_BATCH` records.  ``touched`` counts the
    records a purge looked at (tests check the cost structurally with it).
    """

    clock: Clock = time.time
    max_tasks: int = 100_000
    _records: dict[str, TaskRecord] = attrs.field(init=False, factory=dict)
    _expiry: list[tuple[float, int, str]] = attrs.field(init=False, factory=list)
    """``(expires_at, sequence, task_id)`` of every record with a TTL (a min-heap);
    entries of records already dropped are skipped when popped."""
    _sequence: itertools.count[int] = attrs.field(init=False, factory=itertools.count)
    _per_tenant: dict[str, int] = attrs.field(init=False, factory=dict)
    touched: int = attrs.field(init=False, default=0)

    def __len__(self) -> int:
        return len(self._records)

    def count(self, tenant: str) -> int:
        """Records held against *tenant*'s quota (expired ones until purged)."""
        return self._per_tenant.get(tenant, 0)

    def _drop(self, task_id: str) -> None:
        record = self._records.pop(task_id)
        key = record.quota_key
        left = self._per_tenant[key] - 1
        if left:
            self._per_tenant[key] = left
        else:
            del self._per_tenant[key]

    async def create(self, record: TaskRecord, max_per_owner: int | None = None) -> None:
        if self._expiry and self._expiry[0][0] <= self.clock():
            await self.purge()
        # No await from here on: the checks and the insertion are one step.
        if record.task_id in self._records:
            self._drop(record.task_id)
        if max_per_owner is not None and self.count(record.quota_key) >= max_per_owner:
            raise TaskStoreFull(max_per_owner, "tasks")
        if len(self._records) >= self.max_tasks:
            raise TaskStoreFull(self.max_tasks, "task_store")
        stored = _copy(record)
        self._records[record.task_id] = stored
        key = stored.quota_key
        self._per_tenant[key] = self._per_tenant.get(key, 0) + 1
        if stored.ttl_ms is not None:
            entry = (stored.expires_at, next(self._sequence), stored.task_id)
            heapq.heappush(self._expiry, entry)

    async def get(self, task_id: str) -> TaskRecord | None:
        record = self._records.get(task_id)
        if record is None:
            return None
        if record.expires_at <= self.clock():
            self._drop(task_id)  # its heap entry is skipped when popped
            return None
        return _copy(record)

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
        record = self._records.get(task_id)
        if record is None:
            return None
        transition(
            record,
            status,
            self.clock(),
            result=result,
            error=error,
            message=message,
            input_requests=input_requests,
        )
        return _copy(record)

    async def request_cancel(self, task_id: str) -> TaskRecord | None:
        record = self._records.get(task_id)
        if record is None or record.expires_at <= self.clock():
            return None
        if not record.terminal and not record.cancel_requested:
            record.cancel_requested = True
            record.updated_at = self.clock()
        return _copy(record)

    async def set_message(self, task_id: str, message: str) -> TaskRecord | None:
        record = self._records.get(task_id)
        if record is None or record.terminal or record.expires_at <= self.clock():
            await trio.lowlevel.checkpoint()
            return None
        record.status_message = message
        record.updated_at = self.clock()
        await trio.lowlevel.checkpoint()
        return _copy(record)

    async def orphaned(self, record: TaskRecord) -> bool:
        """One process: whoever runs a task is this process, alive by definition."""
        await trio.lowlevel.checkpoint()
        return False

    async def purge(self) -> int:
        """Pop the expired records off the expiry heap; the unexpired ones are never visited.

        A checkpoint every :data:`PURGE_BATCH` records (and one at the end
        when anything was dropped), so a purge of many records lets other
        tasks run in between.
        """
        heap, dropped, batch = self._expiry, 0, 0
        while heap and heap[0][0] <= self.clock():
            _, _, task_id = heapq.heappop(heap)
            self.touched += 1
            record = self._records.get(task_id)
            if record is not None and record.expires_at <= self.clock():
                self._drop(task_id)
                dropped += 1
            batch += 1
            if batch >= PURGE_BATCH:
                batch = 0
                await trio.lowlevel.checkpoint()
        if batch:
            await trio.lowlevel.checkpoint()
        return dropped


def _copy(record: TaskRecord) -> TaskRecord:
    """Callers get copies, as from a shared store: nobody mutates the stored record."""
    return attrs.evolve(record)


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
