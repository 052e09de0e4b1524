"""How a response reaches the ASGI server: a :class:`Sink`, and the writer of one response.

hypercorn writes to the socket inside a shielded cancel scope: a ``send()``
to a client that stopped reading blocks until the client reads or the
connection closes, and nothing (a cancel, a time limit, shutdown) can
interrupt it; and hypercorn closes the connection only once the
application returned.  So no task that must end on time calls ``send()``:
the request queues its messages in a :class:`ResponseWriter`
(:meth:`ResponseWriter.put` never blocks) and :meth:`ResponseWriter.run`
writes them, in a task of its own, unless the app's sink says the write
cannot block.

**The sink** is chosen once, by the app (``McpHttpApp``), for every
request it serves: :class:`AsgiSink` is plain ASGI (every response through
a writer task; works under any ASGI server); ``HypercornSink``
(:mod:`.hypercorn_compat`, the only module that knows hypercorn's
internals) adds hypercorn's shortcuts: a queued body taken without a
scheduling point, a whole response written in the request's own task, in
one socket write, when that cannot block, and the repair of a head left
pending.  Nothing else in the HTTP transport asks which server it runs under.

The queue is the transports' shared :class:`~.._outbox.Outbox`: progress,
log messages and keep-alives are its bounded items, the final message the
unbounded one.  Since a ``send()`` cannot be cancelled, the write deadline
is not a cancel scope around it: while a write is pending,
``outbox.stall_at`` says when the client counts as gone, and the request's
watcher (whose cancel scope is :attr:`ResponseWriter.wakes`) is woken then.

**On demand** (:meth:`ResponseWriter.start`, a call's response): instead of
one task parked on the queue for the response's whole life, a task is
spawned when there is something to write and ends when the queue is
empty, so a suspended call whose client reads its stream (the usual case:
head, progress, then nothing for a while) holds no writer task; a
keep-alive or a progress message costs a task spawn instead of a wake-up.
The rules are :meth:`ResponseWriter.run`'s: same order, same deadline, and
``done`` only once the queue ended.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final, Protocol

import trio

from .._outbox import Outbox

__all__ = ["WRITER_TASK", "AsgiSink", "ResponseWriter", "Sink", "head"]

logger = logging.getLogger("trio_mcp_cancel.http")

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]

#: Room for a whole response's head (status line, headers) next to its body.
_HEAD_ROOM: Final = 1024
#: The name of a writer's tasks, as trio would name :meth:`~ResponseWriter.run`'s
#: (given, so that trio does not build one string per task).
WRITER_TASK: Final = f"{__name__}.ResponseWriter.run"


def head(status: int, body: bytes, extra: Any = (), *, json: bool | None = None) -> dict[str, Any]:
    """The ``http.response.start`` of a whole response with *body*."""
    headers = [(b"content-length", str(len(body)).encode()), *extra]
    if json or (json is None and body):
        headers.append((b"content-type", b"application/json"))
    return {"type": "http.response.start", "status": status, "headers": headers}


class Sink(Protocol):
    """How one app's responses reach its ASGI server (see the module)."""

    service: trio.Nursery | None
    """The lifespan's service nursery, where writer tasks run (``None``: no lifespan)."""

    def receive_now(self, receive: Receive) -> MutableMapping[str, Any] | None:
        """The next message of *receive* if it is queued already; ``None``: await it."""
        ...

    def head_blocked(self, send: Any, head: MutableMapping[str, Any]) -> None:
        """The request ends while the write of its response *head* is still pending."""
        ...

    def writer(self, send: Send) -> ResponseWriter:
        """A writer for one response through *send*, bounded as the app says."""
        ...

    def start(
        self, writer: ResponseWriter, nursery: trio.Nursery, *, on_demand: bool = False
    ) -> None:
        """Run *writer* in a task of its own (see :meth:`AsgiSink.start`)."""
        ...

    async def write_whole(self, writer: ResponseWriter, send: Send, nursery: trio.Nursery) -> None:
        """Write *writer*'s queued whole response (see :meth:`AsgiSink.write_whole`)."""
        ...

    async def drain(self, writer: ResponseWriter) -> None:
        """Wait until *writer* wrote everything, or give up on a client that does not read."""
        ...

    async def respond(
        self, send: Send, status: int, body: bytes, extra: Any = (), *, json: bool | None = None
    ) -> bool:
        """Send a whole response; whether it reached the server."""
        ...


class AsgiSink:
    """Plain ASGI: every response is queued in a :class:`ResponseWriter` and written by a
    task of its own; nothing is asked of the server beyond ``receive()`` and ``send()``.

    A subclass that can tell a write cannot block (:meth:`can_write_now`)
    has a whole response written in the request's own task instead
    (:meth:`write_now`): ``HypercornSink``.
    """

    __slots__ = ("max_buffered_bytes", "service", "write_timeout")

    def __init__(self, max_buffered_bytes: int, write_timeout: float | None) -> None:
        self.max_buffered_bytes = max_buffered_bytes
        self.write_timeout = write_timeout
        self.service: trio.Nursery | None = None

    # -- what the server offers beyond plain ASGI: nothing here ----------------------

    def receive_now(self, receive: Receive) -> MutableMapping[str, Any] | None:
        return None

    def can_write_now(self, send: Any, size: int) -> bool:
        """Whether *size* bytes written through *send* now cannot block: plain ASGI cannot
        tell, so never."""
        return False

    async def write_now(
        self, send: Send, status: int, body: bytes, extra: Any = (), *, json: bool | None = None
    ) -> bool:
        """Write a whole response in the calling task, only once :meth:`can_write_now`
        said yes; whether it reached the server (one that raises is a ``False``, as
        with a writer task)."""
        start = head(status, body, extra, json=json)
        try:
            await send(start)
            await send({"type": "http.response.body", "body": body, "more_body": False})
        except Exception:
            return False
        return True

    def head_blocked(self, send: Any, head: MutableMapping[str, Any]) -> None:
        pass  # the server's own business (hypercorn's connection guard contains it)

    # -- writing ----------------------------------------------------------------------

    def writer(self, send: Send) -> ResponseWriter:
        return ResponseWriter(send, self.max_buffered_bytes, self)

    def start(
        self, writer: ResponseWriter, nursery: trio.Nursery, *, on_demand: bool = False
    ) -> None:
        """Run *writer* in the service nursery (or, without a lifespan, in *nursery*).

        *on_demand* (a stream, which may wait between writes): in tasks that
        live only while something is to be written (:meth:`ResponseWriter.start`);
        a whole response is one task that writes it and ends.
        """
        writer.outbox.timeout = self.write_timeout
        if on_demand:
            writer.start((self.service or nursery).start_soon)
        else:
            (self.service or nursery).start_soon(writer.run, name=WRITER_TASK)

    async def write_whole(self, writer: ResponseWriter, send: Send, nursery: trio.Nursery) -> None:
        """Write *writer*'s queued whole response in this task when that cannot block (or
        without a lifespan, as an ASGI app usually does), else start its task."""
        if self.service is None or self.can_write_now(send, writer.outbox.bytes + _HEAD_ROOM):
            await writer.run()
        else:
            self.start(writer, nursery)

    async def drain(self, writer: ResponseWriter) -> None:
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
        """Send a whole response; whether it reached the server.

        One that cannot block is written here, without a queue; any other
        goes through a writer task, and the request waits (within the write
        deadline) for it.
        """
        service = self.service
        if service is not None and self.can_write_now(send, len(body) + _HEAD_ROOM):
            return await self.write_now(send, status, body, extra, json=json)
        writer = ResponseWriter(send, self.max_buffered_bytes, self)
        writer.put_whole(status, body, extra, json=json)
        if service is None:
            await writer.run()  # no lifespan: write inline, as an ASGI app usually does
        else:
            self.start(writer, service)
            await self.drain(writer)
        return writer.done and not writer.abandoned


class ResponseWriter:
    """The writes of one response; see the module docstring.

    Its own states are few and one-way: writing (``done`` false), then
    ``done``, with ``abandoned`` set when it gave up before the end (the
    client is gone, the server raised, shutdown); ``stalled`` is the
    request's verdict that the client stopped reading, acted on when the
    request ends (:meth:`abandon`).  What the response as a whole is
    (pending, streaming, finished) is :mod:`.response`'s state machine.
    """

    # Invariant: ``done`` and ``abandoned`` never go back to False, and once
    # ``abandoned`` nothing more is written (the queue is lost).
    # Invariant: ``running`` only on demand (``_spawn`` set), and then exactly
    # one task of :meth:`start` writes; without ``_spawn`` at most one :meth:`run`.
    # Invariant: ``_head`` is set only while the write of the head is pending.

    __slots__ = (
        "_done",
        "_head",
        "_send",
        "_spawn",
        "abandoned",
        "done",
        "outbox",
        "running",
        "sink",
        "stalled",
        "wakes",
    )

    def __init__(self, send: Send, limit: int, sink: Sink | None = None) -> None:
        self._send = send
        self.outbox: Outbox[MutableMapping[str, Any]] = Outbox(limit, None, True)
        self._head: MutableMapping[str, Any] | None = None
        """The response head while its write is pending."""
        self._done: trio.Event | None = None  # made only when somebody waits
        self.sink = sink
        """Told of a head left pending (``None``: nobody to tell)."""
        self.done = False
        """The last message was written, or the writer gave up."""
        self.abandoned = False
        self.stalled = False
        self.wakes: trio.CancelScope | None = None
        self._spawn: Callable[..., object] | None = None
        """Starts a writing task (on demand: see :meth:`start`); ``None``: not started."""
        self.running = False
        """A task of :meth:`start` is writing (or about to)."""

    @property
    def stall_at(self) -> float:
        return self.outbox.stall_at

    async def wait_done(self) -> None:
        """Wait until :attr:`done`."""
        if not self.done:
            if self._done is None:
                self._done = trio.Event()
            await self._done.wait()

    def put(self, message: MutableMapping[str, Any], *, final: bool = False) -> bool:
        """Queue *message*; ``False`` when the client is too far behind to take it.

        The final message is never refused (it ends the response, and the
        request's own wait bounds how long it may take); after it, or once
        abandoned, nothing is taken (``False``: nobody reads any more).
        """
        if self.abandoned or self.outbox.closed:
            return False
        size = len(message.get("body", b""))
        if not self.outbox.put(message, size, bounded=not final):
            return False
        if final:
            self.outbox.end()
        self._kick()
        return True

    def put_whole(
        self, status: int, body: bytes, extra: Any = (), *, json: bool | None = None
    ) -> None:
        """Queue a whole response: its head and its one, final body."""
        self.put(head(status, body, extra, json=json))
        self.put({"type": "http.response.body", "body": body, "more_body": False}, final=True)

    def close(self) -> None:
        """No more messages: the writer ends once the queue is written."""
        self.outbox.end()
        self._kick()

    def abandon(self) -> None:
        """Write nothing more (the response will not be finished): what is queued is
        dropped now, not kept until the request ends."""
        self.abandoned = True
        self.outbox.lose()
        if self._head is not None and self.sink is not None:
            self.sink.head_blocked(self._send, self._head)
        self._kick()

    def drop(self) -> None:
        """Give up at once: drop what is queued and count as done now, even while a
        write is pending (the server releases it when the connection closes, once the
        request returned), so nobody waits on this response any more."""
        self.abandon()
        self._finish()

    def start(self, spawn: Callable[..., object]) -> None:
        """Write the queue on demand (see the module docstring) with tasks that *spawn*
        (a nursery's ``start_soon``) starts; instead of :meth:`run`, not with it."""
        self._spawn = spawn
        self._kick()

    def _kick(self) -> None:
        """On demand and not running: start a task if there is something to write, or
        end if nothing more will be (no task needed for that)."""
        if self._spawn is None or self.running or self.done:
            return
        if self.outbox and not self.abandoned:
            assert self._spawn is not None
            self.running = True
            try:
                self._spawn(self._write_queued, name=WRITER_TASK)
            except RuntimeError:  # the nursery closed (shutdown): never delivered
                self.running = False
                self.abandoned = True
                self._finish()
        elif self.outbox.ending or self.abandoned:
            if self.outbox:
                self.abandoned = True  # abandoned with messages unwritten
            self._finish()

    async def _write_queued(self) -> None:
        """One task of :meth:`start`: write until the queue is empty, or ends."""
        try:
            await self.run(idle_exit=True)
        finally:
            self.running = False

    def _finish(self) -> None:
        self.outbox.stall_at = float("inf")
        self.done = True
        if self._done is not None:
            self._done.set()

    async def run(self, *, idle_exit: bool = False) -> None:
        """Write the queue in order until it ends; see the module docstring.

        *idle_exit* (:meth:`start`'s tasks): return, not done, once the queue
        is empty but not ended, instead of waiting for more.
        """
        outbox = self.outbox
        idle = False
        try:
            while not self.abandoned:
                message = outbox.start_write()
                if message is None:
                    if outbox.ending:
                        return
                    if idle_exit:
                        idle = True
                        return
                    await outbox.wait()
                    continue
                stall_at = outbox.stall_at
                wakes = self.wakes
                if wakes is not None and stall_at < wakes.deadline:
                    wakes.deadline = stall_at
                if message["type"] == "http.response.start":
                    self._head = message
                await self._send(message)
                self._head = None
                outbox.written()
        except Exception:
            # A server may raise once the connection is gone; nothing to deliver to.
            self.abandoned = True
        except BaseException:
            self.abandoned = True  # cancelled (shutdown) before the end: maybe never delivered
            raise
        finally:
            if idle:
                outbox.stall_at = float("inf")
            else:
                self._finish()
