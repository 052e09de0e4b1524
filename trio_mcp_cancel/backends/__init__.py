"""Backends: what several server processes share (task records, cancellation requests).

:class:`MemoryBackend` (the default) keeps everything in one process.
``trio_mcp_cancel.backends.redis.RedisBackend`` (extra ``redis``) shares it
through Redis, for several workers and nodes; see
:mod:`trio_mcp_cancel.backends.base` for what is local and what is shared.
"""

from __future__ import annotations

from .._core.events import BackendEvent
from .._public import fixup_module_metadata
from .base import (
    Backend,
    BackendError,
    BackendUnavailable,
    CancelBus,
    TaskStore,
    TaskStoreFull,
    TaskStoreUnavailable,
)
from .memory import LocalBus, MemoryBackend, MemoryTaskStore
from .task_records import TaskRecord

__all__ = [
    "Backend",
    "BackendError",
    "BackendEvent",
    "BackendUnavailable",
    "CancelBus",
    "LocalBus",
    "MemoryBackend",
    "MemoryTaskStore",
    "TaskRecord",
    "TaskStore",
    "TaskStoreFull",
    "TaskStoreUnavailable",
]


fixup_module_metadata(__name__, __all__, globals())
