"""The handlers of the core methods: lifecycle, logging, discovery, tools and tasks.

Each takes one :class:`~.calls.HandlerInput` and returns its result (or
raises :class:`~.jsonrpc.JsonRpcError`); :mod:`.methods` binds them into the
method table, next to the features served by :mod:`.surface`.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from .._core.namespace import GLOBAL_NAMESPACE
from . import jsonrpc
from .calls import HandlerInput
from .client_requests import InputRound
from .content import ToolError
from .context import (
    ToolContext,
    check_declared,
    client_capabilities,
    input_required,
    invoke,
    make_context,
    needs_state,
    new_context,
    only_rounds,
    without_rounds,
)
from .exchange import Exchange, LegacyState
from .jsonrpc import INVALID_PARAMS, JsonRpcError
from .mrtr import InputRequired, input_required_result
from .pagination import page
from .tasks import (
    TASKS_EXTENSION,
    Runner,
    TasksUnavailable,
    client_declares_tasks,
    require_tasks_extension,
)
from .tools import Tool, ToolArgumentError, error_result
from .versions import LEGACY_VERSIONS, LOG_LEVELS, MODERN_VERSIONS, negotiate_legacy_version

__all__ = [
    "call_tool",
    "discover",
    "empty",
    "initialize",
    "list_tools",
    "set_level",
    "tasks_cancel",
    "tasks_get",
    "tasks_update",
]


# -- lifecycle, logging, discovery ----------------------------------------------


async def initialize(h: HandlerInput) -> dict[str, Any]:
    params, server, channel = h.params, h.registration, h.caller.channel
    version = negotiate_legacy_version(params.get("protocolVersion"))
    capabilities = params.get("capabilities")
    info = params.get("clientInfo")
    if channel is not None:
        channel.legacy = LegacyState(
            version,
            capabilities if isinstance(capabilities, dict) else {},
            info if isinstance(info, dict) else None,
        )
    return server.describe(
        {
            "protocolVersion": version,
            "capabilities": server.capabilities(
                "legacy", notifications=channel is not None and channel.notifications
            ),
            "serverInfo": server.server_info,
        }
    )


async def empty(h: HandlerInput) -> dict[str, Any]:
    return {}


async def set_level(h: HandlerInput) -> dict[str, Any]:
    level = h.params.get("level")
    if level not in LOG_LEVELS:
        raise JsonRpcError(INVALID_PARAMS, "Invalid params: unknown log level")
    channel = h.caller.channel
    if channel is not None and channel.legacy is not None:
        channel.legacy.log_level = level
    return {}


async def discover(h: HandlerInput) -> dict[str, Any]:
    server, era = h.registration, h.call.era
    versions = list(MODERN_VERSIONS)
    capabilities = server.capabilities(era)
    if any(tool.task_support != "forbidden" for tool in server.tools.values()):
        capabilities["extensions"] = {TASKS_EXTENSION: {}}
    if era == "legacy":
        versions += reversed(LEGACY_VERSIONS)
    return server.describe(
        {
            "supportedVersions": versions,
            "capabilities": capabilities,
            "ttlMs": server.list_ttl_ms,
            "cacheScope": "public",
        }
    )


# -- tools ----------------------------------------------------------------------


async def list_tools(h: HandlerInput) -> dict[str, Any]:
    server = h.registration
    tools, more = page("tools", server.list_tools(), h.params, server.page_size)
    result: dict[str, Any] = {"tools": list(tools), **more}
    if h.call.era == "modern":
        result["ttlMs"] = server.list_ttl_ms
        result["cacheScope"] = "public"
    return result


async def call_tool(h: HandlerInput) -> dict[str, Any]:
    tool = h.call.tool
    assert tool is not None
    try:
        arguments = tool.bind(h.params.get("arguments"))
    except ToolArgumentError as exc:
        return error_result(f"Invalid arguments for tool {tool.name!r}: {exc}")
    ctx = await make_context(h, tool.name) if needs_state(h) else new_context(h)
    if h.call.era == "modern" and tool.task_support != "forbidden":
        if h.runtime.tasks.wanted(tool.task_support, client_capabilities(h)):
            if tool.before_task is not None:
                try:
                    asked = await tool.before_task(ctx, **arguments)
                except ToolError as exc:
                    return error_result(str(exc))
                except InputRound as round_:  # ctx.elicit in before_task
                    asked = round_.as_input_required()
                except BaseExceptionGroup as group:  # ... in a task of its own nursery
                    grouped = only_rounds(group)
                    if grouped is None:
                        rest = without_rounds(group)
                        if rest is group:
                            raise
                        raise rest from None  # a round beside a real failure is the failure
                    asked = grouped.as_input_required()
                if isinstance(asked, InputRequired):
                    return input_required(h, asked, tool.name)
            try:
                return await _start_task(h, tool, arguments, ctx)
            except TasksUnavailable:
                if tool.task_support == "required":
                    raise
                # The shared task store is down: answer the ordinary way instead.
    return await invoke(h, ctx, arguments)


async def _start_task(
    h: HandlerInput, tool: Tool, arguments: dict[str, Any], first: ToolContext
) -> dict[str, Any]:
    """Run *tool* as a task in the task manager's nursery (SEP-2663).

    The task's ``ctx`` keeps the MRTR input of the request that created it
    (*first*'s ``input_responses`` and verified ``request_state``).  If the
    ``CreateTaskResult`` never reaches the client (the creating exchange
    lost), the task is cancelled: nobody could poll or cancel it.
    """
    server, caller, request = h.registration, h.caller, h.call.request
    tasks = h.runtime.tasks

    async def runner(exchange: Exchange, task_id: str) -> dict[str, Any]:
        ctx = ToolContext(
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
                    f"Tool {tool.name!r} returned InputRequired without inputRequests in a task",
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
        caller.channel.remember_task(request.id, created["taskId"])
    return created


# -- the Tasks extension (SEP-2663), modern era -------------------------------------


def _task_owner(h: HandlerInput) -> tuple[str, Mapping[str, Any]]:
    envelope = h.call.envelope
    if envelope is None or not client_declares_tasks(envelope.client_capabilities):
        raise require_tasks_extension()
    return h.caller.namespace, h.params


async def tasks_get(h: HandlerInput) -> dict[str, Any]:
    owner, params = _task_owner(h)
    return await h.runtime.tasks.get(owner, params)


async def tasks_cancel(h: HandlerInput) -> dict[str, Any]:
    owner, params = _task_owner(h)
    return await h.runtime.tasks.cancel(owner, params)


async def tasks_update(h: HandlerInput) -> dict[str, Any]:
    owner, params = _task_owner(h)
    return await h.runtime.tasks.update(owner, params)
