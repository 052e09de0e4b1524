"""The ``tasks/*`` requests: reading, cancelling and answering a task through the store.

Every request names a task id and is checked against the caller that
created the task (its owner): a task of somebody else is "not found",
exactly like an unknown one.  The store is the truth for a task that may
run in another process; a task running *here* is reached directly, so
cancelling it never depends on the backend being up.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from .._wire.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, JsonRpcError
from ..backends.base import TaskStoreUnavailable
from ..backends.task_records import TaskRecord
from .errors import store_unavailable, task_not_found
from .runner import TaskRunner
from .settings import TaskSettings
from .table import RunningTasks

__all__ = ["TaskRequests"]

logger = logging.getLogger("trio_mcp_cancel.tasks")


@runtime_checkable
class _ReadsMany(Protocol):
    """A task store that reads many records in one round trip."""

    async def get_many(self, task_ids: list[str]) -> list[TaskRecord | None]: ...


@attrs.frozen
class TaskRequests:
    """Answers ``tasks/get``, ``tasks/cancel``, ``tasks/update`` and ownership checks."""

    settings: TaskSettings
    table: RunningTasks
    runner: TaskRunner

    async def _record(self, owner: str, params: Mapping[str, Any]) -> TaskRecord:
        task_id = params.get("taskId")
        if not isinstance(task_id, str) or not 0 < len(task_id) <= 256:
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: taskId must be a string")
        try:
            record = await self.settings.store.get(task_id)
        except TaskStoreUnavailable as exc:
            raise store_unavailable(exc) from exc
        if record is None or not secrets.compare_digest(record.owner, owner):
            raise task_not_found()
        return record

    async def owned(self, owner: str, task_ids: Iterable[str]) -> frozenset[str]:
        """Which of *task_ids* are live tasks of *owner* (unknown ones are not).

        A ``subscriptions/listen`` may name up to a thousand: a store that
        reads many records at once (:class:`_ReadsMany`, the Redis one: one
        pipeline) is asked once.  When the store is unreachable none is.
        """
        wanted = [t for t in task_ids if 0 < len(t) <= 256]
        store = self.settings.store
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
        if not record.terminal and record.task_id not in self.table:
            record = await self._settle_if_orphaned(record)
        return record.to_wire()

    async def _settle_if_orphaned(self, record: TaskRecord) -> TaskRecord:
        """A task whose process died would stay ``working`` until its TTL: fail it now."""
        store = self.settings.store
        try:
            if not await store.orphaned(record):
                return record
            settled = await store.settle(
                record.task_id,
                "failed",
                error={"code": INTERNAL_ERROR, "message": "The server process running it stopped"},
                message="the server process running the task stopped",
            )
        except TaskStoreUnavailable as exc:
            raise store_unavailable(exc) from exc
        return record if settled is None else settled

    async def cancel(self, owner: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Ask for the task to stop; see :meth:`TaskManager.cancel <.tasks.TaskManager.cancel>`."""
        settings = self.settings
        task_id = params.get("taskId")
        running = self.table.get(task_id) if isinstance(task_id, str) else None
        if running is not None and secrets.compare_digest(running.owner, owner):
            assert isinstance(task_id, str)
            self.table.cancel(task_id)
            try:
                await settings.store.request_cancel(task_id)  # recorded too, best effort
            except TaskStoreUnavailable as exc:
                logger.warning("task cancel not recorded: %s", exc)
            return {}
        record = await self._record(owner, params)
        if record.terminal:
            return {}
        try:
            await settings.store.request_cancel(record.task_id)
            if settings.bus.shared:
                await settings.bus.publish(
                    {"type": "task.cancel", "task": record.task_id, "origin": settings.instance_id}
                )
        except Exception as exc:
            # The store or the bus is down: the cancel may not reach the task.
            raise store_unavailable(exc) from exc
        return {}

    async def update(self, owner: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Hand ``inputResponses`` to the parked task; see :meth:`TaskManager.update
        <.tasks.TaskManager.update>`."""
        responses = params.get("inputResponses", {})
        if not isinstance(responses, dict):
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: inputResponses must be an object")
        record = await self._record(owner, params)
        running = self.table.get(record.task_id)
        bus = self.settings.bus
        if running is not None:
            inputs = running.inputs
            if inputs is not None and inputs.give(responses):
                try:
                    await self.runner.record_inputs(record.task_id, inputs)
                except TaskStoreUnavailable as exc:
                    raise store_unavailable(exc) from exc
        elif record.status == "input_required" and bus.shared and responses:
            try:
                await bus.publish(
                    {"type": "task.input", "task": record.task_id, "responses": responses}
                )
            except Exception as exc:
                raise store_unavailable(exc) from exc
        return {}
