"""Running a task: its tool in the manager's nursery, what the tool says mid-run, its end.

The work of a task outlives the request that created it, so it runs in
the nursery :meth:`TaskManager.run <.tasks.TaskManager.run>` opens, held
here while the manager runs.  While the tool runs it may park the task for
input (:meth:`TaskRunner.ask`, answered through ``tasks/update`` or the
bus) and report progress (the record's ``statusMessage``); however it
ends (a result, an error, a cancel, the manager shutting down) the record
is settled and the task's slots are given back.  A run whose record another
process settled meanwhile (see :meth:`.task_table.RunningTasks.settled_elsewhere`)
is cancelled, and its own ending is dropped: the first terminal state stands.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from .._core.context import checkpoint_cancelled
from .._core.errors import REQUEST_CANCELLED, RequestCancelled
from .._core.ratelog import RateLimitedLog, failure_key
from .._protocol.exchange import Exchange
from .._wire.jsonrpc import INTERNAL_ERROR, JsonRpcError
from ..backends.base import TaskStoreUnavailable
from ..backends.task_records import TaskStatus
from .admission import TaskAdmission
from .errors import store_unavailable
from .progress import TaskProgress, progress_message
from .settings import TaskSettings
from .status import StatusWriter
from .table import PendingInputs, RunningTasks

__all__ = ["Runner", "TaskRunner"]

logger = logging.getLogger("trio_mcp_cancel.tasks")
_failures = RateLimitedLog(logger)  # the same failure, task after task: one line a minute

Runner = Callable[[Exchange, str], Awaitable[dict[str, Any]]]
"""Runs the tool with the task's exchange and id (inside ``tracked()``); its ``CallToolResult``."""


@attrs.define(eq=False)
class TaskRunner:
    """Runs admitted tasks in the manager's nursery and settles them."""

    settings: TaskSettings
    table: RunningTasks
    admission: TaskAdmission
    status: StatusWriter
    nursery: trio.Nursery | None = None
    """The manager's nursery while it runs (``None``: tasks are not being served)."""

    def start(self, task_id: str, runner: Runner, exchange: Exchange) -> None:
        """Start the work of an admitted task (the manager checked it runs)."""
        assert self.nursery is not None
        self.nursery.start_soon(self._work, task_id, runner, exchange)

    async def _work(self, task_id: str, runner: Runner, exchange: Exchange) -> None:
        """Run one task's tool and settle its record, however it ends."""
        status: TaskStatus
        result: dict[str, Any] | None = None
        error: dict[str, Any] | None = None
        message: str | None = None
        running = self.table.get(task_id)
        assert running is not None
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
                await self.status.settle(
                    task_id,
                    "failed",
                    error={"code": INTERNAL_ERROR, "message": "The server shut down"},
                    message="the server shut down before the task finished",
                )
            raise
        finally:
            self.table.remove(task_id)
            await self.admission.release(running.tenant)
        if running.settled_elsewhere is not None:
            # Another process gave the task up (this one was paused past its
            # liveness): its terminal state stands; what the run ended with
            # is dropped, never written over it.
            logger.warning(
                "task %s ended %s here after it was settled %s elsewhere: result dropped",
                task_id[:8],
                status,
                running.settled_elsewhere,
            )
            if running.progress is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(2.0):
                    await running.progress.close()
            return
        # Shielded: a manager stopping right after the work ended still records how.
        with trio.CancelScope(shield=True), trio.move_on_after(2.0):
            if running.progress is not None:
                await running.progress.close()  # the last progress, before the final status
            await self.status.settle(task_id, status, result=result, error=error, message=message)

    # -- input while running ---------------------------------------------------

    async def ask(self, task_id: str, requests: Mapping[str, Any]) -> dict[str, Any]:
        """Park a running task in ``input_required`` until every key is answered.

        See :meth:`TaskManager.ask <.tasks.TaskManager.ask>`.
        """
        running = self.table.get(task_id)
        if running is None or not requests:
            raise JsonRpcError(INTERNAL_ERROR, "Internal error: this task cannot ask for input")
        inputs = running.inputs = PendingInputs(dict(requests))
        store = self.settings.store
        try:
            async with inputs.lock:
                await self.status.set(
                    task_id, "input_required", input_requests=dict(inputs.pending)
                )
            record = await store.get(task_id)
            # No answer can come once the record expired: never wait past it.
            left = 0.0 if record is None else record.expires_at - store.clock()
            with trio.move_on_after(max(0.0, left)) as waiting:
                if running.exchange.cancel_kind is None:
                    await inputs.wake.wait()
            await checkpoint_cancelled()
            if waiting.cancelled_caught:
                raise JsonRpcError(INTERNAL_ERROR, "The task expired while waiting for input")
        except TaskStoreUnavailable as exc:
            raise store_unavailable(exc) from exc
        finally:
            inputs.wake.set()
            running.inputs = None
        return inputs.answers

    async def record_inputs(self, task_id: str, inputs: PendingInputs) -> None:
        """Record what a parked task still waits for; wake it once nothing is left."""
        async with inputs.lock:
            if inputs.wake.is_set():
                return  # already resumed, or cancelled
            if inputs.pending:
                await self.status.set(
                    task_id, "input_required", input_requests=dict(inputs.pending)
                )
                return
            try:
                await self.status.set(task_id, "working")
            finally:
                inputs.wake.set()

    def record_inputs_soon(self, task_id: str, inputs: PendingInputs) -> None:
        """:meth:`record_inputs` in the background (answers that came through the bus)."""
        if self.nursery is not None:
            self.nursery.start_soon(self._record_inputs_quietly, task_id, inputs)

    async def _record_inputs_quietly(self, task_id: str, inputs: PendingInputs) -> None:
        try:
            await self.record_inputs(task_id, inputs)
        except TaskStoreUnavailable as exc:
            logger.warning("task %s input not recorded: %s", task_id[:8], exc)

    # -- progress --------------------------------------------------------------

    def progress(
        self, task_id: str, progress: float, total: float | None, message: str | None
    ) -> None:
        """``ctx.report_progress`` inside a task: update its ``statusMessage`` (rate-limited)."""
        running = self.table.get(task_id)
        if running is None or self.nursery is None:
            return
        if running.progress is None:
            running.progress = TaskProgress(
                lambda text: self.status.write_message(task_id, text),
                self.settings.progress_interval,
            )
            self.nursery.start_soon(running.progress.run)
        running.progress.report(progress_message(progress, total, message))
