"""Task records, their state machine, the task store protocol and the in-memory store.

A *task* (MCP Tasks extension, ``io.modelcontextprotocol/tasks``) is a
durable record of long-running work that outlives the request that started
it.  The record is what ``tasks/get`` answers from, so it must live where
every server process can read it: in memory for one process, in a shared
store (:mod:`trio_mcp_cancel.backends.redis`) for several.  The *work*
itself (a cancel scope, a Trio task) always stays in the process that runs
it; see :mod:`trio_mcp_cancel._protocol.tasks`.

**Times are wall-clock** (seconds since the epoch, from the store's
``clock``), never Trio clock readings: records are shared between
processes whose Trio clocks have nothing in common.  Tests pass a clock
derived from ``trio.current_time()`` so that ``MockClock`` still drives
expiry.

The state machine (:func:`transition`): ``working`` and ``input_required``
(which carries the pending ``inputRequests``) may move to each other or to
a terminal state; ``completed``, ``failed``
and ``cancelled`` are terminal and never change again.  A store applies it
atomically, so two processes settling one task cannot both win.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final, Literal, Protocol

import attrs
import trio

__all__ = [
    "STATUSES",
    "TERMINAL",
    "MemoryTaskStore",
    "TaskRecord",
    "TaskStatus",
    "TaskStore",
    "TaskStoreFull",
    "TaskStoreUnavailable",
    "iso8601",
    "new_task_id",
    "settled_payload",
    "transition",
]

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: Final[frozenset[str]] = frozenset({"completed", "failed", "cancelled"})
STATUSES: Final[frozenset[str]] = frozenset({"working", "input_required"}) | TERMINAL
"""Every status a task can have (the server's store, the Redis store and the client agree)."""

Clock = Callable[[], float]


class TaskStoreUnavailable(Exception):
    """The shared store cannot be reached; the operation did not happen."""


class TaskStoreFull(Exception):
    """No room for a new record: nothing was stored, nothing was evicted.

    ``limit`` says which bound: ``"tasks"``, the tenant already holds *cap*
    unexpired records; ``"task_store"``, the whole store holds *cap* (a
    store never makes room by dropping somebody's unexpired record).
    """

    def __init__(self, cap: int, limit: Literal["tasks", "task_store"] = "tasks") -> None:
        super().__init__(f"too many tasks (max {cap}, {limit})")
        self.cap = cap
        self.limit: Literal["tasks", "task_store"] = limit


def new_task_id() -> str:
    """An unguessable task id (256 random bits): task ids act as bearer handles."""
    return secrets.token_urlsafe(32)


def iso8601(at: float) -> str:
    """A wall-clock time as the ISO 8601 string MCP uses (UTC, milliseconds)."""
    stamp = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


@attrs.define(eq=False, kw_only=True)
class TaskRecord:
    """One task as stored; :meth:`to_wire` is its ``DetailedTask`` shape."""

    task_id: str
    owner: str
    """Who created it (a principal or client namespace); nobody else may see it."""
    tenant: str = ""
    """Whose quota it counts against (``""``: the owner's).  The principal,
    else the client's address bucket: every connection of one tenant shares
    one quota, while each connection still sees only its own tasks."""
    status: TaskStatus = "working"
    created_at: float
    updated_at: float
    ttl_ms: int | None
    poll_interval_ms: int | None = None
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    cancel_requested: bool = False
    """A ``tasks/cancel`` arrived (maybe at another process); the runner obeys it."""
    instance: str = ""
    """The server process running the work."""
    input_requests: dict[str, Any] | None = None
    """While ``input_required``: the still unanswered ``inputRequests`` (key -> request)."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def quota_key(self) -> str:
        """Who the record counts against for ``max_per_owner``: its tenant, else its owner."""
        return self.tenant or self.owner

    @property
    def expires_at(self) -> float:
        return math.inf if self.ttl_ms is None else self.created_at + self.ttl_ms / 1000

    def to_wire(self) -> dict[str, Any]:
        """The ``Task`` fields, with the status's inlined ``result`` or ``error``."""
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": iso8601(self.created_at),
            "lastUpdatedAt": iso8601(self.updated_at),
            "ttlMs": self.ttl_ms,
        }
        if self.poll_interval_ms is not None:
            out["pollIntervalMs"] = self.poll_interval_ms
        if self.status_message is not None:
            out["statusMessage"] = self.status_message
        if self.status == "completed" and self.result is not None:
            out["result"] = self.result
        if self.status == "failed" and self.error is not None:
            out["error"] = self.error
        if self.status == "input_required" and self.input_requests is not None:
            out["inputRequests"] = self.input_requests
        return out

    def dumps(self) -> str:
        """JSON for a shared store."""
        return json.dumps(attrs.asdict(self), separators=(",", ":"))

    @classmethod
    def loads(cls, text: str | bytes) -> TaskRecord:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("status") not in STATUSES:
            raise ValueError("not a task record")
        return cls(**data)


def settled_payload(
    status: TaskStatus,
    *,
    result: dict[str, Any] | None,
    error: dict[str, Any] | None,
    input_requests: dict[str, Any] | None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, dict[str, Any] | None]:
    """The ``(result, error, input_requests)`` a record in *status* keeps.

    One rule for every store (memory here, the Redis script's arguments):
    ``completed`` must carry its *result* and ``failed`` its *error*
    (``ValueError`` otherwise), and each status keeps only its own payload,
    so a task that leaves ``input_required`` drops its pending requests.
    """
    if status == "completed" and result is None:
        raise ValueError("a completed task needs its result")
    if status == "failed" and error is None:
        raise ValueError("a failed task needs its error")
    return (
        result if status == "completed" else None,
        error if status == "failed" else None,
        input_requests if status == "input_required" else None,
    )


def transition(
    record: TaskRecord,
    status: TaskStatus,
    now: float,
    *,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    message: str | None = None,
    input_requests: dict[str, Any] | None = None,
) -> bool:
    """Move *record* to *status* in place; ``False`` (and no change) when it is terminal.

    ``completed`` carries *result*, ``failed`` carries *error* (the JSON-RPC
    error object), ``input_required`` its pending *input_requests*, as the
    extension requires.
    """
    if record.terminal:
        return False
    if status not in STATUSES:
        raise ValueError(f"unknown task status {status!r}")
    record.result, record.error, record.input_requests = settled_payload(
        status, result=result, error=error, input_requests=input_requests
    )
    record.status = status
    record.updated_at = now
    if message is not None:
        record.status_message = message
    return True


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
