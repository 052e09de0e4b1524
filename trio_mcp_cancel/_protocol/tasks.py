"""The Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663), modern era.

A tool registered with ``task="optional"`` (or ``"required"``) runs as a
*task* when the client declares the extension on the ``tools/call``
request: the server creates the task record durably, answers at once with
``resultType: "task"``, and runs the tool in the :class:`TaskManager`'s own
nursery, so the work outlives the POST.  The client polls ``tasks/get``
and may ``tasks/cancel``.

**Cancellation really stops the work.**  The tool runs inside
``tracked()`` like any call, under its own key ``("task:<owner>",
taskId)``.  ``tasks/cancel`` marks the record (so every process sees the
request) and cancels the running request with the registry's two phases:
the polled flag at once, the hard cancel after the grace period.  The
task then settles to ``cancelled``.  When the task runs in another process,
the cancel is published on the backend's bus and applied there; a
process also re-reads the records of its running tasks every
``cancel_poll_interval`` seconds, so a bus message lost while the backend
was down is still honoured.

**Input while running.**  A tool that returns ``InputRequired`` inside a
task parks it (:meth:`TaskManager.ask`): the record goes ``input_required``
with the pending ``inputRequests``, ``tasks/update`` hands answers to it
(here, or through the bus from another process), and the tool runs again
once every key is answered.

**Progress.**  ``ctx.report_progress`` inside a task updates the record's
``statusMessage`` (rate-limited, see :mod:`.task_progress`), published like
a status change.

**A creation nobody received.**  When the ``tools/call`` that created a
task loses its answer (the client cancelled or went away before the
``CreateTaskResult`` was written, :meth:`Exchange.lost`), the task is
cancelled: nobody else knows its id.

**Who may see a task.**  Task ids are unguessable (256 bits) and every
``tasks/*`` request is checked against the caller that created the task
(its principal, or its client namespace when unauthenticated); a task of
somebody else is "not found", exactly like an unknown one.

**A process that dies** cannot settle its tasks; with a shared store a
``tasks/get`` elsewhere notices that its liveness key lapsed and settles
the task ``failed`` (otherwise records expire with their TTL).

**Bounds.**  Running tasks are bounded server-wide and per *tenant*
(``-32001`` when full, like other admission limits), and so are the
records one tenant holds and the store as a whole (a full store refuses,
it never evicts).  The tenant is the caller's principal, else its address
bucket (``ip:<bucket>``), else ``global`` (a stdio process, the in-memory
transport): every connection and session of one tenant shares one quota,
so opening more connections buys no more slots, while a task is still
seen only by the caller (namespace) that created it.  Records expire
``ttl_ms`` after creation (the store drops them, and the janitor purges
them every ``purge_interval``).  Shutting the manager down cancels what
still runs and settles it ``failed``, so no task stays ``working`` for ever.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs
import trio

from .._core.context import checkpoint_cancelled
from .._core.errors import REQUEST_CANCELLED, RequestCancelled
from .._core.events import CancelKind
from .._core.ratelog import RateLimitedLog, failure_key
from .._core.registry import USE_CONFIG, UseConfig
from ..backends.base import (
    BackendUnavailable,
    BusMessage,
    CancelBus,
    SharedCounters,
    TaskStore,
    TaskStoreFull,
    TaskStoreUnavailable,
)
from ..backends.memory import LocalBus, LocalCounters, MemoryTaskStore
from ..backends.task_records import TaskRecord, TaskStatus, new_task_id
from .admission import TOO_MANY_REQUESTS
from .exchange import Exchange
from .jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, JsonRpcError
from .task_progress import TaskProgress, progress_message
from .tools import TaskSupport
from .versions import MISSING_CLIENT_CAPABILITY
from .wire import TASKS_EXTENSION, client_declares_tasks

__all__ = [
    "TASKS_EXTENSION",
    "TaskManager",
    "TasksUnavailable",
    "TaskSupport",
    "client_declares_tasks",
    "require_tasks_extension",
]

logger = logging.getLogger("trio_mcp_cancel.tasks")
_failures = RateLimitedLog(logger)  # the same failure, task after task: one line a minute

Runner = Callable[[Exchange, str], Awaitable[dict[str, Any]]]
"""Runs the tool with the task's exchange and id (inside ``tracked()``); its ``CallToolResult``."""


def require_tasks_extension() -> JsonRpcError:
    """``-32021`` naming the extension, as SEP-2663 requires."""
    return JsonRpcError(
        MISSING_CLIENT_CAPABILITY,
        "Missing required client capability",
        {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


class TasksUnavailable(JsonRpcError):
    """``-32603``: the task store (a shared backend) cannot be reached."""

    def __init__(self) -> None:
        super().__init__(INTERNAL_ERROR, "Internal error: the task store is unavailable")


def _unavailable(exc: Exception) -> JsonRpcError:
    logger.debug("task store unavailable: %s", exc)
    return TasksUnavailable()


@runtime_checkable
class _ReadsMany(Protocol):
    """A task store that reads many records in one round trip."""

    async def get_many(self, task_ids: list[str]) -> list[TaskRecord | None]: ...


def _not_found() -> JsonRpcError:
    return JsonRpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found")


@attrs.define(eq=False)
class _Inputs:
    """What a parked task still waits for, and the answers so far.

    Whoever hands answers in records the new state (under ``lock``, so the
    last write is the latest state) before the ``tasks/update`` is
    acknowledged: a ``tasks/get`` right after it sees the answered keys gone.
    ``wake`` is set once every key is answered (and ``working`` recorded),
    or when the task is cancelled.
    """

    pending: dict[str, Any]
    answers: dict[str, Any] = attrs.field(factory=dict)
    wake: trio.Event = attrs.field(factory=trio.Event)
    lock: trio.Lock = attrs.field(factory=trio.Lock)

    def give(self, responses: Mapping[str, Any]) -> bool:
        """Take the answers to pending keys (others are ignored); whether any was new."""
        taken = False
        for key, value in responses.items():
            if key in self.pending:
                del self.pending[key]
                self.answers[key] = value
                taken = True
        return taken


@attrs.define(eq=False)
class _Running:
    """A task this process runs: how to reach its request, and whose quota it takes."""

    exchange: Exchange
    owner: str
    tenant: str
    inputs: _Inputs | None = None
    progress: TaskProgress | None = None


@attrs.define(eq=False)
class TaskManager:
    """Runs tasks in a nursery of its own and answers ``tasks/*``; see the module docstring.

    A service: ``await nursery.start(manager.run)`` (the HTTP app's ASGI
    lifespan does it; stdio, WebSocket and the in-memory transport start it
    while they serve when nobody runs it, see
    :mod:`trio_mcp_cancel.transports._tasks`).  While it is not running,
    task-capable tools are called the ordinary way, and ``task="required"``
    tools fail with ``-32603``.
    """

    ttl_ms: int | None = 3_600_000
    """How long a task record lives after creation (``None``: until purged by hand)."""
    poll_interval_ms: int = 1000
    """The ``pollIntervalMs`` clients are asked to respect."""
    max_running: int = 256
    """Tasks running in this process at once; ``-32001`` beyond (``data.limit == "server"``)."""
    max_running_per_owner: int = 32
    """Tasks one tenant runs at once, over all its connections (and, with a
    shared backend, all processes); ``-32001`` beyond (``data.limit ==
    "tenant"``).  Well below ``max_running``, so one tenant never takes
    every slot."""
    max_tasks_per_owner: int | None = 1000
    """Unexpired task records one tenant may hold, finished ones included (they
    take room until their TTL); ``-32001`` beyond (``data.limit == "tasks"``).
    A full store is ``-32001`` too (``data.limit == "task_store"``):
    nobody's unexpired record is evicted to make room."""
    purge_interval: float = 60.0
    progress_interval: float = 1.0
    """At most one ``statusMessage`` write per task per this many seconds for
    ``ctx.report_progress`` inside a task (the last value is always written
    before the task settles)."""
    cancel_poll_interval: float = 2.0
    """With a shared bus: how often running tasks' records are re-read for a
    cancel that arrived while the bus was down."""
    store: TaskStore = attrs.field(factory=MemoryTaskStore)
    bus: CancelBus = attrs.field(factory=LocalBus)
    counters: SharedCounters = attrs.field(factory=LocalCounters)
    """With a shared backend, ``max_running_per_owner`` counts every process's tasks."""
    on_change: Callable[[dict[str, Any]], object] | None = None
    """Told each new status as a ``DetailedTask`` (the server fans it out as
    ``notifications/tasks`` to ``subscriptions/listen`` streams; changes in
    other processes arrive through the bus)."""
    instance_id: str = attrs.field(factory=lambda: secrets.token_hex(8))
    _nursery: trio.Nursery | None = attrs.field(init=False, default=None)
    _running: dict[str, _Running] = attrs.field(init=False, factory=dict)
    _per_owner: dict[str, int] = attrs.field(init=False, factory=dict)
    _idle: trio.Event = attrs.field(init=False, factory=trio.Event)
    _started: trio.Event = attrs.field(init=False, factory=trio.Event)
    """Set when a task starts: wakes a janitor that had nothing to look after."""
    _removed: trio.lowlevel.ParkingLot = attrs.field(init=False, factory=trio.lowlevel.ParkingLot)

    def __attrs_post_init__(self) -> None:
        self._idle.set()

    @property
    def running(self) -> bool:
        return self._nursery is not None

    @property
    def running_count(self) -> int:
        """Tasks running in this process."""
        return len(self._running)

    def running_here(self, task_id: str) -> bool:
        return task_id in self._running

    async def run(
        self,
        *,
        store: TaskStore | None = None,
        bus: CancelBus | None = None,
        instance_id: str | None = None,
        counters: SharedCounters | None = None,
        task_status: trio.TaskStatus[TaskManager] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve tasks until cancelled; *store*/*bus*/*instance_id* come from a backend."""
        if self._nursery is not None:
            raise RuntimeError("this task manager is already running")
        if store is not None:
            self.store = store
        if bus is not None:
            self.bus = bus
        if instance_id is not None:
            self.instance_id = instance_id
        if counters is not None:
            self.counters = counters
        unsubscribe = self.bus.subscribe(self._on_bus)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._janitor)
                self._nursery = nursery
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._nursery = None
            unsubscribe()

    async def _janitor(self) -> None:
        """Purge expired records; with a shared bus, re-read running tasks for cancels."""
        now = trio.current_time()
        next_purge = now + self.purge_interval
        poll = self.cancel_poll_interval if self.bus.shared else math.inf
        next_poll = now + poll
        while True:
            if self._nothing_to_look_after():
                # An idle server wakes for no timer: the next task wakes the janitor.
                self._started = trio.Event()
                await self._started.wait()
                now = trio.current_time()
                next_purge, next_poll = now + self.purge_interval, now + poll
                continue
            await trio.sleep_until(min(next_purge, next_poll))
            now = trio.current_time()
            try:
                if now >= next_poll:
                    next_poll = now + poll
                    for task_id in list(self._running):
                        record = await self.store.get(task_id)
                        if record is not None and record.cancel_requested:
                            self._cancel_here(task_id)
                if now >= next_purge:
                    next_purge = now + self.purge_interval
                    await self.store.purge()
            except TaskStoreUnavailable as exc:
                logger.debug("task janitor: %s", exc)

    def _nothing_to_look_after(self) -> bool:
        """No task runs here and the (local, in-memory) store holds no record to purge."""
        store = self.store
        return (
            not self._running
            and not self.bus.shared
            and isinstance(store, MemoryTaskStore)
            and len(store) == 0
        )

    def _on_bus(self, message: BusMessage) -> None:
        task_id = message.get("task")
        if not isinstance(task_id, str):
            return
        if message.get("type") == "task.cancel":
            self._cancel_here(task_id)
        elif message.get("type") == "task.changed":
            detail = message.get("detail")
            if isinstance(detail, dict) and self.on_change is not None:
                self.on_change(detail)
        elif message.get("type") == "task.input":
            responses = message.get("responses")
            running = self._running.get(task_id)
            inputs = running.inputs if running is not None else None
            if isinstance(responses, dict) and inputs is not None and inputs.give(responses):
                if self._nursery is not None:
                    self._nursery.start_soon(self._record_inputs_quietly, task_id, inputs)

    def _cancel_here(self, task_id: str, reason: str = "task cancelled") -> bool:
        running = self._running.get(task_id)
        if running is None:
            return False
        running.exchange.cancel(reason, kind="client")
        if running.inputs is not None:
            running.inputs.wake.set()  # a parked task wakes up to see the flag
        return True

    async def _record_inputs_quietly(self, task_id: str, inputs: _Inputs) -> None:
        try:
            await self._record_inputs(task_id, inputs)
        except TaskStoreUnavailable as exc:
            logger.warning("task %s input not recorded: %s", task_id[:8], exc)

    async def _record_inputs(self, task_id: str, inputs: _Inputs) -> None:
        """Record what a parked task still waits for; wake it once nothing is left."""
        async with inputs.lock:
            if inputs.wake.is_set():
                return  # already resumed, or cancelled
            if inputs.pending:
                await self._set_status(
                    task_id, "input_required", input_requests=dict(inputs.pending)
                )
                return
            try:
                await self._set_status(task_id, "working")
            finally:
                inputs.wake.set()

    async def ask(self, task_id: str, requests: Mapping[str, Any]) -> dict[str, Any]:
        """Park a running task in ``input_required`` until ``tasks/update`` answers every key.

        Called from inside the task's tool (so a cancel stops it at once,
        with :class:`RequestCancelled`); answers may come in several
        ``tasks/update`` calls, and ``tasks/get`` shows what is still
        pending.  Returns the answers, the task ``working`` again.
        """
        running = self._running.get(task_id)
        if running is None or not requests:
            raise JsonRpcError(INTERNAL_ERROR, "Internal error: this task cannot ask for input")
        inputs = running.inputs = _Inputs(dict(requests))
        try:
            async with inputs.lock:
                await self._set_status(
                    task_id, "input_required", input_requests=dict(inputs.pending)
                )
            record = await self.store.get(task_id)
            # No answer can come once the record expired: never wait past it.
            left = 0.0 if record is None else record.expires_at - self.store.clock()
            with trio.move_on_after(max(0.0, left)) as waiting:
                if running.exchange.cancel_kind is None:
                    await inputs.wake.wait()
            await checkpoint_cancelled()
            if waiting.cancelled_caught:
                raise JsonRpcError(INTERNAL_ERROR, "The task expired while waiting for input")
        except TaskStoreUnavailable as exc:
            raise _unavailable(exc) from exc
        finally:
            inputs.wake.set()
            running.inputs = None
        return inputs.answers

    def progress(
        self, task_id: str, progress: float, total: float | None, message: str | None
    ) -> None:
        """``ctx.report_progress`` inside a task: update its ``statusMessage`` (rate-limited)."""
        running = self._running.get(task_id)
        if running is None or self._nursery is None:
            return
        if running.progress is None:
            running.progress = TaskProgress(
                lambda text: self._write_message(task_id, text), self.progress_interval
            )
            self._nursery.start_soon(running.progress.run)
        running.progress.report(progress_message(progress, total, message))

    async def _write_message(self, task_id: str, text: str) -> None:
        record = await self.store.set_message(task_id, text)
        if record is not None and not record.terminal:
            await self._publish(task_id, record)

    # -- tools/call --------------------------------------------------------

    def wanted(self, support: TaskSupport, capabilities: Mapping[str, Any] | None) -> bool:
        """Whether a call of a tool with *support* becomes a task.

        Raises ``-32021`` for a ``"required"`` tool and a client without
        the extension, ``-32603`` when it is required and tasks are not
        being served here.
        """
        if support == "forbidden":
            return False
        declared = capabilities is not None and client_declares_tasks(capabilities)
        if support == "required":
            if not declared:
                raise require_tasks_extension()
            if not self.running:
                raise JsonRpcError(INTERNAL_ERROR, "Internal error: tasks are not being served")
        return declared and self.running

    async def start(
        self,
        owner: str,
        runner: Runner,
        exchange: Exchange,
        *,
        creator: Exchange | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """Create the task durably, start its work, and return the ``CreateTaskResult``.

        *owner* may see the task; *tenant* (default: the owner) is whose
        quotas it counts against: ``max_running_per_owner`` and
        ``max_tasks_per_owner`` (see the module docstring).

        *creator* is the exchange of the ``tools/call`` that creates the
        task: if its answer is lost (the client closed the stream or sent
        ``notifications/cancelled`` before the ``CreateTaskResult`` was
        written), nobody knows the task id, so the task is cancelled with the
        usual two phases and settles ``cancelled``.
        """
        nursery = self._nursery
        if nursery is None:
            raise JsonRpcError(INTERNAL_ERROR, "Internal error: tasks are not being served")
        if len(self._running) >= self.max_running:
            raise JsonRpcError(
                TOO_MANY_REQUESTS,
                "Too many running tasks",
                {"limit": "server", "max": self.max_running},
            )
        quota = owner if tenant is None else tenant
        if self._per_owner.get(quota, 0) >= self.max_running_per_owner:
            raise JsonRpcError(
                TOO_MANY_REQUESTS,
                "Too many running tasks",
                {"limit": "tenant", "max": self.max_running_per_owner},
            )
        now = self.store.clock()
        record = TaskRecord(
            task_id=new_task_id(),
            owner=owner,
            tenant="" if quota == owner else quota,
            created_at=now,
            updated_at=now,
            ttl_ms=self.ttl_ms,
            poll_interval_ms=self.poll_interval_ms,
            instance=self.instance_id,
        )
        # Counted before the await, so concurrent creations cannot overshoot.
        self._add(record.task_id, _Running(exchange, owner, quota))
        try:
            await self._acquire_shared(quota)
            try:
                await self.store.create(record, self.max_tasks_per_owner)
            except TaskStoreFull as exc:
                await self._release_shared(quota)
                raise JsonRpcError(
                    TOO_MANY_REQUESTS, "Too many tasks", {"limit": exc.limit, "max": exc.cap}
                ) from None
            except BaseException:
                await self._release_shared(quota)
                raise
        except TaskStoreUnavailable as exc:
            self._remove(record.task_id)
            raise _unavailable(exc) from exc
        except BaseException:
            self._remove(record.task_id)
            raise
        nursery.start_soon(self._work, record.task_id, runner, exchange)
        if creator is not None:
            creator.when_lost(lambda: self._creation_lost(record.task_id))
        return {"resultType": "task", **record.to_wire()}

    def _creation_lost(self, task_id: str) -> None:
        if self._cancel_here(task_id, "the request that created the task was cancelled"):
            logger.info("task %s: its creation was never delivered; cancelling it", task_id[:8])

    def creation_cancelled(self, task_id: str) -> None:
        """The client cancelled the ``tools/call`` that created *task_id* (on its channel).

        It sent ``notifications/cancelled`` before it read the
        ``CreateTaskResult``, and a client ignores answers to what it
        cancelled: nobody will follow the task, so it is cancelled too.
        """
        if self._cancel_here(task_id, "the request that created the task was cancelled"):
            logger.info("task %s: its tools/call was cancelled; cancelling it", task_id[:8])

    async def _acquire_shared(self, tenant: str) -> None:
        """Count the task against its tenant's quota on every process (shared backend)."""
        if not self.counters.shared:
            return
        try:
            taken = await self.counters.acquire("tasks:" + tenant, self.max_running_per_owner)
        except BackendUnavailable as exc:
            raise TaskStoreUnavailable(str(exc)) from exc
        if not taken:
            raise JsonRpcError(
                TOO_MANY_REQUESTS,
                "Too many running tasks",
                {"limit": "tenant", "max": self.max_running_per_owner},
            )

    async def _release_shared(self, tenant: str) -> None:
        if not self.counters.shared:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(2.0):
            try:
                await self.counters.release("tasks:" + tenant)
            except BackendUnavailable as exc:
                logger.warning("task quota not released yet (repaired later): %s", exc)

    def _add(self, task_id: str, running: _Running) -> None:
        if not self._running:
            self._idle = trio.Event()
        self._running[task_id] = running
        self._started.set()
        self._per_owner[running.tenant] = self._per_owner.get(running.tenant, 0) + 1

    def _remove(self, task_id: str) -> None:
        running = self._running.pop(task_id, None)
        if running is None:
            return
        left = self._per_owner[running.tenant] - 1
        if left:
            self._per_owner[running.tenant] = left
        else:
            del self._per_owner[running.tenant]
        if not self._running:
            self._idle.set()
        self._removed.unpark_all()

    async def end_owner(
        self,
        owner: str,
        reason: str,
        *,
        kind: CancelKind = "disconnect",
        grace: float | UseConfig | None = USE_CONFIG,
    ) -> None:
        """Cancel the tasks *owner* runs here, with the two phases, and wait until they end.

        For a connection (stdio, WebSocket) whose tasks are owned by its own
        namespace: once it closes nobody can ``tasks/get`` them again, so
        their work is stopped like the connection's other requests (the flag
        at once, the hard cancel *grace* later) and they settle ``failed``.
        """
        ending = [t for t, running in self._running.items() if running.owner == owner]
        for task_id in ending:
            self._running[task_id].exchange.cancel(reason, kind=kind, grace=grace)
        await trio.lowlevel.checkpoint()
        while any(task_id in self._running for task_id in ending):
            await self._removed.park()

    async def wait_idle(self) -> None:
        """Wait until no task runs here (tests, draining)."""
        await trio.lowlevel.checkpoint()
        while self._running:
            await self._idle.wait()

    async def _work(self, task_id: str, runner: Runner, exchange: Exchange) -> None:
        """Run one task's tool and settle its record, however it ends."""
        status: TaskStatus
        result: dict[str, Any] | None = None
        error: dict[str, Any] | None = None
        message: str | None = None
        running = self._running[task_id]
        try:
            try:
                result = await runner(exchange, task_id)
                if exchange.cancel_kind is not None:
                    # Cancelled, but it finished before the hard cancel came:
                    # the client asked to stop, so it does not get a result.
                    status, message, result = "cancelled", "cancelled by the client", None
                else:
                    status = "completed"
            except RequestCancelled as exc:
                if exc.kind == "client":
                    status, message = "cancelled", "cancelled by the client"
                else:
                    status, message = "failed", exc.reason or "cancelled by the server"
                    error = {"code": REQUEST_CANCELLED, "message": "Request cancelled"}
                    if exc.reason:
                        error["data"] = {"reason": exc.reason}
            except JsonRpcError as exc:
                status, message = "failed", exc.message
                error = {"code": exc.code, "message": exc.message}
                if exc.data is not None:
                    error["data"] = exc.data
            except Exception as exc:
                _failures.exception(failure_key("task", exc), "task %s failed", task_id[:8])
                status, message = "failed", "internal error"
                error = {"code": INTERNAL_ERROR, "message": "Internal error"}
        except trio.Cancelled:
            # The manager is shutting down: record why, then let Cancelled go on.
            with trio.CancelScope(shield=True), trio.move_on_after(2.0):
                await self._settle(
                    task_id,
                    "failed",
                    error={"code": INTERNAL_ERROR, "message": "The server shut down"},
                    message="the server shut down before the task finished",
                )
            raise
        finally:
            self._remove(task_id)
            await self._release_shared(running.tenant)
        # Shielded: a manager stopping right after the work ended still records how.
        with trio.CancelScope(shield=True), trio.move_on_after(2.0):
            if running.progress is not None:
                await running.progress.close()  # the last progress, before the final status
            await self._settle(task_id, status, result=result, error=error, message=message)

    async def _settle(self, task_id: str, status: TaskStatus, **fields: Any) -> None:
        try:
            await self._set_status(task_id, status, **fields)
        except TaskStoreUnavailable as exc:
            # The record stays "working" until it expires; nothing else leaks.
            logger.warning("task %s ended %s, not recorded: %s", task_id[:8], status, exc)

    async def _set_status(self, task_id: str, status: TaskStatus, **fields: Any) -> None:
        """Record a new status and tell whoever listens (here, and other processes)."""
        record = await self.store.settle(task_id, status, **fields)
        if record is None or record.status != status:
            return  # gone, or already terminal: nothing changed
        await self._publish(task_id, record)

    async def _publish(self, task_id: str, record: TaskRecord) -> None:
        """Tell whoever listens about *record* (here, and other processes)."""
        detail = record.to_wire()
        if self.on_change is not None:
            self.on_change(detail)
        if self.bus.shared:
            message = {"type": "task.changed", "task": task_id, "detail": detail}
            try:
                await self.bus.publish({**message, "origin": self.instance_id})
            except Exception as exc:  # listeners elsewhere miss one status; polling still works
                logger.debug("task %s status not published: %s", task_id[:8], exc)

    # -- tasks/* -------------------------------------------------------------

    async def _record(self, owner: str, params: Mapping[str, Any]) -> TaskRecord:
        task_id = params.get("taskId")
        if not isinstance(task_id, str) or not 0 < len(task_id) <= 256:
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: taskId must be a string")
        try:
            record = await self.store.get(task_id)
        except TaskStoreUnavailable as exc:
            raise _unavailable(exc) from exc
        if record is None or not secrets.compare_digest(record.owner, owner):
            raise _not_found()
        return record

    async def owned(self, owner: str, task_ids: Iterable[str]) -> frozenset[str]:
        """Which of *task_ids* are live tasks of *owner* (unknown ones are not).

        A ``subscriptions/listen`` may name up to a thousand: a store that
        reads many records at once (:class:`_ReadsMany`, the Redis one: one
        pipeline) is asked once.  When the store is unreachable none is.
        """
        wanted = [t for t in task_ids if 0 < len(t) <= 256]
        store = self.store
        try:
            if isinstance(store, _ReadsMany):
                records = await store.get_many(wanted)
            else:
                records = [await store.get(task_id) for task_id in wanted]
        except TaskStoreUnavailable as exc:
            logger.debug("listen: task ids not checked, the store is unavailable: %s", exc)
            return frozenset()
        return frozenset(
            record.task_id
            for record in records
            if record is not None and secrets.compare_digest(record.owner, owner)
        )

    async def owns(self, owner: str, task_id: str) -> bool:
        """Whether *task_id* is a live task of *owner* (``False`` for unknown ones)."""
        try:
            await self._record(owner, {"taskId": task_id})
        except JsonRpcError:
            return False
        return True

    async def get(self, owner: str, params: Mapping[str, Any]) -> dict[str, Any]:
        record = await self._record(owner, params)
        if not record.terminal and record.task_id not in self._running:
            record = await self._settle_if_orphaned(record)
        return record.to_wire()

    async def _settle_if_orphaned(self, record: TaskRecord) -> TaskRecord:
        """A task whose process died would stay ``working`` until its TTL: fail it now."""
        try:
            if not await self.store.orphaned(record):
                return record
            settled = await self.store.settle(
                record.task_id,
                "failed",
                error={"code": INTERNAL_ERROR, "message": "The server process running it stopped"},
                message="the server process running the task stopped",
            )
        except TaskStoreUnavailable as exc:
            raise _unavailable(exc) from exc
        return record if settled is None else settled

    async def cancel(self, owner: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Ask for the task to stop: here at once, elsewhere through the bus.

        The acknowledgement is empty, and the same for a task that already
        finished (idempotent).  A task running in this process is cancelled
        even while the store is unreachable: local cancellation never
        depends on the backend.
        """
        task_id = params.get("taskId")
        running = self._running.get(task_id) if isinstance(task_id, str) else None
        if running is not None and secrets.compare_digest(running.owner, owner):
            assert isinstance(task_id, str)
            self._cancel_here(task_id)
            try:
                await self.store.request_cancel(task_id)  # recorded too, best effort
            except TaskStoreUnavailable as exc:
                logger.warning("task cancel not recorded: %s", exc)
            return {}
        record = await self._record(owner, params)
        if record.terminal:
            return {}
        try:
            await self.store.request_cancel(record.task_id)
            if self.bus.shared:
                await self.bus.publish(
                    {"type": "task.cancel", "task": record.task_id, "origin": self.instance_id}
                )
        except Exception as exc:
            # The store or the bus is down: the cancel may not reach the task.
            raise _unavailable(exc) from exc
        return {}

    async def update(self, owner: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """``tasks/update``: hand ``inputResponses`` to the parked task; an empty ack.

        Keys the task does not wait for are ignored (SEP-2663); a task
        running in another process gets them through the bus.
        """
        responses = params.get("inputResponses", {})
        if not isinstance(responses, dict):
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: inputResponses must be an object")
        record = await self._record(owner, params)
        running = self._running.get(record.task_id)
        if running is not None:
            inputs = running.inputs
            if inputs is not None and inputs.give(responses):
                try:
                    await self._record_inputs(record.task_id, inputs)
                except TaskStoreUnavailable as exc:
                    raise _unavailable(exc) from exc
        elif record.status == "input_required" and self.bus.shared and responses:
            try:
                await self.bus.publish(
                    {"type": "task.input", "task": record.task_id, "responses": responses}
                )
            except Exception as exc:
                raise _unavailable(exc) from exc
        return {}
