"""The method-table entries for resources, prompts, completion and ``subscriptions/listen``.

Each handler has the dispatch core's handler signature and is bound into
:class:`~.dispatch.McpServer`'s method table (``METHODS``).  The methods
that do work on the server's behalf (``resources/read``, ``prompts/get``,
``subscriptions/listen``) have a *target* (``TARGETS``): the dispatcher
finds it while classifying the message and then runs the work inside
``tracked()`` like a tool call, so every cancellation form (a closed HTTP
stream, ``notifications/cancelled``, a time limit, shutdown) stops it the
same way, with the same admission limits (a listen stream has its own:
it is long-lived, not a call; see :class:`~.dispatch.McpServer`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import trio

from .._core.context import checkpoint_cancelled, current_request
from .._core.request import TrackedRequest
from .dispatch import (
    _LEGACY,
    Call,
    Caller,
    Exchange,
    McpServer,
    _Method,
    client_capabilities,
    input_required,
    make_context,
    run_target,
)
from .jsonrpc import INVALID_REQUEST, JsonRpcError
from .mrtr import InputRequired
from .pagination import page
from .prompts import completion_result, prompt_result
from .resources import read_result
from .subscriptions import META_SUBSCRIPTION_ID, read_filter
from .tasks import client_declares_tasks, require_tasks_extension
from .tools import Tool
from .versions import Era

__all__ = ["METHODS", "TARGETS", "next_notification"]

_MODERN: Final[frozenset[Era]] = frozenset({"modern"})
_LISTEN_FILTERS: Final = frozenset(
    {
        "toolsListChanged",
        "promptsListChanged",
        "resourcesListChanged",
        "resourceSubscriptions",
        "taskIds",
    }
)


async def _never(*args: object) -> None:  # the fn of targets whose handler does the work
    raise AssertionError("not called")


def _target(name: str) -> Tool:
    return Tool(name, name, _never, {}, {}, cancellable=True)


def _cache(
    server: McpServer, call: Call, result: dict[str, Any], *, listing: bool
) -> dict[str, Any]:
    """Modern results of lists and reads carry ``ttlMs`` and ``cacheScope`` (SEP-2549)."""
    if call.era == "modern":
        if listing:
            result.setdefault("ttlMs", server.list_ttl_ms)
            result.setdefault("cacheScope", "public")
        else:
            result.setdefault("ttlMs", server.resource_ttl_ms)
            result.setdefault("cacheScope", server.resource_cache_scope)
    return result


def _params(call: Call) -> Mapping[str, Any]:
    assert call.request is not None
    return call.request.params


def _listing(server: McpServer, call: Call, key: str, items: list[Any]) -> dict[str, Any]:
    """One page of a list result under *key* (``cursor`` in, ``nextCursor`` out; ``-32602``).

    Only the page's items are described, and the modern caching fields added.
    """
    items_page, more = page(key, items, _params(call), server.page_size)
    result = {key: [item.describe() for item in items_page], **more}
    return _cache(server, call, result, listing=True)


# -- resources -----------------------------------------------------------------


async def _list_resources(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    return _listing(server, call, "resources", list(server.resources.resources.values()))


async def _list_templates(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    return _listing(server, call, "resourceTemplates", list(server.resources.templates.values()))


def _resource_target(server: McpServer, params: Mapping[str, Any]) -> Tool:
    server.resources.find(params.get("uri"))  # unknown: -32602 at once, before admission
    return _target("resources/read")


async def _read_resource(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    uri = _params(call)["uri"]
    reader, variables, mime_type = server.resources.find(uri)
    ctx = await make_context(server, call, caller, exchange, uri)
    value = await run_target(call, caller, exchange, started, lambda: reader(ctx, **variables))
    if isinstance(value, InputRequired):
        return input_required(server, call, caller, value, uri)
    return _cache(server, call, read_result(uri, value, mime_type), listing=False)


async def _subscribe(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    """Legacy ``resources/subscribe`` / ``unsubscribe``: accepted for a known URI.

    Updates would travel on the legacy GET stream, which this library does
    not serve (see README); the modern era subscribes with ``subscriptions/listen``.
    """
    server.resources.find(_params(call).get("uri"))  # unknown: -32602 with the uri
    return {}


# -- prompts and completion ---------------------------------------------------------


async def _list_prompts(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    return _listing(server, call, "prompts", list(server.prompts.prompts.values()))


def _prompt_target(server: McpServer, params: Mapping[str, Any]) -> Tool:
    server.prompts.find(params.get("name"))
    return _target("prompts/get")


async def _get_prompt(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    params = _params(call)
    prompt = server.prompts.find(params.get("name"))
    arguments = prompt.bind(params.get("arguments"))
    ctx = await make_context(server, call, caller, exchange, prompt.name)
    value = await run_target(call, caller, exchange, started, lambda: prompt.fn(ctx, **arguments))
    if isinstance(value, InputRequired):
        return input_required(server, call, caller, value, prompt.name)
    return prompt_result(value, prompt.description)


async def _complete(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    completer, value, context = server.prompts.completer(_params(call))
    if completer is None:
        return completion_result([])
    ctx = await make_context(server, call, caller, exchange, "completion/complete")
    return completion_result(list(await completer(ctx, value, context)))


# -- subscriptions/listen -------------------------------------------------------------


def _listen_target(server: McpServer, params: Mapping[str, Any]) -> Tool:
    read_filter(params, _LISTEN_FILTERS)  # malformed: -32602 at once
    return _target("subscriptions/listen")


async def _listen(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    """Acknowledge, then forward matching notifications until the request is cancelled."""
    request = call.request
    assert request is not None
    if exchange.send is None:
        # A plain JSON response (McpHttpApp(json_response=True)) cannot stream.
        raise JsonRpcError(INVALID_REQUEST, "subscriptions/listen needs a streamed response")
    granted = read_filter(request.params, _LISTEN_FILTERS)
    if granted.task_ids:
        # Tasks extension: declared on this request (-32021), and only the
        # caller's own tasks are granted (others are "not found", silently).
        if not client_declares_tasks(client_capabilities(call, caller)):
            raise require_tasks_extension()
        owned = await server.tasks.owned(caller.namespace, granted.task_ids)
        granted = attrs.evolve(granted, task_ids=owned)
    tag = {META_SUBSCRIPTION_ID: request.id}
    hub = server.subscriptions

    async def body() -> dict[str, Any]:
        listener = hub.open(granted)
        try:
            await exchange.notify(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/subscriptions/acknowledged",
                    "params": {"notifications": granted.to_wire(), "_meta": tag},
                }
            )
            tracked_request = current_request()
            while True:
                await checkpoint_cancelled()
                try:
                    message = await next_notification(listener.receive, tracked_request)
                except trio.EndOfChannel:
                    break  # overflowed: end the stream, the client re-lists
                if message is None:
                    continue  # flagged: checkpoint_cancelled() raises
                params = {**message["params"], "_meta": tag}
                await exchange.notify(
                    {"jsonrpc": "2.0", "method": message["method"], "params": params}
                )
        finally:
            hub.close(listener)
        return {"_meta": dict(tag)}

    result: dict[str, Any] = await run_target(call, caller, exchange, started, body)
    return result


async def next_notification(
    receive: trio.MemoryReceiveChannel[dict[str, Any]], request: TrackedRequest
) -> dict[str, Any] | None:
    """The next queued notification, or ``None`` as soon as *request* is flagged.

    Event-driven, with no timer: the wait ends when the hub queues a message
    (or closes the queue: ``EndOfChannel``) or when the polled flag is set,
    whatever set it (``notifications/cancelled``, a closed stream, shutdown),
    through :meth:`~.TrackedRequest.on_cancelled`.  An idle listener costs
    nothing and never wakes.
    """
    with trio.CancelScope() as wait:
        remove = request.on_cancelled(wait.cancel)
        try:
            return await receive.receive()
        finally:
            remove()
    return None


METHODS: Final[dict[str, _Method]] = {
    "resources/list": _Method(_list_resources),
    "resources/templates/list": _Method(_list_templates),
    "resources/read": _Method(_read_resource),
    "resources/subscribe": _Method(_subscribe, _LEGACY),
    "resources/unsubscribe": _Method(_subscribe, _LEGACY),
    "prompts/list": _Method(_list_prompts),
    "prompts/get": _Method(_get_prompt),
    "completion/complete": _Method(_complete),
    "subscriptions/listen": _Method(_listen, _MODERN),
}

TARGETS: Final[dict[str, Callable[[McpServer, Mapping[str, Any]], Tool]]] = {
    "resources/read": _resource_target,
    "prompts/get": _prompt_target,
    "subscriptions/listen": _listen_target,
}
