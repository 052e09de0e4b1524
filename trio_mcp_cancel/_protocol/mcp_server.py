"""The server a tool author configures: registration and configuration, no dispatch.

:class:`McpServer` holds what the server offers (tools here, resources,
prompts and completion through :class:`~.features.ServerFeatures`) and its
settings (admission caps, the MRTR state signer, the sync-tool thread limit,
the task manager to use).  Serving a transport is the
:class:`~.dispatcher.Dispatcher`'s job, and what changes while it serves
(the running task manager, the subscription hub, the used MRTR states) is
the dispatcher's :class:`~.runtime.ServerRuntime`; this module imports
nothing of the dispatch path, so the layers only ever import downwards.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Literal, TypeVar, overload

import trio

from .._telemetry.config import Telemetry
from .._telemetry.server import ServerTelemetry, for_server
from .._work.threads import ThreadLimit
from .admission import check_cap
from .features import CacheScope, ServerFeatures
from .mrtr import InputRequired
from .pagination import DEFAULT_PAGE_SIZE
from .subscriptions import DEFAULT_SUBSCRIPTION_LIMITS, SubscriptionLimits
from .tasks import TaskManager
from .tools import TaskSupport, Tool, make_tool
from .versions import Era

__all__ = ["McpServerBase", "OnCancel"]

#: What a request the *client* cancelled is answered with: ``"silent"`` (the
#: default) sends nothing, as MCP requires; ``"error"`` sends ``-32800``
#: "Request cancelled", for clients that wait for an answer regardless.
#: Server-side cancels are always answered ``-32800``.
OnCancel = Literal["silent", "error"]

F = TypeVar("F", bound=Callable[..., Any])  # async def, or a plain def (a sync tool)


class McpServerBase(ServerFeatures):
    """What a server offers and how it is configured, independent of the transport.

    Users build the public :class:`trio_mcp_cancel.server.McpServer`, this
    class plus ``run()`` (which sits above the transports, so it cannot live
    down here without an import cycle); transports accept this base.

    Registration (``tool``, ``resource``, ``prompt``, ...) and configuration
    only: transports are served by the :class:`~.dispatcher.Dispatcher` of
    the server (see :mod:`.dispatcher` for the path every message takes),
    which serves both eras: a request carrying the modern ``_meta`` envelope
    is served statelessly; ``initialize`` starts a legacy channel.

    Admission: tool calls in flight are bounded server-wide
    (*max_concurrent_calls*, across every transport and session) and per
    tenant (*max_calls_per_tenant*: a principal, or a client address bucket
    when unauthenticated, however many sessions or connections it opens),
    besides each channel's own ``max_concurrent_calls``.  A call over any
    of them is answered at once with the refusal (``-31429``; ``-32001`` in the
    legacy era; ``data.limit`` says which), never queued: a queue would turn a flood into a hang for
    everyone behind it.  ``None`` disables a cap.

    Resources, prompts, completion and ``subscriptions/listen`` are
    registered through :class:`~.features.ServerFeatures` and served by
    :mod:`.surface`; ``resources/read``, ``prompts/get`` and listen streams
    run tracked, like tool calls; the first two count against the same caps.
    Open listen streams are not calls (they stay open for hours): they have
    their own bounds, *max_listen_streams* server-wide and
    *max_listen_streams_per_tenant* (refused likewise, ``data.limit``
    ``"listen_server"`` / ``"listen_tenant"``, HTTP ``429``), and the
    transports' ``max_request_time`` does not end them.
    *subscription_limits* bounds the resource URIs that legacy sessions
    (``resources/subscribe``) and listen streams hold, in bytes as well as
    in count, per session, per tenant and in total (a
    :class:`~.subscriptions.SubscriptionLimits`; its fields say the
    defaults and why).
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
    *telemetry*: OpenTelemetry spans and metrics when ``opentelemetry-api``
    is installed (the global providers, or a :class:`Telemetry`'s);
    ``False`` turns them off.
    *lax_arguments*: tool arguments are validated strictly by default, so
    what the published schema says is exactly what passes (``"1"`` is not an
    ``int``); ``True`` converts them in pydantic's lax mode instead, as the
    official Python SDK does (``"1"`` and ``2.0`` become ``1`` and ``2``),
    for clients or models that send numbers as strings.  It applies to the
    tools registered after it is set.
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
        subscription_limits: SubscriptionLimits = DEFAULT_SUBSCRIPTION_LIMITS,
        tasks: TaskManager | None = None,
        state_secret: bytes | str | None = None,
        state_ttl: float = 600.0,
        state_secret_previous: bytes | str | None = None,
        resource_ttl_ms: int = 0,
        resource_cache_scope: CacheScope = "private",
        sync_tool_threads: int | trio.CapacityLimiter = 40,
        page_size: int = DEFAULT_PAGE_SIZE,
        telemetry: bool | Telemetry = True,
        lax_arguments: bool = False,
    ) -> None:
        if on_cancel not in ("error", "silent"):
            raise ValueError("on_cancel must be 'silent' or 'error'")
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.lax_arguments = lax_arguments
        """Tools registered from now on convert arguments in pydantic's lax mode."""
        self.page_size = page_size
        """Items per page of the list methods (opaque ``cursor``/``nextCursor``)."""
        self.telemetry: ServerTelemetry | None = for_server(telemetry)
        """Spans and metrics (``None``: off, or ``opentelemetry-api`` is not installed)."""
        self.max_concurrent_calls = check_cap(max_concurrent_calls)
        """Tool calls in flight, server-wide (``None``: no cap); read at each admission."""
        self.max_calls_per_tenant = check_cap(max_calls_per_tenant)
        self.max_listen_streams = check_cap(max_listen_streams)
        self.max_listen_streams_per_tenant = check_cap(max_listen_streams_per_tenant)
        if not isinstance(subscription_limits, SubscriptionLimits):
            raise TypeError("subscription_limits must be a SubscriptionLimits")
        self.subscription_limits = subscription_limits
        """What resource subscriptions may hold (URI length, URIs and bytes per session,
        bytes per tenant and in total); read at each subscription."""
        self.name = name
        self.version = version
        self.instructions = instructions
        self.on_cancel: OnCancel = on_cancel
        self.list_ttl_ms = list_ttl_ms
        self.tools: dict[str, Tool] = {}
        self.tool_scopes: dict[str, frozenset[str]] = {}
        """OAuth scopes a tool's ``tools/call`` needs (``scopes=``; HTTP ``403`` without them)."""
        # Resources, prompts, completion, subscriptions and MRTR (see .features, .surface).
        self.sync_tool_threads = ThreadLimit(sync_tool_threads)
        """The worker threads sync tools share (not Trio's default limiter); see :mod:`.threads`.

        Configuration: each tool binds it when registered; the limiter is made per Trio run."""
        self.task_manager: TaskManager | None = tasks
        """The task manager given as *tasks* (``None``: a default one), for the runtime to run.

        The one in use, running or not, is ``Dispatcher.of(server).runtime.tasks``
        (:class:`~.runtime.ServerRuntime`)."""
        self.served_by: object = None
        """Low-level: the dispatcher serving this server (``Dispatcher.of`` sets it; the
        server never imports the dispatcher, so it is typed loosely here)."""
        self._init_features(
            state_secret, state_secret_previous, state_ttl, resource_ttl_ms, resource_cache_scope
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
        scopes: Collection[str] = (),
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
        scopes: Collection[str] = (),
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
        *scopes*: the OAuth scopes a token must grant to call the tool over
        an HTTP app that authorizes (:mod:`trio_mcp_cancel.oauth`; ``403
        insufficient_scope`` without them).
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
        needs = frozenset(scopes.split() if isinstance(scopes, str) else scopes)

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
                lax_arguments=self.lax_arguments,
            )
            if needs:
                self.tool_scopes[tool_name] = needs
            self.tools_changed()
            return fn

        return register

    def list_tools(self) -> list[dict[str, Any]]:
        return [tool.describe() for tool in self.tools.values()]

    def remove_tool(self, name: str) -> None:
        """Unregister a tool; listen streams that asked are told the list changed."""
        del self.tools[name]
        self.tool_scopes.pop(name, None)
        self.tools_changed()

    def capabilities(self, era: Era = "legacy", *, notifications: bool = False) -> dict[str, Any]:
        """*notifications*: a legacy client the transport can notify outside requests
        (the HTTP GET stream); the modern era always can (``subscriptions/listen``)."""
        listen = era == "modern" or notifications
        return {
            "tools": {"listChanged": listen},
            "logging": {},
            **self.feature_capabilities(listen),
        }

    def describe(self, result: dict[str, Any]) -> dict[str, Any]:
        """*result* (``initialize``'s or ``server/discover``'s) with the instructions, if any."""
        if self.instructions:
            result["instructions"] = self.instructions
        return result
