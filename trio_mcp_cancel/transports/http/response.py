"""The lifecycle of one cancellable call's HTTP response, as one explicit state machine.

MCP lets the server answer each request with an SSE stream or one JSON
body.  When the client accepts SSE the choice is made lazily: a call that
finishes before it first suspends, having sent nothing, is answered with
one ``application/json`` body (one write, no chunked framing); the
response commits to SSE (its head queued) as soon as the call suspends,
sends a progress or log message, or must end without an answer (a
client-cancelled call ends its stream silently: MCP forbids any message
after a client's cancel).

The states, h11 style (:class:`State`, :class:`Event`, :data:`TRANSITIONS`):

========== ============ ==========================================================
state      event        next state
========== ============ ==========================================================
PENDING    COMMIT       STREAMING   (the SSE head is queued)
PENDING    FINISH       FINISHING   (one whole JSON body is queued)
PENDING    DISCONNECT   ABANDONED   (the client went before anything was queued)
PENDING    ABANDON      ABANDONED   (the request ended without an answer)
STREAMING  COMMIT       STREAMING   (committing twice is a no-op)
STREAMING  FINISH       FINISHING   (the stream's last event, or its end, is queued)
STREAMING  DISCONNECT   ABANDONED
STREAMING  ABANDON      ABANDONED
FINISHING  WRITTEN      DELIVERED   (the writer wrote the final message)
FINISHING  DISCONNECT   FINISHING   (the final message is queued: the writer decides)
FINISHING  ABANDON      ABANDONED   (the writer gave up, or was never let finish)
DELIVERED  DISCONNECT   DELIVERED   (too late to matter)
ABANDONED  any          ABANDONED   (the client is gone: whatever it would be sent is dropped)
========== ============ ==========================================================

Any other pair (writing the final message before it was queued, queueing
after the final message) is a bug in this package and raises
:class:`ResponseStateError`.

Invariants:

* PENDING: nothing is queued; the writer task is not running.
* STREAMING: the SSE head is queued (so the response is SSE for good) and
  the writer task runs; only SSE events are queued from now on.
* FINISHING: the final message is queued; nothing more will be.
* DELIVERED: the writer wrote every message, the final one included.
* ABANDONED: the answer never reached the client; the request reports it
  lost (``Exchange.lost``) when it ends.

:class:`ResponseMachine` is the pure part (no I/O, tested without
sockets); :class:`CallResponse` is that machine with what each transition
writes: driven by the call (its messages, its end) and the watcher (a
disconnect, a stall), it queues the bytes in the request's
:class:`~.writer.ResponseWriter` (one object per call, not two: it sits on
every cancellable call's path).  Everything runs in the
request's task or its watcher, so nothing interleaves with a transition.

**Resumable streams** (legacy sessions, :mod:`.resume`).  When the
response has a :class:`~.resume.ResumableStream`, every SSE event of the
call (progress, log, any server-to-client request, the answer) goes
through :meth:`CallResponse._event` into it: numbered, kept for a replay,
and written on whichever connection carries the stream now.  A
disconnect or a stall then *detaches* that connection instead of
abandoning the response, which stays STREAMING (the call goes on, its
events into the replay buffer) until a resuming GET attaches, or the HTTP
layer gives up (:mod:`.answer`: ``resume_window``); DELIVERED means the
final event was written by whichever connection took it.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Final

from ..._protocol import jsonrpc
from ..._protocol.jsonrpc import Message
from . import sse
from .resume import ResumableStream
from .writer import ResponseWriter

__all__ = [
    "TRANSITIONS",
    "CallResponse",
    "Event",
    "ResponseMachine",
    "ResponseStateError",
    "State",
]

logger = logging.getLogger("trio_mcp_cancel.http")

Headers = list[tuple[bytes, bytes]]


class State(enum.Enum):
    # Members are singletons: identity hashing is right, and a C slot (Enum's
    # own __hash__ is Python, and the table is looked up on every call).
    __hash__ = object.__hash__

    PENDING = "pending"
    STREAMING = "streaming"
    FINISHING = "finishing"
    DELIVERED = "delivered"
    ABANDONED = "abandoned"


class Event(enum.Enum):
    __hash__ = object.__hash__

    COMMIT = "commit"
    FINISH = "finish"
    WRITTEN = "written"
    DISCONNECT = "disconnect"
    ABANDON = "abandon"


_P, _S, _F = State.PENDING, State.STREAMING, State.FINISHING
_D, _A = State.DELIVERED, State.ABANDONED

#: The legal transitions (see the module docstring's table).
TRANSITIONS: Final[dict[tuple[State, Event], State]] = {
    (_P, Event.COMMIT): _S,
    (_P, Event.FINISH): _F,
    (_P, Event.DISCONNECT): _A,
    (_P, Event.ABANDON): _A,
    (_S, Event.COMMIT): _S,
    (_S, Event.FINISH): _F,
    (_S, Event.DISCONNECT): _A,
    (_S, Event.ABANDON): _A,
    (_F, Event.WRITTEN): _D,
    (_F, Event.DISCONNECT): _F,
    (_F, Event.ABANDON): _A,
    (_D, Event.DISCONNECT): _D,
    **{(_A, event): _A for event in Event},
}

#: States in which the call may still queue messages.
OPEN: Final = frozenset({_P, _S})


class ResponseStateError(RuntimeError):
    """A transition the table does not allow: a bug in the HTTP transport."""


class ResponseMachine:
    """The response's state; :meth:`handle` is the only way it changes."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = State.PENDING

    def handle(self, event: Event) -> State:
        try:
            self.state = TRANSITIONS[self.state, event]
        except KeyError:
            raise ResponseStateError(f"{event.value} in state {self.state.value}") from None
        return self.state


class CallResponse(ResponseMachine):
    """The response of one cancellable call: the machine, and what each transition writes.

    *on_stall* is called once when the client is found too slow (it
    cancels the call); *start_writer* starts the writer task when the
    response commits to SSE (``None`` once started, or when the caller
    starts it: a whole answer may be written inline instead).
    """

    __slots__ = ("_extra", "_on_stall", "open_stream", "sse", "start_writer", "stream", "writer")

    def __init__(
        self,
        writer: ResponseWriter,
        extra: Headers,
        sse_mode: bool,
        on_stall: Callable[[], object],
    ) -> None:
        self.state = State.PENDING
        self.writer = writer
        self._extra = extra
        self.sse = sse_mode
        self._on_stall = on_stall
        self.start_writer: Callable[[], None] | None = None
        self.open_stream: Callable[[], ResumableStream] | None = None
        """Makes the response resumable when it commits to SSE (``None``: not resumable)."""
        self.stream: ResumableStream | None = None

    def commit(self) -> None:
        """Make the response an SSE stream, queueing its head (once; SSE clients only)."""
        if not self.sse or self.state is not State.PENDING:
            return
        self.handle(Event.COMMIT)
        headers = [*sse.SSE_HEADERS, *self._extra]
        self.writer.put({"type": "http.response.start", "status": 200, "headers": headers})
        if self.open_stream is not None:
            stream = self.stream = self.open_stream()
            stream.attach(self.writer)
            stream.prime()
        start, self.start_writer = self.start_writer, None
        if start is not None:
            start()  # a stream: its writes may block, so a task of their own

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

    def keepalive(self) -> None:
        self.commit()
        stream = self.stream
        if stream is None:
            self._event(sse.KEEPALIVE)
        elif self.state is State.STREAMING and not stream.keepalive(sse.KEEPALIVE):
            self.stall("too much unread output")

    def finish(self, reply: Message | None) -> None:
        """End the response with *reply* (``None``: end an SSE stream without one)."""
        state = self.state
        if state not in OPEN:
            self.writer.close()  # the client is gone: write what is queued, then stop
            return
        if self.sse and (state is State.STREAMING or reply is None):
            self.commit()
            self._event(b"" if reply is None else sse.event(reply), final=True)
        else:
            assert reply is not None
            self.handle(Event.FINISH)
            self.writer.put_whole(200, jsonrpc.encode(reply), self._extra, json=True)

    def disconnected(self) -> None:
        """The client closed its stream (the watcher saw ``http.disconnect``)."""
        if self.stream is not None:
            # Resumable: a drop detaches (the call goes on); after the final
            # event was queued it is the delivery (see ResumableStream.disconnected).
            self.stream.disconnected(self.writer)
            return
        self.handle(Event.DISCONNECT)

    def stall(self, why: str) -> None:
        """The client stopped reading: treat it as gone (its call is cancelled)."""
        stream = self.stream
        if stream is not None:
            # Resumable: the connection is dropped, not the call (see .answer).
            if stream.writer is not None:
                logger.info("client stopped reading its stream (%s); detaching it", why)
                stream.detach()
                stream.stalled = True
            return
        if self.writer.stalled or self.state is State.ABANDONED:
            return
        logger.info("client stopped reading its response (%s); disconnecting it", why)
        self.handle(Event.DISCONNECT)
        self.writer.stalled = True
        self._on_stall()

    def settle(self) -> bool:
        """The request ends: whether the answer was delivered (else it is lost)."""
        writer = self.writer
        stream = self.stream
        if stream is not None:
            if self.state is State.FINISHING and stream.delivered:
                self.handle(Event.WRITTEN)
            elif self.state is not State.DELIVERED:
                self.handle(Event.ABANDON)
            return self.state is State.DELIVERED
        if self.state is State.FINISHING and writer.done and not writer.abandoned:
            self.handle(Event.WRITTEN)
        elif self.state is not State.DELIVERED:
            self.handle(Event.ABANDON)
        return self.state is State.DELIVERED
