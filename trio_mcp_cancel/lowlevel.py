"""What transport authors, and code that needs the machinery, use (like ``trio.lowlevel``).

A tool author needs none of this: the root package and
:mod:`trio_mcp_cancel.server` cover writing and serving tools.  Here are the
pieces a transport is built from (the :class:`Dispatcher` of a server, which
a transport takes as anything :class:`Served`, with its :class:`Registration`; the
typed call states it classifies messages into, a :class:`Caller` and an
:class:`Exchange`), the server's runtime services (:class:`ServerRuntime`,
``server.dispatcher.runtime``: its task manager, subscription hub and
used MRTR states), the registry's lower-level types and helpers (request ids,
namespaces, the thread token; :func:`track` / :func:`untrack` for code that
cannot use ``async with tracked(...)``, and :class:`Tracking` built directly
for an id checked once already), the task manager, the bounds of resource
subscriptions (:class:`SubscriptionLimits`), the protocol constants, and
multi round-trip requests by hand (a tool returning :class:`InputRequired`
built with :func:`elicit`, :func:`sample`, :func:`list_roots`, for a tool
that keeps its own state between rounds instead of ``await ctx.elicit``).
Stable, but expect to read the source next to them.
"""

from __future__ import annotations

from ._core.context import RequestLike, current_request, reason
from ._core.errors import REQUEST_CANCELLED, CancellationError, InvalidRequestId
from ._core.events import EventHub
from ._core.namespace import GLOBAL_NAMESPACE, client_bucket, namespace_for, namespace_from_asgi
from ._core.registry import (
    USE_CONFIG,
    CancelOutcome,
    Tracking,
    UseConfig,
    current_registry,
    track,
    untrack,
)
from ._core.request import Cancellation, TrackedRequest
from ._core.validation import (
    MAX_ID_BYTES,
    ValidRequestId,
    is_valid_request_id,
    sanitize_reason,
    validate_request_id,
)
from ._protocol.admission import too_many_requests_code
from ._protocol.calls import (
    Call,
    ClientResponseCall,
    HandlerInput,
    NotificationCall,
    Rejected,
    RequestCall,
)
from ._protocol.content import Content
from ._protocol.dispatcher import Dispatcher, Served
from ._protocol.exchange import Caller, Channel, Exchange, LegacyState
from ._protocol.jsonrpc import JsonRpcError
from ._protocol.lifespan import LifespanFailed
from ._protocol.mrtr import InputRequired, StateSigner, elicit, list_roots, sample
from ._protocol.registration import OnCancel, Registration
from ._protocol.runtime import ServerRuntime
from ._protocol.subscriptions import SubscriptionLimits
from ._protocol.tasks import TaskManager
from ._protocol.tools import TaskSupport, Tool
from ._protocol.versions import (
    LATEST_LEGACY_VERSION,
    LATEST_VERSION,
    LEGACY_VERSIONS,
    MODERN_VERSIONS,
    Envelope,
    Era,
)
from ._protocol.wire import LEGACY_TOO_MANY_REQUESTS, TASKS_EXTENSION, TOO_MANY_REQUESTS
from ._public import fixup_module_metadata
from ._work.threads import CancelToken, ThreadLimit

__all__ = [
    "GLOBAL_NAMESPACE",
    "LATEST_LEGACY_VERSION",
    "LATEST_VERSION",
    "LEGACY_TOO_MANY_REQUESTS",
    "LEGACY_VERSIONS",
    "MAX_ID_BYTES",
    "MODERN_VERSIONS",
    "REQUEST_CANCELLED",
    "TASKS_EXTENSION",
    "TOO_MANY_REQUESTS",
    "USE_CONFIG",
    "Call",
    "CancelOutcome",
    "CancelToken",
    "Cancellation",
    "CancellationError",
    "Caller",
    "Channel",
    "ClientResponseCall",
    "Content",
    "Dispatcher",
    "Envelope",
    "Era",
    "EventHub",
    "Exchange",
    "HandlerInput",
    "InputRequired",
    "InvalidRequestId",
    "JsonRpcError",
    "LifespanFailed",
    "LegacyState",
    "NotificationCall",
    "OnCancel",
    "Rejected",
    "RequestCall",
    "Registration",
    "RequestLike",
    "Served",
    "ServerRuntime",
    "StateSigner",
    "SubscriptionLimits",
    "TaskManager",
    "TaskSupport",
    "ThreadLimit",
    "Tool",
    "TrackedRequest",
    "Tracking",
    "UseConfig",
    "ValidRequestId",
    "client_bucket",
    "current_registry",
    "current_request",
    "elicit",
    "is_valid_request_id",
    "list_roots",
    "namespace_for",
    "namespace_from_asgi",
    "reason",
    "sanitize_reason",
    "sample",
    "too_many_requests_code",
    "track",
    "untrack",
    "validate_request_id",
]

fixup_module_metadata(__name__, __all__, globals())
