"""A transport-independent MCP server: tools, dispatch, and cancellation policy.

:class:`McpServer` knows the MCP methods this library serves (``initialize``,
``ping``, ``tools/list``, ``tools/call`` and ``notifications/cancelled``) and
nothing about HTTP or WebSockets.  A transport decodes a message, describes
the caller (:class:`Caller`: its scope and registry) and the exchange
(:class:`Exchange`: where progress goes, and a slot for the tracked request
so the transport can cancel it on disconnect), and sends whatever
:meth:`McpServer.handle` returns.

Every ``tools/call`` runs inside ``tracked()``, so tool bodies only need
``await ctx.checkpoint()`` (or :func:`checkpoint_cancelled`) in their loops.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal, TypeVar, get_type_hints

import attrs
import trio

from . import jsonrpc
from .context import checkpoint_cancelled
from .errors import REQUEST_CANCELLED, RequestCancelled
from .events import CancelKind
from .jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, JsonRpcError, Message
from .registry import USE_CONFIG, Registry, TrackedRequest, UseConfig
from .validation import RequestId, is_valid_request_id

__all__ = [
    "LATEST_PROTOCOL_VERSION",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "TOO_MANY_REQUESTS",
    "too_many_requests",
    "Caller",
    "Exchange",
    "McpServer",
    "OnCancel",
    "Tool",
    "ToolContext",
]

logger = logging.getLogger("trio_mcp_cancel.server")

LATEST_PROTOCOL_VERSION: Final = "2025-06-18"

#: JSON-RPC error code (implementation-defined range) for a caller that
#: already runs its transport's ``max_concurrent_requests`` tool calls.
TOO_MANY_REQUESTS: Final = -32001


def too_many_requests(request_id: RequestId) -> Message:
    """The answer to a tool call over the caller's concurrency limit."""
    return jsonrpc.error_message(request_id, TOO_MANY_REQUESTS, "Too many concurrent requests")


SUPPORTED_PROTOCOL_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

#: What a cancelled request is answered with: ``"error"`` sends JSON-RPC
#: error ``-32800`` "Request cancelled"; ``"silent"`` sends nothing, as the
#: MCP specification recommends (where the transport can stay silent).
OnCancel = Literal["error", "silent"]

ProgressSink = Callable[[Message], Awaitable[None]]
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

_JSON_TYPES: Final[dict[Any, tuple[str, tuple[type, ...]]]] = {
    int: ("integer", (int,)),
    float: ("number", (int, float)),
    str: ("string", (str,)),
    bool: ("boolean", (bool,)),
    list: ("array", (list,)),
    dict: ("object", (dict,)),
}


@attrs.define(eq=False)
class Caller:
    """Who is calling: the scope their ids live in, and the registry to use.

    ``session_id`` is a name for the session that is safe to show (over HTTP,
    not the ``Mcp-Session-Id`` secret itself).
    """

    scope: str
    registry: Registry
    session_id: str | None = None
    principal: str | None = None


@attrs.define(eq=False)
class Exchange:
    """One request/response exchange as the transport sees it.

    ``progress`` sends a notification on the request's stream (``None``:
    the transport cannot stream, and progress is dropped).  ``request`` is
    filled in while the tool runs, so the transport can cancel exactly this
    request (by its private token) when its stream goes away; a cancel that
    comes before the tool started is kept and applied when it starts.
    """

    progress: ProgressSink | None = None
    request: TrackedRequest | None = None
    _pending: tuple[str, CancelKind, float | UseConfig | None] | None = None

    def cancel(
        self,
        reason: str,
        *,
        kind: CancelKind = "disconnect",
        grace: float | UseConfig | None = USE_CONFIG,
    ) -> None:
        """Cancel this exchange's request server-side, now or as soon as it starts.

        After the tool has finished there is nothing left to cancel, and
        this does nothing observable (the kept cancel is never applied).
        """
        if self.request is not None:
            self.request.registry.cancel_request(self.request, reason, kind=kind, grace=grace)
        elif self._pending is None:
            self._pending = (reason, kind, grace)

    def _started(self, request: TrackedRequest) -> None:
        self.request = request
        if self._pending is not None:
            reason, kind, grace = self._pending
            self.cancel(reason, kind=kind, grace=grace)


@attrs.define(eq=False)
class ToolContext:
    """The first argument of every tool: identity, cancellation and progress."""

    request_id: RequestId
    caller: Caller
    progress_token: str | int | None = None
    _exchange: Exchange = attrs.field(factory=Exchange)
    _last_progress: float = -math.inf

    @property
    def scope(self) -> str:
        return self.caller.scope

    @property
    def registry(self) -> Registry:
        return self.caller.registry

    @property
    def request(self) -> TrackedRequest:
        """The tracked request (available inside the tool body)."""
        request = self._exchange.request
        if request is None:
            raise RuntimeError("the tool is not running")
        return request

    @property
    def cancelled(self) -> bool:
        """The polled flag of this request (always false for a non-cancellable tool)."""
        request = self._exchange.request
        return request is not None and request.cancelled

    async def checkpoint(self) -> None:
        """``await checkpoint_cancelled()``: a checkpoint that raises once cancelled.

        For a tool registered with ``cancellable=False`` it is a plain checkpoint.
        """
        if self._exchange.request is None:
            await trio.lowlevel.checkpoint()
        else:
            await checkpoint_cancelled()

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Send ``notifications/progress`` if the client asked for progress.

        MCP requires progress to increase; a value that does not is a bug in
        the tool and raises :class:`ValueError`.
        """
        if not progress > self._last_progress:
            raise ValueError(f"progress must increase ({progress} after {self._last_progress})")
        if not math.isfinite(progress) or (total is not None and not math.isfinite(total)):
            raise ValueError("progress and total must be finite numbers")
        self._last_progress = progress
        sink = self._exchange.progress
        if sink is None or self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await sink({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})


@attrs.frozen
class Tool:
    """A registered tool: the function and the schema derived from its signature."""

    name: str
    description: str
    fn: Callable[..., Awaitable[Any]]
    input_schema: dict[str, Any]
    params: dict[str, tuple[tuple[type, ...], bool]]
    """name -> (accepted Python types, required)."""
    cancellable: bool = True
    """Run inside ``tracked()`` (and, over HTTP, watch for disconnects)."""

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }

    def bind(self, arguments: object) -> dict[str, Any]:
        """Check *arguments* against the signature; raise ``-32602`` on mismatch."""
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: arguments must be an object")
        unknown = sorted(set(arguments) - set(self.params))
        if unknown:
            raise JsonRpcError(
                INVALID_PARAMS, f"Invalid params: unknown argument {unknown[0]!r}"[:300]
            )
        for name, (types, required) in self.params.items():
            if name not in arguments:
                if required:
                    raise JsonRpcError(INVALID_PARAMS, f"Invalid params: missing argument {name!r}")
                continue
            value = arguments[name]
            if types and (
                not isinstance(value, types) or (bool not in types and isinstance(value, bool))
            ):
                expected = self.input_schema["properties"][name]["type"]
                raise JsonRpcError(INVALID_PARAMS, f"Invalid params: {name!r} must be {expected}")
        return arguments


def _make_tool(
    fn: Callable[..., Awaitable[Any]], name: str, description: str | None, cancellable: bool
) -> Tool:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"tool {name!r} must be an async function")
    signature = inspect.signature(fn)
    hints = get_type_hints(fn)
    parameters = list(signature.parameters.values())[1:]  # the first is the ToolContext
    properties: dict[str, Any] = {}
    required: list[str] = []
    params: dict[str, tuple[tuple[type, ...], bool]] = {}
    for parameter in parameters:
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise TypeError(f"tool {name!r}: parameter {parameter.name!r} must be named")
        json_type, accepted = _JSON_TYPES.get(hints.get(parameter.name, Any), (None, ()))
        properties[parameter.name] = {"type": json_type} if json_type else {}
        is_required = parameter.default is parameter.empty
        if is_required:
            required.append(parameter.name)
        params[parameter.name] = (accepted, is_required)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    doc = description if description is not None else inspect.getdoc(fn) or ""
    return Tool(name, doc, fn, schema, params, cancellable)


def _find_cancellation(exc: BaseException) -> RequestCancelled | None:
    """The first :class:`RequestCancelled` inside an exception group, if any."""
    if isinstance(exc, RequestCancelled):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find_cancellation(inner)
            if found is not None:
                return found
    return None


def _tool_result(value: object) -> dict[str, Any]:
    """Wrap a tool's return value as a ``CallToolResult``.

    ``None`` is no content, a string is one text block, anything else is
    JSON text (a ``dict`` is also the ``structuredContent``).  A value that
    is not strict JSON raises here, inside the tool's error handling.
    """
    if value is None:
        return {"content": [], "isError": False}
    if isinstance(value, str):
        return {"content": [{"type": "text", "text": value}], "isError": False}
    text = jsonrpc.encode(value).decode("ascii")
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if isinstance(value, dict):
        result["structuredContent"] = value
    return result


class McpServer:
    """Tools plus the MCP methods around them, independent of the transport.

    ``on_cancel`` chooses the answer to a cancelled ``tools/call`` (see
    :data:`OnCancel`); the default, ``"error"``, answers ``-32800`` so that
    clients which do wait for a response get one.
    """

    def __init__(
        self,
        name: str = "trio-mcp-cancel",
        version: str = "0.1.0",
        *,
        instructions: str | None = None,
        on_cancel: OnCancel = "error",
    ) -> None:
        if on_cancel not in ("error", "silent"):
            raise ValueError("on_cancel must be 'error' or 'silent'")
        self.name = name
        self.version = version
        self.instructions = instructions
        self.on_cancel: OnCancel = on_cancel
        self.tools: dict[str, Tool] = {}

    def tool(
        self,
        name: str | None = None,
        *,
        description: str | None = None,
        cancellable: bool = True,
    ) -> Callable[[F], F]:
        """Register ``async def fn(ctx: ToolContext, **arguments)`` as a tool.

        The input schema comes from the annotations of the named parameters
        after ``ctx`` (``int``, ``float``, ``str``, ``bool``, ``list``,
        ``dict``); the description from *description* or the docstring.
        ``cancellable=False`` skips tracking for tools that finish in
        milliseconds, where a cancellation would arrive after the response
        anyway.
        """

        def register(fn: F) -> F:
            tool_name = name or fn.__name__
            if tool_name in self.tools:
                raise ValueError(f"tool {tool_name!r} is already registered")
            self.tools[tool_name] = _make_tool(fn, tool_name, description, cancellable)
            return fn

        return register

    def list_tools(self) -> list[dict[str, Any]]:
        return [tool.describe() for tool in self.tools.values()]

    def tracks(self, request: jsonrpc.Request) -> bool:
        """Whether answering *request* runs a cancellable tool.

        Transports use it to decide whether to watch the stream for a
        disconnect; everything else is answered at once.
        """
        tool = self._tool_for(request) if request.method == "tools/call" else None
        return tool is not None and tool.cancellable

    def _tool_for(self, request: jsonrpc.Request) -> Tool | None:
        name = request.params.get("name")
        return self.tools.get(name) if isinstance(name, str) else None

    async def handle(
        self, message: object, caller: Caller, exchange: Exchange | None = None
    ) -> Message | None:
        """Answer one decoded JSON-RPC message; ``None`` means "send nothing".

        Never raises for bad input: shape errors become JSON-RPC errors.
        ``trio.Cancelled`` (the transport shutting down) propagates.
        """
        try:
            parsed = jsonrpc.classify(message)
        except JsonRpcError as exc:
            return exc.to_message()
        if isinstance(parsed, jsonrpc.ClientResponse):
            return None  # this server sends no requests, so there is nothing to match
        if isinstance(parsed, jsonrpc.Notification):
            self.notify(parsed, caller)
            return None
        return await self.respond(parsed, caller, exchange)

    async def respond(
        self,
        request: jsonrpc.Request,
        caller: Caller,
        exchange: Exchange | None = None,
        *,
        allow_silence: bool = True,
    ) -> Message | None:
        """Answer one classified request.

        ``None`` only for a cancelled request under ``on_cancel="silent"``,
        and only when *allow_silence* (a plain JSON HTTP response must carry
        something, so that transport passes ``False`` and gets ``-32800``).
        """
        try:
            result = await self._call(request, caller, exchange or Exchange())
        except JsonRpcError as exc:
            exc.request_id = request.id
            return exc.to_message()
        except RequestCancelled as exc:
            if self.on_cancel == "silent" and allow_silence:
                return None
            data = {"reason": exc.reason} if exc.reason else None
            return jsonrpc.error_message(request.id, REQUEST_CANCELLED, "Request cancelled", data)
        return jsonrpc.result_message(request.id, result)

    def notify(self, notification: jsonrpc.Notification, caller: Caller) -> None:
        """Handle a notification; only ``notifications/cancelled`` does anything."""
        if notification.method != "notifications/cancelled":
            return
        params = notification.params
        request_id = params.get("requestId")
        outcome = caller.registry.notify_cancelled(caller.scope, request_id, params.get("reason"))
        logger.debug(
            "notifications/cancelled %r in %r: %s",
            request_id if is_valid_request_id(request_id) else "<invalid>",
            caller.scope,
            outcome.value,
        )

    async def _call(self, request: jsonrpc.Request, caller: Caller, exchange: Exchange) -> object:
        method = request.method
        if method == "ping":
            return {}
        if method == "initialize":
            return self._initialize(request.params)
        if method == "tools/list":
            return {"tools": self.list_tools()}
        if method == "tools/call":
            return await self._call_tool(request, caller, exchange)
        raise JsonRpcError(METHOD_NOT_FOUND, "Method not found", {"method": method[:100]})

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        version = requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": self.name, "version": self.version},
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    async def _call_tool(
        self, request: jsonrpc.Request, caller: Caller, exchange: Exchange
    ) -> dict[str, Any]:
        tool = self._tool_for(request)
        if tool is None:
            name = request.params.get("name")
            raise JsonRpcError(INVALID_PARAMS, "Unknown tool", {"name": str(name)[:100]})
        arguments = tool.bind(request.params.get("arguments"))
        meta = request.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        ctx = ToolContext(
            request.id, caller, token if is_valid_request_id(token) else None, exchange
        )
        try:
            if tool.cancellable:
                async with caller.registry.tracked(request.id, caller.scope) as tracked_request:
                    exchange._started(tracked_request)
                    value = await tool.fn(ctx, **arguments)
            else:
                value = await tool.fn(ctx, **arguments)
            return _tool_result(value)
        except (RequestCancelled, trio.Cancelled):
            raise
        except Exception as exc:
            cancelled = _find_cancellation(exc)
            if cancelled is not None:
                # A helper task of the tool stopped at checkpoint_cancelled().
                raise cancelled from exc
            # A failing tool is a tool result, not a protocol error (MCP "isError").
            logger.exception("tool %r failed", tool.name)
            return {
                "content": [{"type": "text", "text": f"{type(exc).__name__}: {exc}"[:1000]}],
                "isError": True,
            }
        finally:
            exchange.request = None
