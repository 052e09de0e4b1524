"""Admitting a new task: the quotas it must fit in, and its durable record.

A task is admitted when it fits every bound (see :mod:`.manager`): the
tasks running in this process (``max_running``), the tasks its tenant runs
here and, with a shared backend, on every process
(``max_running_per_owner``), and the records its tenant holds in the store
(``max_tasks_per_owner``, or a full store).  Each refusal is the modern
admission refusal (``-31429``: tasks are modern only), with ``data.limit``
naming the bound.  What was taken for a task that is then refused is
given back, so a refusal never leaks a slot.
"""

from __future__ import annotations

import logging

import attrs
import trio

from .._protocol.exchange import Exchange
from ..backends.base import BackendUnavailable, TaskStoreFull, TaskStoreUnavailable
from ..backends.task_records import TaskRecord, new_task_id
from .errors import store_unavailable, too_many_tasks
from .settings import TaskSettings
from .table import RunningTask, RunningTasks

__all__ = ["TaskAdmission"]

logger = logging.getLogger("trio_mcp_cancel.tasks")


@attrs.frozen
class TaskAdmission:
    """Counts a new task against its quotas and creates its record, or refuses it."""

    settings: TaskSettings
    table: RunningTasks

    async def admit(self, owner: str, tenant: str, exchange: Exchange) -> TaskRecord:
        """Create the record of a task *owner* may see, counted against *tenant*'s quotas.

        The task is in the table (counted) when this returns; it is not
        when this raises.
        """
        settings = self.settings
        if len(self.table) >= settings.max_running:
            raise too_many_tasks("Too many running tasks", "server", settings.max_running)
        if self.table.tenant_count(tenant) >= settings.max_running_per_owner:
            raise too_many_tasks("Too many running tasks", "tenant", settings.max_running_per_owner)
        now = settings.store.clock()
        record = TaskRecord(
            task_id=new_task_id(),
            owner=owner,
            tenant="" if tenant == owner else tenant,
            created_at=now,
            updated_at=now,
            ttl_ms=settings.ttl_ms,
            poll_interval_ms=settings.poll_interval_ms,
            instance=settings.instance_id,
        )
        # Counted before the await, so concurrent creations cannot overshoot.
        self.table.add(record.task_id, RunningTask(exchange, owner, tenant))
        try:
            await self._acquire_shared(tenant)
            try:
                await settings.store.create(record, settings.max_tasks_per_owner)
            except TaskStoreFull as exc:
                await self.release(tenant)
                raise too_many_tasks("Too many tasks", exc.limit, exc.cap) from None
            except BaseException:
                await self.release(tenant)
                raise
        except TaskStoreUnavailable as exc:
            self.table.remove(record.task_id)
            raise store_unavailable(exc) from exc
        except BaseException:
            self.table.remove(record.task_id)
            raise
        return record

    async def _acquire_shared(self, tenant: str) -> None:
        """Count the task against its tenant's quota on every process (shared backend)."""
        settings = self.settings
        if not settings.counters.shared:
            return
        cap = settings.max_running_per_owner
        try:
            taken = await settings.counters.acquire("tasks:" + tenant, cap)
        except BackendUnavailable as exc:
            raise TaskStoreUnavailable(str(exc)) from exc
        if not taken:
            raise too_many_tasks("Too many running tasks", "tenant", cap)

    async def release(self, tenant: str) -> None:
        """Give back the shared slot a task of *tenant* took (shielded, bounded)."""
        counters = self.settings.counters
        if not counters.shared:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(2.0):
            try:
                await counters.release("tasks:" + tenant)
            except BackendUnavailable as exc:
                logger.warning("task quota not released yet (repaired later): %s", exc)
