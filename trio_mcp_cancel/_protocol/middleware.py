"""Middleware: code that wraps every request, sees how it ended, and may refuse or rewrite it.

A middleware is ``async def mw(request: MiddlewareRequest, call_next) -> result``.
The dispatcher runs the chain in its one answer path (``Dispatcher._answer``),
so it wraps every request (never a notification) on every transport and in
both eras; the first middleware given is the outermost.  ``call_next()``
returns the result (a dict the middleware may rewrite) or raises: a
:class:`~.._wire.jsonrpc.JsonRpcError` (the request's JSON-RPC error), a
``RequestCancelled`` (the request was cancelled) or ``trio.Cancelled`` (the
transport itself is going away).  To refuse, raise ``JsonRpcError``;
to rewrite the request, replace ``request.params`` before ``call_next()``.

Before ``call_next()`` returns or raises, ``request.outcome`` says how the
request ended (:class:`Outcome`), read from the tracked request's
cancellation in the registry when it was cancelled: who cancelled it, why
(the bounded cause telemetry uses) and in which phase it stopped.  A
middleware's ``finally`` therefore always sees an outcome, also after a
hard cancel; it must let ``trio.Cancelled`` (and ``RequestCancelled``)
propagate, since swallowing either would send an answer MCP forbids.

With no middleware installed the dispatcher calls the handler directly: the
chain costs nothing unless used.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, cast

import attrs
import trio

from .._core.errors import RequestCancelled
from .._core.request import TrackedRequest
from .._telemetry.names import server_cause
from .._wire.jsonrpc import INTERNAL_ERROR, JsonRpcError
from .._wire.versions import Era
from .calls import HandlerInput, RequestCall
from .tools import Tool

__all__ = ["CallNext", "Middleware", "MiddlewareRequest", "Outcome", "run_chain"]

CallNext = Callable[[], Awaitable[Any]]
"""The rest of the chain (the next middleware, at the end the method's handler)."""

Middleware = Callable[["MiddlewareRequest", CallNext], Awaitable[Any]]
"""``async def mw(request, call_next) -> result``: see the module docstring."""

Status = Literal["ok", "error", "cancelled"]
_FROZEN = attrs.setters.frozen


@attrs.frozen
class Outcome:
    """How one request ended, as a middleware reads it after ``call_next()``."""

    status: Status
    """``"ok"``: a result; ``"error"``: a JSON-RPC error; ``"cancelled"``: it was cancelled."""
    error_code: int | None = None
    """The JSON-RPC error code (``-32603`` for a failure that was not a ``JsonRpcError``)."""
    tool_error: bool = False
    """A ``tools/call`` result with ``isError`` (still ``"ok"`` on the JSON-RPC level)."""
    cancel_kind: str | None = None
    """``"client"``, ``"server"`` or ``"disconnect"``."""
    cancel_cause: str | None = None
    """The bounded cause: ``"client"``, ``"disconnect"``, ``"time_limit"``, ``"shutdown"``,
    ``"session_end"``, ``"token_expired"``, ``"limit"``, ``"internal_error"``, ``"other"``."""
    cancel_phase: str | None = None
    """Where it stopped: ``"flag"`` (it noticed the polled flag), ``"hard_cancel"`` (the
    grace period ran out) or ``"overrun"`` (it ignored even that for a while); ``None``
    when no tracked request was cancelled (an untracked method, a transport closing)."""
    reason: str | None = None
    """The cancel's reason as given (the client's, or the server's own)."""


@attrs.define(eq=False)
class MiddlewareRequest:
    """One request as the middleware sees it; only ``params`` (and ``outcome``) change."""

    method: str = attrs.field(on_setattr=_FROZEN)
    params: dict[str, Any]
    """The request's params; replace them (or the dict's items) before ``call_next()``
    to rewrite the request."""
    era: Era = attrs.field(on_setattr=_FROZEN)
    request_id: str | int = attrs.field(on_setattr=_FROZEN)
    target: str | None = attrs.field(on_setattr=_FROZEN)
    """The tool of a ``tools/call``, the prompt of ``prompts/get``, the URI of
    ``resources/read``; else ``None``."""
    principal: str | None = attrs.field(on_setattr=_FROZEN)
    session_id: str | None = attrs.field(on_setattr=_FROZEN)
    namespace: str = attrs.field(on_setattr=_FROZEN)
    tenant: str | None = attrs.field(on_setattr=_FROZEN)
    read_only: bool = attrs.field(default=False, on_setattr=_FROZEN)
    """A ``tools/call`` of a tool annotated ``readOnlyHint: true`` (what may be cached)."""
    state: dict[str, Any] = attrs.field(factory=dict, on_setattr=_FROZEN)
    """Free for the middleware of this request to share values (the timing one's duration)."""
    outcome: Outcome | None = None
    """How the request ended; set before ``call_next()`` returns or raises."""


def _target(call: RequestCall) -> str | None:
    params = call.request.params
    key = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}.get(
        call.request.method
    )
    value = None if key is None else params.get(key)
    return value[:200] if isinstance(value, str) else None


def _read_only(call: RequestCall) -> bool:
    tool = call.tool
    if call.request.method != "tools/call" or tool is None or not tool.annotations:
        return False
    return tool.annotations.get("readOnlyHint") is True


def outcome_of(exc: BaseException, tracked: TrackedRequest | None) -> Outcome:
    """The outcome of a request that raised *exc* (see :class:`Outcome`)."""
    if isinstance(exc, JsonRpcError):
        return Outcome("error", error_code=exc.code)
    if isinstance(exc, RequestCancelled):
        return _cancelled(exc.kind, exc.reason, tracked)
    if isinstance(exc, trio.Cancelled):
        return _cancelled("server", None, tracked)
    return Outcome("error", error_code=INTERNAL_ERROR)


def _cancelled(kind: str, reason: str | None, tracked: TrackedRequest | None) -> Outcome:
    phase = None
    if tracked is not None and tracked.cancellation is not None:
        # The registry's record is the truth (the exception may carry less).
        cancellation = tracked.cancellation
        kind, reason = cancellation.kind, cancellation.reason
        hard = trio.current_time() >= tracked.hard_deadline
        phase = "overrun" if tracked.overran else "hard_cancel" if hard else "flag"
    cause = kind if kind != "server" else server_cause(reason)
    return Outcome(
        "cancelled", cancel_kind=kind, cancel_cause=cause, cancel_phase=phase, reason=reason
    )


class _Forward:
    """Reports a rewritten request's start on the original :class:`HandlerInput`."""

    def __init__(self, h: HandlerInput) -> None:
        self.h = h

    def started(self, value: None = None) -> None:
        self.h.started()


async def run_chain(
    chain: list[Middleware], h: HandlerInput, find_tool: Callable[[Mapping[str, Any]], Tool]
) -> Any:
    """Run *h*'s request through *chain* (first = outermost), then its handler, once."""
    call, caller = h.call, h.caller
    original = call.request.params
    request = MiddlewareRequest(
        call.request.method,
        original,
        call.era,
        call.request.id,
        _target(call),
        caller.principal,
        caller.session_id,
        caller.namespace,
        caller.tenant,
        _read_only(call),
    )
    layers = tuple(chain)  # a decorator added while serving applies to later requests
    ran = False

    async def handler() -> Any:
        nonlocal ran
        if ran:
            raise RuntimeError("a middleware called call_next() twice")
        ran = True
        inner = h if request.params is original else _rewritten(h, request.params, find_tool)
        result = await inner.call.method.handler(inner)
        if inner.call.tracked and h.exchange.silenced:
            # The client cancelled, but the tool finished anyway: the dispatcher
            # sends nothing, and the middleware must see a cancel, not a result.
            raise RequestCancelled(None, h.exchange.cancel_kind or "client")
        return result

    async def step(index: int) -> Any:
        try:
            if index == len(layers):
                result = await handler()
            else:
                result = await layers[index](request, lambda: step(index + 1))
        except BaseException as exc:
            if request.outcome is None:  # the innermost raise decides, once
                request.outcome = outcome_of(exc, h.exchange.request)
            raise
        if request.outcome is None:
            tool_error = isinstance(result, dict) and result.get("isError") is True
            request.outcome = Outcome("ok", tool_error=tool_error)
        return result

    return await step(0)


def _rewritten(
    h: HandlerInput, params: dict[str, Any], find_tool: Callable[[Mapping[str, Any]], Tool]
) -> HandlerInput:
    """*h* with the params a middleware gave: a ``tools/call`` to another name finds that tool."""
    if not isinstance(params, dict):
        raise TypeError("a middleware set request.params to something other than a dict")
    call = h.call
    tool = call.tool
    if call.request.method == "tools/call" and params.get("name") != call.request.params.get(
        "name"
    ):
        tool = find_tool(params)
    request = attrs.evolve(call.request, params=params)
    new = RequestCall(call.era, request, call.method, tool, call.envelope)
    status = cast("trio.TaskStatus[None]", _Forward(h))
    return HandlerInput(h.registration, new, h.caller, h.exchange, h.runtime, status)
