"""The tasks this process runs: who may see each, whose quota it takes, how to stop it.

Local state only, no store and no bus, and nothing here awaits except the
waits: the task manager counts a new task here before the first ``await``
of its creation, which is what keeps concurrent creations from
overshooting a quota.  Every piece of the manager shares one
:class:`RunningTasks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import trio

from .._core.events import CancelKind
from .._core.registry import USE_CONFIG, UseConfig
from .._protocol.exchange import Exchange
from .progress import TaskProgress

__all__ = ["PendingInputs", "RunningTask", "RunningTasks"]


@attrs.define(eq=False)
class PendingInputs:
    """What a parked task still waits for, and the answers so far.

    Whoever hands answers in records the new state (under ``lock``, so the
    last write is the latest state) before the ``tasks/update`` is
    acknowledged: a ``tasks/get`` right after it sees the answered keys gone.
    ``wake`` is set once every key is answered (and ``working`` recorded),
    or when the task is cancelled.
    """

    # Invariant: ``pending`` and ``answers`` never share a key (a key moves from one to
    # the other once); ``wake`` is set only when ``pending`` is empty or the task ends.
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
class RunningTask:
    """A task this process runs: how to reach its request, and whose quota it takes."""

    exchange: Exchange
    owner: str
    tenant: str
    inputs: PendingInputs | None = None
    progress: TaskProgress | None = None
    settled_elsewhere: str | None = None
    """The terminal status another process (or the janitor of a dead process's
    tasks) gave the record while the work still ran here: the run is cancelled
    and whatever it ends with is dropped (the store keeps the first terminal
    state), see :meth:`RunningTasks.settled_elsewhere`."""

    def cancel(
        self,
        reason: str,
        kind: CancelKind,
        grace_period: float | UseConfig | None = USE_CONFIG,
    ) -> None:
        """Cancel its request (the registry's two phases); a task parked for input
        wakes up to see the flag."""
        self.exchange.cancel(reason, kind=kind, grace_period=grace_period)
        if self.inputs is not None:
            self.inputs.wake.set()


@attrs.define(eq=False)
class RunningTasks:
    """The running tasks by id, counted per tenant, with the signals their waiters need."""

    _tasks: dict[str, RunningTask] = attrs.field(init=False, factory=dict)
    _per_tenant: dict[str, int] = attrs.field(init=False, factory=dict)
    _idle: trio.Event = attrs.field(init=False, factory=trio.Event)
    _started: trio.Event = attrs.field(init=False, factory=trio.Event)
    """Set when a task starts: wakes a janitor that had nothing to look after."""
    _removed: trio.lowlevel.ParkingLot = attrs.field(init=False, factory=trio.lowlevel.ParkingLot)

    def __attrs_post_init__(self) -> None:
        self._idle.set()

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._tasks

    def get(self, task_id: str) -> RunningTask | None:
        return self._tasks.get(task_id)

    def ids(self) -> list[str]:
        """The ids of the running tasks, a copy (safe to await while walking it)."""
        return list(self._tasks)

    def tenant_count(self, tenant: str) -> int:
        """Tasks *tenant* runs in this process."""
        return self._per_tenant.get(tenant, 0)

    def add(self, task_id: str, running: RunningTask) -> None:
        if not self._tasks:
            self._idle = trio.Event()
        self._tasks[task_id] = running
        self._started.set()
        self._per_tenant[running.tenant] = self._per_tenant.get(running.tenant, 0) + 1

    def remove(self, task_id: str) -> None:
        running = self._tasks.pop(task_id, None)
        if running is None:
            return
        left = self._per_tenant[running.tenant] - 1
        if left:
            self._per_tenant[running.tenant] = left
        else:
            del self._per_tenant[running.tenant]
        if not self._tasks:
            self._idle.set()
        self._removed.unpark_all()

    def next_start(self) -> trio.Event:
        """An event set when the next task starts (an idle janitor waits on it)."""
        self._started = trio.Event()
        return self._started

    def cancel(self, task_id: str, reason: str = "task cancelled") -> bool:
        """Cancel *task_id*'s request as the client would; whether it runs here."""
        running = self._tasks.get(task_id)
        if running is None:
            return False
        running.cancel(reason, "client")
        return True

    def cancel_all(
        self,
        reason: str,
        *,
        kind: CancelKind = "server",
        grace_period: float | UseConfig | None = USE_CONFIG,
    ) -> int:
        """Cancel every running task, with the two phases (a server shutting down); how many."""
        for running in self._tasks.values():
            running.cancel(reason, kind, grace_period)
        return len(self._tasks)

    def settled_elsewhere(self, task_id: str, status: str) -> bool:
        """The record of *task_id*, still running here, is terminal already: stop the run.

        How a paused process learns its tasks were given up on: a worker
        frozen past its liveness (a VM pause, a blocking loop) had them
        settled ``failed`` by whoever noticed; finishing them after it
        resumes would run side effects the client was told never happened
        (and may retry).  Cancelled with kind ``server`` (the registry's two
        phases); ``False`` when it does not run here or was stopped already.
        """
        running = self._tasks.get(task_id)
        if running is None or running.settled_elsewhere is not None:
            return False
        running.settled_elsewhere = status
        reason = f"the task was settled {status} elsewhere while it ran here"
        running.cancel(reason, "server")
        return True

    async def end_owner(
        self,
        owner: str,
        reason: str,
        *,
        kind: CancelKind = "disconnect",
        grace_period: float | UseConfig | None = USE_CONFIG,
    ) -> None:
        """Cancel the tasks *owner* runs here, with the two phases, and wait until they end."""
        ending = [t for t, running in self._tasks.items() if running.owner == owner]
        for task_id in ending:
            self._tasks[task_id].exchange.cancel(reason, kind=kind, grace_period=grace_period)
        await trio.lowlevel.checkpoint()
        while any(task_id in self._tasks for task_id in ending):
            await self._removed.park()

    async def wait_idle(self) -> None:
        """Wait until no task runs here."""
        await trio.lowlevel.checkpoint()
        while self._tasks:
            await self._idle.wait()
