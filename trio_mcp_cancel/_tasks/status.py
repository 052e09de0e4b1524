"""Recording a task's new status, and telling whoever listens.

Every change of a task record that a client may be waiting for (a new
status, a progress ``statusMessage``) goes through :class:`StatusWriter`:
the store records it, then ``on_change`` hears it here (the server fans it
out as ``notifications/tasks``) and, with a shared bus, the other
processes do.  One path, so a listener never misses a kind of change.

Which moves are legal is not decided here: the status table
(:data:`~trio_mcp_cancel.backends.task_records.TRANSITIONS`) lives beside
the records, because every store applies it atomically and a check here,
on a record read earlier, would race the other processes settling the task.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from ..backends.base import TaskStoreUnavailable
from ..backends.task_records import TaskRecord, TaskStatus
from .settings import TaskSettings

__all__ = ["StatusWriter"]

logger = logging.getLogger("trio_mcp_cancel.tasks")


@attrs.frozen
class StatusWriter:
    """Writes task records' changes to the store and publishes them."""

    settings: TaskSettings

    async def set(self, task_id: str, status: TaskStatus, **fields: Any) -> None:
        """Record a new status and tell whoever listens (here, and other processes)."""
        record = await self.settings.store.settle(task_id, status, **fields)
        if record is None or record.status != status:
            return  # gone, or already terminal: nothing changed
        await self.publish(task_id, record)

    async def settle(self, task_id: str, status: TaskStatus, **fields: Any) -> None:
        """:meth:`set`, logging a store that cannot be reached instead of raising."""
        try:
            await self.set(task_id, status, **fields)
        except TaskStoreUnavailable as exc:
            # The record stays "working" until it expires; nothing else leaks.
            logger.warning("task %s ended %s, not recorded: %s", task_id[:8], status, exc)

    async def write_message(self, task_id: str, text: str) -> None:
        """Record a running task's ``statusMessage`` (its progress) and publish it."""
        record = await self.settings.store.set_message(task_id, text)
        if record is not None and not record.terminal:
            await self.publish(task_id, record)

    async def publish(self, task_id: str, record: TaskRecord) -> None:
        """Tell whoever listens about *record* (here, and other processes)."""
        settings = self.settings
        detail = record.to_wire()
        if settings.on_change is not None:
            settings.on_change(detail)
        if settings.bus.shared:
            message = {"type": "task.changed", "task": task_id, "detail": detail}
            try:
                await settings.bus.publish({**message, "origin": settings.instance_id})
            except Exception as exc:  # listeners elsewhere miss one status; polling still works
                logger.debug("task %s status not published: %s", task_id[:8], exc)
