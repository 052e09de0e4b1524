"""A bounded queue of writes to one peer: the part every transport's writer shares.

Two writers use it: a message-stream connection's (stdio, WebSocket,
memory: :mod:`._connection`) and an HTTP response's
(:mod:`.http.writer`).  They differ in what they write (encoded JSON-RPC
texts, ASGI messages) and in how a write is cut short (a cancellable
``write``; hypercorn's uncancellable ``send()``), not in the rules, which
live here once:

* **Order.**  Items are written oldest first; the oldest is *in flight*
  from the moment the writer takes it until :meth:`Outbox.written` drops
  it, so it never counts against the bound (one item of any size always
  goes out).
* **The bound.**  An item is *bounded* when the producer can make more of
  them without end (progress, log messages, keep-alives) and *unbounded*
  when there is one per request (a reply, the end of a response).
  :meth:`Outbox.put` refuses a bounded item that would take the bounded
  bytes waiting behind the one in flight past ``limit``; the refusal means
  "the peer is too far behind": the caller treats it as stalled.  An
  unbounded item is always accepted.
* **The write deadline.**  :meth:`Outbox.start_write` says until when the
  peer has to take the oldest item (``timeout`` from now, ``inf`` without
  one); :attr:`Outbox.stall_at` holds it while the write is pending.
* **Lost callbacks.**  An item may carry ``on_lost``, called if the item is
  dropped unwritten (:meth:`Outbox.lose`): a reply's ``Exchange.lost``, so
  an answer that never reached the peer is reported as such.

The queue itself exists only while something is queued (``None`` when
empty): an empty :class:`~collections.deque` is large (the figure is in
``benchmarks/RESULTS.md``), and most of the time a peer that reads has
nothing waiting (an HTTP call suspended in its tool holds one such queue).

Invariants: ``bytes == sum of the sizes queued``; ``bounded_bytes`` is the
part of it in bounded items; once ``closed`` nothing more is accepted;
once ``lost`` the queue is empty and stays empty.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

import trio

__all__ = ["Outbox"]

T = TypeVar("T")


class Outbox(Generic[T]):
    """The queue of one peer's writes; see the module docstring.

    Parameters:
        limit: bytes of bounded items that may wait behind the one in flight.
        timeout: seconds one write may stay pending (``None``: no limit).
        lenient: accept a bounded item whatever its size when no bounded
            bytes wait (an HTTP response's one large progress message); a
            message stream's rule is strict (waiting + size must fit).
    """

    __slots__ = (
        "_items",
        "_wakeup",
        "bounded_bytes",
        "bytes",
        "closed",
        "ending",
        "lenient",
        "limit",
        "lost",
        "stall_at",
        "timeout",
    )

    def __init__(self, limit: int, timeout: float | None = None, lenient: bool = False) -> None:
        self._items: deque[tuple[T, int, bool, Callable[[], object] | None]] | None = None
        self._wakeup: trio.lowlevel.ParkingLot | None = None
        self.limit = limit
        self.timeout = timeout
        self.lenient = lenient
        self.bytes = 0
        """Bytes queued, the item in flight included."""
        self.bounded_bytes = 0
        """Of those, bytes in bounded items."""
        self.closed = False
        """Nothing more is accepted."""
        self.ending = False
        """The writer ends once the queue is empty (instead of waiting for more)."""
        self.lost = False
        """The peer cannot be written to any more: the queue was dropped."""
        self.stall_at = math.inf
        """When the pending write's peer counts as stalled (``inf``: none pending)."""

    def __bool__(self) -> bool:
        return self._items is not None

    def __len__(self) -> int:
        return 0 if self._items is None else len(self._items)

    # -- the producer's side ---------------------------------------------------

    def put(
        self, item: T, size: int, *, bounded: bool, on_lost: Callable[[], object] | None = None
    ) -> bool:
        """Queue *item*; ``False`` when a bounded item does not fit (the peer is stalled).

        A closed outbox takes nothing (and calls *on_lost* at once: the item
        will never be written); that is not a refusal.
        """
        if self.closed:
            if on_lost is not None:
                on_lost()
            return True
        items = self._items
        if items is None:
            items = self._items = deque()
        elif bounded and not self._fits(items, size):
            return False
        items.append((item, size, bounded, on_lost))
        self.bytes += size
        if bounded:
            self.bounded_bytes += size
        if self._wakeup is not None:
            self._wakeup.unpark_all()
        return True

    def waiting_bounded(self) -> int:
        """Bytes of bounded items waiting behind the one in flight (the peer is behind)."""
        items = self._items
        if items is None:
            return 0
        waiting = self.bounded_bytes
        _, head_size, head_bounded, _ = items[0]
        if head_bounded:
            waiting -= head_size  # in flight: never counted
        return waiting

    def _fits(
        self, items: deque[tuple[T, int, bool, Callable[[], object] | None]], size: int
    ) -> bool:
        waiting = self.waiting_bounded()
        if self.lenient and not waiting:
            return True
        return waiting + size <= self.limit

    def backlogged(self) -> bool:
        """More than ``limit`` bytes (of any kind) wait behind the item in flight."""
        items = self._items
        return items is not None and self.bytes - items[0][1] > self.limit

    def close(self) -> None:
        """Accept nothing more; what is queued is still written."""
        self.closed = True

    def end(self) -> None:
        """Accept nothing more, and let the writer end once the queue is written."""
        self.closed = self.ending = True
        if self._wakeup is not None:
            self._wakeup.unpark_all()

    def lose(self) -> None:
        """The peer cannot be written to: drop the queue, calling its lost callbacks."""
        self.closed = self.ending = self.lost = True
        items = self._items or ()
        lost = [on_lost for *_, on_lost in items if on_lost is not None]
        self._items = None
        self.bytes = self.bounded_bytes = 0
        self._wake()
        for on_lost in lost:
            on_lost()

    # -- the writer's side -----------------------------------------------------

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.unpark_all()

    async def wait(self) -> None:
        """Wait until something is queued, or the queue ends (``ending``)."""
        if self._items is not None or self.ending:
            return
        if self._wakeup is None:  # made only when a writer waits: most never do
            self._wakeup = trio.lowlevel.ParkingLot()
        await self._wakeup.park()

    def start_write(self) -> T | None:
        """The oldest item, to write now (``None``: nothing queued); sets :attr:`stall_at`.

        The item stays queued, in flight, until :meth:`written`.
        """
        items = self._items
        if items is None:
            return None
        if self.timeout is not None:
            self.stall_at = trio.current_time() + self.timeout
        return items[0][0]

    def written(self) -> None:
        """The oldest item was written: drop it."""
        self.stall_at = math.inf
        items = self._items
        if items is None:
            return  # lost while it was being written
        _, size, bounded, _ = items.popleft()
        if not items:
            self._items = None
        self.bytes -= size
        if bounded:
            self.bounded_bytes -= size
