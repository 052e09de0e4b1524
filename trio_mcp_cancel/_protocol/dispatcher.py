"""The dispatcher: one path from a decoded message to its answer, for every transport.

A transport frames a message and describes who sent it (:class:`~.exchange.Caller`)
and how to reach that request's stream (:class:`~.exchange.Exchange`); the
server's :class:`Dispatcher` (``server.dispatcher``) does the rest, in
this order:

1. :meth:`Dispatcher.prepare` *classifies* the message (JSON-RPC shape, era,
   modern envelope) into one typed state (:mod:`.calls`), finds its handler
   in the **method table** (:mod:`.methods`) and, for ``tools/call``, the
   tool, once.  It never awaits, so a transport can decide from the result
   (``call.tracked``) whether to watch the stream, stream SSE, or answer at
   once, without parsing anything twice.
2. :meth:`Dispatcher.answer` applies the **admission policy** (the
   server-wide and per-tenant caps, and the concurrency limit of the
   caller's channel), runs the handler (tools inside ``tracked()``) and
   turns every exception into a JSON-RPC error in exactly one place.  It
   reports ``task_status.started()`` once the request is registered, so a
   stream transport using ``nursery.start`` never reads the next message
   (a ``notifications/cancelled`` for this one, say) before this request
   can be cancelled.
3. The answer follows MCP's cancellation rules: after a **client** cancel
   (``notifications/cancelled`` or a closed stream) nothing more is sent for
   the request, neither the response nor progress; after a **server**
   cancel (a time limit, a session ending, shutdown) the client gets
   ``-32800`` with the reason, so it never waits forever.

:meth:`Dispatcher.handle` is ``prepare`` + ``answer`` in one call.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Mapping, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

import trio

from .._core.errors import REQUEST_CANCELLED, RequestCancelled
from .._core.ratelog import failure_key
from .._core.registry import CancelOutcome
from .._telemetry.names import OTHER_METHOD
from .._telemetry.server import Subject
from .._wire import jsonrpc
from .._wire.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, JsonRpcError, Message
from .._wire.versions import (
    META_SERVER_INFO,
    MISSING_CLIENT_CAPABILITY,
    Envelope,
    Era,
    has_modern_meta,
    missing_capabilities,
    read_envelope,
)
from .admission import CALL_LIMITS, LISTEN_LIMITS, Slots, too_many_requests
from .calls import (
    Call,
    ClientResponseCall,
    HandlerInput,
    Method,
    NotificationCall,
    Rejected,
    RequestCall,
    Target,
)
from .exchange import Caller, Exchange
from .extension import Extension, ExtensionHost
from .methods import TARGETS, method_table
from .middleware import Middleware, run_chain
from .registration import Registration
from .runtime import ServerRuntime
from .subscriptions import listen_bytes
from .tools import Tool

__all__ = ["Dispatcher", "Served"]

logger = logging.getLogger("trio_mcp_cancel.server")

E = TypeVar("E", bound=Extension)


class Dispatcher:
    """Serves one server's :class:`~.registration.Registration` to every transport.

    See the module docstring.  :class:`~.server.McpServer` makes one in its
    ``__init__`` (``server.dispatcher``), shared by every transport that
    serves it, because admission is server-wide (``ServerLimits.max_calls``
    counts the calls of every transport and session).  The registration is
    configuration and imports nothing of this module; what changes while
    the server serves (its subscription hub, used MRTR states) is the
    dispatcher's :attr:`runtime`, made with it; its *extensions* (see
    :mod:`.extension`) are bound here, once, and their methods join the table.
    """

    def __init__(
        self,
        registration: Registration,
        extensions: Sequence[Extension] = (),
        middleware: Sequence[Middleware] = (),
    ) -> None:
        self.registration = registration
        """What the server offers and its settings, the admission caps among them."""
        self.runtime = ServerRuntime.for_server(registration)
        """The server's runtime services (subscription hub, used MRTR states, the
        failure log); one per server, owned here (see :mod:`.runtime`)."""
        self.extensions: tuple[Extension, ...] = tuple(extensions)
        """The server's extensions, in the order given (their ``call_tool`` nest so)."""
        host = ExtensionHost(self.runtime.subscriptions.publish, self.runtime.failures)
        for extension in self.extensions:
            extension.bind(host)
        self.methods: dict[str, Method] = method_table(self.extensions)
        """The method table (the core's and the extensions', a copy per server, so a
        test may extend one)."""
        self.targets: dict[str, Target] = dict(TARGETS)
        self.middleware: list[Middleware] = list(middleware)
        """What wraps every request, first = outermost (:mod:`.middleware`); empty, the
        handler is called directly."""
        self.calls = Slots()
        """Tool calls (and tracked reads) admitted and not finished."""
        self.listens = Slots()
        """Open ``subscriptions/listen`` streams."""

    def extension(self, kind: type[E]) -> E | None:
        """The server's extension of class *kind* (the first), or ``None``."""
        for extension in self.extensions:
            if isinstance(extension, kind):
                return extension
        return None

    @property
    def calls_in_flight(self) -> int:
        """Tool calls admitted and not finished, across every transport."""
        return self.calls.held

    @property
    def listen_streams(self) -> int:
        """Open ``subscriptions/listen`` streams, across every transport."""
        return self.listens.held

    # -- classify -------------------------------------------------------------

    def prepare(
        self,
        message: object,
        caller: Caller,
        *,
        envelope: Envelope | None = None,
        legacy: bool = False,
    ) -> Call:
        """Classify *message* and bind it to its handler; never awaits, never raises.

        The era is modern when the request carries the modern envelope (a
        transport that already read it passes *envelope*; one that already
        found there is none passes ``legacy=True``), else legacy.
        """
        try:
            parsed = jsonrpc.classify(message)
        except JsonRpcError as exc:
            self.refuse(exc, message, caller)
            return Rejected(exc)
        if isinstance(parsed, jsonrpc.Notification):
            return NotificationCall(parsed)
        if isinstance(parsed, jsonrpc.ClientResponse):
            return ClientResponseCall(parsed)  # an answer to a ctx.elicit (legacy)
        try:
            if envelope is None and not legacy and has_modern_meta(parsed.params):
                envelope = read_envelope(parsed.params)
            era: Era = "legacy" if envelope is None else "modern"
            method = self.methods.get(parsed.method)
            if method is None or era not in method.eras:
                raise JsonRpcError(
                    METHOD_NOT_FOUND, "Method not found", {"method": parsed.method[:100]}
                )
            tool: Tool | None = None
            if parsed.method == "tools/call":
                tool = self._find_tool(parsed.params)
                _check_capabilities(tool, envelope, caller)
            else:
                target = self.targets.get(parsed.method)
                if target is not None:
                    # resources/read, prompts/get, subscriptions/listen: tracked like a tool.
                    tool = target(self.registration, parsed.params)
        except JsonRpcError as exc:
            exc.request_id = parsed.id
            self.refuse(exc, parsed, caller)
            return Rejected(exc, parsed)
        return RequestCall(era, parsed, method, tool, envelope)

    def refuse(self, error: JsonRpcError, message: object, caller: Caller) -> None:
        """Record a message refused before any handler ran (telemetry only).

        :meth:`prepare` calls it for what it refuses; a transport calls it
        for what it refuses itself (text that is not JSON, a bad modern
        envelope).  The span's ``error.type`` is the JSON-RPC code; its
        method is one the server knows, else ``_OTHER``, so a client cannot
        name spans or metric series at will.
        """
        telemetry = self.registration.telemetry
        if telemetry is None:
            return
        method: object = None
        params: object = None
        if isinstance(message, jsonrpc.Request):
            method, params = message.method, message.params
        elif isinstance(message, dict):
            method, params = message.get("method"), message.get("params")
        if not isinstance(params, Mapping):
            params = {}
        if telemetry.quiet(params):
            return
        known = method if isinstance(method, str) and method in self.methods else OTHER_METHOD
        subject = _caller_subject(known, None, error.request_id, params, caller)
        telemetry.refused_request(error.to_message(), subject)

    def _find_tool(self, params: Mapping[str, Any]) -> Tool:
        name = params.get("name")
        tool = self.registration.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            shown = str(name)[:100]  # the client's own string, echoed bounded
            raise JsonRpcError(INVALID_PARAMS, f"Unknown tool: {shown}", {"name": shown})
        return tool

    # -- notifications ----------------------------------------------------------

    def notify(self, notification: jsonrpc.Notification, caller: Caller) -> bool:
        """Handle a notification; only ``notifications/cancelled`` does anything.

        Returns whether the cancel may be meant for another process: it names
        a (valid) request that does not run here.  A transport whose sessions
        span processes forwards exactly those, and decides nothing itself.
        """
        if notification.method != "notifications/cancelled":
            return False
        params = notification.params
        request_id: Any = params.get("requestId")
        channel = caller.channel
        ordered = channel is not None and channel.ordered
        registry = caller.registry
        outcome = registry.notify_cancelled(
            caller.namespace, request_id, params.get("reason"), keep_early=not ordered
        )
        telemetry = self.registration.telemetry
        if telemetry is not None:
            subject = _caller_subject(notification.method, None, None, params, caller)
            telemetry.notification(subject, outcome.value)
        logger.debug(
            "notifications/cancelled %r in %r: %s",
            "<invalid>" if outcome is CancelOutcome.INVALID_REQUEST_ID else request_id,
            caller.namespace,
            outcome.value,
        )
        if outcome is CancelOutcome.INVALID_REQUEST_ID:  # the id is checked once, by the registry
            return False
        stop = None if channel is None else channel.late_cancels.pop(request_id, None)
        if stop is not None:
            stop()  # what its answer started (a task) outlives the request: stop it too
        if outcome is CancelOutcome.LIMIT_REACHED:  # refused either way: does it run here?
            return not registry.in_flight(request_id, caller.namespace)
        return outcome is not CancelOutcome.CANCELLED

    def respond(self, call: ClientResponseCall, caller: Caller) -> bool:
        """Hand a client's response to the tool waiting for it; ``False``: none here waits.

        Matched within the caller's channel only (its session or connection),
        so an answer sent on another session matches nothing and is dropped.
        """
        channel = caller.channel
        if call.response is None or channel is None:
            return False
        return channel.client_requests.resolve(call.response)

    # -- answer -----------------------------------------------------------------

    async def handle(
        self, message: object, caller: Caller, exchange: Exchange | None = None
    ) -> Message | None:
        """Answer one decoded JSON-RPC message; ``None`` means "send nothing".

        Never raises for bad input: shape errors become JSON-RPC errors.
        ``trio.Cancelled`` (the transport shutting down) propagates.
        """
        call = self.prepare(message, caller)
        if isinstance(call, RequestCall):
            return await self.answer(call, caller, exchange or Exchange())
        if isinstance(call, NotificationCall):
            self.notify(call.notification, caller)
        elif isinstance(call, Rejected):
            return call.error.to_message()
        return None

    def answer(
        self,
        call: RequestCall,
        caller: Caller,
        exchange: Exchange,
        *,
        allow_silence: bool = True,
        admitted: bool = False,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> Coroutine[Any, Any, Message | None]:
        """Answer one prepared request: the one place errors become JSON-RPC errors.

        With telemetry on (``registration.telemetry``, checked once) it runs inside
        the request's span, unless nothing would record it (``quiet``); see
        :meth:`_answer`.  A plain function returning the coroutine to await
        (or to start), so the common path adds no coroutine frame of its own.
        """
        telemetry = self.registration.telemetry
        request = call.request
        if telemetry is None or telemetry.quiet(request.params):
            return self._answer(call, caller, exchange, allow_silence, admitted, task_status)
        return telemetry.serve(
            partial(self._answer, call, caller, exchange, allow_silence, admitted, task_status),
            _subject(call, caller),
            registry=caller.registry,
            tracked=lambda: exchange.request,
        )

    async def _answer(
        self,
        call: RequestCall,
        caller: Caller,
        exchange: Exchange,
        allow_silence: bool,
        admitted: bool,
        task_status: trio.TaskStatus[None],
    ) -> Message | None:
        """:meth:`answer`'s work.

        ``None`` only when the client cancelled the request (see
        :data:`~.registration.OnCancel`) and *allow_silence* (a plain JSON HTTP
        response must carry something, so that transport passes ``False``
        and gets ``-32800``).  ``task_status.started()`` is reported once the
        request can be cancelled, at the latest when the answer is ready.

        *admitted*: the transport already took the call's slots with
        :meth:`admit`, as every transport does (so it can refuse before it
        commits to a response, or to a task), and admission runs once per
        call; the slots are released here all the same.  A transport that
        admits and then never gets here (cancelled while it waited) gives
        them back with :meth:`release`.  Without *admitted* (a direct
        caller), this admits the call itself.
        """
        request = call.request
        h = HandlerInput(self.registration, call, caller, exchange, self.runtime, task_status)
        if caller.channel is not None:
            caller.channel.late_cancels.pop(request.id, None)  # the id is reused
        try:
            if not admitted:
                refused = self._admit(call, caller, exchange)
                if refused is not None:
                    return refused
            try:
                chain = self.middleware
                if chain:
                    result = await run_chain(chain, h, self._find_tool)
                else:
                    result = await call.method.handler(h)
            finally:
                self.release(call, caller, exchange)
            if call.tracked and exchange.silenced:
                # The client cancelled, but the tool finished anyway: MCP
                # forbids sending its result (or anything else) now.
                raise RequestCancelled(None, exchange.cancel_kind or "client")
            return jsonrpc.result_message(request.id, _finish(self.registration, call, result))
        except JsonRpcError as exc:
            return jsonrpc.error_message(request.id, exc.code, exc.message, exc.data)
        except RequestCancelled as exc:
            exchange.lost()  # its real answer is never sent
            if exchange.silenced and self.registration.on_cancel == "silent" and allow_silence:
                return None
            data = {"reason": exc.reason} if exc.reason else None
            return jsonrpc.error_message(request.id, REQUEST_CANCELLED, "Request cancelled", data)
        except Exception as exc:
            # A bug in the server or a tool (a result that is not JSON, say)
            # fails this request, never the transport and its other requests;
            # the same failure repeated (one bad request in a loop) is logged
            # once per interval, not once per request.
            self.runtime.failures.exception(
                failure_key(request.method, exc), "%s %r failed", request.method[:100], request.id
            )
            return jsonrpc.error_message(request.id, jsonrpc.INTERNAL_ERROR, "Internal error")
        finally:
            h.started()

    # -- admission ----------------------------------------------------------------

    def admit(self, call: RequestCall, caller: Caller, exchange: Exchange) -> Message | None:
        """Count a call that runs work against the admission limits, or return its refusal.

        Only calls with a tool or target count: every other method answers
        from memory at once.  An admitted call is :meth:`release`\\ d once.
        Every transport calls it once per call, before it commits to a
        response, then ``answer(..., admitted=True)``.
        """
        refused = self._admit(call, caller, exchange)
        if refused is not None:
            telemetry = self.registration.telemetry  # read for a refusal only
            if telemetry is not None:
                # Its span: :meth:`answer` never runs for it.
                telemetry.refused_request(refused, _subject(call, caller))
        return refused

    def _admit(self, call: RequestCall, caller: Caller, exchange: Exchange) -> Message | None:
        """:meth:`admit` inside :meth:`answer` (whose span records a refusal itself).

        A refusal is counted (telemetry) here, once: a refused call is never
        asked again.
        """
        if call.tool is None:
            return None
        refused = _limit_refusal(self, call, caller)
        if refused is not None:
            telemetry = self.registration.telemetry
            if telemetry is not None:
                telemetry.refused(refused["error"]["data"]["limit"])
            return refused
        if call.long_lived:
            self.listens.take(caller.tenant)
            self.runtime.subscription_bytes.take(caller.tenant, listen_bytes(call.request.params))
        else:
            self.calls.take(caller.tenant)
        if caller.channel is not None and call.tracked:
            caller.channel.exchanges.add(exchange)
        return None

    def release(self, call: RequestCall, caller: Caller, exchange: Exchange) -> None:
        """Give back what :meth:`admit` took."""
        if call.tool is None:
            return
        if call.long_lived:
            self.listens.give(caller.tenant)
            self.runtime.subscription_bytes.give(caller.tenant, listen_bytes(call.request.params))
        else:
            self.calls.give(caller.tenant)
        if caller.channel is not None:
            caller.channel.exchanges.discard(exchange)

    def admit_notification_stream(self, tenant: str | None) -> tuple[str, int] | None:
        """Count a legacy session's GET stream as a listen stream, or say which cap
        (``"server"``/``"tenant"``, and its value) it would exceed; give it back with
        :meth:`release_notification_stream`."""
        limits = self.registration.limits
        full = self.listens.full(
            tenant, limits.max_listen_streams, limits.max_listen_streams_per_tenant
        )
        if full is None:
            self.listens.take(tenant)
        return full

    def release_notification_stream(self, tenant: str | None) -> None:
        self.listens.give(tenant)


def _subject(call: RequestCall, caller: Caller) -> Subject:
    """What the request's span is named and described by."""
    request = call.request
    version = None if call.envelope is None else call.envelope.protocol_version
    return _caller_subject(
        request.method, _target(call), request.id, request.params, caller, version
    )


def _caller_subject(
    method: str,
    target: str | None,
    request_id: object,
    params: Mapping[str, Any],
    caller: Caller,
    version: str | None = None,
) -> Subject:
    """A span's subject, what the caller tells of itself filled in: its session, its
    transport, and (unless *version* is given) the version its channel negotiated."""
    return Subject(
        method,
        target,
        request_id,
        params,
        version if version is not None else _caller_version(caller),
        caller.session_id,
        caller.network_transport,
        caller.network_protocol,
    )


def _target(call: RequestCall) -> str | None:
    """The span name's target: the tool of ``tools/call``, the prompt of ``prompts/get``."""
    method = call.request.method
    if method == "tools/call" and call.tool is not None:
        return call.tool.name
    if method == "prompts/get" and call.tool is not None:
        name = call.request.params.get("name")
        return name[:100] if isinstance(name, str) else None
    return None


def _caller_version(caller: Caller) -> str | None:
    """The version a legacy ``initialize`` negotiated on the caller's channel, if any."""
    channel = caller.channel
    legacy = None if channel is None else channel.legacy
    return None if legacy is None else legacy.protocol_version


class Served(Protocol):
    """What a transport serves: anything with a :class:`Dispatcher` (an ``McpServer``).

    Transports type their argument with this, not with the server class, so
    none imports the server (or what it imports to be run); a test or an
    application may serve a bare dispatcher's holder the same way.
    """

    @property
    def dispatcher(self) -> Dispatcher: ...


def _check_capabilities(tool: Tool, envelope: Envelope | None, caller: Caller) -> None:
    """A tool that needs client capabilities is refused (``-32021``) without them."""
    if not tool.client_capabilities:
        return
    channel = caller.channel
    if envelope is not None:
        declared: Mapping[str, Any] = envelope.client_capabilities
    elif channel is not None and channel.legacy is not None:
        declared = channel.legacy.client_capabilities
    else:
        return  # a legacy caller without a session: nothing to check against
    missing = missing_capabilities(declared, tool.client_capabilities)
    if missing:
        raise JsonRpcError(
            MISSING_CLIENT_CAPABILITY,
            "Missing required client capability",
            {"requiredCapabilities": missing},
        )


def _limit_refusal(dispatcher: Dispatcher, call: RequestCall, caller: Caller) -> Message | None:
    """The refusal of *call* by the server's, the tenant's or the channel's caps, if any."""
    request, limits = call.request, dispatcher.registration.limits
    if call.long_lived:
        full = dispatcher.listens.full(
            caller.tenant, limits.max_listen_streams, limits.max_listen_streams_per_tenant
        )
        if full is not None:
            return too_many_requests(request.id, call.era, LISTEN_LIMITS[full[0]], full[1])
        # Its resource URIs, held while it is open, within the subscription budgets.
        size = listen_bytes(request.params)
        over = dispatcher.runtime.subscription_bytes.refusal(
            caller.tenant, size, limits.subscriptions, call.era
        )
        if over is not None:
            over.request_id = request.id
            return over.to_message()
    else:
        full = dispatcher.calls.full(caller.tenant, limits.max_calls, limits.max_calls_per_tenant)
        if full is not None:
            return too_many_requests(request.id, call.era, CALL_LIMITS[full[0]], full[1])
    channel = caller.channel
    if channel is not None and call.tracked:
        cap = channel.max_concurrent_calls
        if len(channel.exchanges) >= cap:
            return too_many_requests(request.id, call.era, "channel", cap)
    return None


def _finish(registration: Registration, call: RequestCall, result: Any) -> Any:
    """Modern results carry ``resultType`` and the server's identity."""
    if call.era != "modern" or not isinstance(result, dict):
        return result
    result.setdefault("resultType", "complete")
    meta = result.get("_meta")
    # Discovery carries the whole Implementation (title, icons, ...); the other
    # results only name the server.
    discover = call.request.method == "server/discover"
    info = registration.server_info if discover else registration.info
    result["_meta"] = {**(meta if isinstance(meta, dict) else {}), META_SERVER_INFO: info}
    return result
