"""A Trio MCP client whose calls are cancelled when the caller's scope is.

For gateways and tools that call other MCP servers::

    @server.tool()
    async def summarize(ctx: Context, path: str) -> str:
        async with open_client("http://127.0.0.1:9000/mcp") as upstream:
            result = await upstream.call_tool("read", {"path": path})
        return result["content"][0]["text"]

Cancellation reaches the downstream server in both phases: when the
gateway's request is flagged (its client cancelled it), the downstream call
is cancelled at once, the way its transport cancels (modern HTTP: close the
request's stream; legacy HTTP, stdio and WebSocket:
``notifications/cancelled``), and ``call_tool`` raises
:class:`~trio_mcp_cancel.RequestCancelled`; a cancelled scope around the
call (the hard cancel, a timeout) does the same.

Tasks (the Tasks extension, modern era): with ``tasks=True`` (or
``call_tool(..., task=True)``) a call declares the extension, and when the
server answers with a task, ``call_tool`` polls ``tasks/get`` until it is
done and returns its result (a task that ends ``cancelled`` raises
:class:`McpTaskCancelled`, the client's own error, never a ``-32800``);
cancelling the call, either way, sends ``tasks/cancel``, since a task
outlives the request that made it.

Transports: :func:`open_http_client` (Streamable HTTP, both eras),
:func:`open_websocket_client`, :func:`open_stdio_client` (a child process
in its own process group, stopped and reaped on exit), or
:func:`open_client`, which picks one from the target.  Eras: ``"modern"``
(2026-07-28: ``_meta`` on every request, no handshake), ``"legacy"``
(``initialize`` first), or ``"auto"`` (a modern ``server/discover`` first,
``initialize`` when the server does not speak the modern era).
"""

from __future__ import annotations

import contextlib
import importlib
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack

import attrs
import trio
import trio_websocket

from ._client.calls import PendingCall, ProgressCallback
from ._client.engine import ClientEngine
from ._client.errors import McpError, McpTransportError, OAuthError
from ._client.handlers import ClientHandlers, InputHandler, ServerRequests
from ._client.streams import MessageTransport, read_lines, stop_child
from ._client.tasks import McpTaskCancelled, McpTaskError, TaskCallback, TaskPolling
from ._public import fixup_module_metadata, missing_extra
from ._telemetry.client import Network, for_client
from ._telemetry.config import Telemetry
from ._wire.names import MODERN_ERRORS

if TYPE_CHECKING:
    import ssl

    import httpx2

    from ._client.http import HttpTransport
    from ._client.oauth import ClientCredentialsAuth

__all__ = [
    "ClientCredentialsAuth",
    "ClientEra",
    "ClientHandlers",
    "ClientOptions",
    "InputHandler",
    "McpClient",
    "McpError",
    "McpTaskCancelled",
    "McpTaskError",
    "McpTransportError",
    "OAuthError",
    "PendingCall",
    "ProgressCallback",
    "TaskCallback",
    "TaskPolling",
    "open_client",
    "open_http_client",
    "open_stdio_client",
    "open_websocket_client",
]

ClientEra = Literal["modern", "legacy", "auto"]


@attrs.define(eq=False)
class McpClient(ClientEngine):
    """An MCP client on one transport; made by the ``open_*_client`` functions.

    ``call_tool``, ``request``, ``list_tools``, ``start_call`` and the rest
    come from the engine shared with the test client.  It forgets answered
    calls and keeps bounded lists of stray messages, so it can live as long
    as a gateway does.  Its ``transport`` is attached for the ``async with``
    block and detached (``None``: closed) when it ends.
    """


async def _handshake(client: McpClient, era: ClientEra) -> None:
    if era == "legacy":
        await client.initialize()
    elif era == "auto":
        try:
            await client.request("server/discover")
        except McpError as exc:
            if exc.code in MODERN_ERRORS:
                raise
            client.era = "legacy"
            await client.initialize()


class ClientOptions(TypedDict, total=False):
    """What every ``open_*_client`` takes, besides its transport's own options.

    *era*: ``"modern"`` (default), ``"legacy"`` or ``"auto"``.
    *client_info*, *client_capabilities*: what the client says it is and
    declares.  *log_level*: the log messages wanted.  *forward_cancel*
    (default true): cancel a call when the tracked request the caller runs
    in is flagged.  *tasks* (default false): declare the Tasks extension on
    ``tools/call``; *task_polling*: how tasks are followed.  *handlers*
    (:class:`ClientHandlers`): answers to the server's elicitation,
    sampling and roots requests, in every form (MRTR ``input_required``,
    a task's ``tasks/update``, a legacy server request); each handler
    given is declared as a capability.  *telemetry* (default true: the
    global OpenTelemetry providers; a :class:`~trio_mcp_cancel.server.Telemetry`
    for your own; false: off): a ``CLIENT`` span per request, parent of
    the server's, and ``mcp.client.operation.duration``.
    """

    era: ClientEra
    client_info: Mapping[str, Any] | None
    client_capabilities: Mapping[str, Any] | None
    log_level: str | None
    forward_cancel: bool
    tasks: bool
    task_polling: TaskPolling
    handlers: ClientHandlers | None
    telemetry: bool | Telemetry


def _new_client(options: ClientOptions, network: Network) -> McpClient:
    era = options.get("era", "modern")
    if era not in ("modern", "legacy", "auto"):
        raise ValueError(f"era must be 'modern', 'legacy' or 'auto', not {era!r}")
    handlers = options.get("handlers")
    capabilities = dict(options.get("client_capabilities") or {})
    if handlers is not None:
        capabilities = handlers.capabilities() | capabilities
    client = McpClient(
        "modern" if era == "auto" else era,
        capabilities,
        keep_history=False,
        forward_cancel=options.get("forward_cancel", True),
        tasks=options.get("tasks", False),
        task_polling=options.get("task_polling", TaskPolling()),
        handlers=handlers,
        telemetry=for_client(options.get("telemetry", True), network),
    )
    client_info = options.get("client_info")
    if client_info is not None:
        client.client_info = dict(client_info)
    client.log_level = options.get("log_level")
    return client


@contextlib.asynccontextmanager
async def _connected(
    client: McpClient,
    transport: HttpTransport | MessageTransport,
    era: ClientEra,
    nursery: trio.Nursery,
) -> AsyncIterator[McpClient]:
    """Attach *transport* (whose tasks run in *nursery*), shake hands, and detach on exit."""
    client.transport = transport
    if client.handlers is not None:

        def reply(message: dict[str, Any]) -> None:
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                transport.transmit(message, None)

        client.server_requests = ServerRequests(client.handlers, nursery, reply)
    if isinstance(transport, MessageTransport):
        nursery.start_soon(transport.write)
        nursery.start_soon(transport.read)
    try:
        await _handshake(client, era)
        yield client
    finally:
        client.transport = None
        client.server_requests = None
        nursery.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def _one_error() -> AsyncIterator[None]:
    """Our nursery is an implementation detail: a lone exception comes out as itself."""
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        raise group.exceptions[0] from None


def _httpx2() -> Any:
    """The ``client`` extra's module: the client's HTTP runs on httpx2."""
    try:
        from ._client import http
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise missing_extra("the HTTP client", "client", exc) from exc
    return http


@contextlib.asynccontextmanager
async def open_http_client(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    auth: httpx2.Auth | None = None,
    verify: ssl.SSLContext | str | bool = True,
    cert: Any = None,
    http2: bool = False,
    max_connections: int = 16,
    connect_timeout: float = 10.0,
    max_message_size: int = 16 * 1024 * 1024,
    http_client: httpx2.AsyncClient | None = None,
    **options: Unpack[ClientOptions],
) -> AsyncIterator[McpClient]:
    """An MCP client of the Streamable HTTP endpoint *url*, for one ``async with``.

    Requests go through one pooled ``httpx2.AsyncClient`` (at most
    *max_connections* connections, kept alive between calls; proxies from
    the environment).  *headers* go on every request; *auth* is an
    ``httpx2.Auth`` (a bearer token, OAuth); *verify* and *cert* are the TLS
    settings (a CA bundle or ``ssl.SSLContext``, a client certificate);
    *http2* speaks HTTP/2 (ALPN over TLS, prior knowledge in clear text).
    *max_message_size* bounds a JSON response body and each SSE event, as
    it bounds a line or a message of the other clients.
    *http_client*: your own ``httpx2.AsyncClient`` instead (then those
    settings are its own; it is not closed here).

    Modern cancellation closes the request's stream (only that one);
    legacy posts ``notifications/cancelled``, re-initializes once when the
    server forgot the session, and ends the session (``DELETE``) on exit.
    Leaving the block closes every stream still open, which cancels those
    calls on a modern server.  *options*: :class:`ClientOptions`.
    """
    http = _httpx2()
    client = _new_client(options, ("tcp", "http"))
    async with contextlib.AsyncExitStack() as stack:
        if http_client is None:
            http_client = await stack.enter_async_context(
                http.client_for(
                    headers=headers,
                    auth=auth,
                    verify=verify,
                    cert=cert,
                    # Clear-text HTTP/2 is prior knowledge: no HTTP/1.1 to fall back to.
                    http1=not (http2 and url.startswith("http://")),
                    http2=http2,
                    max_connections=max_connections,
                    connect_timeout=connect_timeout,
                )
            )
        async with _one_error(), trio.open_nursery() as nursery:
            transport: HttpTransport = http.HttpTransport(
                url, nursery, http_client, max_message_size, receiver=client.inbound
            )
            try:
                async with _connected(client, transport, options.get("era", "modern"), nursery):
                    if client.era == "legacy":
                        nursery.start_soon(transport.listen)
                    yield client
            finally:
                await transport.end_session()


@contextlib.asynccontextmanager
async def open_websocket_client(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    connect_timeout: float = 10.0,
    max_message_size: int = 1 << 20,
    **options: Unpack[ClientOptions],
) -> AsyncIterator[McpClient]:
    """An MCP client over WebSocket (subprotocol ``mcp``), for one ``async with``.

    Cancellation is ``notifications/cancelled``; closing the connection on
    exit cancels whatever still runs on the server.  *options*:
    :class:`ClientOptions`.
    """
    client = _new_client(options, ("tcp", "websocket"))
    extra = [(name.encode(), value.encode()) for name, value in (headers or {}).items()]
    async with (
        _one_error(),
        trio_websocket.open_websocket_url(
            url,
            subprotocols=["mcp"],
            extra_headers=extra,
            max_message_size=max_message_size,
            connect_timeout=connect_timeout,
            disconnect_timeout=connect_timeout,
        ) as ws,
    ):

        async def texts() -> AsyncIterator[str]:
            while True:
                try:
                    message = await ws.get_message()
                except trio_websocket.ConnectionClosed:
                    return
                yield message if isinstance(message, str) else message.decode("utf-8", "replace")

        async with trio.open_nursery() as nursery:
            transport = MessageTransport(ws.send_message, texts(), url, client.inbound)
            async with _connected(client, transport, options.get("era", "modern"), nursery):
                yield client


@contextlib.asynccontextmanager
async def open_stdio_client(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stderr: int | None = None,
    shutdown_timeout: float = 2.0,
    max_message_size: int = 16 * 1024 * 1024,
    **options: Unpack[ClientOptions],
) -> AsyncIterator[McpClient]:
    """Start the stdio MCP server *command* and connect to it, for one ``async with``.

    The server runs in a process group of its own; on exit its stdin is
    closed, then (after *shutdown_timeout* seconds each) it gets ``SIGTERM``
    and ``SIGKILL``; it is always reaped, and what it left in its group is
    killed.  *stderr* (default: inherited) is passed to the child.
    *options*: :class:`ClientOptions`.
    """
    if isinstance(command, str):
        raise TypeError("command must be a sequence of arguments, not a string")
    client = _new_client(options, ("pipe", None))
    process = await trio.lowlevel.open_process(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=None if env is None else dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        stdin = process.stdin

        async def send(text: str) -> None:
            await stdin.send_all(text.encode() + b"\n")

        async with _one_error(), trio.open_nursery() as nursery:
            transport = MessageTransport(
                send, read_lines(process.stdout, max_message_size), str(command[0]), client.inbound
            )
            async with _connected(client, transport, options.get("era", "modern"), nursery):
                yield client
    finally:
        await stop_child(process, shutdown_timeout)


@contextlib.asynccontextmanager
async def open_client(target: str | Sequence[str], **options: Any) -> AsyncIterator[McpClient]:
    """:func:`open_http_client` for an ``http(s)://`` URL, :func:`open_websocket_client`
    for ``ws(s)://``, :func:`open_stdio_client` for a command (a list of arguments)."""
    if isinstance(target, str):
        if target.startswith(("http://", "https://")):
            opener: Any = open_http_client
        elif target.startswith(("ws://", "wss://")):
            opener = open_websocket_client
        else:
            raise ValueError(
                f"not an http(s):// or ws(s):// URL: {target[:100]!r}"
                " (a stdio server is a list of arguments)"
            )
    else:
        opener = open_stdio_client
    async with opener(target, **options) as client:
        yield client


_LAZY = {"ClientCredentialsAuth": "oauth"}
"""Names from modules that need httpx2 (the ``client`` extra), imported when first used."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        imported = importlib.import_module(f"{__package__}._client.{module}")
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise missing_extra(name, "client", exc) from exc
    value = getattr(imported, name)
    globals()[name] = value
    fixup_module_metadata(__name__, [name], globals())
    return value


fixup_module_metadata(__name__, [n for n in __all__ if n not in _LAZY], globals())
