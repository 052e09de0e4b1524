"""Resumable legacy SSE streams (SEP-1699): event ids, a bounded replay buffer, reattaching.

In the 2025-11-25 era a client whose SSE stream drops may come back with
``GET`` and ``Last-Event-ID`` and receive what it missed, on that stream
only.  So every SSE stream of a legacy session is a
:class:`ResumableStream`: each event it carries gets an id naming the
stream (``<stream>.<n>``, unique in the session), the stream starts with a
*priming* event (an id, a ``retry`` field, empty data: clients learn where
to resume from before anything else arrives), and it keeps its recent
events in a replay buffer.  The connection that carries the stream (the
POST's response, later a resuming GET's) is *attached*; a dropped
connection *detaches* it, and the events go on into the buffer until a GET
attaches again, which first gets the events after its ``Last-Event-ID``.

**Bounds.**  The buffer keeps at most ``limit`` bytes of events (oldest
dropped first); the final message (the call's answer) is kept apart and
never dropped: it is what a resume is for, and a call produces one.  An
event dropped before it was handed to any connection cannot be replayed:
the stream is then :attr:`~ResumableStream.overflowed`, no resume can be
complete, and the HTTP layer ends the call as a disconnect rather than let
the client wait for a stream with a hole in it.  A resume whose
``Last-Event-ID`` is older than the oldest event held is refused the same
way.  Each session holds one stream per running SSE call (bounded by its
``max_concurrent_calls``) and one standalone GET stream
(:class:`StreamTable`); a stream is removed, and its buffer freed, as soon
as its answer was delivered, or given up.  A client that closes its
connection after the answer was queued on it (hypercorn reports that
``http.disconnect`` while it is still writing the last body) had it
delivered: that is not a dropped connection to keep a replay for.

**The server-wide budget** (:class:`StreamBudget`,
``HttpLimits.max_retained_stream_bytes``).  Per-stream limits alone let
memory grow with the call rate when clients do not read (every unread
answer is held for ``write_timeout`` plus ``resume_window``), so every
stream of an app counts its buffered events and its answer against one
budget.  Over it, the oldest *retired* streams (finished but not
delivered, or a GET stream kept only for a resume) are evicted first: their
connection is dropped, their bytes freed, their answer reported lost,
and a resume of them is ``409`` like any stream the session does not hold.
When nothing is left to evict, the stream that is adding an event keeps
less history (its oldest events are dropped, as at its own limit), and if
its client is behind too it is treated as one that stopped reading (its
connection is dropped with its queue; without a resume the call is
cancelled as a disconnect), so the total never exceeds the budget by more
than one answer.  An attached connection's queue holds the same event
objects as the stream's history (never a copy), and is bounded per
connection by ``max_buffered_bytes``.

**Memory.**  A stream lives as long as its call, suspended calls
included, so it is kept small: the buffer is a list whose dropped head is
cut off in batches (a :class:`~collections.deque` is large even when it
holds one event; the figure is in ``benchmarks/RESULTS.md``), and the
event that wakes waiters for a (de)attach exists only while somebody
waits.

Sans-IO apart from :class:`~.writer.ResponseWriter`'s ``put`` (which never
blocks) and the waits on attach/detach, so every transition runs in the
task that causes it.
"""

from __future__ import annotations

import logging
import secrets
from itertools import islice
from typing import Any, Final

import attrs
import trio

from ..._core.ratelog import RateLimitedLog
from .writer import ResponseWriter

logger = logging.getLogger("trio_mcp_cancel.http")

__all__ = ["ResumableStream", "StreamBudget", "StreamTable", "parse_event_id"]

#: How long a client waits before reconnecting (the SSE ``retry`` field, in ms).
RETRY_MS: Final = 1000
#: Bytes counted per buffered event on top of its own (the deque entry, the tuple).
_EVENT_OVERHEAD: Final = 64


#: Dropped events (``None``) at the buffer's head before it is compacted (and only when
#: they are half of it or more): amortised O(1) per event, as a deque's popleft.
_COMPACT_AT: Final = 32
_GONE: Final = (0, b"")

#: Hex digits of a stream key.
_KEY_LENGTH: Final = 12
_HEX: Final = frozenset("0123456789abcdef")


def parse_event_id(value: str) -> tuple[str, int] | None:
    """``(stream key, sequence number)`` of an event id this module issued, else ``None``
    (so a made-up id is refused at once, never asked about on the bus)."""
    key, dot, seq = value.strip().rpartition(".")
    if len(key) != _KEY_LENGTH or not _HEX.issuperset(key):
        return None
    if not dot or not seq.isascii() or not seq.isdigit() or len(seq) > 18:
        return None
    return key, int(seq)


def _body(data: bytes, final: bool) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": not final}


@attrs.define(eq=False)
class ResumableStream:
    """One SSE stream of a legacy session: its ids, its replay buffer, its connection."""

    key: str
    limit: int
    """Bytes of (non-final) events kept for a resume."""
    standalone: bool = False
    """The session's GET stream (never ends by itself) rather than a call's."""
    seq: int = 0
    """The last sequence number given (0: the priming event's)."""
    events: list[tuple[int, bytes]] = attrs.field(factory=list)
    """The buffer; its first :attr:`dropped` entries were dropped already (not yet cut)."""
    dropped: int = 0
    size: int = 0
    first_held: int = 1
    """The oldest sequence number still in the buffer (or the next one)."""
    written: int = 0
    """The last sequence number handed to a connection."""
    overflowed: bool = False
    """An event was dropped before any connection took it: no resume can be complete."""
    stalled: bool = False
    """Its last connection was dropped for not reading (not closed by its client)."""
    final: tuple[int, bytes] | None = None
    """The last event (the answer, or ``b""``: end without one), once emitted."""
    writer: ResponseWriter | None = None
    """The connection the stream is attached to (``None``: detached)."""
    final_writer: ResponseWriter | None = None
    resumed: bool = False
    """The attached connection is a resume (a GET, here or relayed), not the call's own."""
    handed_over: bool = False
    """Its client closed the connection the final event was queued on: delivered."""
    evicted: bool = False
    """Dropped to keep the server-wide budget (:class:`StreamBudget`): it cannot resume."""
    budget: StreamBudget | None = None
    """The app's budget its bytes count against (``None``: only its own ``limit``)."""
    table: StreamTable | None = None
    """The session's table that holds it (eviction removes it from there)."""
    _changed: trio.Event | None = None
    """Set at the next change; made by the first waiter (most streams never have one)."""

    def event_id(self, seq: int) -> bytes:
        return f"{self.key}.{seq}".encode()

    @property
    def ended(self) -> bool:
        return self.final is not None

    @property
    def delivered(self) -> bool:
        """The final event was written by the connection that took it."""
        writer = self.final_writer
        return writer is not None and (self.handed_over or (writer.done and not writer.abandoned))

    @property
    def bytes_held(self) -> int:
        """Bytes it holds: buffered events (with their overhead) and the final event."""
        final = self.final
        return self.size + (0 if final is None else len(final[1]))

    def _touch(self) -> None:
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()

    async def _wait_changed(self) -> None:
        changed = self._changed
        if changed is None:
            changed = self._changed = trio.Event()
        await changed.wait()

    def held(self) -> islice[tuple[int, bytes]]:
        """The events in the buffer, oldest first."""
        return islice(self.events, self.dropped, None)

    def prime(self) -> bool:
        """Send the priming event (id, ``retry``, empty data) to the attached connection."""
        frame = b"id: " + self.event_id(0) + b"\nretry: %d\ndata:\n\n" % RETRY_MS
        return self.writer is None or self.writer.put(_body(frame, False))

    def emit(self, data: bytes, *, final: bool = False) -> bool:
        """Number, buffer and send one SSE event (``b""`` with *final*: end without one).

        ``False`` when the attached connection refused it (its client is too
        far behind): the caller detaches it.  Never blocks.
        """
        if self.evicted:
            return False
        if data:
            self.seq += 1
            data = b"id: " + self.event_id(self.seq) + b"\n" + data
        seq = self.seq
        if final:
            self.final = (seq, data)
            added = len(data)
        else:
            self.events.append((seq, data))
            added = len(data) + _EVENT_OVERHEAD
            self.size += added
        accepted = True
        writer = self.writer
        if writer is not None:
            accepted = writer.put(_body(data, final), final=final)
            if accepted:
                self.written = seq
                if final:
                    self.final_writer = writer
        # Trimmed once the event was handed over: an event the attached
        # connection took is not lost when the buffer drops it.
        if self.size > self.limit:
            self._drop_oldest(self.limit)
        budget = self.budget
        if budget is not None:
            if final:
                budget.retire(self)
            if not budget.grow(self, added):
                accepted = False  # the budget is spent and its client is behind
        if final:
            self._touch()
        return accepted

    def _drop_oldest(self, keep: int) -> None:
        """Drop the oldest events until the buffer holds at most *keep* bytes (or nothing).

        A dropped entry is replaced by :data:`_GONE` at once, so its bytes are
        freed before the head is cut off.
        """
        events = self.events
        dropped = self.dropped
        freed = 0
        while self.size > keep and dropped < len(events):
            seq, frame = events[dropped]
            events[dropped] = _GONE
            dropped += 1
            self.size -= len(frame) + _EVENT_OVERHEAD
            freed += len(frame) + _EVENT_OVERHEAD
            self.first_held = seq + 1
            if seq > self.written and not self.overflowed:
                self.overflowed = True
                self._touch()
        if dropped >= _COMPACT_AT and dropped * 2 >= len(events):
            del events[:dropped]
            dropped = 0
        self.dropped = dropped
        if freed and self.budget is not None:
            self.budget.shrink(freed)

    def shed(self, excess: int) -> None:
        """Keep *excess* fewer bytes of history (the budget is spent; see the module)."""
        self._drop_oldest(max(0, self.size - excess))

    def keepalive(self, frame: bytes) -> bool:
        """A comment for the attached connection only (never numbered, never replayed)."""
        writer = self.writer
        return writer is None or writer.put(_body(frame, False))

    def can_resume(self, after: int) -> bool:
        """Whether every event after *after* is still held (or was never sent)."""
        if self.overflowed or self.evicted or self.delivered:
            return False  # a delivered answer is never sent twice
        return after <= self.seq and after >= self.first_held - 1

    def resume_in_progress(self) -> bool:
        """Another resume carries the stream now: a second one is refused (``409``), not
        let take it over (the first one's response would end before its head)."""
        writer = self.writer
        return self.resumed and writer is not None and not writer.done

    def attach(self, writer: ResponseWriter, after: int | None = None) -> bool:
        """Carry the stream on *writer* from now on, first replaying what came after *after*.

        *after* ``None``: the connection that started the stream (nothing
        to replay).  A connection still attached is dropped (its client came
        back on a new one).  ``False`` when *writer* refused the replay.
        """
        old = self.writer
        if old is not None and old is not writer:
            _drop(old)
        self.writer = writer
        self.resumed = after is not None
        self.stalled = False
        if self.budget is not None and self.final is None:
            self.budget.unretire(self)  # a GET stream resumed: live again
        self._touch()
        if after is None:
            return True
        for seq, frame in self.held():
            if seq > after:
                if not writer.put(_body(frame, False)):
                    return False
                self.written = max(self.written, seq)
        if self.final is not None:
            seq, frame = self.final
            if not writer.put(_body(frame if seq > after else b"", True), final=True):
                return False
            self.final_writer = writer
        return True

    def end_connection(self) -> bool:
        """End the attached connection's response cleanly, keeping the stream (SEP-1699
        polling: its client reconnects with ``Last-Event-ID``); ``False``: none attached."""
        writer = self.writer
        if writer is None or self.final is not None:
            return False
        self.writer = None
        writer.put(_body(b"", True), final=True)
        self._touch()
        if writer.wakes is not None:
            writer.wakes.cancel()
        return True

    def detach(self, writer: ResponseWriter | None = None) -> None:
        """The attached connection is gone (or *writer*, when it is still the one)."""
        if self.writer is None or (writer is not None and self.writer is not writer):
            return
        _drop(self.writer)
        self.writer = None
        self._touch()

    def disconnected(self, writer: ResponseWriter) -> bool:
        """*writer*'s client closed its connection; ``True`` when that was the delivery.

        A close after the final event was queued on *writer* is the end of
        a delivered response (hypercorn reports it while the last body is
        still being written), not a drop: the writer is left to finish, and
        the stream is released at once (its buffer freed, its events no
        longer resumable), so a delivered answer is held for nobody.  Any
        other close detaches the connection: the stream waits for a resume.
        """
        if self.final_writer is writer and writer is not None:
            self.handed_over = True
            self.writer = None
            self._touch()
            self.release()
            return True
        self.detach(writer)
        return False

    def release(self) -> None:
        """Forget the stream: out of its table, its bytes freed (the budget's too)."""
        table = self.table
        if table is not None:
            table.close(self)
        else:
            self._free()

    def _free(self) -> None:
        held = self.bytes_held
        self.events = []
        self.dropped = self.size = 0
        if self.final is not None:
            self.final = (self.final[0], b"")
        if self.budget is not None:
            self.budget.forget(self, held)

    def evict(self) -> None:
        """Dropped to keep the server-wide budget: its connection ends (the queue is
        dropped with it), waiters wake, a resume is refused, its bytes are freed."""
        self.evicted = True
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.drop()
            if writer.wakes is not None:
                writer.wakes.cancel()
        self.release()
        self._touch()

    async def wait_attached(self, window: float) -> bool:
        """Wait up to *window* seconds for a connection; ``False``: none came (or the
        stream overflowed or was evicted meanwhile, so none could be given everything)."""
        with trio.move_on_after(window):
            while self.writer is None and not self.overflowed and not self.evicted:
                await self._wait_changed()
        return self.writer is not None

    async def wait_detached(self) -> None:
        while self.writer is not None:
            await self._wait_changed()


def _drop(writer: ResponseWriter) -> None:
    """Stop writing on *writer* (its client left, or came back on another connection),
    and wake whoever watches it; a writer that finished is left as it is."""
    if not writer.done:
        writer.abandon()
    if writer.wakes is not None:
        writer.wakes.cancel()


@attrs.define(eq=False)
class StreamTable:
    """The resumable streams of one session: one per running SSE call, and the GET stream."""

    streams: dict[str, ResumableStream] = attrs.field(factory=dict)

    def open(
        self, limit: int, *, standalone: bool = False, budget: StreamBudget | None = None
    ) -> ResumableStream:
        """A new stream whose key is unique in the session (and unguessable: it is not
        a credential, but one client's ids should not name another's streams)."""
        key = secrets.token_hex(_KEY_LENGTH // 2)
        while key in self.streams:
            key = secrets.token_hex(_KEY_LENGTH // 2)
        stream = self.streams[key] = ResumableStream(key, limit, standalone)
        stream.budget = budget
        stream.table = self
        return stream

    def find(self, event_id: str) -> tuple[ResumableStream, int] | None:
        parsed = parse_event_id(event_id)
        if parsed is None:
            return None
        stream = self.streams.get(parsed[0])
        return None if stream is None else (stream, parsed[1])

    def standalone(self) -> ResumableStream | None:
        return next((s for s in self.streams.values() if s.standalone), None)

    def close(self, stream: ResumableStream) -> None:
        """Forget *stream* (delivered, or given up) and free its bytes; its connection,
        if any, is left alone."""
        if self.streams.get(stream.key) is stream:
            del self.streams[stream.key]
            stream.table = None
            stream._free()

    def close_all(self) -> None:
        """The session ended: end its GET stream (its calls' streams end with the calls,
        which the session's end cancels: each answers on its own stream)."""
        for stream in list(self.streams.values()):
            if stream.standalone:
                stream.detach()
                self.close(stream)


@attrs.define(eq=False)
class StreamBudget:
    """Bytes every resumable stream of one app holds, together; see the module docstring.

    Streams report what they add (:meth:`grow`) and drop (:meth:`shrink`,
    :meth:`forget`); a stream that can no longer gain events (finished, or
    a GET stream kept only for a resume) is *retired* and may give its bytes
    back.  Over the limit, oldest retired first: a retired stream nobody is
    connected to, or whose client is behind (events still queued on its
    connection, which hold the same bytes), is evicted; one whose client
    read everything but the answer gives up its history (the answer goes
    on).  Then those are evicted too, oldest first; then the stream adding
    an event sheds its own history, and, when its client is behind (the
    events are queued on its connection as well), counts that client as
    stalled, which drops its connection's queue.  Everything runs in the
    task that changes a stream: no locking, no task of its own.
    """

    limit: int
    held: int = 0
    evictions: int = 0
    """Streams evicted so far (logged, and read by the benchmarks)."""
    _retired: dict[ResumableStream, None] = attrs.field(factory=dict)
    """Retired streams that still hold history or have no connection, oldest first."""
    _bare: dict[ResumableStream, None] = attrs.field(factory=dict)
    """Retired streams reduced to their answer, still being written, oldest first."""
    _log: RateLimitedLog = attrs.field(factory=lambda: RateLimitedLog(logger))

    def retire(self, stream: ResumableStream) -> None:
        self._retired[stream] = None

    def unretire(self, stream: ResumableStream) -> None:
        self._retired.pop(stream, None)
        self._bare.pop(stream, None)

    def grow(self, stream: ResumableStream, size: int) -> bool:
        """*stream* holds *size* more bytes: make room when the budget is exceeded.

        ``False``: nothing else could give room and *stream*'s client is behind
        (its connection holds queued events that shedding history cannot free):
        the caller treats the client as stalled, which drops that queue.
        """
        self.held += size
        if self.held > self.limit:
            return self._make_room(stream)
        return True

    def shrink(self, size: int) -> None:
        self.held -= size

    def forget(self, stream: ResumableStream, held: int) -> None:
        """*stream* was released, with the *held* bytes it still counted."""
        self.held -= held
        self.unretire(stream)

    def _make_room(self, adding: ResumableStream) -> bool:
        """Free bytes in the order of the class docstring (never evicting *adding*)."""
        retired, bare = self._retired, self._bare
        evicted = 0
        # *adding* is retired only while it adds its final event: it is the newest.
        while self.held > self.limit and retired:
            victim = next(iter(retired))
            if victim is adding:
                break
            writer = victim.writer
            if writer is None or writer.outbox.waiting_bounded():
                # Nobody connected, or a client behind on its events: what they
                # hold is queued on its connection too, so only eviction frees it.
                victim.evict()  # forgets it
                evicted += 1
            else:
                victim.shed(victim.size)  # its client read all but the answer, which goes on
                del retired[victim]
                bare[victim] = None
        while self.held > self.limit and bare:
            victim = next(iter(bare))
            if victim is adding:
                break
            victim.evict()
            evicted += 1
        if evicted:
            self.evictions += evicted
            self._log.log(
                logging.WARNING,
                "evicted",
                "resumable streams hold more than %d bytes (max_retained_stream_bytes);"
                " evicted %d unread stream(s), oldest first: their answers are lost",
                self.limit,
                evicted,
            )
        if self.held <= self.limit:
            return True
        adding.shed(self.held - self.limit)
        writer = adding.writer
        return writer is None or not writer.outbox.waiting_bounded()
