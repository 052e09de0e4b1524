"""One HTTP response's ASGI messages, queued by the request and written by a task of its own.

hypercorn writes to the socket inside a shielded cancel scope: a ``send()``
to a client that stopped reading blocks until the client reads or the
connection closes, and nothing (a cancel, a time limit, shutdown) can
interrupt it; and hypercorn closes the connection only once the
application returned.  So no task that must end on time calls ``send()``:
the request queues its messages here (:meth:`ResponseWriter.put` never
blocks) and :meth:`ResponseWriter.run` writes them, in a task of its own
unless the write cannot block (see :mod:`.inline`).

The queue is the transports' shared :class:`~.._outbox.Outbox`: progress,
log messages and keep-alives are its bounded items, the final message the
unbounded one.  Since a ``send()`` cannot be cancelled, the write deadline
is not a cancel scope around it: while a write is pending,
``outbox.stall_at`` says when the client counts as gone, and the request's
watcher (whose cancel scope is :attr:`ResponseWriter.wakes`) is woken then.

**On demand** (:meth:`ResponseWriter.start`, a call's response): instead of
one task parked on the queue for the response's whole life, a task is
spawned when there is something to write and ends when the queue is
empty.  A suspended call whose client reads its stream (the usual case:
head, progress, then nothing for a while) then holds no writer task, its
coroutine frames and its parking lot (about 2.5 KB of an in-flight
call's heap, issue 27); a keep-alive or a progress message costs a task
spawn instead of a wake-up.  The rules are :meth:`ResponseWriter.run`'s:
same order, same deadline, and ``done`` only once the queue ended.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import trio

from .._outbox import Outbox
from . import hypercorn_compat

__all__ = ["WRITER_TASK", "ResponseWriter", "head", "write_now"]

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: The name of a writer's tasks, as trio would name :meth:`~ResponseWriter.run`'s
#: (given, so that trio does not build one string per task).
WRITER_TASK: Final = f"{__name__}.ResponseWriter.run"


def head(status: int, body: bytes, extra: Any = (), *, json: bool | None = None) -> dict[str, Any]:
    """The ``http.response.start`` of a whole response with *body*."""
    headers = [(b"content-length", str(len(body)).encode()), *extra]
    if json or (json is None and body):
        headers.append((b"content-type", b"application/json"))
    return {"type": "http.response.start", "status": status, "headers": headers}


async def write_now(
    send: Send,
    status: int,
    body: bytes,
    extra: Any = (),
    *,
    json: bool | None = None,
) -> bool:
    """Write a whole response in the calling task; whether it reached the server.

    Only for a write that cannot block (:func:`~.inline.can_write_now`
    said so, which only hypercorn's fast paths do): it needs no writer
    task, no queue and no deadline, and on hypercorn's HTTP/1.1 it is one
    socket write.  A server that raises because the connection is gone is
    a ``False``, as with :meth:`ResponseWriter.run`.
    """
    start = head(status, body, extra, json=json)
    try:
        if await hypercorn_compat.send_whole(send, start, body):
            return True  # in one socket write
        await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": False})
    except Exception:
        return False
    return True


class ResponseWriter:
    """The writes of one response; see the module docstring.

    Its own states are few and one-way: writing (``done`` false), then
    ``done``, with ``abandoned`` set when it gave up before the end (the
    client is gone, the server raised, shutdown); ``stalled`` is the
    request's verdict that the client stopped reading, acted on when the
    request ends (:meth:`abandon`).  What the response as a whole is
    (pending, streaming, finished) is :mod:`.response`'s state machine.
    """

    __slots__ = (
        "_done",
        "_head",
        "_send",
        "_spawn",
        "abandoned",
        "done",
        "fast_paths",
        "outbox",
        "running",
        "stalled",
        "wakes",
    )

    def __init__(self, send: Send, limit: int, fast_paths: bool = True) -> None:
        self._send = send
        self.outbox: Outbox[MutableMapping[str, Any]] = Outbox(limit, None, True)
        self._head: MutableMapping[str, Any] | None = None
        """The response head while its write is pending."""
        self._done: trio.Event | None = None  # made only when somebody waits
        self.fast_paths = fast_paths
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
        if self._head is not None and self.fast_paths:
            hypercorn_compat.mark_head_blocked(self._send, self._head)
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
