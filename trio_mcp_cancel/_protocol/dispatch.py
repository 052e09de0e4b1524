"""The dispatch core: one path from a decoded message to its answer, for every transport.

A transport frames a message and describes who sent it (:class:`Caller`)
and how to reach that request's stream (:class:`Exchange`); everything else
happens here, in this order:

1. :meth:`McpServer.prepare` *classifies* the message (JSON-RPC shape, era,
   modern envelope), finds its handler in the **method table** and, for
   ``tools/call``, the tool, once.  It never awaits, so a transport can decide
   from the result (``call.tracked``) whether to watch the stream, stream
   SSE, or answer at once, without parsing anything twice.
2. :meth:`McpServer.run` applies the **admission policy** (concurrency limit
   of the caller's channel), runs the handler (tools inside ``tracked()``)
   and turns every exception into a JSON-RPC error in exactly one place.
   It reports ``task_status.started()`` once the request is registered, so
   a stream transport using ``nursery.start`` never reads the next message
   (a ``notifications/cancelled`` for this one, say) before this request can
   be cancelled.
3. The answer follows MCP's cancellation rules: after a **client** cancel
   (``notifications/cancelled`` or a closed stream) nothing more is sent for
   the request, neither the response nor progress; after a **server**
   cancel (a time limit, a session ending, shutdown) the client gets
   ``-32800`` with the reason, so it never waits forever.

:meth:`McpServer.handle` is ``prepare`` + ``run`` in one call.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Final, Literal, TypeVar, overload

import attrs
import trio

from .._core.context import checkpoint_cancelled
from .._core.errors import REQUEST_CANCELLED, RequestCancelled
from .._core.events import CancelKind
from .._core.namespace import GLOBAL_NAMESPACE
from .._core.ratelog import RateLimitedLog, failure_key
from .._core.registry import USE_CONFIG, Registry, UseConfig
from .._core.request import TrackedRequest
from .._core.threads import ThreadLimit
from .._core.validation import RequestId, is_valid_request_id
from . import jsonrpc, tasks
from .admission import Slots
from .content import ToolError
from .features import CacheScope, ServerFeatures
from .jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, JsonRpcError, Message
from .mrtr import InputRequired, binding, input_required_result
from .pagination import DEFAULT_PAGE_SIZE, page
from .tasks import TaskManager
from .tools import TaskSupport, Tool, ToolArgumentError, error_result, make_tool
from .versions import (
    LEGACY_VERSIONS,
    LOG_LEVELS,
    META_SERVER_INFO,
    MISSING_CLIENT_CAPABILITY,
    MODERN_VERSIONS,
    Envelope,
    Era,
    has_modern_meta,
    missing_capabilities,
    negotiate_legacy_version,
    read_envelope,
)

__all__ = [
    "TOO_MANY_REQUESTS",
    "Call",
    "Limit",
    "Caller",
    "Channel",
    "Exchange",
    "LegacyState",
    "McpServer",
    "OnCancel",
    "ToolContext",
    "too_many_requests",
]

logger = logging.getLogger("trio_mcp_cancel.server")

#: JSON-RPC error code (implementation-defined) for a caller that already
#: runs its channel's ``max_concurrent_requests`` calls.
TOO_MANY_REQUESTS: Final = -32001

#: What a request the *client* cancelled is answered with: ``"silent"`` (the
#: default) sends nothing, as MCP requires; ``"error"`` sends ``-32800``
#: "Request cancelled", for clients that wait for an answer regardless.
#: Server-side cancels are always answered ``-32800``.
OnCancel = Literal["silent", "error"]

SendMessage = Callable[[Message], Awaitable[None]]
F = TypeVar("F", bound=Callable[..., Any])  # async def, or a plain def (a sync tool)
_CLIENT_KINDS: Final = frozenset({"client", "disconnect"})

#: Task creations a channel remembers, so a ``notifications/cancelled`` the
#: client sent before it read the ``CreateTaskResult`` still stops the task.
_CREATED_TASKS_KEPT: Final = 64


#: Which admission limit a refused call hit, in the error's ``data.limit``.
#: ``listen_server`` / ``listen_tenant``: the separate bounds of open
#: ``subscriptions/listen`` streams (see :class:`McpServer`).
Limit = Literal["server", "tenant", "channel", "listen_server", "listen_tenant"]


def too_many_requests(request_id: RequestId, limit: Limit = "channel", cap: int = 0) -> Message:
    """The answer to a call over one of the admission limits (see :meth:`McpServer.admit`)."""
    return jsonrpc.error_message(
        request_id,
        TOO_MANY_REQUESTS,
        "Too many concurrent requests",
        {"limit": limit, "max": cap},
    )


@attrs.define(eq=False)
class LegacyState:
    """What a legacy ``initialize`` negotiated, for the rest of its session."""

    protocol_version: str
    client_capabilities: Mapping[str, Any]
    client_info: Mapping[str, Any] | None = None
    log_level: str | None = None
    """Set by ``logging/setLevel``; ``None`` sends every level."""


@attrs.define(eq=False)
class Channel:
    """What one client holds open across requests: a legacy HTTP session or a
    stream connection (stdio, WebSocket, memory).  Modern HTTP has none.

    It bounds how many calls the client runs at once, and knows them all so
    that ending the channel cancels them.
    """

    max_concurrent_requests: int = 64
    exchanges: set[Exchange] = attrs.field(factory=set)
    legacy: LegacyState | None = None
    """Set by ``initialize``: this channel speaks the legacy era."""
    ordered: bool = False
    """Messages arrive in order (one stream), so a cancel of a request that is
    not running refers to one that already ended, never to one still on its
    way: no early cancel is kept (see ``RegistryConfig.early_cancel_ttl``)."""
    created_tasks: dict[RequestId, str] = attrs.field(factory=dict)
    """The latest ``tools/call`` ids answered with a task, and the task ids:
    a client that cancels the call (racing the ``CreateTaskResult``) ignores
    the answer, so the task it never saw is cancelled too."""

    def remember_task(self, request_id: RequestId, task_id: str) -> None:
        self.created_tasks.pop(request_id, None)
        self.created_tasks[request_id] = task_id
        while len(self.created_tasks) > _CREATED_TASKS_KEPT:
            del self.created_tasks[next(iter(self.created_tasks))]

    def cancel_all(
        self,
        reason: str,
        *,
        kind: CancelKind = "server",
        grace: float | UseConfig | None = USE_CONFIG,
    ) -> None:
        """Cancel every call still running on this channel."""
        for exchange in list(self.exchanges):
            exchange.cancel(reason, kind=kind, grace=grace)


@attrs.define(eq=False)
class Caller:
    """Who is calling: the namespace their ids live in, and the registry to use.

    ``session_id`` is a name for the session that is safe to show (over HTTP,
    not the ``Mcp-Session-Id`` secret itself).  ``tenant`` is who the
    server-wide admission policy counts the call against: the principal when
    authenticated, else the client's address bucket (``ip:...``); ``None``
    (stdio, tests): only the server-wide cap applies.
    """

    namespace: str
    registry: Registry
    channel: Channel | None = None
    principal: str | None = None
    session_id: str | None = None
    tenant: str | None = None


@attrs.define(eq=False)
class Exchange:
    """One request/response exchange as the transport sees it.

    ``send`` writes a request-related notification (progress, log) on the
    request's own stream (``None``: the transport cannot stream, and they are
    dropped).  ``request`` is set once the tool runs, so the transport can
    cancel exactly this request (by its private token) when its stream goes
    away; a cancel that comes before the tool started is kept and applied
    when it starts.
    """

    send: SendMessage | None = None
    request: TrackedRequest | None = None
    _registry: Registry | None = None
    _pending: tuple[str, CancelKind, float | UseConfig | None] | None = None
    _on_lost: list[Callable[[], object]] = attrs.field(factory=list)

    def when_lost(self, callback: Callable[[], object]) -> None:
        """Call *callback* if this exchange's answer is never delivered (see :meth:`lost`).

        A ``tools/call`` that created a task registers here: a client that
        never saw the ``CreateTaskResult`` cannot poll or cancel the task,
        so nobody would ever stop it.
        """
        self._on_lost.append(callback)

    def lost(self) -> None:
        """The answer was not delivered: the client cancelled first, or its stream went away.

        Called by the dispatcher (a silenced answer) and by the transport (a
        stream closed, or a write that never completed); idempotent.
        """
        callbacks, self._on_lost = self._on_lost, []
        for callback in callbacks:
            callback()

    def cancel(
        self,
        reason: str,
        *,
        kind: CancelKind = "disconnect",
        grace: float | UseConfig | None = USE_CONFIG,
    ) -> None:
        """Cancel this exchange's request server-side, now or as soon as it starts."""
        if self.request is not None and self._registry is not None:
            self._registry.cancel_request(self.request, reason, kind=kind, grace=grace)
        elif self._pending is None:
            self._pending = (reason, kind, grace)

    def _started(self, request: TrackedRequest, registry: Registry) -> None:
        self.request = request
        self._registry = registry
        if self._pending is not None:
            reason, kind, grace = self._pending
            self.cancel(reason, kind=kind, grace=grace)

    @property
    def cancel_kind(self) -> CancelKind | None:
        """Who cancelled this request, if anybody did."""
        if self.request is not None and self.request.cancellation is not None:
            return self.request.cancellation.kind
        return None if self._pending is None else self._pending[1]

    @property
    def silenced(self) -> bool:
        """The client cancelled: nothing more may be sent for this request."""
        return self.cancel_kind in _CLIENT_KINDS

    async def notify(self, message: Message) -> None:
        """Send a request-related notification, unless the client cancelled."""
        if self.send is not None and not self.silenced:
            await self.send(message)


@attrs.define(eq=False)
class ToolContext:
    """The first argument of every tool: identity, cancellation, progress and logging."""

    request_id: RequestId
    caller: Caller
    progress_token: str | int | None = None
    _exchange: Exchange = attrs.field(factory=Exchange)
    log_level: str | None = None
    """The least severe level the client wants logged for this request (``None``: none)."""
    era: Era = "legacy"
    _last_progress: float = -math.inf
    client_capabilities: Mapping[str, Any] = attrs.field(factory=dict)
    """What the client declared (modern: on this request; legacy: in ``initialize``)."""
    input_responses: Mapping[str, Any] | None = None
    """MRTR: the client's answers to the ``inputRequests`` of the previous round."""
    request_state: Any = None
    """MRTR: the state the previous round returned, verified (see :class:`~.mrtr.StateSigner`)."""
    _task_progress: Callable[[float, float | None, str | None], None] | None = None
    """Inside a task: where progress goes instead (the task's ``statusMessage``)."""

    @property
    def namespace(self) -> str:
        return self.caller.namespace

    @property
    def registry(self) -> Registry:
        return self.caller.registry

    @property
    def request(self) -> TrackedRequest:
        """The tracked request (available inside a cancellable tool's body)."""
        request = self._exchange.request
        if request is None:
            raise RuntimeError("the tool is not running, or is not cancellable")
        return request

    @property
    def last_progress(self) -> float | None:
        """The last progress value reported (``None`` before the first): the next must exceed it."""
        return None if self._last_progress == -math.inf else self._last_progress

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

        Inside a task (no request stream) it updates the task's
        ``statusMessage`` instead, rate-limited (see :mod:`.task_progress`).
        MCP requires progress to increase; a value that does not is a bug in
        the tool and raises :class:`ValueError`.  Nothing is sent once the
        client cancelled the request.
        """
        if not progress > self._last_progress:
            raise ValueError(f"progress must increase ({progress} after {self._last_progress})")
        if not math.isfinite(progress) or (total is not None and not math.isfinite(total)):
            raise ValueError("progress and total must be finite numbers")
        self._last_progress = progress
        if self._task_progress is not None:
            self._task_progress(progress, total, message)
        if self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self._exchange.notify(
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
        )

    async def log(self, level: str, data: object, logger: str | None = None) -> None:
        """Send ``notifications/message`` on this request's stream.

        Sent only when the client asked for *level* or a less severe one:
        per request in the modern era (``_meta`` ``logLevel``; no level, no
        messages), by ``logging/setLevel`` in the legacy era (every level
        until the client sets one).  Never sent after the client cancelled.
        """
        if level not in LOG_LEVELS:
            raise ValueError(f"unknown log level {level!r}")
        if self.log_level is None or LOG_LEVELS.index(level) < LOG_LEVELS.index(self.log_level):
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        await self._exchange.notify(
            {"jsonrpc": "2.0", "method": "notifications/message", "params": params}
        )


Handler = Callable[["McpServer", "Call", Caller, Exchange, Callable[[], None]], Awaitable[Any]]


@attrs.frozen
class _Method:
    handler: Handler
    eras: frozenset[Era] = frozenset({"modern", "legacy"})
    ordered: bool = False
    """It changes the channel's state (``initialize``, ``logging/setLevel``),
    so a stream transport finishes it before reading the next message; any
    other request that is not a tracked tool runs concurrently with the reads."""


@attrs.define(eq=False, slots=True)
class Call:
    """One classified message, bound to what answers it.

    ``error`` is set when the message is answered at once with an error (bad
    shape, unknown method, bad envelope); ``request`` is ``None`` for
    notifications and client responses.
    """

    era: Era
    request: jsonrpc.Request | None = None
    notification: jsonrpc.Notification | None = None
    method: _Method | None = None
    tool: Tool | None = None
    envelope: Envelope | None = None
    error: JsonRpcError | None = None

    @property
    def tracked(self) -> bool:
        """Whether running it runs a cancellable tool (so it can be cancelled)."""
        return self.tool is not None and self.tool.cancellable and self.error is None

    @property
    def long_lived(self) -> bool:
        """A ``subscriptions/listen`` stream: no call caps, no ``max_request_time``."""
        return self.request is not None and self.request.method == "subscriptions/listen"


class _Starter:
    """Calls ``task_status.started()`` exactly once."""

    __slots__ = ("_status",)

    def __init__(self, status: trio.TaskStatus[None]) -> None:
        self._status: trio.TaskStatus[None] | None = status

    def __call__(self) -> None:
        status, self._status = self._status, None
        if status is not None:
            status.started()


class McpServer(ServerFeatures):
    """Tools plus the MCP methods around them, independent of the transport.

    Serves both eras: a request carrying the modern ``_meta`` envelope is
    served statelessly; ``initialize`` starts a legacy channel.  See the
    module docstring for the path every message takes.

    Admission: tool calls in flight are bounded server-wide
    (*max_concurrent_calls*, across every transport and session) and per
    tenant (*max_calls_per_tenant*: a principal, or a client address bucket
    when unauthenticated, however many sessions or connections it opens),
    besides each channel's own ``max_concurrent_requests``.  A call over any
    of them is answered at once with error ``-32001`` (``data.limit`` says
    which), never queued: a queue would turn a flood into a hang for
    everyone behind it.  ``None`` disables a cap.

    Resources, prompts, completion and ``subscriptions/listen`` are
    registered through :class:`~.features.ServerFeatures` and served by
    :mod:`.surface`; ``resources/read``, ``prompts/get`` and listen streams
    run tracked, like tool calls; the first two count against the same caps.
    Open listen streams are not calls (they stay open for hours): they have
    their own bounds, *max_listen_streams* server-wide and
    *max_listen_streams_per_tenant* (refused with ``-32001``, ``data.limit``
    ``"listen_server"`` / ``"listen_tenant"``, HTTP ``429``), and the
    transports' ``max_request_time`` does not end them.
    *state_secret* (at least 32 bytes, or their base64 text as in
    ``MCP_STATE_SECRET``; default: random per process, so instances behind
    a load balancer must share one) seals MRTR ``requestState`` values for
    *state_ttl* seconds; *state_secret_previous* (the secret before a
    rotation) still opens them, never seals: keep it set for one
    *state_ttl* after rotating.  A state is used once (:mod:`.replay`).
    *resource_ttl_ms*
    and *resource_cache_scope* are the caching hints of modern reads.
    *page_size* is how many items one page of ``tools/list``,
    ``resources/list``, ``resources/templates/list`` or ``prompts/list``
    holds; longer lists continue with ``nextCursor`` (:mod:`.pagination`).
    """

    def __init__(
        self,
        name: str = "trio-mcp-cancel",
        version: str = "0.1.0",
        *,
        instructions: str | None = None,
        on_cancel: OnCancel = "silent",
        list_ttl_ms: int = 300_000,
        max_concurrent_calls: int | None = 4096,
        max_calls_per_tenant: int | None = 1024,
        max_listen_streams: int | None = 4096,
        max_listen_streams_per_tenant: int | None = 32,
        tasks: TaskManager | None = None,
        state_secret: bytes | str | None = None,
        state_ttl: float = 600.0,
        state_secret_previous: bytes | str | None = None,
        resource_ttl_ms: int = 0,
        resource_cache_scope: CacheScope = "private",
        sync_tool_threads: int | trio.CapacityLimiter = 40,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        if on_cancel not in ("error", "silent"):
            raise ValueError("on_cancel must be 'silent' or 'error'")
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.page_size = page_size
        """Items per page of the list methods (opaque ``cursor``/``nextCursor``)."""
        self._call_slots = Slots(max_concurrent_calls, max_calls_per_tenant)
        self._listen_slots = Slots(max_listen_streams, max_listen_streams_per_tenant)
        self.name = name
        self.version = version
        self.instructions = instructions
        self.on_cancel: OnCancel = on_cancel
        self.list_ttl_ms = list_ttl_ms
        self.tools: dict[str, Tool] = {}
        self._methods: dict[str, _Method] = dict(_METHODS)
        # Resources, prompts, completion, subscriptions and MRTR (see .features, .surface).
        self.sync_tool_threads = ThreadLimit(sync_tool_threads)
        """The worker threads sync tools share (not Trio's default limiter); see :mod:`.threads`."""
        self.tasks: TaskManager = TaskManager() if tasks is None else tasks
        """Runs task-capable tools as tasks (Tasks extension); see :mod:`.tasks`."""
        self._init_features(
            state_secret, state_secret_previous, state_ttl, resource_ttl_ms, resource_cache_scope
        )
        self._failures = RateLimitedLog(logger)
        """Unexpected failures, logged with their traceback once per kind and interval."""
        # Task status changes reach the subscriptions/listen streams that asked (taskIds).
        self.tasks.on_change = lambda task: self.subscriptions.publish("notifications/tasks", task)
        self._methods.update(surface.METHODS)
        self._targets: dict[str, Callable[[McpServer, Mapping[str, Any]], Tool]] = dict(
            surface.TARGETS
        )

    @property
    def info(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version}

    @overload
    def tool(self, name: F, /) -> F: ...

    @overload
    def tool(
        self,
        name: str | None = None,
        *,
        description: str | None = None,
        cancellable: bool = True,
        client_capabilities: Mapping[str, Any] | None = None,
        input_schema: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        annotations: Mapping[str, Any] | None = None,
        title: str | None = None,
        task: TaskSupport = "forbidden",
        before_task: Callable[..., Awaitable[InputRequired | None]] | None = None,
        thread_limiter: int | trio.CapacityLimiter | None = None,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        name: str | F | None = None,
        *,
        description: str | None = None,
        cancellable: bool = True,
        client_capabilities: Mapping[str, Any] | None = None,
        input_schema: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        annotations: Mapping[str, Any] | None = None,
        title: str | None = None,
        task: TaskSupport = "forbidden",
        before_task: Callable[..., Awaitable[InputRequired | None]] | None = None,
        thread_limiter: int | trio.CapacityLimiter | None = None,
    ) -> Callable[[F], F] | F:
        """Register a function as a tool: ``@server.tool``, ``@server.tool()`` or ``(name=...)``.

        Its parameters are the tool's arguments (see :func:`.tools.make_tool`),
        except the one annotated ``ToolContext``, at any position, which
        receives the context (a tool need not take one).

        *input_schema* replaces the derived schema and is sent as written
        (JSON Schema 2020-12, ``$defs`` and all); *output_schema* makes the
        tool return a ``dict`` sent as ``structuredContent``; *annotations*
        are MCP ``ToolAnnotations`` (``readOnlyHint``, ...).  The tool may
        return text, content objects (:class:`~.content.Image`, ...), a
        :class:`~.content.ToolResult`, JSON values, or (modern era)
        :class:`~.mrtr.InputRequired`; raising :class:`~.content.ToolError`
        reports an ``isError`` result.

        A plain ``def`` is a sync tool, run in a worker thread that sees the
        polled flag and is abandoned at the hard cancel (:mod:`.tools`).
        Its threads come from the server's *sync_tool_threads*, or from
        *thread_limiter* (a number of threads, or a ``CapacityLimiter``):
        give a tool that may get stuck a limit of its own, so its abandoned
        threads cannot starve the other sync tools.

        The input schema and the argument validation come from the type hints
        of the other parameters, through pydantic (any type it supports;
        ``Annotated[T, "description"]``; defaults), and a model, dataclass or
        ``TypedDict`` return annotation gives the output schema; the
        description comes from *description* or the docstring.
        ``cancellable=False`` skips tracking for tools that finish in
        microseconds, where a cancellation would come after the response
        anyway.  *client_capabilities* (a ``ClientCapabilities``
        shape) are what the client must declare to call it (``-32021``).
        *task* (modern era, Tasks extension): ``"optional"`` runs the call as
        a task when the client declares the extension on the request,
        ``"required"`` only as a task (``-32021`` otherwise).  Inside a task,
        returning :class:`~.mrtr.InputRequired` parks the task in
        ``input_required`` until ``tasks/update`` answers every request, and
        the tool runs again with them in ``ctx.input_responses`` (and the
        state in ``ctx.request_state``).  *before_task*, ``async (ctx,
        **arguments)``, gathers input before the task exists (SEP-2663:
        finish MRTR exchanges before creating the task): it runs in the
        request itself; an ``InputRequired`` it returns is the answer (no
        task yet), ``None`` creates the task, whose tool sees the same
        verified ``input_responses`` and ``request_state``.
        """
        if callable(name):
            return self.tool()(name)  # bare @server.tool
        if task not in ("forbidden", "optional", "required"):
            raise ValueError("task must be 'forbidden', 'optional' or 'required'")
        if task != "forbidden" and not cancellable:
            raise ValueError("a task-capable tool must be cancellable (tasks/cancel stops it)")
        if before_task is not None and task == "forbidden":
            raise ValueError("before_task needs task='optional' or 'required'")

        threads = None if thread_limiter is None else ThreadLimit(thread_limiter)
        given: str | None = name

        def register(fn: F) -> F:
            tool_name = given or fn.__name__
            if threads is not None and inspect.iscoroutinefunction(fn):
                raise TypeError(f"tool {tool_name!r}: thread_limiter is for sync (def) tools")
            if tool_name in self.tools:
                raise ValueError(f"tool {tool_name!r} is already registered")
            self.tools[tool_name] = make_tool(
                fn,
                tool_name,
                description,
                cancellable,
                client_capabilities,
                input_schema=input_schema,
                output_schema=output_schema,
                annotations=annotations,
                title=title,
                task_support=task,
                before_task=before_task,
                threads=self.sync_tool_threads if threads is None else threads,
            )
            self.tools_changed()
            return fn

        return register

    def list_tools(self) -> list[dict[str, Any]]:
        return [tool.describe() for tool in self.tools.values()]

    def remove_tool(self, name: str) -> None:
        """Unregister a tool; listen streams that asked are told the list changed."""
        del self.tools[name]
        self.tools_changed()

    def capabilities(self, era: Era = "legacy") -> dict[str, Any]:
        modern = era == "modern"
        return {
            "tools": {"listChanged": modern},
            "logging": {},
            **self.feature_capabilities(modern),
        }

    def describe(self, result: dict[str, Any]) -> dict[str, Any]:
        """*result* (``initialize``'s or ``server/discover``'s) with the instructions, if any."""
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    # -- the path of one message -------------------------------------------

    def prepare(self, message: object, caller: Caller, *, envelope: Envelope | None = None) -> Call:
        """Classify *message* and bind it to its handler; never awaits, never raises.

        The era is modern when the request carries the modern envelope (a
        transport that already read it passes *envelope*), else legacy.
        """
        try:
            parsed = jsonrpc.classify(message)
        except JsonRpcError as exc:
            return Call("legacy", error=exc)
        if isinstance(parsed, jsonrpc.Notification):
            return Call("legacy", notification=parsed)
        if isinstance(parsed, jsonrpc.ClientResponse):
            return Call("legacy")  # we send no requests, so there is nothing to match
        call = Call("legacy", request=parsed)
        try:
            if envelope is None and has_modern_meta(parsed.params):
                envelope = read_envelope(parsed.params)
            if envelope is not None:
                call.era, call.envelope = "modern", envelope
            method = self._methods.get(parsed.method)
            if method is None or call.era not in method.eras:
                raise JsonRpcError(
                    METHOD_NOT_FOUND, "Method not found", {"method": parsed.method[:100]}
                )
            call.method = method
            if parsed.method == "tools/call":
                call.tool = self._find_tool(parsed.params)
                self._check_capabilities(call, caller)
            elif parsed.method in self._targets:
                # resources/read, prompts/get, subscriptions/listen: tracked like a tool.
                call.tool = self._targets[parsed.method](self, parsed.params)
        except JsonRpcError as exc:
            exc.request_id = parsed.id
            call.error = exc
        return call

    def _find_tool(self, params: Mapping[str, Any]) -> Tool:
        name = params.get("name")
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            raise JsonRpcError(INVALID_PARAMS, "Unknown tool", {"name": str(name)[:100]})
        return tool

    def _check_capabilities(self, call: Call, caller: Caller) -> None:
        assert call.tool is not None
        if not call.tool.client_capabilities:
            return
        if call.envelope is not None:
            declared: Mapping[str, Any] = call.envelope.client_capabilities
        elif caller.channel is not None and caller.channel.legacy is not None:
            declared = caller.channel.legacy.client_capabilities
        else:
            return  # a legacy caller without a session: nothing to check against
        missing = missing_capabilities(declared, call.tool.client_capabilities)
        if missing:
            raise JsonRpcError(
                MISSING_CLIENT_CAPABILITY,
                "Missing required client capability",
                {"requiredCapabilities": missing},
            )

    async def handle(
        self, message: object, caller: Caller, exchange: Exchange | None = None
    ) -> Message | None:
        """Answer one decoded JSON-RPC message; ``None`` means "send nothing".

        Never raises for bad input: shape errors become JSON-RPC errors.
        ``trio.Cancelled`` (the transport shutting down) propagates.
        """
        call = self.prepare(message, caller)
        if call.notification is not None:
            self.notify(call.notification, caller)
            return None
        return await self.run(call, caller, exchange or Exchange())

    def notify(self, notification: jsonrpc.Notification, caller: Caller) -> None:
        """Handle a notification; only ``notifications/cancelled`` does anything."""
        if notification.method != "notifications/cancelled":
            return
        params = notification.params
        request_id = params.get("requestId")
        ordered = caller.channel is not None and caller.channel.ordered
        outcome = caller.registry.notify_cancelled(
            caller.namespace, request_id, params.get("reason"), keep_early=not ordered
        )
        if caller.channel is not None and is_valid_request_id(request_id):
            task_id = caller.channel.created_tasks.pop(request_id, None)
            if task_id is not None:
                self.tasks.creation_cancelled(task_id)
        logger.debug(
            "notifications/cancelled %r in %r: %s",
            request_id if is_valid_request_id(request_id) else "<invalid>",
            caller.namespace,
            outcome.value,
        )

    async def run(
        self,
        call: Call,
        caller: Caller,
        exchange: Exchange,
        *,
        allow_silence: bool = True,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> Message | None:
        """Answer one prepared request: the one place errors become JSON-RPC errors.

        ``None`` only when the client cancelled the request (see
        :data:`OnCancel`) and *allow_silence* (a plain JSON HTTP response
        must carry something, so that transport passes ``False`` and gets
        ``-32800``).  ``task_status.started()`` is reported once the request
        can be cancelled, at the latest when the answer is ready.
        """
        started = _Starter(task_status)
        request, method = call.request, call.method
        if call.error is not None or request is None or method is None:
            started()
            return None if call.error is None else call.error.to_message()
        if caller.channel is not None:
            caller.channel.created_tasks.pop(request.id, None)  # the id is reused
        try:
            refused = self.admit(call, caller, exchange)
            if refused is not None:
                return refused
            try:
                result = await method.handler(self, call, caller, exchange, started)
            finally:
                self._release(call, caller, exchange)
            if call.tracked and exchange.silenced:
                # The client cancelled, but the tool finished anyway: MCP
                # forbids sending its result (or anything else) now.
                raise RequestCancelled(None, exchange.cancel_kind or "client")
            return jsonrpc.result_message(request.id, self._finish(call, result))
        except JsonRpcError as exc:
            return jsonrpc.error_message(request.id, exc.code, exc.message, exc.data)
        except RequestCancelled as exc:
            exchange.lost()  # its real answer is never sent
            if exchange.silenced and self.on_cancel == "silent" and allow_silence:
                return None
            data = {"reason": exc.reason} if exc.reason else None
            return jsonrpc.error_message(request.id, REQUEST_CANCELLED, "Request cancelled", data)
        except Exception as exc:
            # A bug in the server or a tool (a result that is not JSON, say)
            # fails this request, never the transport and its other requests;
            # the same failure repeated (one bad request in a loop) is logged
            # once per interval, not once per request.
            self._failures.exception(
                failure_key(request.method, exc), "%s %r failed", request.method[:100], request.id
            )
            return jsonrpc.error_message(request.id, jsonrpc.INTERNAL_ERROR, "Internal error")
        finally:
            started()

    def refusal(self, call: Call, caller: Caller) -> Message | None:
        """The error :meth:`admit` would answer *call* with now, without admitting it.

        Lets a transport refuse before it commits to a response (an HTTP
        ``429`` rather than an SSE stream carrying the error).
        """
        request = call.request
        if call.tool is None or request is None:
            return None
        if call.long_lived:
            full = self._listen_slots.full(caller.tenant)
            if full is not None:
                return too_many_requests(request.id, _LISTEN_LIMITS[full[0]], full[1])
        else:
            full = self._call_slots.full(caller.tenant)
            if full is not None:
                return too_many_requests(request.id, _CALL_LIMITS[full[0]], full[1])
        channel = caller.channel
        if call.tracked and channel is not None:
            cap = channel.max_concurrent_requests
            if len(channel.exchanges) >= cap:
                return too_many_requests(request.id, "channel", cap)
        return None

    def admit(self, call: Call, caller: Caller, exchange: Exchange) -> Message | None:
        """Count a tool call against the admission limits, or return its refusal.

        Only tool calls count: every other method answers from memory at once.
        """
        refused = self.refusal(call, caller)
        if refused is not None or call.tool is None:
            return refused
        self._slots(call).take(caller.tenant)
        if call.tracked and caller.channel is not None:
            caller.channel.exchanges.add(exchange)
        return None

    def _release(self, call: Call, caller: Caller, exchange: Exchange) -> None:
        if call.tool is None:
            return
        self._slots(call).give(caller.tenant)
        if caller.channel is not None:
            caller.channel.exchanges.discard(exchange)

    def _slots(self, call: Call) -> Slots:
        return self._listen_slots if call.long_lived else self._call_slots

    @property
    def max_concurrent_calls(self) -> int | None:
        return self._call_slots.total_cap

    @max_concurrent_calls.setter
    def max_concurrent_calls(self, cap: int | None) -> None:
        self._call_slots.total_cap = cap

    @property
    def max_calls_per_tenant(self) -> int | None:
        return self._call_slots.tenant_cap

    @max_calls_per_tenant.setter
    def max_calls_per_tenant(self, cap: int | None) -> None:
        self._call_slots.tenant_cap = cap

    @property
    def calls_in_flight(self) -> int:
        """Tool calls admitted and not finished, across every transport."""
        return self._call_slots.held

    @property
    def listen_streams(self) -> int:
        """Open ``subscriptions/listen`` streams, across every transport."""
        return self._listen_slots.held

    def _finish(self, call: Call, result: Any) -> Any:
        """Modern results carry ``resultType`` and the server's identity."""
        if call.era != "modern" or not isinstance(result, dict):
            return result
        result.setdefault("resultType", "complete")
        meta = result.get("_meta")
        result["_meta"] = {**(meta if isinstance(meta, dict) else {}), META_SERVER_INFO: self.info}
        return result


# -- the method table ------------------------------------------------------


async def _initialize(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    assert call.request is not None
    params = call.request.params
    version = negotiate_legacy_version(params.get("protocolVersion"))
    capabilities = params.get("capabilities")
    info = params.get("clientInfo")
    if caller.channel is not None:
        caller.channel.legacy = LegacyState(
            version,
            capabilities if isinstance(capabilities, dict) else {},
            info if isinstance(info, dict) else None,
        )
    return server.describe(
        {
            "protocolVersion": version,
            "capabilities": server.capabilities("legacy"),
            "serverInfo": server.info,
        }
    )


async def _empty(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    return {}


async def _set_level(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    assert call.request is not None
    level = call.request.params.get("level")
    if level not in LOG_LEVELS:
        raise JsonRpcError(INVALID_PARAMS, "Invalid params: unknown log level")
    if caller.channel is not None and caller.channel.legacy is not None:
        caller.channel.legacy.log_level = level
    return {}


async def _discover(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    versions = list(MODERN_VERSIONS)
    capabilities = server.capabilities(call.era)
    if any(tool.task_support != "forbidden" for tool in server.tools.values()):
        capabilities["extensions"] = {tasks.TASKS_EXTENSION: {}}
    if call.era == "legacy":
        versions += reversed(LEGACY_VERSIONS)
    return server.describe(
        {
            "supportedVersions": versions,
            "capabilities": capabilities,
            "ttlMs": server.list_ttl_ms,
            "cacheScope": "public",
        }
    )


async def _list_tools(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    assert call.request is not None
    tools, more = page("tools", server.list_tools(), call.request.params, server.page_size)
    result: dict[str, Any] = {"tools": list(tools), **more}
    if call.era == "modern":
        result["ttlMs"] = server.list_ttl_ms
        result["cacheScope"] = "public"
    return result


def _log_level(call: Call, caller: Caller) -> str | None:
    if call.envelope is not None:
        return call.envelope.log_level
    legacy = caller.channel.legacy if caller.channel is not None else None
    return LOG_LEVELS[0] if legacy is None or legacy.log_level is None else legacy.log_level


def client_capabilities(call: Call, caller: Caller) -> Mapping[str, Any]:
    """What the client declared: on the request (modern) or in ``initialize`` (legacy)."""
    if call.envelope is not None:
        return call.envelope.client_capabilities
    legacy = caller.channel.legacy if caller.channel is not None else None
    return {} if legacy is None else legacy.client_capabilities


async def make_context(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, target: str
) -> ToolContext:
    """The ``ctx`` of one request: identity, progress, logging and (modern) MRTR input.

    A ``requestState`` is opened (verified) and used up here, before any
    code of the server runs, so a tampered or replayed one never reaches a
    tool (``-32602``).
    """
    request = call.request
    assert request is not None
    params = request.params
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    ctx = ToolContext(
        request.id,
        caller,
        token if is_valid_request_id(token) else None,
        exchange,
        _log_level(call, caller),
        call.era,
        client_capabilities=client_capabilities(call, caller),
    )
    if call.era == "modern":
        responses = params.get("inputResponses")
        if responses is not None and not isinstance(responses, dict):
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: inputResponses must be an object")
        ctx.input_responses = responses
        if "requestState" in params:
            signer = server.state_signer
            opened = signer.open_token(params["requestState"], _mrtr_binding(call, caller, target))
            if not await server.used_states.use(opened.key, opened.expires_at, signer.now()):
                raise JsonRpcError(INVALID_PARAMS, "Invalid params: requestState was used already")
            ctx.request_state = opened.state
    return ctx


def _mrtr_binding(call: Call, caller: Caller, target: str) -> str:
    assert call.request is not None
    params = call.request.params
    arguments = params.get("arguments") if call.request.method != "resources/read" else None
    return binding(mrtr_identity(caller), call.request.method, target, arguments)


def mrtr_identity(caller: Caller) -> str | None:
    """Who a ``requestState`` is bound to: the principal, else the caller's tenant.

    Without authentication the tenant is the client's address bucket
    (``ip:<bucket>``), so an anonymous caller elsewhere with the same
    arguments cannot replay another's state.  The ``principal:`` prefix is
    :func:`~.._core.namespace.tenant_for`'s, so a principal named like an
    address never matches that address's anonymous callers.
    """
    if caller.principal is not None:
        return f"principal:{caller.principal}"
    return caller.tenant


def input_required(
    server: McpServer, call: Call, caller: Caller, value: InputRequired, target: str
) -> dict[str, Any]:
    """The ``InputRequiredResult`` for *value*, its state sealed; modern era only.

    It may only ask for what the client declared (``-32021`` otherwise).
    """
    if call.era != "modern":
        raise JsonRpcError(
            INVALID_PARAMS, "This request needs client input, which requires MCP 2026-07-28"
        )
    _check_declared(value, client_capabilities(call, caller))
    token = None
    if value.state is not None:
        token = server.state_signer.seal(value.state, _mrtr_binding(call, caller, target))
    return input_required_result(value, token)


def _check_declared(value: InputRequired, declared: Mapping[str, Any]) -> None:
    """Input may only be asked of capabilities the client declared (``-32021``)."""
    missing: dict[str, Any] = {n: {} for n in value.capabilities() if n not in declared}
    if missing:
        raise JsonRpcError(
            MISSING_CLIENT_CAPABILITY,
            "Missing required client capability",
            {"requiredCapabilities": missing},
        )


async def run_target(
    call: Call,
    caller: Caller,
    exchange: Exchange,
    started: Callable[[], None],
    body: Callable[[], Awaitable[Any]],
    key: tuple[RequestId, str] | None = None,
) -> Any:
    """Run *body* as the request's work: inside ``tracked()`` when ``call.tool`` is cancellable.

    It is tracked under the request's id in the caller's namespace, or under
    *key* (``(id, namespace)``: a task is tracked by its task id).

    A :class:`RequestCancelled` raised by a helper task (inside an exception
    group) is the request's cancellation; other exceptions propagate.
    """
    request, tool = call.request, call.tool
    assert request is not None and tool is not None
    try:
        if tool.cancellable:
            registry = caller.registry
            request_id, namespace = (request.id, caller.namespace) if key is None else key
            async with registry.tracked(request_id, namespace) as tracked_request:
                exchange._started(tracked_request, registry)
                started()
                return await body()
        started()
        return await body()
    except (RequestCancelled, trio.Cancelled):
        raise
    except Exception as exc:
        cancelled = _find_cancellation(exc)
        if cancelled is not None:
            # A helper task of the work stopped at checkpoint_cancelled().
            raise cancelled from exc
        raise


async def _call_tool(
    server: McpServer, call: Call, caller: Caller, exchange: Exchange, started: Callable[[], None]
) -> dict[str, Any]:
    request, tool = call.request, call.tool
    assert request is not None and tool is not None
    try:
        arguments = tool.bind(request.params.get("arguments"))
    except ToolArgumentError as exc:
        return error_result(f"Invalid arguments for tool {tool.name!r}: {exc}")
    ctx = await make_context(server, call, caller, exchange, tool.name)
    if call.era == "modern" and tool.task_support != "forbidden":
        if server.tasks.wanted(tool.task_support, client_capabilities(call, caller)):
            if tool.before_task is not None:
                try:
                    asked = await tool.before_task(ctx, **arguments)
                except ToolError as exc:
                    return error_result(str(exc))
                if isinstance(asked, InputRequired):
                    return input_required(server, call, caller, asked, tool.name)
            try:
                return await _start_task(server, call, caller, tool, arguments, ctx, exchange)
            except tasks.TasksUnavailable:
                if tool.task_support == "required":
                    raise
                # The shared task store is down: answer the ordinary way instead.
    return await _invoke(server, call, caller, exchange, started, ctx, arguments)


async def _start_task(
    server: McpServer,
    call: Call,
    caller: Caller,
    tool: Tool,
    arguments: dict[str, Any],
    first: ToolContext,
    creator: Exchange,
) -> dict[str, Any]:
    """Run *tool* as a task in the task manager's nursery (SEP-2663).

    The task's ``ctx`` keeps the MRTR input of the request that created it
    (*first*'s ``input_responses`` and verified ``request_state``).  If the
    ``CreateTaskResult`` never reaches the client (*creator* lost), the
    task is cancelled: nobody could poll or cancel it.
    """
    assert call.request is not None

    async def runner(exchange: Exchange, task_id: str) -> dict[str, Any]:
        assert call.request is not None
        ctx = ToolContext(
            call.request.id,
            caller,
            None,
            exchange,
            None,
            call.era,
            client_capabilities=first.client_capabilities,
            input_responses=first.input_responses,
            request_state=first.request_state,
            task_progress=partial(server.tasks.progress, task_id),
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
            _check_declared(value, ctx.client_capabilities)
            wire = input_required_result(value, None)["inputRequests"]
            ctx.input_responses = await server.tasks.ask(task_id, wire)
            ctx.request_state = value.state

        return await _invoke(server, call, caller, exchange, _no_op, ctx, arguments, key, ask)

    # Quotas are the tenant's (every connection of it), visibility the caller's own.
    tenant = caller.tenant or GLOBAL_NAMESPACE
    created = await server.tasks.start(
        caller.namespace, runner, Exchange(), creator=creator, tenant=tenant
    )
    if caller.channel is not None:
        caller.channel.remember_task(call.request.id, created["taskId"])
    return created


def _no_op() -> None:
    pass


async def _invoke(
    server: McpServer,
    call: Call,
    caller: Caller,
    exchange: Exchange,
    started: Callable[[], None],
    ctx: ToolContext,
    arguments: dict[str, Any],
    key: tuple[RequestId, str] | None = None,
    ask: Callable[[InputRequired], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """Run ``call.tool`` with *ctx* (see :func:`run_target`); its result, as a tool result.

    With *ask* (a task), an ``InputRequired`` is handed to it and the tool
    runs again, still tracked, once it returns.
    """
    tool = call.tool
    assert tool is not None

    async def body() -> Any:
        value = await tool.fn(ctx, **arguments)
        while ask is not None and isinstance(value, InputRequired):
            await ask(value)
            value = await tool.fn(ctx, **arguments)
        return value

    try:
        value = await run_target(call, caller, exchange, started, body, key)
        if isinstance(value, InputRequired):
            return input_required(server, call, caller, value, tool.name)
        return tool.result(value)
    except (RequestCancelled, trio.Cancelled, JsonRpcError):
        # A tool raising JsonRpcError asks for a protocol error (a failed task).
        raise
    except ToolError as exc:
        return error_result(str(exc))
    except Exception as exc:
        # A failing tool is a tool result, not a protocol error (MCP "isError").
        server._failures.exception(failure_key(tool.name, exc), "tool %r failed", tool.name)
        return error_result(f"{type(exc).__name__}: {exc}")


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


_LEGACY: Final[frozenset[Era]] = frozenset({"legacy"})
_CALL_LIMITS: Final[dict[str, Limit]] = {"server": "server", "tenant": "tenant"}
_LISTEN_LIMITS: Final[dict[str, Limit]] = {"server": "listen_server", "tenant": "listen_tenant"}

_METHODS: Final[dict[str, _Method]] = {
    "initialize": _Method(_initialize, _LEGACY, ordered=True),
    "ping": _Method(_empty, _LEGACY),
    "logging/setLevel": _Method(_set_level, _LEGACY, ordered=True),
    "server/discover": _Method(_discover),
    "tools/list": _Method(_list_tools),
    "tools/call": _Method(_call_tool),
    # The Tasks extension (SEP-2663); tasks/result and tasks/list do not exist there.
    "tasks/get": _Method(tasks.tasks_get, frozenset({"modern"})),
    "tasks/cancel": _Method(tasks.tasks_cancel, frozenset({"modern"})),
    "tasks/update": _Method(tasks.tasks_update, frozenset({"modern"})),
}


# The features beyond tools (resources, prompts, completion, subscriptions)
# serve from their own module; it imports this one, so it is bound last.
from . import surface  # noqa: E402
