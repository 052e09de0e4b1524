"""Correct, safe, bounded request cancellation for MCP servers on Trio.

Quick start::

    async with open_registry(grace_period=5) as reg:
        ...
        async with tracked(request):          # in the tool
            for item in work:
                await checkpoint_cancelled()  # raises RequestCancelled
                ...

This module is what a tool author needs: track a request, poll its flag
(``await checkpoint_cancelled()``, or ``cancelled()`` for a boolean; in a
sync tool's thread ``cancel_token()``), carry the cancellation into threads
and child processes, and read the events.
The MCP server is in :mod:`trio_mcp_cancel.server`, the transports in
:mod:`.http`, :mod:`.websocket` and :mod:`.stdio`, the test helpers in
:mod:`.testing`, and what transport authors need in :mod:`.lowlevel`.
"""

from __future__ import annotations

from ._core.context import cancelled, checkpoint_cancelled
from ._core.errors import CancellationLimitReached, NoRegistry, RegistryClosed, RequestCancelled
from ._core.events import (
    CancelKind,
    CleanupEvent,
    Event,
    EvictionEvent,
    HardCancelEvent,
    LimitReachedEvent,
    OverrunEvent,
    RequestCancelledEvent,
    RequestStoppedEvent,
    ThreadAbandonedEvent,
)
from ._core.registry import Registry, RegistryConfig, open_registry, tracked
from ._core.validation import RequestId
from ._public import fixup_module_metadata
from ._work.process import run_process
from ._work.threads import cancel_token, run_sync

__version__ = "0.2.0"

__all__ = [
    "CancelKind",
    "CancellationLimitReached",
    "CleanupEvent",
    "Event",
    "EvictionEvent",
    "HardCancelEvent",
    "LimitReachedEvent",
    "NoRegistry",
    "OverrunEvent",
    "Registry",
    "RegistryClosed",
    "RegistryConfig",
    "RequestCancelled",
    "RequestCancelledEvent",
    "RequestId",
    "RequestStoppedEvent",
    "ThreadAbandonedEvent",
    "cancel_token",
    "cancelled",
    "checkpoint_cancelled",
    "open_registry",
    "run_process",
    "run_sync",
    "tracked",
]

fixup_module_metadata(__name__, __all__, globals())
