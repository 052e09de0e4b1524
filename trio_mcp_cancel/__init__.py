"""Correct, safe, bounded request cancellation for MCP servers on Trio.

Quick start::

    async with open_registry(grace_period=5) as reg:
        ...
        async with tracked(request):          # in the tool
            for item in work:
                await checkpoint_cancelled()  # raises RequestCancelled
                ...

The core lives here; the MCP server is in :mod:`trio_mcp_cancel.server`,
the transports in :mod:`.http`, :mod:`.websocket` and :mod:`.stdio`, and the
test helpers in :mod:`.testing`.  See README.md for the configuration.
"""

from __future__ import annotations

from ._core.context import (
    RequestLike,
    cancelled,
    checkpoint_cancelled,
    current_request,
    reason,
)
from ._core.errors import (
    REQUEST_CANCELLED,
    CancellationError,
    CancellationLimitReached,
    InvalidRequestId,
    RegistryClosed,
    RequestCancelled,
)
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
from ._core.namespace import (
    GLOBAL_NAMESPACE,
    client_bucket,
    namespace_for,
    namespace_from_asgi,
)
from ._core.registry import (
    CancelOutcome,
    Registry,
    RegistryConfig,
    current_registry,
    open_registry,
    tracked,
)
from ._core.request import Cancellation, TrackedRequest
from ._core.validation import (
    MAX_ID_BYTES,
    RequestId,
    is_valid_request_id,
    sanitize_reason,
    validate_request_id,
)
from ._work.process import ProcessResult, run_process
from ._work.threads import CancelToken, ThreadLimit, cancel_token, run_sync

__version__ = "0.2.0"

__all__ = [
    "GLOBAL_NAMESPACE",
    "MAX_ID_BYTES",
    "REQUEST_CANCELLED",
    "CancelKind",
    "CancelOutcome",
    "CancelToken",
    "Cancellation",
    "CancellationError",
    "CancellationLimitReached",
    "CleanupEvent",
    "Event",
    "EvictionEvent",
    "HardCancelEvent",
    "InvalidRequestId",
    "LimitReachedEvent",
    "OverrunEvent",
    "ProcessResult",
    "Registry",
    "RegistryClosed",
    "RegistryConfig",
    "RequestCancelled",
    "RequestCancelledEvent",
    "RequestStoppedEvent",
    "RequestId",
    "RequestLike",
    "ThreadAbandonedEvent",
    "ThreadLimit",
    "TrackedRequest",
    "cancel_token",
    "cancelled",
    "checkpoint_cancelled",
    "client_bucket",
    "current_registry",
    "current_request",
    "is_valid_request_id",
    "namespace_for",
    "namespace_from_asgi",
    "open_registry",
    "reason",
    "run_process",
    "run_sync",
    "sanitize_reason",
    "tracked",
    "validate_request_id",
]
