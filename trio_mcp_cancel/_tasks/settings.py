"""What the task manager's pieces read from it: its settings and its backend.

The pieces (:mod:`.admission`, :mod:`.runner`,
:mod:`.requests`, :mod:`.watch`, :mod:`.status`) hold the
manager as a :class:`TaskSettings` and read these attributes each time
rather than copying them: ``TaskManager.run`` swaps in a backend's store,
bus and counters, and an application (or a test) may set ``store`` or
``ttl_ms`` after construction.  A protocol, so that no piece imports the
manager's module and the manager's module imports every piece.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..backends.base import CancelBus, SharedCounters, TaskStore

__all__ = ["TaskSettings"]


class TaskSettings(Protocol):
    """The fields of :class:`~.tasks.TaskManager`, documented there."""

    ttl_ms: int | None
    poll_interval_ms: int
    max_running: int
    max_running_per_owner: int
    max_tasks_per_owner: int | None
    purge_interval: float
    progress_interval: float
    cancel_poll_interval: float
    store: TaskStore
    bus: CancelBus
    counters: SharedCounters
    on_change: Callable[[dict[str, Any]], object] | None
    instance_id: str
