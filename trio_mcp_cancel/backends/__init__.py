"""Backends: what several server processes share (task records, cancellation requests).

:class:`MemoryBackend` (the default) keeps everything in one process.
``trio_mcp_cancel.backends.redis.RedisBackend`` (extra ``redis``) shares it
through Redis, for several workers and nodes; see
:mod:`trio_mcp_cancel._core.backend` for what is local and what is shared.
"""

from __future__ import annotations

from .._core.backend import Backend, BackendUnavailable, CancelBus, LocalBus, MemoryBackend
from .._core.events import BackendEvent
from .._core.tasks import (
    MemoryTaskStore,
    TaskRecord,
    TaskStore,
    TaskStoreFull,
    TaskStoreUnavailable,
)

__all__ = [
    "Backend",
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
