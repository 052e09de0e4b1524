"""The method-table entries for resources, prompts, completion and ``subscriptions/listen``.

Each handler takes one :class:`~.calls.HandlerInput`; :mod:`.methods`
binds them (``METHODS``) into the one method table.  The methods
that do work on the server's behalf (``resources/read``, ``prompts/get``,
``subscriptions/listen``) have a *target* (``TARGETS``): the dispatcher
finds it while classifying the message and then runs the work inside
``tracked()`` like a tool call, so every cancellation form (a closed HTTP
stream, ``notifications/cancelled``, a time limit, shutdown) stops it the
same way, with the same admission limits (a listen stream has its own:
it is long-lived, not a call; see :class:`~.server.McpServer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs
import trio

from .._core.context import checkpoint_cancelled, current_request
from .._core.request import TrackedRequest
from .._wire.jsonrpc import INVALID_REQUEST, JsonRpcError
from .calls import LEGACY_ONLY, MODERN_ONLY, HandlerInput, Method, Target
from .client_requests import InputRound
from .context import (
    input_required,
    make_context,
    only_rounds,
    run_target,
    without_rounds,
)
from .extension import Extension
from .mrtr import InputRequired
from .pagination import page
from .prompts import completion_result, prompt_result
from .registration import Registration
from .resources import read_result
from .subscriptions import META_SUBSCRIPTION_ID, check_uri, read_filter
from .time_limits import time_limit_reason
from .tools import Tool

__all__ = ["METHODS", "TARGETS", "listen", "next_notification"]

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


def _target(name: str, time_limit: float | None = None) -> Tool:
    if time_limit is None:
        return Tool(name, name, _never, {}, {}, cancellable=True)
    reason = time_limit_reason(time_limit)
    return Tool(name, name, _never, {}, {}, time_limit=time_limit, time_limit_reason=reason)


def _cache(h: HandlerInput, result: dict[str, Any], *, listing: bool) -> dict[str, Any]:
    """Modern results of lists and reads carry ``ttlMs`` and ``cacheScope`` (SEP-2549)."""
    server = h.registration
    if h.call.era == "modern":
        if listing:
            result.setdefault("ttlMs", server.list_ttl_ms)
            result.setdefault("cacheScope", "public")
        else:
            result.setdefault("ttlMs", server.resource_ttl_ms)
            result.setdefault("cacheScope", server.resource_cache_scope)
    return result


def _listing(h: HandlerInput, key: str, items: list[Any]) -> dict[str, Any]:
    """One page of a list result under *key* (``cursor`` in, ``nextCursor`` out; ``-32602``).

    Only the page's items are described, and the modern caching fields added.
    """
    items_page, more = page(key, items, h.params, h.registration.page_size)
    result = {key: [item.describe() for item in items_page], **more}
    return _cache(h, result, listing=True)


# -- resources -----------------------------------------------------------------


async def _list_resources(h: HandlerInput) -> dict[str, Any]:
    return _listing(h, "resources", list(h.registration.resources.resources.values()))


async def _list_templates(h: HandlerInput) -> dict[str, Any]:
    return _listing(h, "resourceTemplates", list(h.registration.resources.templates.values()))


def _resource_target(registration: Registration, params: Mapping[str, Any]) -> Tool:
    # Unknown: -32602 at once, before admission.
    time_limit = registration.resources.find(params.get("uri"))[3]
    return _target("resources/read", time_limit)


async def _read_resource(h: HandlerInput) -> dict[str, Any]:
    uri = h.params["uri"]
    reader, variables, mime_type, _ = h.registration.resources.find(uri)
    ctx = await make_context(h, uri)
    value = await run_target(h, reader(ctx, **variables))
    if isinstance(value, InputRequired):
        return input_required(h, value, uri)
    return _cache(h, read_result(uri, value, mime_type), listing=False)


async def _subscribe(h: HandlerInput) -> dict[str, Any]:
    """Legacy ``resources/subscribe`` / ``unsubscribe`` of a known URI.

    The session remembers it, bounded in count and bytes (the server's
    ``limits.subscriptions``; see :class:`~.subscriptions.SubscriptionLimits`):
    ``notifications/resources/updated`` for it then travel on the session's
    GET stream (HTTP) or its connection; the modern era subscribes with
    ``subscriptions/listen`` instead.
    """
    uri, limits = h.params.get("uri"), h.registration.limits.subscriptions
    if isinstance(uri, str):
        check_uri(uri, limits)  # over-long: -32602 before it is looked at
    h.registration.resources.find(uri)  # unknown: -32602 with the uri
    channel = h.caller.channel
    if channel is not None and isinstance(uri, str):
        subscribed = channel.resource_subscriptions
        if h.call.request.method == "resources/unsubscribe":
            subscribed.discard(uri)
        else:
            subscribed.add(uri, h.runtime.subscription_bytes, h.caller.tenant, limits)
    return {}


# -- prompts and completion ---------------------------------------------------------


async def _list_prompts(h: HandlerInput) -> dict[str, Any]:
    return _listing(h, "prompts", list(h.registration.prompts.prompts.values()))


def _prompt_target(registration: Registration, params: Mapping[str, Any]) -> Tool:
    return _target("prompts/get", registration.prompts.find(params.get("name")).time_limit)


async def _get_prompt(h: HandlerInput) -> dict[str, Any]:
    params = h.params
    prompt = h.registration.prompts.find(params.get("name"))
    arguments = prompt.bind(params.get("arguments"))
    ctx = await make_context(h, prompt.name)
    value = await run_target(h, prompt.fn(ctx, **arguments))
    if isinstance(value, InputRequired):
        return input_required(h, value, prompt.name)
    return prompt_result(value, prompt.description)


async def _complete(h: HandlerInput) -> dict[str, Any]:
    completer, value, context = h.registration.prompts.completer(h.params)
    if completer is None:
        return completion_result([])
    ctx = await make_context(h, "completion/complete")
    try:
        values = await completer(ctx, value, context)
    except InputRound:
        # A completion has no input_required answer: a completer that asks
        # the client is a bug of the server (an internal error, logged),
        # never a BaseException loose in the transport.
        raise RuntimeError("a completer cannot ask the client (ctx.elicit)") from None
    except BaseExceptionGroup as group:
        rest = without_rounds(group)
        if only_rounds(group) is not None:
            raise RuntimeError("a completer cannot ask the client (ctx.elicit)") from None
        if rest is group:
            raise
        raise rest from None
    return completion_result(list(values))


# -- subscriptions/listen -------------------------------------------------------------


def _listen_target(registration: Registration, params: Mapping[str, Any]) -> Tool:
    read_filter(params, _LISTEN_FILTERS, registration.limits.subscriptions)  # malformed: -32602
    return _target("subscriptions/listen")


async def listen(h: HandlerInput, grants: tuple[Extension, ...] = ()) -> dict[str, Any]:
    """Acknowledge, then forward matching notifications until the request is cancelled.

    *grants*: the server's extensions that narrow what is granted (bound by
    :func:`.methods.method_table`); task ids are granted only by them (the
    Tasks extension grants the caller's own), and never without one.
    """
    request, exchange = h.call.request, h.exchange
    if exchange.send is None:
        # A plain JSON response (McpHttpApp(json_response=True)) cannot stream.
        raise JsonRpcError(INVALID_REQUEST, "subscriptions/listen needs a streamed response")
    granted = read_filter(request.params, _LISTEN_FILTERS, h.registration.limits.subscriptions)
    if granted.task_ids and not grants:
        granted = attrs.evolve(granted, task_ids=frozenset())
    for extension in grants:
        granted = await extension.grant_listen(h, granted)
    tag = {META_SUBSCRIPTION_ID: request.id}
    hub = h.runtime.subscriptions

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

    result: dict[str, Any] = await run_target(h, body())
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


METHODS: Final[dict[str, Method]] = {
    "resources/list": Method(_list_resources),
    "resources/templates/list": Method(_list_templates),
    "resources/read": Method(_read_resource),
    "resources/subscribe": Method(_subscribe, LEGACY_ONLY),
    "resources/unsubscribe": Method(_subscribe, LEGACY_ONLY),
    "prompts/list": Method(_list_prompts),
    "prompts/get": Method(_get_prompt),
    "completion/complete": Method(_complete),
    "subscriptions/listen": Method(listen, MODERN_ONLY),
}

TARGETS: Final[dict[str, Target]] = {
    "resources/read": _resource_target,
    "prompts/get": _prompt_target,
    "subscriptions/listen": _listen_target,
}
