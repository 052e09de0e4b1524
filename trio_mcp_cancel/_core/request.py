"""One tracked request and the value behind its polled flag.

Kept apart from the registry so that :mod:`.context` (which every tool's
polling loop imports) depends on these types only, never on the registry.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Callable

import attrs
import trio

from .events import CancelKind, EventHub
from .validation import RequestId

__all__ = ["Cancellation", "TrackedRequest", "set_flag"]


@attrs.frozen
class Cancellation:
    """Why and how a request was cancelled; the value behind the polled flag."""

    reason: str | None
    kind: CancelKind
    at: float


@attrs.define(eq=False, repr=False)
class TrackedRequest:
    """One tracked request: its key, its private token and its cancel scope.

    ``token`` is private: it is assigned here, never derived from or shown to
    the client, so a server-side cancellation keyed to it cannot be seen or
    cleared by another client that shares the namespace and reuses the id.
    """

    request_id: RequestId
    namespace: str
    token: int
    cancel_scope: trio.CancelScope
    started_at: float
    cancellation: Cancellation | None = None
    _task: weakref.ref[trio.lowlevel.Task] | None = None
    hard_deadline: float = math.inf
    """When the hard cancel is (or was) due; ``inf`` while none is armed."""
    overran: bool = False
    """An :class:`~.events.OverrunEvent` was emitted for it."""
    events: EventHub | None = attrs.field(default=None, repr=False)
    """The registry's event hub, for helpers that report on the request
    (an abandoned worker thread, say); ``None`` for a request built by hand."""
    _watchers: list[Callable[[], object]] | None = attrs.field(default=None, repr=False)

    def __repr__(self) -> str:
        state = "cancelled" if self.cancellation is not None else "running"
        return f"<TrackedRequest {self.request_id!r} in {self.namespace!r} {state}>"

    @property
    def cancelled(self) -> bool:
        """The polled flag."""
        return self.cancellation is not None

    @property
    def reason(self) -> str | None:
        return None if self.cancellation is None else self.cancellation.reason

    def on_cancelled(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call *callback* once, synchronously, when the polled flag is set.

        The hook that carries the flag to where the work runs without a
        polling loop: a child process gets its polite signal, a worker
        thread's :class:`threading.Event` is set, a downstream call is
        cancelled, all in the task that set the flag.  Called at once when
        the flag is already set.  The callback must not block or raise (an
        exception is logged and ignored: it must not break the canceller).
        Returns a function that removes the callback; remove it when the
        work ends, so a long request does not collect dead callbacks.
        """
        if self.cancellation is not None:
            _run_watcher(callback)
            return _nothing
        if self._watchers is None:
            self._watchers = []
        watchers = self._watchers
        watchers.append(callback)

        def remove() -> None:
            if callback in watchers:
                watchers.remove(callback)

        return remove

    async def wait_cancelled(self) -> None:
        """Block until the polled flag is set (a checkpoint, even if it already is)."""
        if self.cancellation is not None:
            await trio.lowlevel.checkpoint()
            return
        event = trio.Event()
        remove = self.on_cancelled(event.set)
        try:
            await event.wait()
        finally:
            remove()

    def _fire_watchers(self) -> None:
        """Run the :meth:`on_cancelled` callbacks; the registry calls it once, on the flag."""
        watchers, self._watchers = self._watchers, None
        for callback in watchers or ():
            _run_watcher(callback)

    @property
    def task_alive(self) -> bool:
        """Whether the task that tracked this request can still untrack it."""
        task = None if self._task is None else self._task()
        return task is not None and getattr(task.coro, "cr_frame", True) is not None


_logger = logging.getLogger("trio_mcp_cancel")


def set_flag(request: TrackedRequest, cancellation: Cancellation) -> None:
    """Set *request*'s polled flag, unless set already (the first wins), and run its watchers.

    The registry's half of :meth:`TrackedRequest.on_cancelled` (a function, not
    a method: ``TrackedRequest`` is public, and only the registry flags).
    """
    if request.cancellation is None:
        request.cancellation = cancellation
        if request._watchers:
            request._fire_watchers()


def _nothing() -> None:
    pass


def _run_watcher(callback: Callable[[], object]) -> None:
    try:
        callback()
    except Exception:
        _logger.exception("on_cancelled callback %r raised", callback)
