"""Correct, safe, bounded request cancellation for MCP servers on Trio.

Quick start::

    async with open_registry(grace_period=5) as reg:
        ...
        async with tracked(request):          # in the tool
            for item in work:
                await checkpoint_cancelled()  # raises RequestCancelled
                ...

See README.md for the transports and the full configuration.
"""

from __future__ import annotations

from .context import (
    RequestLike,
    cancelled,
    checkpoint_cancelled,
    current_registry,
    current_request,
    reason,
    tracked,
)
from .errors import (
    REQUEST_CANCELLED,
    CancellationError,
    CancellationLimitReached,
    InvalidRequestId,
    RegistryClosed,
    RequestCancelled,
)
from .events import (
    CancelKind,
    CleanupEvent,
    Event,
    EventHub,
    EvictionEvent,
    HardCancelEvent,
    LimitReachedEvent,
    RequestCancelledEvent,
)
from .registry import (
    USE_CONFIG,
    Cancellation,
    CancelOutcome,
    Registry,
    RegistryConfig,
    TrackedRequest,
    Tracking,
    UseConfig,
    open_registry,
)
from .scope import GLOBAL_SCOPE, client_bucket, scope_for, scope_from_asgi
from .validation import (
    MAX_ID_BYTES,
    RequestId,
    is_valid_request_id,
    sanitize_reason,
    validate_request_id,
)

__version__ = "0.1.0"

__all__ = [
    "GLOBAL_SCOPE",
    "MAX_ID_BYTES",
    "REQUEST_CANCELLED",
    "USE_CONFIG",
    "CancelKind",
    "CancelOutcome",
    "Cancellation",
    "CancellationError",
    "CancellationLimitReached",
    "CleanupEvent",
    "Event",
    "EventHub",
    "EvictionEvent",
    "HardCancelEvent",
    "InvalidRequestId",
    "LimitReachedEvent",
    "Registry",
    "RegistryClosed",
    "RegistryConfig",
    "RequestCancelled",
    "RequestCancelledEvent",
    "RequestId",
    "RequestLike",
    "TrackedRequest",
    "Tracking",
    "UseConfig",
    "cancelled",
    "checkpoint_cancelled",
    "client_bucket",
    "current_registry",
    "current_request",
    "is_valid_request_id",
    "open_registry",
    "reason",
    "sanitize_reason",
    "scope_for",
    "scope_from_asgi",
    "tracked",
    "validate_request_id",
]
