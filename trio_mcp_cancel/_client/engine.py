"""The MCP client engine: requests, their answers and progress, and cancellation.

One engine behind both clients: the in-memory test client
(:func:`trio_mcp_cancel.testing.open_test_client`) and the public client
(:mod:`trio_mcp_cancel.client`, over stdio, WebSocket and HTTP).  It knows
the protocol (the modern ``_meta`` envelope, the legacy ``initialize``,
ids, progress tokens, answers) and nothing about the wire.  It is composed
with a transport, never subclassed to get one: it sends and cancels
through ``engine.transport`` (a :class:`~._client.base.ClientTransport`),
and the transport feeds what arrives to ``engine.inbound`` (a
:class:`~._client.base.Receiver`, which sorts it: :mod:`._client.inbound`);
tasks are followed through the engine's public task requests
(:mod:`._client.tasks`).

Cancellation goes both ways through the caller's scopes:

* the caller's cancel scope is cancelled while it waits for an answer: the
  call is cancelled on the server (``notifications/cancelled``, or the
  transport's own form: closing the request's stream on modern HTTP);
* the caller runs inside a tracked request (a tool that calls another MCP
  server) and that request's polled flag is set: the downstream call is
  cancelled *at once*, in the polite phase, so the downstream tool sees its
  own flag one message later, and the waiting caller gets
  :class:`RequestCancelled` (MCP forbids an answer after a cancel, so there
  is nothing left to wait for).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
import trio

from .. import __version__
from .._core.context import current_request
from .._core.errors import RequestCancelled
from .._protocol.wire import (
    HEADER_MISMATCH,
    LATEST_LEGACY_VERSION,
    LATEST_VERSION,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    Era,
    client_declares_tasks,
)
from .._telemetry.propagation import inject_meta
from .base import ClientTransport
from .calls import PendingCall, ProgressCallback
from .errors import McpError, McpTransportError, Message
from .handlers import ClientHandlers, ServerRequests, complete_rounds
from .inbound import MAX_KEPT, Inbound
from .params import ToolSchemas
from .tasks import TaskCallback, TaskPolling, follow_task, with_tasks

__all__ = ["ClientEngine"]

logger = logging.getLogger("trio_mcp_cancel.client")


def _inbound(engine: ClientEngine) -> Inbound:
    """The engine's receiving side (typed: mypy checks the engine is an ``InboundEngine``)."""
    return Inbound(engine)


@attrs.define(eq=False)
class ClientEngine:
    """The protocol side of an MCP client; see the module docstring.

    In the modern era every request carries the ``_meta`` envelope
    (protocol version, client capabilities and info, optional log level);
    in the legacy era the client sends ``initialize`` first.  What the
    server sends that matches no request lands in ``unexpected``; log
    messages (``notifications/message``) in ``log_messages``.

    *keep_history*: keep every call in ``calls`` and every stray message
    (the test client, whose tests look at them); otherwise answered calls
    are forgotten and the two lists keep only the last
    :attr:`MAX_KEPT` entries, so a long-lived client does not grow.
    *forward_cancel*: cancel a call when the polled flag of the request
    the caller runs in is set (see the module docstring).
    *tasks*: declare the Tasks extension on ``tools/call`` (modern era), so
    a server may answer with a task, which :meth:`call_tool` follows to its
    end and cancels with ``tasks/cancel`` (see :mod:`._client.tasks`);
    declaring it in *client_capabilities* does the same.
    *transport*: the wire (``None``: closed; sending raises
    ``trio.ClosedResourceError``); it feeds what arrives to :attr:`inbound`.
    *answer_server_requests*: answer the server's ``ping`` (and refuse its
    other requests); when false they are only kept in ``unexpected``.
    """

    MAX_KEPT = MAX_KEPT
    """See :data:`._client.inbound.MAX_KEPT`."""

    era: Era
    client_capabilities: Mapping[str, Any] = attrs.field(factory=dict)
    client_info: Mapping[str, Any] = attrs.field(
        factory=lambda: {"name": "trio-mcp-cancel-client", "version": __version__}
    )
    log_level: str | None = None
    initialize_result: Message | None = None
    log_messages: list[Message] = attrs.field(factory=list)
    unexpected: list[Message] = attrs.field(factory=list)
    calls: dict[int, PendingCall] = attrs.field(factory=dict)
    """Calls sent and not yet forgotten, by id."""
    keep_history: bool = True
    forward_cancel: bool = True
    tasks: bool = attrs.field(default=False, kw_only=True)
    task_polling: TaskPolling = attrs.field(factory=TaskPolling, kw_only=True)
    transport: ClientTransport | None = attrs.field(default=None, kw_only=True)
    answer_server_requests: bool = attrs.field(default=True, kw_only=True)
    handlers: ClientHandlers | None = attrs.field(default=None, kw_only=True)
    """Answers to the server's input requests (MRTR, tasks, legacy server requests)."""
    server_requests: ServerRequests | None = attrs.field(default=None, kw_only=True)
    """Where legacy server requests are answered, once a transport is attached with a nursery."""
    tool_schemas: ToolSchemas = attrs.field(factory=ToolSchemas, kw_only=True)
    """What ``tools/list`` said about ``x-mcp-header`` arguments (``Mcp-Param-*``)."""
    inbound: Inbound = attrs.field(init=False, default=attrs.Factory(_inbound, takes_self=True))
    """What the transport feeds (a :class:`~._client.base.Receiver`): :mod:`._client.inbound`."""
    _ids: Iterator[int] = attrs.field(factory=lambda: itertools.count(1))
    _session_lock: trio.Lock = attrs.field(factory=trio.Lock)
    _sessions: int = 0
    """How many times ``initialize`` succeeded (a re-initialization bumps it)."""

    # -- the wire ------------------------------------------------------------------

    def _transmit(self, message: Message, call: PendingCall | None) -> None:
        if self.transport is None:
            raise trio.ClosedResourceError("the client is closed")
        self.transport.transmit(message, call)

    def _cancel_call(self, call: PendingCall, reason: str | None) -> None:
        if self.transport is not None:
            self.transport.cancel(call, reason)

    # -- the protocol ------------------------------------------------------------

    @property
    def protocol_version(self) -> str:
        """The version this client speaks: negotiated (legacy), else the latest."""
        if self.initialize_result is not None:
            return str(self.initialize_result.get("protocolVersion", LATEST_LEGACY_VERSION))
        return LATEST_VERSION if self.era == "modern" else LATEST_LEGACY_VERSION

    def envelope(self, capabilities: Mapping[str, Any] | None = None) -> Message:
        """The modern ``_meta`` keys this client puts on every request.

        *capabilities* replace :attr:`client_capabilities` for one request
        (the modern era declares them per request).
        """
        if capabilities is None:
            capabilities = self.client_capabilities
        meta: Message = {
            META_PROTOCOL_VERSION: LATEST_VERSION,
            META_CLIENT_CAPABILITIES: dict(capabilities),
            META_CLIENT_INFO: dict(self.client_info),
        }
        if self.log_level is not None:
            meta[META_LOG_LEVEL] = self.log_level
        return meta

    async def send(self, message: Mapping[str, Any]) -> None:
        """Send any JSON-RPC message as is (a transport may wait until it is delivered)."""
        await self._send_message(dict(message))

    async def _send_message(self, message: Message) -> None:
        if self.transport is None:
            raise trio.ClosedResourceError("the client is closed")
        await self.transport.send(message)

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a notification."""
        message: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        await self.send(message)

    def start_request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        envelope: bool = True,
        progress: bool = False,
        on_progress: ProgressCallback | None = None,
        capabilities: Mapping[str, Any] | None = None,
    ) -> PendingCall:
        """Send a request without waiting for its answer.

        *envelope*: add the modern ``_meta`` envelope (modern era only), with
        *capabilities* instead of the client's own, if given.
        *progress* (or *on_progress*): ask for progress, with the request id
        as the progress token, as the MCP SDKs do.
        """
        request_id = next(self._ids)
        body: Message = dict(params or {})
        meta: Message = dict(body.get("_meta") or {})
        if envelope and self.era == "modern":
            meta.update(self.envelope(capabilities))
        if progress or on_progress is not None:
            meta["progressToken"] = request_id
        inject_meta(meta)  # the caller's trace context, for the server's span (SEP-414)
        if meta:
            body["_meta"] = meta
        call = PendingCall(request_id, method, self._cancel_call, on_progress)
        if method == "tools/call" and envelope and self.era == "modern":
            sent = self.client_capabilities if capabilities is None else capabilities
            if client_declares_tasks(sent):
                call.task_capabilities = sent
        if method == "tools/call" and self.era == "modern" and isinstance(body.get("name"), str):
            arguments = body.get("arguments")
            if isinstance(arguments, Mapping):
                call.headers = self.tool_schemas.headers(body["name"], arguments)
        self.calls[request_id] = call
        self._transmit({"jsonrpc": "2.0", "id": request_id, "method": method, "params": body}, call)
        return call

    async def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, envelope: bool = True
    ) -> Message:
        """Send a request and return its ``result`` (:class:`McpError` for an error).

        An ``input_required`` result is answered through the client's
        handlers and the request retried (MRTR), when it has handlers.
        """
        self._refuse_if_flagged()
        base = dict(params or {})

        async def send(extra: Message) -> Message:
            def start() -> PendingCall:
                return self.start_request(method, base | extra, envelope=envelope)

            return await self._in_session(start, retry=True)

        return await complete_rounds(self.handlers, await send({}), send)

    async def _in_session(self, start: Callable[[], PendingCall], *, retry: bool) -> Message:
        """Wait for the call *start* sends; a legacy session the server forgot is renewed once.

        MCP: a ``404`` for a session id means the session is gone; the
        client starts a new one with ``initialize``.  The request is sent
        again only when *retry* (not for a ``tools/call``: it may have been
        the one that ran); otherwise the error says it was not retried.
        """
        sessions = self._sessions
        try:
            return await self._wait(start())
        except McpTransportError as exc:
            ended = isinstance(exc.data, dict) and exc.data.get("session_ended")
            if not ended or self.era != "legacy" or self.initialize_result is None:
                raise
            async with self._session_lock:
                if self._sessions == sessions:  # nobody renewed it meanwhile
                    await self.initialize()
            if not retry:
                raise McpTransportError(
                    "the server ended the session (HTTP 404); a new session was started,"
                    " and the call was not sent again",
                    {"status": 404, "session_ended": True, "reinitialized": True},
                ) from exc
            return await self._wait(start())

    def start_call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        progress: bool = True,
        on_progress: ProgressCallback | None = None,
        task: bool | None = None,
    ) -> PendingCall:
        """Send ``tools/call`` without waiting: cancel it, watch its progress.

        Progress is asked for by default, so ``call.progress`` fills up.
        *task*: declare the Tasks extension on this call (``None``: as the
        client does); the answer may then be a ``CreateTaskResult``.
        """
        params: Message = {"name": name, "arguments": dict(arguments or {})}
        return self.start_request(
            "tools/call",
            params,
            progress=progress,
            on_progress=on_progress,
            capabilities=self._call_capabilities(task),
        )

    def declares_tasks(self, task: bool | None = None) -> bool:
        """Whether a ``tools/call`` declares the Tasks extension (*task*: this call's choice).

        Only the modern era declares capabilities per request; a legacy
        call is always an ordinary one.
        """
        if self.era != "modern":
            return False
        if task is not None:
            return task
        return self.tasks or client_declares_tasks(self.client_capabilities)

    def _call_capabilities(self, task: bool | None) -> dict[str, Any]:
        return with_tasks(self.client_capabilities, self.declares_tasks(task))

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        progress: ProgressCallback | None = None,
        task: bool | None = None,
        on_task: TaskCallback | None = None,
    ) -> Message:
        """Call a tool and return its result (``content``, ``isError``, ...).

        A tool that fails is a result with ``isError``; a JSON-RPC error
        raises :class:`McpError`.  *progress* is called with the params of
        each ``notifications/progress``.  The call is cancelled on the
        server when the calling scope is cancelled, or when the polled flag
        of the request the caller runs in is set (then this raises
        :class:`RequestCancelled`).

        With the Tasks extension declared (*task*, or the client's *tasks*)
        the server may run the call as a task: it is followed (``tasks/get``
        at the server's ``pollIntervalMs``; *on_task* sees every ``Task``)
        and its result returned; a ``failed`` task raises :class:`McpTaskError`,
        a ``cancelled`` one its subclass :class:`McpTaskCancelled` (code 0:
        the client's own error, not the server's ``-32800``).  Cancelling
        the call sends ``tasks/cancel``.
        """
        self._refuse_if_flagged()
        capabilities = self._call_capabilities(task)
        base: Message = {"name": name, "arguments": dict(arguments or {})}

        async def send(extra: Message) -> Message:
            def start() -> PendingCall:
                return self.start_request(
                    "tools/call", base | extra, on_progress=progress, capabilities=capabilities
                )

            try:
                return await self._in_session(start, retry=False)
            except McpError as exc:
                # SEP-2243: the server refused the call before running it for an
                # Mcp-Param-* header it wants; learn the schemas and send it again.
                if exc.code != HEADER_MISMATCH or self.tool_schemas.knows(name):
                    raise
                await self.list_tools()
                return await self._in_session(start, retry=False)

        result = await complete_rounds(self.handlers, await send({}), send)
        if result.get("resultType") != "task":
            return result
        if not client_declares_tasks(capabilities):
            # SEP-2663: a task the client did not ask for is an invalid response.
            raise McpError(0, "the server answered with a task, which this call did not declare")
        return await follow_task(
            self,
            result,
            polling=self.task_polling,
            forward_cancel=self.forward_cancel,
            on_task=on_task,
            on_progress=progress,
            handlers=self.handlers,
        )

    async def list_tools(self) -> list[Message]:
        """``tools/list``, every page."""
        tools: list[Message] = []
        cursor: object = None
        while True:
            result = await self.request("tools/list", {} if cursor is None else {"cursor": cursor})
            page = [tool for tool in result.get("tools") or [] if isinstance(tool, dict)]
            self.tool_schemas.remember(page)
            tools.extend(page)
            cursor = result.get("nextCursor")
            if not cursor:
                return tools

    async def get_task(self, task_id: str) -> Message:
        """``tasks/get`` (Tasks extension): the task's status, and its result once done."""
        return await self._task_request("tasks/get", task_id, self._call_capabilities(True))

    async def cancel_task(self, task_id: str) -> Message:
        """``tasks/cancel`` (Tasks extension): the way a task, not a request, is cancelled.

        MCP forbids ``notifications/cancelled`` for tasks.  :meth:`call_tool`
        sends it by itself when a followed task's caller is cancelled; this
        is for a task id kept from elsewhere (``on_task``).
        """
        return await self._task_request("tasks/cancel", task_id, self._call_capabilities(True))

    async def update_task(self, task_id: str, input_responses: Mapping[str, Any]) -> Message:
        """``tasks/update`` (Tasks extension): answers to a task's ``inputRequests``."""
        call = self.start_request(
            "tasks/update",
            {"taskId": task_id, "inputResponses": dict(input_responses)},
            capabilities=self._call_capabilities(True),
        )
        return await self._wait(call, forward=False)

    async def _task_request(
        self, method: str, task_id: str, capabilities: Mapping[str, Any]
    ) -> Message:
        # No forwarding of the caller's flag: following a task handles it.
        call = self.start_request(method, {"taskId": task_id}, capabilities=capabilities)
        return await self._wait(call, forward=False)

    def _refuse_if_flagged(self) -> None:
        request = current_request(None) if self.forward_cancel else None
        if request is not None and request.cancellation is not None:
            raise RequestCancelled(request.cancellation.reason, request.cancellation.kind)

    async def _wait(self, call: PendingCall, *, forward: bool = True) -> Message:
        request = current_request(None) if self.forward_cancel and forward else None
        try:
            if request is None:
                return await call.result()
            with trio.CancelScope() as flagged:
                remove = request.on_cancelled(flagged.cancel)
                try:
                    return await call.result()
                finally:
                    remove()
            # Only reached when the flag cancelled the wait: forward it now,
            # in the polite phase, and stop waiting (no answer may come).
            cancellation = request.cancellation
            assert cancellation is not None
            self._abandon(call, cancellation.reason)
            raise RequestCancelled(cancellation.reason, cancellation.kind)
        except trio.Cancelled:
            self._abandon(call, "caller cancelled")
            raise
        finally:
            if not self.keep_history and call.finished:
                self.calls.pop(call.id, None)

    def _abandon(self, call: PendingCall, reason: str | None) -> None:
        if call.finished:
            return
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            call.cancel_nowait(reason)
        if not self.keep_history:
            self.calls.pop(call.id, None)
            self.inbound.remember_abandoned(call)

    # -- the legacy handshake ----------------------------------------------------

    async def initialize(self) -> None:
        """The legacy handshake: ``initialize``, ``notifications/initialized``, the log level.

        The ``open_*`` functions do it for ``era="legacy"`` (and ``"auto"``
        against a legacy server); the answer is kept in ``initialize_result``.
        """
        self.initialize_result = None  # the new session's headers, not the old one's
        call = self.start_request(
            "initialize",
            {
                "protocolVersion": LATEST_LEGACY_VERSION,
                "capabilities": dict(self.client_capabilities),
                "clientInfo": dict(self.client_info),
            },
        )
        self.initialize_result = await self._wait(call)
        self._sessions += 1
        await self.notify("notifications/initialized")
        if self.log_level is not None:
            await self.request("logging/setLevel", {"level": self.log_level})
