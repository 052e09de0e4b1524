"""Blocking code in worker threads: the polled flag reaches them, the hard cancel abandons them.

A thread cannot be cancelled, only asked to stop.  :func:`run_sync` runs a
function in a Trio worker thread bound to the current request:

* the flag is visible from the thread: :func:`cancelled` works there (Trio
  copies the request's context into the thread), and :func:`cancel_token`
  returns a :class:`CancelToken` whose :meth:`~CancelToken.wait` blocks the
  thread until the flag is set, instead of a ``time.sleep`` poll;
* at the hard cancel the thread is abandoned the Trio way
  (``abandon_on_cancel=True``): the request ends on time, and the thread,
  which Python cannot stop, is left to finish on its own; a
  :class:`~.events.ThreadAbandonedEvent` records it, because a thread that
  ignores the flag keeps its CPU, its memory and its slot in its thread
  limiter until it returns.

That last point is why sync tools do not use Trio's default limiter: a tool
whose abandoned threads pile up would take every slot, and with them every
other sync tool, and Trio's own users of the default limiter (DNS lookups,
``trio.Path``).  :class:`ThreadLimit` gives a server (and, when asked, one
tool) a limiter of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import TypeVar, cast

import trio
from trio.lowlevel import RunVar

from .._core.context import current_request
from .._core.errors import RequestCancelled
from .._core.events import EventHub, ThreadAbandonedEvent
from .._core.request import TrackedRequest

__all__ = ["CancelToken", "ThreadLimit", "cancel_token", "run_sync"]

T = TypeVar("T")

_current_token: ContextVar[CancelToken] = ContextVar("trio_mcp_cancel.cancel_token")


class CancelToken:
    """A thread-safe view of one request's polled flag, for blocking code.

    Reading the flag is one attribute read, safe from any thread; the
    :class:`threading.Event` behind :meth:`wait` is set from the Trio thread
    through :meth:`TrackedRequest.on_cancelled`, the moment the flag is.
    """

    __slots__ = ("_event", "_remove", "request")

    def __init__(self, request: TrackedRequest) -> None:
        """Create it in the Trio thread (it registers its hook there)."""
        self.request = request
        self._event = threading.Event()
        self._remove = request.on_cancelled(self._event.set)

    @property
    def cancelled(self) -> bool:
        """The polled flag."""
        return self.request.cancellation is not None

    @property
    def reason(self) -> str | None:
        return self.request.reason

    def raise_if_cancelled(self) -> None:
        """Raise :class:`RequestCancelled` once the flag is set: the sync ``checkpoint``."""
        cancellation = self.request.cancellation
        if cancellation is not None:
            raise RequestCancelled(cancellation.reason, cancellation.kind)

    def wait(self, timeout: float | None = None) -> bool:
        """Block the calling thread until the flag is set or *timeout* passes.

        Returns whether the flag is set.  Never call it from the Trio thread.
        """
        return self._event.wait(timeout)

    def close(self) -> None:
        """Unregister the hook (from the Trio thread); the flag stays readable."""
        self._remove()


class ThreadLimit:
    """How many worker threads a server's sync tools (or one tool's) may hold at once.

    Given a number, the :class:`trio.CapacityLimiter` is made on first use
    in each Trio run: a server object outlives a run (tests run many), and
    a thread abandoned in a run that has ended never gives its slot back.
    Given a ``CapacityLimiter``, that one is used as is (share it between
    tools, or with your own ``run_sync`` calls, deliberately).

    Threads abandoned at a hard cancel keep their slots until they return:
    size the limit for the stuck threads you tolerate, and watch
    ``thread.abandoned`` events.
    """

    __slots__ = ("_fixed", "_per_run", "total")

    def __init__(self, limit: int | trio.CapacityLimiter) -> None:
        if isinstance(limit, trio.CapacityLimiter):
            self._fixed: trio.CapacityLimiter | None = limit
            self.total = limit.total_tokens
        elif isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1:
            self._fixed = None
            self.total = limit
        else:
            raise ValueError(f"a thread limit is an int >= 1 or a trio.CapacityLimiter: {limit!r}")
        self._per_run: RunVar[trio.CapacityLimiter] = RunVar("trio_mcp_cancel.thread_limit")

    @property
    def limiter(self) -> trio.CapacityLimiter:
        """This run's limiter (call it inside ``trio.run``)."""
        if self._fixed is not None:
            return self._fixed
        try:
            return self._per_run.get()
        except LookupError:
            limiter = trio.CapacityLimiter(self.total)
            self._per_run.set(limiter)
            return limiter

    def __repr__(self) -> str:
        return f"ThreadLimit({self.total})"


class _Slot:
    """A limiter as Trio's ``to_thread`` uses it (Trio documents any object
    with these two methods as a limiter).

    It notes whether the slot was acquired (once it is, a thread runs), and
    a call that has to *wait* for a slot stops waiting when its request is
    flagged, with :class:`RequestCancelled`: a queued call has no work to
    stop politely, so it ends at once instead of at the hard cancel.  A free
    slot is taken even when the flag is set, so the thread can see it.
    """

    __slots__ = ("acquired", "limiter", "request")

    def __init__(self, limiter: trio.CapacityLimiter, request: TrackedRequest | None) -> None:
        self.limiter = limiter
        self.request = request
        self.acquired = False

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        try:
            self.limiter.acquire_on_behalf_of_nowait(borrower)
        except trio.WouldBlock:
            if self.request is None:
                await self.limiter.acquire_on_behalf_of(borrower)
            else:
                await self._wait_unless_flagged(self.request, borrower)
        else:
            try:
                await trio.lowlevel.checkpoint()
            except BaseException:
                self.limiter.release_on_behalf_of(borrower)
                raise
        self.acquired = True

    async def _wait_unless_flagged(self, request: TrackedRequest, borrower: object) -> None:
        with trio.CancelScope() as waiting:
            remove = request.on_cancelled(waiting.cancel)
            try:
                await self.limiter.acquire_on_behalf_of(borrower)
            finally:
                remove()
        if waiting.cancelled_caught:
            cancellation = request.cancellation
            assert cancellation is not None
            raise RequestCancelled(cancellation.reason, cancellation.kind)

    def release_on_behalf_of(self, borrower: object) -> None:
        self.limiter.release_on_behalf_of(borrower)


def cancel_token() -> CancelToken:
    """The :class:`CancelToken` of the worker thread :func:`run_sync` is running.

    Raises :class:`RuntimeError` outside such a thread.
    """
    token = _current_token.get(None)
    if token is None:
        raise RuntimeError("cancel_token() works in threads started by run_sync()")
    return token


async def run_sync(
    fn: Callable[..., T],
    *args: object,
    request: TrackedRequest | None = None,
    events: EventHub | None = None,
    limiter: trio.CapacityLimiter | None = None,
    thread_name: str | None = None,
) -> T:
    """Run ``fn(*args)`` in a worker thread bound to the current request.

    In the thread, :func:`cancelled` and :func:`cancel_token` see the
    request; ``fn`` stops cooperatively by returning or by raising
    :class:`RequestCancelled` (``cancel_token().raise_if_cancelled()``),
    which comes out of ``run_sync`` as itself.  When the hard cancel comes
    first, ``run_sync`` raises ``trio.Cancelled`` at once and the thread is
    abandoned; *events* (default: the request's registry's) gets a
    :class:`ThreadAbandonedEvent`.  A call that has to wait for a slot of
    *limiter* (default: Trio's) stops waiting when the flag is set, with
    :class:`RequestCancelled`.  Outside a tracked request it is
    ``trio.to_thread.run_sync(..., abandon_on_cancel=True)`` plus the event.
    """
    if request is None:
        request = current_request(None)
    if events is None and request is not None:
        events = request.events
    token = None if request is None else CancelToken(request)
    slot = _Slot(limiter or trio.to_thread.current_default_thread_limiter(), request)
    finished = threading.Event()

    def in_thread() -> T:
        reset = None if token is None else _current_token.set(token)
        try:
            return fn(*args)
        finally:
            if reset is not None:
                _current_token.reset(reset)
            finished.set()

    name = thread_name or f"trio_mcp_cancel: {getattr(fn, '__qualname__', repr(fn))}"[:200]
    try:
        return await trio.to_thread.run_sync(
            in_thread,
            abandon_on_cancel=True,
            limiter=cast(trio.CapacityLimiter, slot),
            thread_name=name,
        )
    except trio.Cancelled:
        # Cancelled while waiting for a limiter slot: no thread to abandon.
        if slot.acquired and not finished.is_set() and events is not None:
            cancellation = None if request is None else request.cancellation
            events.emit(
                ThreadAbandonedEvent(
                    None if request is None else request.request_id,
                    None if request is None else request.namespace,
                    "server" if cancellation is None else cancellation.kind,
                    name,
                )
            )
        raise
    finally:
        if token is not None:
            token.close()
