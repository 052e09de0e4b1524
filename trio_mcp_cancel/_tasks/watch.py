"""Keeping this process's tasks in step with the others and with time.

What arrives on the bus from other processes (a cancel or input answers
for a task running here, a status change to fan out to this process's
listeners) and what has to happen without any request (purging expired
records; with a shared bus, re-reading the records of running tasks for a
cancel whose bus message was lost while the backend was down, and a
terminal state another process wrote while the work still runs here).  An idle
server with a local store wakes for no timer: the next task wakes the
janitor.
"""

from __future__ import annotations

import logging
import math

import attrs
import trio

from ..backends.base import BusMessage, TaskStoreUnavailable
from ..backends.memory import MemoryTaskStore
from .runner import TaskRunner
from .settings import TaskSettings
from .table import RunningTasks

__all__ = ["TaskWatch"]

logger = logging.getLogger("trio_mcp_cancel.tasks")


@attrs.frozen
class TaskWatch:
    """The bus listener and the janitor of the task manager."""

    settings: TaskSettings
    table: RunningTasks
    runner: TaskRunner

    def on_bus(self, message: BusMessage) -> None:
        """A message of another process (subscribed while the manager runs)."""
        task_id = message.get("task")
        if not isinstance(task_id, str):
            return
        if message.get("type") == "task.cancel":
            self.table.cancel(task_id)
        elif message.get("type") == "task.changed":
            detail = message.get("detail")
            on_change = self.settings.on_change
            if isinstance(detail, dict) and on_change is not None:
                on_change(detail)
        elif message.get("type") == "task.input":
            responses = message.get("responses")
            running = self.table.get(task_id)
            inputs = running.inputs if running is not None else None
            if isinstance(responses, dict) and inputs is not None and inputs.give(responses):
                self.runner.record_inputs_soon(task_id, inputs)

    async def janitor(self) -> None:
        """Purge expired records; with a shared bus, re-read running tasks for cancels."""
        settings = self.settings
        now = trio.current_time()
        next_purge = now + settings.purge_interval
        poll = settings.cancel_poll_interval if settings.bus.shared else math.inf
        next_poll = now + poll
        while True:
            if self._nothing_to_look_after():
                await self.table.next_start().wait()
                now = trio.current_time()
                next_purge, next_poll = now + settings.purge_interval, now + poll
                continue
            await trio.sleep_until(min(next_purge, next_poll))
            now = trio.current_time()
            try:
                if now >= next_poll:
                    next_poll = now + poll
                    for task_id in self.table.ids():
                        record = await settings.store.get(task_id)
                        if record is None:
                            continue
                        if record.terminal:
                            self._settled_elsewhere(task_id, record.status)
                        elif record.cancel_requested:
                            self.table.cancel(task_id)
                if now >= next_purge:
                    next_purge = now + settings.purge_interval
                    await settings.store.purge()
            except TaskStoreUnavailable as exc:
                logger.debug("task janitor: %s", exc)

    def _settled_elsewhere(self, task_id: str, status: str) -> None:
        """A task running here whose record is terminal: cancel its run, and say so."""
        if self.table.settled_elsewhere(task_id, status):
            logger.warning(
                "task %s was settled %s elsewhere while it still ran here (this process"
                " was paused or lost its liveness key?): cancelling its run; its result"
                " will be dropped",
                task_id[:8],
                status,
            )

    def _nothing_to_look_after(self) -> bool:
        """No task runs here and the (local, in-memory) store holds no record to purge."""
        store = self.settings.store
        return (
            not len(self.table)
            and not self.settings.bus.shared
            and isinstance(store, MemoryTaskStore)
            and len(store) == 0
        )
