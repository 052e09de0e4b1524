"""The Tasks extension on the Extension API: ``McpServer(extensions=[Tasks()])``.

What it adds to a server, each through one hook of
:class:`~trio_mcp_cancel._protocol.extension.Extension`:

* the methods ``tasks/get``, ``tasks/cancel`` and ``tasks/update`` (modern
  era; the caller must declare the extension on each request, ``-32021``);
* its declaration under ``capabilities.extensions`` in ``server/discover``,
  once a tool may run as a task;
* ``tools/call`` of a tool registered with ``task="optional"`` or
  ``"required"``: when the client declares the extension, the call becomes
  a task (``before_task`` first, if any) and is answered at once with the
  ``CreateTaskResult``; otherwise it goes on as an ordinary call;
* ``subscriptions/listen`` with ``taskIds``: only the caller's own tasks
  are granted;
* its service, the :class:`~.manager.TaskManager` (a nursery for the tasks'
  work, the bus listener, the janitor), run by the transports on the shared
  backend when there is one; a shutdown and a closed connection stop tasks
  with the registry's two phases.

The rules of tasks themselves (who may see one, bounds, what a dying
process leaves) are the manager's: see :mod:`.manager`.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._core.events import CancelKind
from .._core.namespace import GLOBAL_NAMESPACE
from .._core.registry import USE_CONFIG, UseConfig
from .._protocol.calls import MODERN_ONLY, HandlerInput, Method
from .._protocol.client_requests import InputRound
from .._protocol.content import ToolError
from .._protocol.context import (
    Context,
    check_declared,
    client_capabilities,
    input_required,
    invoke,
    only_rounds,
    without_rounds,
)
from .._protocol.exchange import Exchange
from .._protocol.extension import CallNext, Extension, ExtensionHost, ToolCall
from .._protocol.mrtr import InputRequired, input_required_result
from .._protocol.registration import Registration
from .._protocol.subscriptions import Filter
from .._protocol.tools import Tool, error_result
from .._wire import jsonrpc
from .._wire.jsonrpc import JsonRpcError
from .._wire.names import TASKS_EXTENSION, client_declares_tasks
from .._wire.versions import Era
from .errors import TasksUnavailable, require_tasks_extension
from .manager import TaskManager
from .runner import Runner

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = ["Tasks"]


class Tasks(Extension):
    """The Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663); see the module docstring.

    ``Tasks()`` runs tasks with a default :class:`~.manager.TaskManager`;
    ``Tasks(TaskManager(ttl_ms=..., max_running=...))`` with one configured
    (:attr:`manager`, where tests and applications read task state).
    """

    name = TASKS_EXTENSION

    def __init__(self, manager: TaskManager | None = None) -> None:
        self.manager: TaskManager = TaskManager() if manager is None else manager
        """Runs the tasks and answers ``tasks/*``."""

    def __repr__(self) -> str:
        return f"Tasks({self.manager!r})"

    # -- what it adds ------------------------------------------------------------

    def methods(self) -> Mapping[str, Method]:
        return {
            "tasks/get": Method(self._get, MODERN_ONLY),
            "tasks/cancel": Method(self._cancel, MODERN_ONLY),
            "tasks/update": Method(self._update, MODERN_ONLY),
        }

    def capability(self, registration: Registration, era: Era) -> Mapping[str, Any] | None:
        if any(tool.task_support != "forbidden" for tool in registration.tools.values()):
            return {}
        return None

    def bind(self, host: ExtensionHost) -> None:
        # Status changes reach the subscriptions/listen streams that asked (taskIds).
        self.manager.on_change = partial(host.publish, "notifications/tasks")

    async def call_tool(self, h: HandlerInput, call: ToolCall, call_next: CallNext) -> Any:
        tool = call.tool
        if h.call.era != "modern" or tool.task_support == "forbidden":
            return await call_next()
        if not self.manager.wanted(tool.task_support, client_capabilities(h)):
            return await call_next()
        if tool.before_task is not None:
            asked = await _before_task(tool, call)
            if isinstance(asked, dict):
                return asked
            if isinstance(asked, InputRequired):
                return input_required(h, asked, tool.name)
        try:
            return await self._start(h, tool, call.arguments, call.ctx)
        except TasksUnavailable:
            if tool.task_support == "required":
                raise
            # The shared task store is down: answer the ordinary way instead.
        return await call_next()

    async def grant_listen(self, h: HandlerInput, granted: Filter) -> Filter:
        if not granted.task_ids:
            return granted
        # Declared on this request (-32021), and only the caller's own tasks are
        # granted (others are "not found", silently).
        if not client_declares_tasks(client_capabilities(h)):
            raise require_tasks_extension()
        owned = await self.manager.owned(h.caller.namespace, granted.task_ids)
        return attrs.evolve(granted, task_ids=owned)

    # -- its lifetime ------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.manager.running

    async def serve(
        self,
        backend: Backend | None = None,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        if backend is None:
            await self.manager.run(task_status=task_status)
        else:
            await self.manager.run(
                store=backend.tasks,
                bus=backend.bus,
                instance_id=backend.instance_id,
                counters=backend.counters,
                task_status=task_status,
            )

    def shutdown(self, reason: str, grace_period: float | UseConfig | None = USE_CONFIG) -> int:
        return self.manager.cancel_all(reason, grace_period=grace_period)

    async def connection_closed(
        self,
        owner: str,
        reason: str,
        *,
        kind: CancelKind = "disconnect",
        grace_period: float | UseConfig | None = USE_CONFIG,
    ) -> None:
        # Nobody can tasks/get them again: stopped like the connection's other requests.
        await self.manager.end_owner(owner, reason, kind=kind, grace_period=grace_period)

    # -- tasks/* -------------------------------------------------------------------

    async def _get(self, h: HandlerInput) -> dict[str, Any]:
        return await self.manager.get(_owner(h), h.params)

    async def _cancel(self, h: HandlerInput) -> dict[str, Any]:
        return await self.manager.cancel(_owner(h), h.params)

    async def _update(self, h: HandlerInput) -> dict[str, Any]:
        return await self.manager.update(_owner(h), h.params)

    # -- a tools/call that becomes a task -------------------------------------------

    async def _start(
        self, h: HandlerInput, tool: Tool, arguments: dict[str, Any], first: Context
    ) -> dict[str, Any]:
        """Run *tool* as a task in the task manager's nursery (SEP-2663).

        The task's ``ctx`` keeps the MRTR input of the request that created it
        (*first*'s ``input_responses`` and verified ``request_state``).  If the
        ``CreateTaskResult`` never reaches the client (the creating exchange
        lost, or the call cancelled on its channel after the answer), the task
        is cancelled: nobody could poll or cancel it.
        """
        server, caller, request = h.registration, h.caller, h.call.request
        tasks = self.manager

        async def runner(exchange: Exchange, task_id: str) -> dict[str, Any]:
            ctx = Context(
                request.id,
                caller,
                None,
                exchange,
                None,
                h.call.era,
                client_capabilities=first.client_capabilities,
                input_responses=first.input_responses,
                request_state=first.request_state,
                task_progress=partial(tasks.progress, task_id),
                ask_task=partial(tasks.ask, task_id),
                lifespan=h.runtime.lifespan,
            )
            key = (task_id, "task:" + caller.namespace)

            async def ask(value: InputRequired) -> None:
                # In a task, InputRequired parks the task in input_required until
                # tasks/update answers it; then the tool runs again with the answers.
                if not value.requests:
                    raise JsonRpcError(
                        jsonrpc.INTERNAL_ERROR,
                        f"Tool {tool.name!r} returned InputRequired without inputRequests"
                        " in a task",
                    )
                check_declared(value, ctx.client_capabilities)
                wire = input_required_result(value, None)["inputRequests"]
                ctx.input_responses = await tasks.ask(task_id, wire)
                ctx.request_state = value.state

            return await invoke(h.with_exchange(exchange), ctx, arguments, key, ask)

        # Quotas are the tenant's (every connection of it), visibility the caller's own.
        tenant = caller.tenant or GLOBAL_NAMESPACE
        work: Runner = runner
        if server.telemetry is not None:  # its execution's span, linked to this call's
            work = server.telemetry.wrap_task(runner, tool.name)
        created = await tasks.start(
            caller.namespace, work, Exchange(), creator=h.exchange, tenant=tenant
        )
        if caller.channel is not None:
            task_id = created["taskId"]
            caller.channel.on_late_cancel(request.id, partial(tasks.creation_cancelled, task_id))
        return created


async def _before_task(tool: Tool, call: ToolCall) -> dict[str, Any] | InputRequired | None:
    """Run the tool's ``before_task``: ``None`` creates the task, an ``InputRequired``
    asks first, a dict is the call's answer (a ``ToolError``'s error result)."""
    assert tool.before_task is not None
    try:
        asked: InputRequired | None = await tool.before_task(call.ctx, **call.arguments)
    except ToolError as exc:
        return error_result(str(exc))
    except InputRound as round_:  # ctx.elicit in before_task
        return round_.as_input_required()
    except BaseExceptionGroup as group:  # ... in a task of its own nursery
        grouped = only_rounds(group)
        if grouped is None:
            rest = without_rounds(group)
            if rest is group:
                raise
            raise rest from None  # a round beside a real failure is the failure
        return grouped.as_input_required()
    return asked


def _owner(h: HandlerInput) -> str:
    """Who asks about a task: the extension must be declared on the request (-32021)."""
    envelope = h.call.envelope
    if envelope is None or not client_declares_tasks(envelope.client_capabilities):
        raise require_tasks_extension()
    return h.caller.namespace
