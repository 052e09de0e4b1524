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
``statusMessage`` (rate-limited, see :mod:`.progress`), published like
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
(``-31429`` when full, like other admission limits), and so are the
records one tenant holds and the store as a whole (a full store refuses,
it never evicts).  The tenant is the caller's principal, else its address
bucket (``ip:<bucket>``), else ``global`` (a stdio process, the in-memory
transport): every connection and session of one tenant shares one quota,
so opening more connections buys no more slots, while a task is still
seen only by the caller (namespace) that created it.  Records expire
``ttl_ms`` after creation (the store drops them, and the janitor purges
them every ``purge_interval``).  Shutting the manager down cancels what
still runs and settles it ``failed``, so no task stays ``working`` for ever.

**Its pieces**, each a module with one job, sharing one table of running
tasks (:mod:`.table`) and reading the manager's settings as they are
now (:mod:`.settings`): admission and quotas (:mod:`.admission`),
running a task's work, its input and progress (:mod:`.runner`), the
``tasks/*`` requests against the store (:mod:`.requests`), status
changes and their listeners (:mod:`.status`), the bus listener and
the janitor (:mod:`.watch`), and the errors they share
(:mod:`.errors`).  :class:`TaskManager` owns their lifetime and is
the one object the server and the transports use.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import trio

from .._core.events import CancelKind
from .._core.registry import USE_CONFIG, UseConfig
from .._protocol.exchange import Exchange
from .._protocol.tools import TaskSupport
from .._wire.names import TASKS_EXTENSION, client_declares_tasks
from ..backends.base import CancelBus, SharedCounters, TaskStore
from ..backends.memory import LocalBus, LocalCounters, MemoryTaskStore
from .admission import TaskAdmission
from .errors import TasksUnavailable, require_tasks_extension, tasks_not_served
from .requests import TaskRequests
from .runner import Runner, TaskRunner
from .settings import TaskSettings
from .status import StatusWriter
from .table import RunningTasks
from .watch import TaskWatch

__all__ = [
    "TASKS_EXTENSION",
    "Runner",
    "TaskManager",
    "TaskSupport",
    "TasksUnavailable",
    "client_declares_tasks",
    "require_tasks_extension",
]

logger = logging.getLogger("trio_mcp_cancel.tasks")
TASKS_DRAFT_SCHEMA = "ext-tasks schema/draft@e434597 (2026-08-21)"  # the Tasks draft followed


@attrs.define(eq=False)
class TaskManager:
    """Runs tasks in a nursery of its own and answers ``tasks/*``; see the module docstring.

    A service: ``await nursery.start(manager.run)`` (the Tasks extension's
    ``serve`` does it, which the HTTP app's ASGI lifespan runs; stdio,
    WebSocket and the in-memory transport run it while they serve when
    nobody runs it, see :mod:`trio_mcp_cancel.transports._extensions`).  While it is not running,
    task-capable tools are called the ordinary way, and ``task="required"``
    tools fail with ``-32603``.
    """

    ttl_ms: int | None = 3_600_000
    """How long a task record lives after creation (``None``: until purged by hand)."""
    poll_interval_ms: int = 1000
    """The ``pollIntervalMs`` clients are asked to respect."""
    max_running: int = 256
    """Tasks running in this process at once; ``-31429`` beyond (``data.limit == "server"``)."""
    max_running_per_owner: int = 32
    """Tasks one tenant runs at once, over all its connections (and, with a
    shared backend, all processes); ``-31429`` beyond (``data.limit ==
    "tenant"``).  Well below ``max_running``, so one tenant never takes
    every slot."""
    max_tasks_per_owner: int | None = 1000
    """Unexpired task records one tenant may hold, finished ones included (they
    take room until their TTL); ``-31429`` beyond (``data.limit == "tasks"``).
    A full store is ``-31429`` too (``data.limit == "task_store"``):
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
    _table: RunningTasks = attrs.field(init=False, factory=RunningTasks)
    _admission: TaskAdmission = attrs.field(init=False)
    _runner: TaskRunner = attrs.field(init=False)
    _requests: TaskRequests = attrs.field(init=False)
    _watch: TaskWatch = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        settings: TaskSettings = self
        self._admission = TaskAdmission(settings, self._table)
        status = StatusWriter(settings)
        self._runner = TaskRunner(settings, self._table, self._admission, status)
        self._requests = TaskRequests(settings, self._table, self._runner)
        self._watch = TaskWatch(settings, self._table, self._runner)

    @property
    def running(self) -> bool:
        return self._runner.nursery is not None

    @property
    def running_count(self) -> int:
        """Tasks running in this process."""
        return len(self._table)

    def running_here(self, task_id: str) -> bool:
        return task_id in self._table

    async def run(
        self,
        *,
        store: TaskStore | None = None,
        bus: CancelBus | None = None,
        instance_id: str | None = None,
        counters: SharedCounters | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve tasks until cancelled; *store*/*bus*/*instance_id* come from a backend."""
        if self.running:
            raise RuntimeError("this task manager is already running")
        if store is not None:
            self.store = store
        if bus is not None:
            self.bus = bus
        if instance_id is not None:
            self.instance_id = instance_id
        if counters is not None:
            self.counters = counters
        unsubscribe = self.bus.subscribe(self._watch.on_bus)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch.janitor)
                self._runner.nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._runner.nursery = None
            unsubscribe()

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
                raise tasks_not_served()
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
        if not self.running:
            raise tasks_not_served()
        quota = owner if tenant is None else tenant
        record = await self._admission.admit(owner, quota, exchange)
        self._runner.start(record.task_id, runner, exchange)
        if creator is not None:
            creator.when_lost(lambda: self._creation_lost(record.task_id))
        return {"resultType": "task", **record.to_wire()}

    def _creation_lost(self, task_id: str) -> None:
        if self._table.cancel(task_id, "the request that created the task was cancelled"):
            logger.info("task %s: its creation was never delivered; cancelling it", task_id[:8])

    def creation_cancelled(self, task_id: str) -> None:
        """The client cancelled the ``tools/call`` that created *task_id* (on its channel).

        It sent ``notifications/cancelled`` before it read the
        ``CreateTaskResult``, and a client ignores answers to what it
        cancelled: nobody will follow the task, so it is cancelled too.
        """
        if self._table.cancel(task_id, "the request that created the task was cancelled"):
            logger.info("task %s: its tools/call was cancelled; cancelling it", task_id[:8])

    async def end_owner(
        self,
        owner: str,
        reason: str,
        *,
        kind: CancelKind = "disconnect",
        grace_period: float | UseConfig | None = USE_CONFIG,
    ) -> None:
        """Cancel the tasks *owner* runs here, with the two phases, and wait until they end.

        For a connection (stdio, WebSocket) whose tasks are owned by its own
        namespace: once it closes nobody can ``tasks/get`` them again, so
        their work is stopped like the connection's other requests (the flag
        at once, the hard cancel *grace_period* later) and they settle ``failed``.
        """
        await self._table.end_owner(owner, reason, kind=kind, grace_period=grace_period)

    def cancel_all(
        self, reason: str, *, grace_period: float | UseConfig | None = USE_CONFIG
    ) -> int:
        """Cancel every task running here (kind ``"server"``: a server shutting down).

        The flag at once, the hard cancel *grace_period* later, so a tool can
        tidy up before the manager itself stops; each settles ``failed`` with
        *reason*.  Returns how many were running.
        """
        return self._table.cancel_all(reason, kind="server", grace_period=grace_period)

    async def wait_idle(self) -> None:
        """Wait until no task runs here (tests, draining)."""
        await self._table.wait_idle()

    # -- inside a running task ---------------------------------------------

    async def ask(self, task_id: str, requests: Mapping[str, Any]) -> dict[str, Any]:
        """Park a running task in ``input_required`` until ``tasks/update`` answers every key.

        Called from inside the task's tool (so a cancel stops it at once,
        with :class:`RequestCancelled`); answers may come in several
        ``tasks/update`` calls, and ``tasks/get`` shows what is still
        pending.  Returns the answers, the task ``working`` again.
        """
        return await self._runner.ask(task_id, requests)

    def progress(
        self, task_id: str, progress: float, total: float | None, message: str | None
    ) -> None:
        """``ctx.report_progress`` inside a task: update its ``statusMessage`` (rate-limited)."""
        self._runner.progress(task_id, progress, total, message)

    # -- tasks/* -------------------------------------------------------------

    async def owned(self, owner: str, task_ids: Iterable[str]) -> frozenset[str]:
        """Which of *task_ids* are live tasks of *owner* (unknown ones are not).

        A ``subscriptions/listen`` may name up to a thousand: a store that
        reads many records at once (the Redis one: one pipeline) is asked
        once.  When the store is unreachable none is.
        """
        return await self._requests.owned(owner, task_ids)

    async def owns(self, owner: str, task_id: str) -> bool:
        """Whether *task_id* is a live task of *owner* (``False`` for unknown ones)."""
        return await self._requests.owns(owner, task_id)

    async def get(self, owner: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """``tasks/get``: the task, settled ``failed`` first if its process died."""
        return await self._requests.get(owner, params)

    async def cancel(self, owner: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Ask for the task to stop: here at once, elsewhere through the bus.

        The acknowledgement is empty, and the same for a task that already
        finished (idempotent).  A task running in this process is cancelled
        even while the store is unreachable: local cancellation never
        depends on the backend.
        """
        return await self._requests.cancel(owner, params)

    async def update(self, owner: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """``tasks/update``: hand ``inputResponses`` to the parked task; an empty ack.

        Keys the task does not wait for are ignored (SEP-2663); a task
        running in another process gets them through the bus.
        """
        return await self._requests.update(owner, params)
