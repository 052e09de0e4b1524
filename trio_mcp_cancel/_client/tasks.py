"""The client side of the Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663).

A client that declares the extension on a ``tools/call`` must take either
answer: the tool's result, or a ``CreateTaskResult`` (``resultType:
"task"`` and the flat ``Task`` fields).  :func:`follow_task` turns the
second into the first, so ``call_tool`` returns a tool result either way:
it polls ``tasks/get`` at the server's ``pollIntervalMs`` until the task is
terminal and returns the inlined ``result`` (``completed``), or raises
:class:`McpTaskError` (``failed``: the task's JSON-RPC error) or
:class:`McpTaskCancelled` (``cancelled``: the client's own error, never the
server's ``-32800``).

**Cancellation is the point.**  A task outlives the request that made it
(and the connection), so closing a stream or ``notifications/cancelled``
cannot stop it; MCP forbids the latter for tasks anyway.  Whenever the
client stops following a task that is not terminal, it sends
``tasks/cancel``:

* the caller's tracked request is flagged (a gateway's own client
  cancelled): ``tasks/cancel`` at once, in the polite phase, then
  :class:`RequestCancelled`, as for a plain call; the hard cancel of the
  request bounds the wait for the acknowledgement;
* the caller's cancel scope is cancelled (a timeout, the hard cancel):
  ``tasks/cancel`` in a shielded scope bounded by
  :attr:`TaskPolling.cancel_timeout`, then ``trio.Cancelled`` goes on; a
  task left running with nobody following it is the leak this avoids;
* anything else ends the following (the task asks for input this client
  cannot give, its TTL ran out, the connection broke): the same bounded
  ``tasks/cancel``, then the error.

A task that asks for input (``input_required`` with ``inputRequests``) is
answered through the client's handlers (:mod:`._client.handlers`) with
``tasks/update``, then followed on; a changed ``statusMessage`` (where the
server puts a task's progress, ``"3/10: message"``) reaches the caller's
progress callback as progress params.

The acknowledgement is eventually consistent (SEP-2663): the client does
not wait for ``cancelled``, it has nothing left to wait for.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
import trio

from .._core.context import current_request
from .._core.errors import RequestCancelled
from .._wire.names import TASK_STATUSES, TASKS_EXTENSION, TERMINAL_STATUSES
from .calls import ProgressCallback
from .errors import McpError, Message
from .handlers import ClientHandlers

__all__ = [
    "McpTaskCancelled",
    "McpTaskError",
    "TaskCallback",
    "TaskPolling",
    "TaskServer",
    "follow_task",
    "status_progress",
    "with_tasks",
]

logger = logging.getLogger("trio_mcp_cancel.client")


TaskCallback = Callable[[Message], object]
"""Called with every ``Task`` the server sends: the ``CreateTaskResult``, then each poll."""


class McpTaskError(McpError):
    """A task ended without a result.

    ``status`` is ``"failed"`` (``code``/``message``/``data`` are the task's
    JSON-RPC error), ``"cancelled"`` (the subclass :class:`McpTaskCancelled`),
    or the status it was in when the client gave up on it
    (``input_required``: this client has no handlers, or the task asked more
    than ``max_rounds`` times; ``working`` past its TTL; code 0, as for
    every error the client makes itself).  ``task`` is the last ``Task``
    the server sent.
    """

    def __init__(self, code: int, message: str, data: object, task: Message) -> None:
        super().__init__(code, message, data)
        self.task = task
        self.task_id = str(task.get("taskId", ""))
        self.status = str(task.get("status", ""))


class McpTaskCancelled(McpTaskError):
    """A followed task ended ``cancelled`` (by ``tasks/cancel``, from here or elsewhere).

    Made by the client from the task's status, so its ``code`` is 0 like
    every error the client makes itself: a ``-32800`` would read as the
    server's JSON-RPC answer to a cancelled *request*, which this is not
    (the request that made the task was answered, with the task).
    ``status`` is ``"cancelled"``; ``status_message`` is the task's
    ``statusMessage`` (the server's reason), ``None`` when it gave none.
    """

    def __init__(self, task: Message) -> None:
        message = task.get("statusMessage")
        self.status_message = message if isinstance(message, str) else None
        super().__init__(
            0, f"the task was cancelled: {self.status_message or 'no reason given'}", None, task
        )


@attrs.frozen
class TaskPolling:
    """How a client follows tasks.

    The server's ``pollIntervalMs`` is honoured (SHOULD), within
    [*min_interval*, *max_interval*] seconds, so a bad value can neither
    make the client spin nor park it for a day; *default_interval* is used
    when the server gives none.  *cancel_timeout* bounds the wait for the
    ``tasks/cancel`` acknowledgement when the caller is already cancelled.
    """

    default_interval: float = 1.0
    min_interval: float = 0.01
    max_interval: float = 60.0
    cancel_timeout: float = 2.0

    def interval(self, task: Message) -> float:
        value = task.get("pollIntervalMs")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return self.default_interval
        seconds = value / 1000 if math.isfinite(value) else self.max_interval
        return min(max(seconds, self.min_interval), self.max_interval)


class TaskServer(Protocol):
    """What following a task needs from the client: its two task requests.

    The engine's public ``get_task`` and ``cancel_task`` are exactly this;
    a follower needs nothing else from it.
    """

    async def get_task(self, task_id: str) -> Message:
        """``tasks/get``: the task as the server has it now."""

    async def cancel_task(self, task_id: str) -> Message:
        """``tasks/cancel``: the way a task, not a request, is cancelled."""

    async def update_task(self, task_id: str, input_responses: Mapping[str, Any]) -> Message:
        """``tasks/update``: answers to the task's ``inputRequests``."""


def with_tasks(capabilities: Mapping[str, Any], declared: bool) -> dict[str, Any]:
    """*capabilities* with the Tasks extension declared, or without it."""
    out = dict(capabilities)
    extensions = dict(out.get("extensions") or {})
    if declared:
        extensions[TASKS_EXTENSION] = dict(extensions.get(TASKS_EXTENSION) or {})
    else:
        extensions.pop(TASKS_EXTENSION, None)
    if extensions:
        out["extensions"] = extensions
    else:
        out.pop("extensions", None)
    return out


def _checked(task: Message, task_id: str | None) -> Message:
    """*task* if it is a ``Task`` (of *task_id*, once known), else :class:`McpError`."""
    found = task.get("taskId")
    if not isinstance(found, str) or not found or (task_id is not None and found != task_id):
        raise McpError(0, f"invalid task from the server: {task!r}"[:500])
    if task.get("status") not in TASK_STATUSES:
        raise McpError(0, f"invalid task status from the server: {task.get('status')!r}"[:500])
    return task


def _outcome(task: Message) -> Message:
    """A terminal task's result, or :class:`McpTaskError` (:class:`McpTaskCancelled`)."""
    status = task["status"]
    if status == "completed":
        result = task.get("result")
        if not isinstance(result, dict):
            raise McpError(0, f"a completed task without a result: {task!r}"[:500])
        return result
    if status == "failed":
        error = task.get("error")
        error = error if isinstance(error, dict) else {}
        code = error.get("code")
        raise McpTaskError(
            code if isinstance(code, int) else 0,
            str(error.get("message") or task.get("statusMessage") or "task failed"),
            error.get("data"),
            task,
        )
    raise McpTaskCancelled(task)


async def follow_task(
    server: TaskServer,
    created: Message,
    *,
    polling: TaskPolling,
    forward_cancel: bool = True,
    on_task: TaskCallback | None = None,
    on_progress: ProgressCallback | None = None,
    handlers: ClientHandlers | None = None,
) -> Message:
    """Follow the task *created* announced to its end; see the module docstring.

    *server* answers the task requests; *polling* paces them;
    *forward_cancel*: cancel the task when the tracked request the caller
    runs in is flagged (the engine's setting of the same name).
    """
    task = _checked(created, None)
    task_id: str = task["taskId"]
    request = current_request(None) if forward_cancel else None
    started = trio.current_time()
    cancel_acked = False
    last_message: object = None
    answered = 0

    async def poll() -> Message:
        nonlocal task, last_message, answered
        while True:
            if on_task is not None:
                on_task(task)
            message = task.get("statusMessage")
            if on_progress is not None and isinstance(message, str) and message != last_message:
                on_progress(status_progress(task))
            last_message = message
            status = task["status"]
            if status in TERMINAL_STATUSES:
                return task
            if status == "input_required" and task.get("inputRequests"):
                if handlers is None:
                    raise McpTaskError(
                        0, "the task needs input, which this client cannot give", None, task
                    )
                answered += 1
                if answered > handlers.max_rounds:
                    raise McpTaskError(
                        0,
                        f"the task asked for input more than {handlers.max_rounds} times",
                        None,
                        task,
                    )
                responses = await handlers.answer_all(task["inputRequests"])
                await server.update_task(task_id, responses)
                task = _checked(await server.get_task(task_id), task_id)
                continue
            ttl = task.get("ttlMs")  # null: unlimited
            if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and math.isfinite(ttl):
                expires = started + ttl / 1000
                if trio.current_time() >= expires:
                    raise McpTaskError(0, "the task outlived its TTL", None, task)
                await trio.sleep(min(polling.interval(task), expires - trio.current_time()))
            else:
                await trio.sleep(polling.interval(task))
            answer = await server.get_task(task_id)
            task = _checked(answer, task_id)

    try:
        with trio.CancelScope() as flagged:
            remove = request.on_cancelled(flagged.cancel) if request is not None else None
            try:
                final = await poll()
            finally:
                if remove is not None:
                    remove()
        if not flagged.cancelled_caught:
            return _outcome(final)
        # The caller's request was flagged: cancel the task in the polite
        # phase (the request's hard cancel bounds the wait), then stop.
        assert request is not None and request.cancellation is not None
        cancellation = request.cancellation
        await _cancel_task(server, task_id, cancellation.reason)
        cancel_acked = True
        raise RequestCancelled(cancellation.reason, cancellation.kind)
    except BaseException:
        if not cancel_acked and task["status"] not in TERMINAL_STATUSES:
            with trio.CancelScope(shield=True), trio.move_on_after(polling.cancel_timeout):
                await _cancel_task(server, task_id, "the client stopped following")
        raise


_PROGRESS = re.compile(
    r"(?P<progress>-?[0-9.]+)(?:/(?P<total>-?[0-9.]+))?(?:: (?P<message>.*))?", re.S
)


def status_progress(task: Message) -> Message:
    """A task's ``statusMessage`` as progress params, for the caller's progress callback.

    Our server writes a task's progress as ``"3/10: message"``; that form
    gives ``progress``, ``total`` and ``message``; any other text is the
    ``message`` alone.  ``taskId`` and ``status`` say where it came from.
    """
    text = str(task.get("statusMessage", ""))
    params: Message = {"taskId": task.get("taskId"), "status": task.get("status"), "message": text}
    match = _PROGRESS.fullmatch(text)
    if match is not None:
        with contextlib.suppress(ValueError):
            params["progress"] = float(match["progress"])
            if match["total"] is not None:
                params["total"] = float(match["total"])
            params["message"] = match["message"] or ""
    return params


async def _cancel_task(server: TaskServer, task_id: str, reason: str | None) -> None:
    """``tasks/cancel``, best effort: an error answer or a broken connection is logged."""
    try:
        await server.cancel_task(task_id)
    except McpError as exc:
        logger.info("tasks/cancel of %s... (%s) failed: %s", task_id[:8], reason, exc)
    else:
        logger.debug("task %s... cancelled (%s)", task_id[:8], reason)
