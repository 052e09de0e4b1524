"""The server a tool author writes: :class:`McpServer`, one object composed of three.

``McpServer(...)`` builds, in its ``__init__``:

* its :class:`~.registration.Registration` (``server.registration``): what
  it offers, filled by the decorators below (``tool``, ``resource``,
  ``prompt``, ...), and the settings it is served with, the server-wide
  :class:`~.limits.ServerLimits` (``server.limits``) among them;
* its :class:`~.dispatcher.Dispatcher` (``server.dispatcher``), which serves
  that registration to every transport;
* the dispatcher's :class:`~.runtime.ServerRuntime`
  (``server.dispatcher.runtime``): what changes while it serves (its
  subscription hub, used MRTR states);
* its extensions (``McpServer(extensions=[...])``, :mod:`.extension`), bound
  by the dispatcher: the Tasks extension (``trio_mcp_cancel.server.Tasks``)
  is one, and what it keeps (its running tasks) is its own.

Transports take anything with a ``dispatcher`` (:class:`~.dispatcher.Served`),
so none imports this module, and :meth:`McpServer.run` imports the runner
(which imports the HTTP stack) only when called: importing the server loads
no hypercorn and patches nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

import trio

from .._run.choices import FROM_ENVIRONMENT, FromEnvironment, Transport
from .._telemetry.config import Telemetry
from .._wire.names import TASKS_EXTENSION
from .._work.threads import ThreadLimit
from .dispatcher import Dispatcher
from .extension import Extension
from .lifespan import Lifespan
from .limits import DEFAULT_SERVER_LIMITS, ServerLimits
from .metadata import check_icons
from .middleware import Middleware
from .mounting import Mounting
from .mrtr import InputRequired
from .offerings import Offerings
from .pagination import DEFAULT_PAGE_SIZE
from .registration import CacheScope, OnCancel, Registration
from .time_limits import check_time_limit
from .tools import TaskSupport, make_tool

__all__ = ["McpServer"]

F = TypeVar("F", bound=Callable[..., Any])  # async def, or a plain def (a sync tool)
MW = TypeVar("MW", bound=Middleware)


class _MiddlewareDecorator:
    """``@server.middleware``, apart so that :class:`McpServer` stays within its size."""

    dispatcher: Dispatcher

    def middleware(self, fn: MW, /) -> MW:
        """Decorator: *fn* wraps every request, inside those added before it."""
        self.dispatcher.middleware.append(fn)
        return fn


class McpServer(Mounting, Offerings, _MiddlewareDecorator):
    """An MCP server: register tools, resources and prompts, then :meth:`run` it.

    Transport-independent: the same server is served on stdio (:meth:`run`,
    or :func:`~trio_mcp_cancel.stdio.serve_mcp_stdio` inside a Trio
    program), over HTTP (:class:`~trio_mcp_cancel.http.McpHttpApp`),
    WebSocket, or to the test client, all through its one :attr:`dispatcher`
    (see :mod:`.dispatcher`), which serves both eras.  ``docs/reference.md``
    gives every keyword's default and meaning; in short:

    *limits*: the server-wide admission caps (:class:`ServerLimits`), besides
    each channel's own ``ConnectionLimits.max_concurrent_calls``.
    *extensions*: the MCP extensions it serves (:class:`~.extension.Extension`),
    in order; tools registered with ``task=`` need the Tasks extension
    (``extensions=[Tasks()]``).
    *middleware*: wraps every request, first = outermost (:mod:`.middleware`).
    *state_secret* (at least 32 bytes, or their base64 text; default: random
    per process, so instances behind a load balancer must share one) seals
    MRTR ``requestState`` values for *state_ttl* seconds;
    *state_secret_previous* (the secret before a rotation) still opens them,
    never seals.  *resource_ttl_ms*, *resource_cache_scope* and
    *list_ttl_ms* are the caching hints of modern results; *page_size* the
    items per page of the list methods; *on_cancel* ``"silent"`` (MCP's
    rule) or ``"error"`` (``-32800`` for a request the client cancelled);
    *sync_tool_threads* the worker threads sync (``def``) tools share;
    *telemetry* OpenTelemetry spans and metrics (``False``: off).
    *lax_arguments*: arguments are validated strictly by default (what the
    published schema says is exactly what passes); ``True`` converts them
    in pydantic's lax mode, as the official Python SDK does, for the tools
    registered after it is set (``server.registration.lax_arguments``).
    *title*, *description*, *website_url* and *icons*: the display metadata of
    ``serverInfo`` (``initialize``, ``server/discover``; :mod:`.metadata`).
    *lifespan*: ``lifespan(server)``, an async context manager entered around
    serving on every transport, what it yields read as ``ctx.lifespan``; its
    exit may take *lifespan_timeout* seconds (:mod:`.lifespan`).
    """

    def __init__(
        self,
        name: str = "trio-mcp-cancel",
        version: str = "0.1.0",
        *,
        instructions: str | None = None,
        limits: ServerLimits = DEFAULT_SERVER_LIMITS,
        extensions: Sequence[Extension] = (),
        middleware: Sequence[Middleware] = (),
        on_cancel: OnCancel = "silent",
        list_ttl_ms: int = 300_000,
        state_secret: bytes | str | None = None,
        state_ttl: float = 600.0,
        state_secret_previous: bytes | str | None = None,
        resource_ttl_ms: int = 0,
        resource_cache_scope: CacheScope = "private",
        sync_tool_threads: int | trio.CapacityLimiter = 40,
        page_size: int = DEFAULT_PAGE_SIZE,
        telemetry: bool | Telemetry = True,
        lax_arguments: bool = False,
        title: str | None = None,
        description: str | None = None,
        website_url: str | None = None,
        icons: Iterable[Mapping[str, Any]] | None = None,
        lifespan: Lifespan | None = None,
        lifespan_timeout: float = 10.0,
    ) -> None:
        self.registration = Registration(
            name,
            version,
            instructions=instructions,
            limits=limits,
            on_cancel=on_cancel,
            list_ttl_ms=list_ttl_ms,
            state_secret=state_secret,
            state_ttl=state_ttl,
            state_secret_previous=state_secret_previous,
            resource_ttl_ms=resource_ttl_ms,
            resource_cache_scope=resource_cache_scope,
            sync_tool_threads=sync_tool_threads,
            page_size=page_size,
            telemetry=telemetry,
            lax_arguments=lax_arguments,
            title=title,
            description=description,
            website_url=website_url,
            icons=icons,
            lifespan=lifespan,
            lifespan_timeout=lifespan_timeout,
        )
        """What this server offers and its serving settings (the decorators fill it)."""
        self.dispatcher = Dispatcher(self.registration, extensions, middleware)
        """Serves :attr:`registration` to every transport, with the extensions; its
        ``runtime`` holds the subscription hub and the used MRTR states."""

    @property
    def limits(self) -> ServerLimits:
        """The server-wide admission caps; assign new ones to change them while serving
        (the dispatcher reads them at each admission)."""
        return self.registration.limits

    @limits.setter
    def limits(self, limits: ServerLimits) -> None:
        if not isinstance(limits, ServerLimits):
            raise TypeError("limits must be a ServerLimits")
        self.registration.limits = limits

    def run(
        self,
        transport: Transport = "stdio",
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        grace_period: float | FromEnvironment | None = FROM_ENVIRONMENT,
        log_level: str = "info",
        http: str = "h11",
    ) -> None:
        """Serve this server until stopped; blocks (it calls ``trio.run`` itself).

        ``run()`` serves stdio, what a desktop host launches;
        ``run("http", host=..., port=...)`` serves Streamable HTTP (both eras)
        on ``127.0.0.1:8000`` by default (``port=0``: any free port, logged).
        Both stop cleanly on SIGINT/SIGTERM (and stdio on end of input).
        *grace_period* is the seconds from a cancel to its hard cancel (default:
        ``MCP_GRACE_PERIOD``, else 5; ``None``: never hard-cancel).  Logging
        goes to stderr at *log_level*, one line per cancelled request at
        ``"info"``, as ``trio-mcp-cancel run`` does.  ``"streamable-http"``
        is the same as ``"http"``.  *http* is the HTTP/1.1 parser over HTTP:
        ``"h11"`` (the default) or ``"httptools"`` (the ``httptools`` extra:
        the same bytes on the wire for less CPU per request), as
        ``trio-mcp-cancel run --http``; it is refused for stdio.

        When serving cannot start (the port is in use, the app refused to
        start), raises :class:`SystemExit` whose message is the one sentence
        saying why: a script exits with status 1 and that line, not a
        traceback; the ``StartupFailed`` is its ``__cause__``.
        """
        # Imported here: the runner sits above every transport and imports the
        # HTTP stack, which a registered-only or stdio-embedded server never needs.
        from .._run import runner

        runner.run_server(
            self,
            transport,
            host=host,
            port=port,
            grace_period=grace_period,
            log_level=log_level,
            http=http,
        )

    # -- tools -------------------------------------------------------------------

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
        time_limit: float | None = None,
        icons: Iterable[Mapping[str, Any]] | None = None,
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
        time_limit: float | None = None,
        icons: Iterable[Mapping[str, Any]] | None = None,
    ) -> Callable[[F], F] | F:
        """Register a function as a tool: ``@server.tool``, ``@server.tool()`` or ``(name=...)``.

        Its parameters are the tool's arguments (see :func:`.tools.make_tool`),
        except the one annotated ``Context``, at any position, which
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
        *time_limit*: seconds one call (one task run) may take: then its flag is
        set (kind ``server``) and a grace period later it is hard-cancelled; the
        client reads ``-32800`` "time limit of N s reached" (:mod:`.time_limits`).
        *icons*: the tool's ``icons`` (:mod:`.metadata`).
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
        _check_task_support(task, self.dispatcher.extensions)

        what = f"tool {name!r}" if name else "a tool"
        limit, shown = check_time_limit(time_limit, what), check_icons(icons, what)
        if limit is not None and not cancellable:
            raise ValueError(f"{what}: a time_limit needs a cancellable tool")
        threads = None if thread_limiter is None else ThreadLimit(thread_limiter)
        given: str | None = name
        needs = frozenset(scopes.split() if isinstance(scopes, str) else scopes)
        registration = self.registration

        def register(fn: F) -> F:
            tool_name = given or fn.__name__
            if threads is not None and inspect.iscoroutinefunction(fn):
                raise TypeError(f"tool {tool_name!r}: thread_limiter is for sync (def) tools")
            if tool_name in registration.tools:
                raise ValueError(f"tool {tool_name!r} is already registered")
            registration.tools[tool_name] = make_tool(
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
                threads=registration.sync_tool_threads if threads is None else threads,
                lax_arguments=registration.lax_arguments,
                time_limit=limit,
                icons=shown,
            )
            if needs:
                registration.tool_scopes[tool_name] = needs
            self.tools_changed()
            return fn

        return register

    def remove_tool(self, name: str) -> None:
        """Unregister a tool; listen streams that asked are told the list changed."""
        del self.registration.tools[name]
        self.registration.tool_scopes.pop(name, None)
        self.tools_changed()

    def remove_prompt(self, name: str) -> None:
        del self.registration.prompts.prompts[name]
        self.prompts_changed()

    # -- change notifications ----------------------------------------------------

    def tools_changed(self) -> None:
        """Tell listen streams that asked: ``notifications/tools/list_changed``."""
        self.registration.changed("notifications/tools/list_changed")

    def resource_updated(self, uri: str) -> None:
        """Tell listen streams subscribed to *uri*: ``notifications/resources/updated``."""
        self.registration.changed("notifications/resources/updated", {"uri": uri})


def _check_task_support(task: TaskSupport, extensions: Sequence[Extension]) -> None:
    """A tool that may run as a task needs the Tasks extension to run it."""
    if task != "forbidden" and not any(e.name == TASKS_EXTENSION for e in extensions):
        raise ValueError(
            f"task={task!r} needs the Tasks extension: McpServer(..., extensions=[Tasks()])"
            " (from trio_mcp_cancel.server import Tasks)"
        )
