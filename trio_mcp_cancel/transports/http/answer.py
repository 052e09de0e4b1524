"""Answering one routed HTTP request: admission once, the run, the response, the watcher.

Both eras end here once their rules accepted a request (:class:`Routed`).
This is also the one place the HTTP transport calls into the dispatcher
(:meth:`Responder.prepare`, :meth:`Responder.notify`, and in
:meth:`Responder.answer` the admission, ``Dispatcher.admit``, then the run,
``Dispatcher.answer(admitted=True)``), so the interface between them is
short and visible.  Admission comes first, like on every transport, so a
refused call is a ``429`` before any response is committed to.

**Writes never block a request.**  Every response is queued in a
:class:`~.writer.ResponseWriter` (see there for why) and written by a task
of its own in the app's service nursery (on demand: only while something
waits to be written), except a whole response the
socket can take at once (:func:`~.inline.can_write_now`), which is written
in the request's own task.  A client that leaves a write pending for
``write_timeout``, or lets the queue overflow, is treated as gone: its call
is cancelled (kind ``"disconnect"``), the request returns, and hypercorn
closes the connection, which releases the pending write.

**A cancellable call** gets a :class:`~.response.CallResponse` (SSE or one
JSON body, chosen lazily) and, once it first suspends
(:func:`~.lazy.await_then`), a watcher task that waits on ``receive()`` for
``http.disconnect`` (hypercorn reports a closed connection or a reset
HTTP/2 stream there; a ``send()`` to a gone client silently does nothing),
and carries the ``max_request_time`` limit, the keep-alive timer and the
write deadline, so a call costs one extra task at most.

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
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Final

import attrs
import trio

from ..._core.registry import Registry, UseConfig
from ..._protocol import jsonrpc
from ..._protocol.calls import Call, RequestCall
from ..._protocol.dispatcher import Dispatcher, Served
from ..._protocol.exchange import Caller, Exchange
from ..._protocol.jsonrpc import Message
from ..._protocol.versions import Era
from ..._protocol.wire import TOO_MANY_REQUESTS
from ...backends.base import Backend
from .._shutdown import SHUTDOWN_REASON, Shutdown  # re-exported: HTTP's shutdown is the shared one
from . import rules
from .inline import can_write_now
from .lazy import await_then
from .response import CallResponse, State
from .resume import ResumableStream, StreamBudget
from .sessions import Session
from .shared import tenant_call_slot
from .writer import WRITER_TASK, ResponseWriter, write_now

__all__ = ["SHUTDOWN_REASON", "Post", "Responder", "Routed", "Shutdown"]

logger = logging.getLogger("trio_mcp_cancel.http")

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Header = tuple[bytes, bytes]
Headers = list[Header]

#: Room for a whole response's head (status line, headers) next to its body.
_HEAD_ROOM: Final = 1024
RETRY_AFTER: Final[Headers] = [(b"retry-after", b"1")]
#: The watcher tasks' name, as trio would make it (given: not one string per task).
_WATCHER: Final = f"{__name__}.Responder._watch"


def _extra(routed: Routed, status: int) -> Any:
    """The headers of *routed*'s whole answer: a ``429`` says when to retry, as at admission."""
    return routed.extra if status != 429 else [*routed.extra, *RETRY_AFTER]


def _nothing() -> None:
    pass


@attrs.define  # not frozen: made per POST, and a frozen attrs class costs 3x to build
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
    """Runs routed calls and writes every response of one app (see the module)."""

    server: Served
    backend: Backend | None
    json_response: bool
    disconnect_grace_period: float | UseConfig | None
    max_request_time: float | None
    keepalive_interval: float | None
    legacy_disconnect_cancels: bool
    write_timeout: float | None
    max_buffered_bytes: int
    fast_paths: bool = True
    """hypercorn's shortcuts (see :mod:`.hypercorn_compat`); off: plain ASGI only."""
    resume_window: float | None = None
    """Legacy SSE streams are resumable, and a dropped one waits this long for its
    client to come back before it counts as a disconnect (``None``: not resumable)."""
    replay_limit: int = 256 * 1024
    """Bytes of events each resumable stream keeps for a replay."""
    stream_budget: StreamBudget = attrs.field(factory=lambda: StreamBudget(64 << 20))
    """Bytes every resumable stream of the app may hold together (see :mod:`.resume`)."""
    service: trio.Nursery | None = None
    """The lifespan's service nursery (``None``: served without a lifespan)."""
    shutdown: Shutdown = attrs.field(init=False, factory=lambda: Shutdown(log=logger))
    """The app's calls in flight, and the shutdown that cancels them."""
    dispatcher: Dispatcher = attrs.field(init=False)
    """The server's dispatcher (``server.dispatcher``), looked up once per app."""

    @dispatcher.default
    def _dispatcher_of_server(self) -> Dispatcher:
        return self.server.dispatcher

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

    async def answer(
        self, routed: Routed, receive: Receive, send: Send, exchange: Exchange | None = None
    ) -> None:
        """Admit *routed* (once), run it and write its response (*exchange*: the one the
        app holds to cancel it, e.g. at its token's expiry)."""
        call, caller = routed.call, routed.caller
        exchange = Exchange() if exchange is None else exchange
        refused = self.dispatcher.admit(call, caller, exchange)
        if refused is not None:
            await self.refuse(send, refused, routed.extra)
            return
        # From here ``Dispatcher.answer`` releases what admit took, once it
        # runs; nothing before it checkpoints, except the shared slot below.
        backend = self.backend
        if backend is None or not backend.counters.shared:
            await self._run(routed, exchange, receive, send)
            return
        # Scale-out: the per-tenant cap counts the calls of every process.
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
        await self.respond(send, 429, jsonrpc.encode(reply), [*extra, *RETRY_AFTER], json=True)

    def _call(self, routed: Routed, exchange: Exchange, allow_silence: bool) -> Any:
        """The coroutine that runs the admitted call (the one place the dispatcher runs one)."""
        return self.dispatcher.answer(
            routed.call, routed.caller, exchange, allow_silence=allow_silence, admitted=True
        )

    async def _run(self, routed: Routed, exchange: Exchange, receive: Receive, send: Send) -> None:
        if routed.call.tracked:
            if self.service is not None:
                await self._stream(routed, exchange, receive, send, self.service)
                return
            # Without a lifespan the request hosts its helper tasks itself.
            async with trio.open_nursery() as nursery:
                await self._stream(routed, exchange, receive, send, nursery)
            return
        reply = await self._call(routed, exchange, False)
        assert reply is not None
        if routed.before_reply is not None and not await routed.before_reply(routed, send):
            return
        code = jsonrpc.error_code(reply)
        status = 200 if code is None else rules.status_for(code, routed.era)
        await self.respond(send, status, jsonrpc.encode(reply), _extra(routed, status), json=True)

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
        opens no nursery of its own; and its :class:`CallResponse` is made
        only when needed (see :class:`_CallRun`), so one that also sends
        nothing is answered with one whole response, as a plain call is.
        """
        run = _CallRun(self, routed, exchange, receive, send, nursery)
        if run.sse:
            exchange.send = run.send_message
            if run.resumable:
                exchange.close_stream = run.close_stream
        shutdown = self.shutdown
        shutdown.in_flight.add(exchange)
        if shutdown.at is not None:
            shutdown.flag(exchange)  # started during the shutdown
        try:
            # The watcher starts when the call first suspends: one that
            # never does cannot be disconnected from mid-way (see lazy.py).
            reply = await await_then(self._call(routed, exchange, run.sse), run.watch)
            response = run.response
            if response is None and reply is not None:
                # Never suspended, sent nothing: one whole response (a task
                # refused by its quota is a 429, as an admission refusal is).
                status = 429 if jsonrpc.error_code(reply) == TOO_MANY_REQUESTS else 200
                encoded = jsonrpc.encode(reply)
                if not await self.respond(send, status, encoded, _extra(routed, status), json=True):
                    exchange.lost()  # the answer never reached the client
                return
            response = run.get()
            response.finish(reply)
            writer = response.writer
            if response.start_writer is not None:
                # Never committed: one whole response, or nothing (client gone).
                await self._write_whole(writer, send, nursery)
            if response.stream is not None:
                await self._deliver(response.stream)
            else:
                await self._drain(writer)
        finally:
            shutdown.in_flight.discard(exchange)
            if run.response is not None:
                run.settle()

    async def _watch(self, run: _CallRun, response: CallResponse) -> None:
        """Wait for the client to go, sending keep-alives and enforcing the time limits,
        until the call's request ended (:meth:`_CallRun.settle`).

        It runs in the service nursery, where an exception would stop the
        whole app: a bug here fails this call only (cancelled, kind
        ``"server"``).  One frame (not a wrapper around the loop's) and one
        cancel scope at a time, not a scope for the watcher's life plus one
        per wait (each is a scope and a cancel status, ~650 bytes of a
        suspended call, issue 27): the wait's scope is also the one
        :meth:`_CallRun.settle` cancels (``run.watching``), and ``run.over``
        tells the two apart.
        """
        try:
            if run.over:
                return
            exchange, receive = run.exchange, run.receive
            now = trio.current_time()
            # A listen stream is meant to stay open: no time limit.
            limit = None if run.routed.call.long_lived else self.max_request_time
            limit_at = math.inf if limit is None else now + limit
            interval = self.keepalive_interval if response.sse else None
            keepalive_at = math.inf if interval is None else now + interval
            writer = response.writer
            stream = response.stream
            while True:
                wait = trio.CancelScope(deadline=min(limit_at, keepalive_at, writer.stall_at))
                run.watching = writer.wakes = wait
                with wait:
                    if (await receive())["type"] == "http.disconnect":
                        break
                    continue  # trailing body chunks; the body was already read whole
                if run.over:
                    writer.wakes = None
                    return
                now = trio.current_time()
                if stream is not None and stream.writer is not writer:
                    # Detached (a stall), or a resuming GET carries the stream now.
                    writer.wakes = None
                    with run.outlived():
                        await self._await_resume(stream, exchange, limit_at)
                    return
                if now >= writer.stall_at:
                    response.stall("write timeout")
                    if stream is not None:
                        with run.outlived():
                            await self._await_resume(stream, exchange, limit_at)
                    return
                if now >= limit_at:
                    limit_at = math.inf
                    exchange.cancel("request time limit reached", kind="server")
                if interval is not None and now >= keepalive_at:
                    response.keepalive()
                    keepalive_at = now + interval
            writer.wakes = None
            response.disconnected()
            if stream is not None:
                if stream.delivered:
                    return  # closed after its answer was queued: delivered
                with run.outlived():
                    await self._await_resume(stream, exchange, limit_at)
                return
            if run.routed.era == "modern" or self.legacy_disconnect_cancels:
                exchange.cancel("client disconnected", grace_period=self.disconnect_grace_period)
            elif limit_at < math.inf and response.state is State.ABANDONED:
                # The call goes on without its client, but within the time limit.
                with run.outlived():
                    await trio.sleep_until(limit_at)
                    exchange.cancel("request time limit reached", kind="server")
        except Exception:
            logger.exception("the stream watcher of a call failed; cancelling the call")
            run.exchange.cancel("internal error", kind="server")

    async def _await_resume(
        self, stream: ResumableStream, exchange: Exchange, limit_at: float
    ) -> None:
        """A resumable stream lost its connection: give its client ``resume_window`` to
        come back (each time), then cancel the call as a disconnect.

        With ``legacy_disconnect_cancels`` off a client that closed its stream
        is spared (the call runs on, within the time limit), as without
        resumption; one that stopped reading is not (it holds the server's
        memory and connection).  A stream whose replay buffer dropped an
        undelivered event cannot be resumed whole: that counts as the window
        passing.
        """
        window = self.resume_window
        assert window is not None
        with trio.move_on_at(limit_at):
            while True:
                if stream.writer is None and not await stream.wait_attached(window):
                    if self.legacy_disconnect_cancels or stream.stalled:
                        why = "client stopped reading" if stream.stalled else "client disconnected"
                        if stream.overflowed:
                            why += " (its stream's replay buffer overflowed)"
                        exchange.cancel(why, grace_period=self.disconnect_grace_period)
                        return
                    await trio.sleep_forever()  # the time limit may still end it
                await stream.wait_detached()
        exchange.cancel("request time limit reached", kind="server")

    async def _deliver(self, stream: ResumableStream) -> None:
        """Wait until *stream*'s final event was written, on whichever connection carries
        it; a stream left detached for ``resume_window`` is given up (the answer is lost)."""
        window = self.resume_window
        assert window is not None
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
            await self._drain(writer)
            if not stream.delivered:
                stream.detach(writer)

    # -- writing ------------------------------------------------------------------

    def _start_writer(
        self, writer: ResponseWriter, nursery: trio.Nursery, *, on_demand: bool = False
    ) -> None:
        """Run *writer* in the service nursery (or, without a lifespan, in *nursery*).

        *on_demand* (a stream, which may wait between writes): in tasks that
        live only while something is to be written (:meth:`ResponseWriter.start`);
        a whole response is one task that writes it and ends, as ever.
        """
        writer.outbox.timeout = self.write_timeout
        if on_demand:
            writer.start((self.service or nursery).start_soon)
        else:
            (self.service or nursery).start_soon(writer.run, name=WRITER_TASK)

    async def _write_whole(self, writer: ResponseWriter, send: Send, nursery: trio.Nursery) -> None:
        """Write *writer*'s whole response in this task when that cannot block, else start it.

        See :mod:`.inline`: a small response on an HTTP/1.1 socket with room
        to spare is written at once, so the writer task (and its spawn) is
        only needed for a write that could be left pending by the client.
        """
        if self.service is None or (
            self.fast_paths and can_write_now(send, writer.outbox.bytes + _HEAD_ROOM)
        ):
            await writer.run()
        else:
            self._start_writer(writer, nursery)

    async def _drain(self, writer: ResponseWriter) -> None:
        """Wait until *writer* wrote everything, or give up on a client that does not read.

        Giving up means returning with the response unfinished; the server
        then closes the connection, which releases the pending write.
        """
        if writer.done and not writer.stalled:
            return
        if writer.stalled:
            writer.abandon()
            return
        timeout = math.inf if self.write_timeout is None else self.write_timeout
        try:
            with trio.move_on_after(timeout):
                await writer.wait_done()
                return
            logger.info("client did not read its response for %ss; closing", self.write_timeout)
        finally:
            if not writer.done:
                writer.abandon()

    async def respond(
        self, send: Send, status: int, body: bytes, extra: Any = (), *, json: bool | None = None
    ) -> bool:
        """Send a whole response (see the module docstring); whether it reached the socket.

        One that cannot block is written here, in two ``send()`` calls and
        no queue; any other goes through a writer.
        """
        service = self.service
        if service is not None and self.fast_paths and can_write_now(send, len(body) + _HEAD_ROOM):
            return await write_now(send, status, body, extra, json=json)
        writer = ResponseWriter(send, self.max_buffered_bytes, self.fast_paths)
        writer.put_whole(status, body, extra, json=json)
        if service is None:
            await writer.run()  # no lifespan: write inline, as an ASGI app usually does
        else:
            self._start_writer(writer, service)
            await self._drain(writer)
        return writer.done and not writer.abandoned


class _CallRun:
    """One cancellable call's response side, made on first need.

    The :class:`CallResponse` (its writer, queue and state machine) exists
    once the call suspends (the watcher needs it), sends a message or
    closes its stream; a call that does none of these (a no-op, a lookup in
    memory: the common case) is answered by :meth:`Responder.respond` and
    never makes one.  Plain attributes rather than closures: one object per
    call.
    """

    __slots__ = (
        "exchange",
        "nursery",
        "over",
        "receive",
        "responder",
        "response",
        "resumable",
        "routed",
        "send",
        "sse",
        "watching",
    )

    def __init__(
        self,
        responder: Responder,
        routed: Routed,
        exchange: Exchange,
        receive: Receive,
        send: Send,
        nursery: trio.Nursery,
    ) -> None:
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
        self.response: CallResponse | None = None
        self.watching: trio.CancelScope | None = None
        """The watcher's current wait, which :meth:`settle` cancels."""
        self.over = False
        """The request ended (:meth:`settle`): the watcher's job is done."""

    def get(self) -> CallResponse:
        """The call's response, made now if it was not yet."""
        response = self.response
        if response is None:
            responder, routed = self.responder, self.routed
            writer = ResponseWriter(self.send, responder.max_buffered_bytes, responder.fast_paths)
            # Bound methods of this object, not partials (each with its own
            # argument tuple and keyword dict, kept for the call's life).
            response = self.response = CallResponse(writer, routed.extra, self.sse, self._stalled)
            if self.resumable:
                response.open_stream = self._open_stream
            # The writer starts when the response commits to SSE, or not at
            # all when the whole answer can be written inline.
            response.start_writer = self._start_writer
        return response

    def _stalled(self) -> None:
        grace = self.responder.disconnect_grace_period
        self.exchange.cancel("client stopped reading", grace_period=grace)

    def _open_stream(self) -> ResumableStream:
        session = self.routed.session
        assert session is not None
        responder = self.responder
        return session.streams.open(responder.replay_limit, budget=responder.stream_budget)

    def _start_writer(self) -> None:
        assert self.response is not None
        self.responder._start_writer(self.response.writer, self.nursery, on_demand=True)

    def outlived(self) -> trio.CancelScope:
        """The scope of the watcher's waits once its stream's wait is over: cancelled
        by :meth:`settle`, or at once when the request already ended."""
        scope = self.watching = trio.CancelScope()
        if self.over:
            scope.cancel()
        return scope

    async def send_message(self, message: Message) -> None:
        """``Exchange.send``: a progress or log message, on the call's (SSE) response."""
        await self.get().send_message(message)

    def close_stream(self) -> bool:
        """``Exchange.close_stream`` (a resumable legacy stream)."""
        return self.get().close_stream()

    def settle(self) -> None:
        """The call is over: so is the watcher's job; report an answer that was lost."""
        response = self.get()
        self.over = True
        if self.watching is not None:
            self.watching.cancel()
        writer = response.writer
        if not writer.done:
            writer.abandon()  # cancelled (shutdown): leave the client
        stream, session = response.stream, self.routed.session
        if stream is not None and session is not None:
            if not stream.delivered:
                stream.detach()  # a resuming GET still attached ends too
            session.streams.close(stream)
        if not response.settle():
            self.exchange.lost()  # the answer never reached the client

    def watch(self) -> None:
        """The call suspends, still running: commit to SSE now, so a silent call's head
        and keep-alives reach the client, and watch its stream."""
        response = self.get()
        response.commit()
        # A constant name: trio would otherwise build one string per task.
        self.nursery.start_soon(self.responder._watch, self, response, name=_WATCHER)
