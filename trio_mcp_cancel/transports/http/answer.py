"""Answering one routed HTTP request: admission once, the run, the response, the watcher.

Both eras end here once their rules accepted a request (:class:`Routed`).
This is also the one place the HTTP transport calls into the dispatcher
(:meth:`Responder.prepare`, :meth:`Responder.notify`, and in
:meth:`Responder.answer` the admission, ``Dispatcher.admit``, then the run,
``Dispatcher.answer(admitted=True)``), so the interface between them is
short and visible.  Admission comes first, like on every transport, so a
refused call is a ``429`` before any response is committed to.

**Writes never block a request.**  Every response goes through the app's
sink (:class:`~.writer.Sink`, chosen once by the app): queued in a
:class:`~.writer.ResponseWriter` and written by a task of its own in the
app's service nursery (on demand: only while something waits to be
written), except a whole response the sink can tell the socket takes at
once (hypercorn's sink only), which is written in the request's own task.
A client that leaves a write pending for ``write_timeout``, or lets the
queue overflow, is treated as gone: its call is cancelled (kind
``"disconnect"``), the request returns, and the server closes the
connection, which releases the pending write.

**A cancellable call** gets one :class:`CallResponse` (SSE or one JSON
body, chosen lazily; its lifecycle's rules are :mod:`.response`'s table)
and, once it first suspends (:func:`await_then`), a watcher task that
waits on ``receive()`` for ``http.disconnect`` (hypercorn reports a closed
connection or a reset HTTP/2 stream there; a ``send()`` to a gone client
silently does nothing), and carries the ``max_request_time`` limit, the
keep-alive timer and the write deadline, so a call costs one extra task
at most.

**Resumable legacy streams** (``resume_window`` not ``None``; see
:mod:`.resume`).  A legacy session's SSE response is a resumable stream: a
dropped (or stalled) connection detaches it, and the watcher then waits up
to ``resume_window`` seconds for a GET with ``Last-Event-ID`` to attach
again (:mod:`.get_stream`), each time it drops; only when none comes is
the call cancelled, kind ``"disconnect"`` (with
``legacy_disconnect_cancels``).  A call that ends while detached keeps its
answer for a resume for the same window.  The modern era has no
resumption: there a closed stream is the cancel, at once.

**Shutdown** (:meth:`Shutdown.begin`, what ``serve()`` calls on
SIGINT/SIGTERM through ``McpHttpApp.begin_shutdown``) flags every call in
flight, and every call that starts later, as stdio does on a signal: kind
``"server"``, reason ``"server shutting down"``, hard-cancelled at one
deadline for all.  So each one's client gets an answer while its
connection is still open (``-32800`` with the reason, on the call's SSE
stream or as its JSON body; a tool that finishes anyway answers its
result), each cancelled call is logged when it stops, and the open GET
streams are ended, rather than all of them being cut when the server's
graceful timeout runs out.
"""

from __future__ import annotations

import logging
import math
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator, MutableMapping, Sequence
from typing import Any, Final, TypeVar

import attrs
import trio

from ..._core.registry import Registry, UseConfig
from ..._protocol.calls import Call, RequestCall
from ..._protocol.dispatcher import Dispatcher, Served
from ..._protocol.exchange import Caller, Exchange
from ..._wire import jsonrpc
from ..._wire.jsonrpc import Message
from ..._wire.names import TOO_MANY_REQUESTS
from ..._wire.versions import Era
from ...backends.base import Backend
from .._shutdown import SHUTDOWN_REASON, Shutdown  # re-exported: HTTP's shutdown is the shared one
from . import rules, sse
from .response import OPEN, Event, ResponseMachine, State
from .resume import ResumableStream, StreamBudget
from .sessions import Session
from .shared import tenant_call_slot
from .writer import AsgiSink, ResponseWriter, Sink

__all__ = [
    "SHUTDOWN_REASON",
    "CallResponse",
    "Post",
    "Responder",
    "Routed",
    "Shutdown",
    "await_then",
]

logger = logging.getLogger("trio_mcp_cancel.http")

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
T = TypeVar("T")
Header = tuple[bytes, bytes]
Headers = list[Header]

RETRY_AFTER: Final[Headers] = [(b"retry-after", b"1")]
#: The watcher tasks' name, as trio would make it (given: not one string per task).
_WATCHER: Final = f"{__name__}.CallResponse._watch"


def _extra(routed: Routed, status: int, reply: Message | None = None) -> Any:
    """The headers of *routed*'s whole answer: a ``429`` says when to retry, as at admission."""
    return routed.extra if status != 429 else [*routed.extra, *_retry_after(reply)]


def _retry_after(reply: Message | None) -> Headers:
    """``Retry-After``: the refusal's own ``data.retryAfter`` (a rate limit's wait, whole
    seconds, at most a day) when it gives one, else one second."""
    error = None if reply is None else reply.get("error")
    data = error.get("data") if isinstance(error, dict) else None
    seconds = data.get("retryAfter") if isinstance(data, dict) else None
    if type(seconds) is int and 1 <= seconds <= 86_400:
        return [(b"retry-after", str(seconds).encode())]
    return RETRY_AFTER


@attrs.define  # not frozen: made per POST (benchmarks/RESULTS.md, "code's shapes")
class Post:
    """One POST's message and who sent it, once its body is read."""

    send: Send
    headers: dict[str, str]
    principal: str | None
    client: object
    tenant: str | None
    message: object
    registry: Registry


@attrs.define  # not frozen, as Post
class Routed:
    """A request its era's rules accepted: the call, its caller, and the extra headers.

    ``before_reply`` (legacy scale-out) runs before a plain call's reply is
    written, and answers it instead when it returns ``False``.
    """

    call: RequestCall
    caller: Caller
    extra: Headers
    era: Era
    session: Session | None = None
    before_reply: Callable[[Routed, Send], Awaitable[bool]] | None = None


@attrs.define(eq=False)
class Responder:
    """Runs the routed calls of one app; their responses go through its sink (see the
    module)."""

    server: Served
    backend: Backend | None
    json_response: bool
    disconnect_grace_period: float | UseConfig | None
    max_request_time: float | None
    keepalive_interval: float | None
    legacy_disconnect_cancels: bool
    write_timeout: float | None
    max_buffered_bytes: int
    sink_type: type[AsgiSink] = AsgiSink
    """The kind of :class:`~.writer.Sink` the app chose (plain ASGI, or hypercorn's)."""
    resume_window: float | None = None
    """Legacy SSE streams are resumable, and a dropped one waits this long for its
    client to come back before it counts as a disconnect (``None``: not resumable)."""
    replay_limit: int = 256 * 1024
    """Bytes of events each resumable stream keeps for a replay."""
    stream_budget: StreamBudget = attrs.field(factory=lambda: StreamBudget(64 << 20))
    """Bytes every resumable stream of the app may hold together (see :mod:`.resume`)."""
    sink: Sink = attrs.field(init=False)
    """How this app's responses reach the server (see :mod:`.writer`); it holds the
    lifespan's service nursery (``sink.service``), where the writer tasks run."""
    shutdown: Shutdown = attrs.field(init=False, factory=lambda: Shutdown(log=logger))
    """The app's calls in flight, and the shutdown that cancels them."""
    dispatcher: Dispatcher = attrs.field(init=False)
    """The server's dispatcher (``server.dispatcher``), looked up once per app."""

    @dispatcher.default
    def _dispatcher_of_server(self) -> Dispatcher:
        return self.server.dispatcher

    @sink.default
    def _make_sink(self) -> Sink:
        return self.sink_type(self.max_buffered_bytes, self.write_timeout)

    # -- the dispatcher, called from here only -----------------------------------

    def prepare(
        self, message: object, caller: Caller, envelope: Any = None, *, legacy: bool = False
    ) -> Call:
        return self.dispatcher.prepare(message, caller, envelope=envelope, legacy=legacy)

    def notify(self, notification: jsonrpc.Notification, caller: Caller) -> bool:
        """Handle *notification*; whether to forward it (see :meth:`Dispatcher.notify`)."""
        return self.dispatcher.notify(notification, caller)

    def admit_notification_stream(self, tenant: str | None) -> tuple[str, int] | None:
        """A legacy GET stream takes a listen slot (``None``), or the cap it would exceed."""
        return self.dispatcher.admit_notification_stream(tenant)

    def release_notification_stream(self, tenant: str | None) -> None:
        self.dispatcher.release_notification_stream(tenant)

    # -- answering ----------------------------------------------------------------

    def answer(
        self, routed: Routed, receive: Receive, send: Send, exchange: Exchange | None = None
    ) -> Awaitable[None]:
        """Admit *routed* (once), run it and write its response (*exchange*: the one the
        app holds to cancel it, e.g. at its token's expiry).

        A plain function returning the coroutine to await (at once): admission
        never blocks, and a running call then holds no frame of this one, nor
        of :meth:`_run` (each coroutine frame is kept for the call's life).
        """
        call, caller = routed.call, routed.caller
        exchange = Exchange() if exchange is None else exchange
        refused = self.dispatcher.admit(call, caller, exchange)
        if refused is not None:
            return self.refuse(send, refused, routed.extra)
        # From here ``Dispatcher.answer`` releases what admit took, once it
        # runs; nothing before it checkpoints, except the shared slot below.
        backend = self.backend
        if backend is None or not backend.counters.shared:
            return self._run(routed, exchange, receive, send)
        return self._answer_shared(routed, exchange, receive, send, backend)

    async def _answer_shared(
        self, routed: Routed, exchange: Exchange, receive: Receive, send: Send, backend: Backend
    ) -> None:
        """Scale-out: the per-tenant cap counts the calls of every process."""
        call, caller = routed.call, routed.caller
        cap = self.dispatcher.registration.limits.max_calls_per_tenant
        running = False
        try:
            async with tenant_call_slot(backend.counters, call, caller, cap) as refused:
                if refused is None:
                    running = True
                    await self._run(routed, exchange, receive, send)
                    return
        finally:
            if not running:  # refused, or cancelled while asking the backend
                self.dispatcher.release(call, caller, exchange)
        assert refused is not None
        # (No local here: each one is a slot in every call's coroutine frame.)
        if self.dispatcher.registration.telemetry is not None:
            self.dispatcher.registration.telemetry.refused("tenant")
        await self.refuse(send, refused, routed.extra)

    async def refuse(self, send: Send, reply: Message, extra: Sequence[Header] = ()) -> None:
        """Answer ``429`` with the admission refusal *reply*."""
        await self.sink.respond(send, 429, jsonrpc.encode(reply), [*extra, *RETRY_AFTER], json=True)

    def _call(self, routed: Routed, exchange: Exchange, allow_silence: bool) -> Any:
        """The coroutine that runs the admitted call (the one place the dispatcher runs one)."""
        return self.dispatcher.answer(
            routed.call, routed.caller, exchange, allow_silence=allow_silence, admitted=True
        )

    def _run(
        self, routed: Routed, exchange: Exchange, receive: Receive, send: Send
    ) -> Awaitable[None]:
        """The coroutine that runs the admitted call and writes its response."""
        if routed.call.tracked:
            service = self.sink.service
            if service is not None:
                return self._stream(routed, exchange, receive, send, service)
            return self._stream_hosted(routed, exchange, receive, send)
        return self._plain(routed, exchange, send)

    async def _stream_hosted(
        self, routed: Routed, exchange: Exchange, receive: Receive, send: Send
    ) -> None:
        """Without a lifespan the request hosts its helper tasks itself."""
        async with trio.open_nursery() as nursery:
            await self._stream(routed, exchange, receive, send, nursery)

    async def _plain(self, routed: Routed, exchange: Exchange, send: Send) -> None:
        """A call that cannot be cancelled: its one whole response, as a plain request."""
        reply = await self._call(routed, exchange, False)
        assert reply is not None
        if routed.before_reply is not None and not await routed.before_reply(routed, send):
            return
        code = jsonrpc.error_code(reply)
        status = 200 if code is None else rules.status_for(code, routed.era)
        await self.sink.respond(
            send, status, jsonrpc.encode(reply), _extra(routed, status, reply), json=True
        )

    async def _stream(
        self,
        routed: Routed,
        exchange: Exchange,
        receive: Receive,
        send: Send,
        nursery: trio.Nursery,
    ) -> None:
        """Run a cancellable call, watching its stream; see the module docstring.

        Its helper tasks (the watcher, the writer) run in *nursery* (the
        service nursery when there is one), so a call that never suspends
        opens no nursery of its own; and its :class:`CallResponse` makes
        its writer only when needed, so one that also sends nothing is
        answered with one whole response, as a plain call is.
        """
        response = CallResponse(self, routed, exchange, receive, send, nursery)
        if response.sse:
            exchange.send = response.send_message
            if response.resumable:
                exchange.close_stream = response.close_stream
        shutdown = self.shutdown
        shutdown.in_flight.add(exchange)
        if shutdown.at is not None:
            shutdown.flag(exchange)  # started during the shutdown
        try:
            # The watcher starts when the call first suspends: one that
            # never does cannot be disconnected from mid-way.
            reply = await await_then(self._call(routed, exchange, response.sse), response.watch)
            if response.writer is None and reply is not None:
                # Never suspended, sent nothing: one whole response (a task
                # refused by its quota is a 429, as an admission refusal is).
                status = 429 if jsonrpc.error_code(reply) == TOO_MANY_REQUESTS else 200
                encoded = jsonrpc.encode(reply)
                extra = _extra(routed, status, reply)
                if not await self.sink.respond(send, status, encoded, extra, json=True):
                    exchange.lost()  # the answer never reached the client
                return
            writer = response.finish(reply)
            if not response.committed:
                # Never committed: one whole response, or nothing (client gone).
                await self.sink.write_whole(writer, send, nursery)
            if response.stream is not None:
                await response.deliver()
            else:
                await self.sink.drain(writer)
        finally:
            shutdown.in_flight.discard(exchange)
            if response.writer is not None:
                response.settle()


class CallResponse(ResponseMachine):
    """The response of one cancellable call: its state (the rules are :mod:`.response`'s
    table), what each transition writes, and the watcher of the call's stream.

    One object per call, made when the call starts.  Driven by the call
    (its messages, its end, in the request's task) and the watcher (a
    disconnect, a stall, keep-alives, the time limit), it queues the bytes
    in its :class:`~.writer.ResponseWriter`, made on first need: a call
    that never suspends, sends nothing and ends with an answer (a no-op, a
    lookup in memory: the common case) is answered by
    the sink (``sink.respond``) and never makes one.  Everything runs in the
    request's task or its watcher, so nothing interleaves with a transition.

    **Resumable streams** (legacy sessions, :mod:`.resume`).  When the
    response has a :class:`~.resume.ResumableStream`, every SSE event of
    the call (progress, log, any server-to-client request, the answer)
    goes through :meth:`_event` into it: numbered, kept for a replay, and
    written on whichever connection carries the stream now.  A disconnect
    or a stall then *detaches* that connection instead of abandoning the
    response, which stays STREAMING (the call goes on, its events into the
    replay buffer) until a resuming GET attaches, or ``resume_window``
    passes (:meth:`_await_resume`); DELIVERED means the final event was
    written by whichever connection took it.
    """

    # Invariant: ``writer`` is None only while PENDING and nothing was asked of
    # the response (no message, no suspension, no end yet).
    # Invariant: ``committed`` is True exactly when the state went through
    # STREAMING: the SSE head is queued and the writer runs on demand (in
    # ``nursery``; with no nursery, the caller runs it).
    # Invariant: ``stream`` is not None only when ``resumable`` and committed.
    # Invariant: ``over`` once the request ended (:meth:`settle`); ``watching``
    # is the watcher's current wait, which :meth:`settle` cancels.

    __slots__ = (
        "committed",
        "exchange",
        "nursery",
        "over",
        "receive",
        "responder",
        "resumable",
        "routed",
        "send",
        "sse",
        "stream",
        "watching",
        "writer",
    )

    def __init__(
        self,
        responder: Responder,
        routed: Routed,
        exchange: Exchange,
        receive: Receive,
        send: Send,
        nursery: trio.Nursery | None,
    ) -> None:
        self.state = State.PENDING
        self.responder = responder
        self.routed = routed
        self.exchange = exchange
        self.receive = receive
        self.send = send
        self.nursery = nursery
        self.sse = not responder.json_response
        self.resumable = (
            self.sse
            and responder.resume_window is not None
            and routed.session is not None
            and routed.era == "legacy"
        )
        self.writer: ResponseWriter | None = None
        self.committed = False
        self.stream: ResumableStream | None = None
        self.watching: trio.CancelScope | None = None
        self.over = False

    def _open(self) -> ResponseWriter:
        """The response's writer, made now if it was not yet."""
        writer = self.writer
        if writer is None:
            responder = self.responder
            writer = self.writer = responder.sink.writer(self.send)
        return writer

    # -- driven by the call ---------------------------------------------------------

    def watch(self) -> None:
        """The call suspends, still running: commit to SSE now, so a silent call's head
        and keep-alives reach the client, and watch its stream."""
        self.commit()
        assert self.nursery is not None
        # A constant name: trio would otherwise build one string per task.
        self.nursery.start_soon(self._watch, name=_WATCHER)

    def commit(self) -> None:
        """Make the response an SSE stream, queueing its head (once; SSE clients only)."""
        writer = self._open()
        if not self.sse or self.state is not State.PENDING:
            return
        self.handle(Event.COMMIT)
        self.committed = True
        headers = [*sse.SSE_HEADERS, *self.routed.extra]
        writer.put({"type": "http.response.start", "status": 200, "headers": headers})
        if self.resumable:
            responder = self.responder
            session = self.routed.session
            assert session is not None
            stream = self.stream = session.streams.open(
                responder.replay_limit, budget=responder.stream_budget
            )
            stream.attach(writer)
            stream.prime()
        if self.nursery is not None:
            # A stream: its writes may block, so tasks of their own.
            self.responder.sink.start(writer, self.nursery, on_demand=True)

    def _event(self, data: bytes, *, final: bool = False) -> None:
        if self.state is not State.STREAMING:
            return
        if final:
            self.handle(Event.FINISH)
        stream = self.stream
        if stream is not None:
            if not stream.emit(data, final=final):
                self.stall("too much unread output")
            return
        message = {"type": "http.response.body", "body": data, "more_body": not final}
        assert self.writer is not None
        if not self.writer.put(message, final=final):
            self.stall("too much unread output")

    async def send_message(self, message: Message) -> None:
        """A progress or log message of the call (``Exchange.send``)."""
        self.commit()
        self._event(sse.event(message))

    def close_stream(self) -> bool:
        """``Exchange.close_stream``: end this connection, keep the resumable stream."""
        self.commit()
        return self.stream is not None and self.stream.end_connection()

    def finish(self, reply: Message | None) -> ResponseWriter:
        """End the response with *reply* (``None``: end an SSE stream without one)."""
        writer = self._open()
        state = self.state
        if state not in OPEN:
            writer.close()  # the client is gone: write what is queued, then stop
        elif self.sse and (state is State.STREAMING or reply is None):
            self.commit()
            self._event(b"" if reply is None else sse.event(reply), final=True)
        else:
            assert reply is not None
            self.handle(Event.FINISH)
            writer.put_whole(200, jsonrpc.encode(reply), self.routed.extra, json=True)
        return writer

    # -- driven by the watcher ------------------------------------------------------

    def keepalive(self) -> None:
        self.commit()
        stream = self.stream
        if stream is None:
            self._event(sse.KEEPALIVE)
        elif self.state is State.STREAMING and not stream.keepalive(sse.KEEPALIVE):
            self.stall("too much unread output")

    def disconnected(self) -> None:
        """The client closed its stream (the watcher saw ``http.disconnect``)."""
        if self.stream is not None:
            # Resumable: a drop detaches (the call goes on); after the final
            # event was queued it is the delivery (see ResumableStream.disconnected).
            assert self.writer is not None
            self.stream.disconnected(self.writer)
            return
        self.handle(Event.DISCONNECT)

    def stall(self, why: str) -> None:
        """The client stopped reading: treat it as gone (its call is cancelled)."""
        stream = self.stream
        if stream is not None:
            # Resumable: the connection is dropped, not the call (see _await_resume).
            if stream.writer is not None:
                logger.info("client stopped reading its stream (%s); detaching it", why)
                stream.detach()
                stream.stalled = True
            return
        writer = self._open()
        if writer.stalled or self.state is State.ABANDONED:
            return
        logger.info("client stopped reading its response (%s); disconnecting it", why)
        self.handle(Event.DISCONNECT)
        writer.stalled = True
        grace = self.responder.disconnect_grace_period
        self.exchange.cancel("client stopped reading", grace_period=grace)

    # -- the end of the request -------------------------------------------------------

    def delivered(self) -> bool:
        """Whether the answer reached the client, as the last transition says (WRITTEN or
        ABANDON)."""
        writer = self._open()
        stream = self.stream
        if stream is not None:
            written = stream.delivered
        else:
            written = writer.done and not writer.abandoned
        if self.state is State.FINISHING and written:
            self.handle(Event.WRITTEN)
        elif self.state is not State.DELIVERED:
            self.handle(Event.ABANDON)
        return self.state is State.DELIVERED

    def settle(self) -> bool:
        """The request ends: so does the watcher's job; an answer that was not delivered
        is reported lost (``Exchange.lost``).  Whether it was delivered."""
        writer = self._open()
        self.over = True
        if self.watching is not None:
            self.watching.cancel()
        if not writer.done:
            writer.abandon()  # cancelled (shutdown): leave the client
        stream, session = self.stream, self.routed.session
        if stream is not None and session is not None:
            if not stream.delivered:
                stream.detach()  # a resuming GET still attached ends too
            session.streams.close(stream)
        if self.delivered():
            return True
        self.exchange.lost()  # the answer never reached the client
        return False

    async def deliver(self) -> None:
        """Wait until the resumable stream's final event was written, on whichever
        connection carries it; a stream left detached for ``resume_window`` is given up
        (the answer is lost)."""
        stream = self.stream
        window = self.responder.resume_window
        assert stream is not None and window is not None
        while not stream.delivered:
            writer = stream.writer
            if writer is None:
                if stream.evicted:
                    return  # evicted to keep the server-wide budget: the answer is lost
                if stream.final is not None and not stream.final[1]:
                    return  # ended without an answer (its client cancelled): nothing to resume
                if not await stream.wait_attached(window):
                    return
                continue
            await self.responder.sink.drain(writer)
            if not stream.delivered:
                stream.detach(writer)

    # -- the watcher ----------------------------------------------------------------

    def _outlived(self) -> trio.CancelScope:
        """The scope of the watcher's waits once its stream's wait is over: cancelled
        by :meth:`settle`, or at once when the request already ended."""
        scope = self.watching = trio.CancelScope()
        if self.over:
            scope.cancel()
        return scope

    async def _watch(self) -> None:
        """Wait for the client to go, sending keep-alives and enforcing the time limits,
        until the call's request ended (:meth:`settle`).

        It runs in the service nursery, where an exception would stop the
        whole app: a bug here fails this call only (cancelled, kind
        ``"server"``).  One cancel scope at a time (not one for the
        watcher's life plus one per wait: a suspended call holds whatever
        its watcher holds): the wait's scope is also the one :meth:`settle`
        cancels (``watching``), and ``over`` tells the two apart.
        """
        exchange = self.exchange
        try:
            if self.over:
                return
            responder, receive = self.responder, self.receive
            now = trio.current_time()
            # A listen stream is meant to stay open: no time limit.
            limit = None if self.routed.call.long_lived else responder.max_request_time
            limit_at = math.inf if limit is None else now + limit
            interval = responder.keepalive_interval if self.sse else None
            keepalive_at = math.inf if interval is None else now + interval
            writer = self._open()
            stream = self.stream
            while True:
                wait = trio.CancelScope(deadline=min(limit_at, keepalive_at, writer.stall_at))
                self.watching = writer.wakes = wait
                with wait:
                    if (await receive())["type"] == "http.disconnect":
                        break
                    continue  # trailing body chunks; the body was already read whole
                if self.over:
                    writer.wakes = None
                    return
                now = trio.current_time()
                if stream is not None and stream.writer is not writer:
                    # Detached (a stall), or a resuming GET carries the stream now.
                    writer.wakes = None
                    with self._outlived():
                        await self._await_resume(limit_at)
                    return
                if now >= writer.stall_at:
                    self.stall("write timeout")
                    if stream is not None:
                        with self._outlived():
                            await self._await_resume(limit_at)
                    return
                if now >= limit_at:
                    limit_at = math.inf
                    exchange.cancel("request time limit reached", kind="server")
                if interval is not None and now >= keepalive_at:
                    self.keepalive()
                    keepalive_at = now + interval
            writer.wakes = None
            self.disconnected()
            if stream is not None:
                if stream.delivered:
                    return  # closed after its answer was queued: delivered
                with self._outlived():
                    await self._await_resume(limit_at)
                return
            if self.routed.era == "modern" or responder.legacy_disconnect_cancels:
                exchange.cancel(
                    "client disconnected", grace_period=responder.disconnect_grace_period
                )
            elif limit_at < math.inf and self.state is State.ABANDONED:
                # The call goes on without its client, but within the time limit.
                with self._outlived():
                    await trio.sleep_until(limit_at)
                    exchange.cancel("request time limit reached", kind="server")
        except Exception:
            logger.exception("the stream watcher of a call failed; cancelling the call")
            exchange.cancel("internal error", kind="server")

    async def _await_resume(self, limit_at: float) -> None:
        """The resumable stream lost its connection: give its client ``resume_window`` to
        come back (each time), then cancel the call as a disconnect.

        With ``legacy_disconnect_cancels`` off a client that closed its stream
        is spared (the call runs on, within the time limit), as without
        resumption; one that stopped reading is not (it holds the server's
        memory and connection).  A stream whose replay buffer dropped an
        undelivered event cannot be resumed whole: that counts as the window
        passing.
        """
        stream, exchange, responder = self.stream, self.exchange, self.responder
        window = responder.resume_window
        assert stream is not None and window is not None
        with trio.move_on_at(limit_at):
            while True:
                if stream.writer is None and not await stream.wait_attached(window):
                    if responder.legacy_disconnect_cancels or stream.stalled:
                        why = "client stopped reading" if stream.stalled else "client disconnected"
                        if stream.overflowed:
                            why += " (its stream's replay buffer overflowed)"
                        exchange.cancel(why, grace_period=responder.disconnect_grace_period)
                        return
                    await trio.sleep_forever()  # the time limit may still end it
                await stream.wait_detached()
        exchange.cancel("request time limit reached", kind="server")


@types.coroutine
def await_then(
    coro: Coroutine[Any, Any, T], on_suspend: Callable[[], object]
) -> Generator[Any, Any, T]:
    """``await coro`` in the calling task, calling *on_suspend()* once just before the
    coroutine's first suspension reaches the scheduler.

    Why not a task: a call's watcher is needed only while the call is
    suspended (a call that finishes without yielding cannot be
    disconnected from, kept alive or timed out in the middle), and a task
    per call would be most of a no-op call's cost.  Trio has no hook for
    "this task suspends", so this drives the coroutine itself, by the
    protocol of ``yield from`` (PEP 380): whatever the coroutine yields
    goes to the scheduler, whatever the scheduler sends or throws goes
    back in, and closing this closes the coroutine; the cancel scopes are
    the caller's.  (One visible difference: ``Task.iter_await_frames()``
    stops at this frame.)
    """
    try:
        value = coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    try:
        on_suspend()
    except BaseException:
        coro.close()
        raise
    while True:
        try:
            sent = yield value
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                value = coro.throw(exc)
            except StopIteration as done:
                result = done.value
                return result
        else:
            try:
                value = coro.send(sent)
            except StopIteration as done:
                result = done.value
                return result
