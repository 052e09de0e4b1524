"""One tracked request and the value behind its polled flag.

Kept apart from the registry so that :mod:`.context` (which every tool's
polling loop imports) depends on these types only, never on the registry.
"""

from __future__ import annotations

import math
import weakref

import attrs
import trio

from .events import CancelKind
from .validation import RequestId

__all__ = ["Cancellation", "TrackedRequest"]


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

    @property
    def task_alive(self) -> bool:
        """Whether the task that tracked this request can still untrack it."""
        task = None if self._task is None else self._task()
        return task is not None and getattr(task.coro, "cr_frame", True) is not None
