"""What transport authors, and code that needs the machinery, use (like ``trio.lowlevel``).

A tool or server author needs none of this: the root package and
:mod:`trio_mcp_cancel.server` cover writing and serving tools.  Here are:

* the pieces a transport is built from: the :class:`Dispatcher` of a
  server (a transport takes anything :class:`Served`, with its
  :class:`Registration`), the typed call states it classifies messages
  into (:data:`Call`: :class:`RequestCall`, :class:`NotificationCall`,
  :class:`ClientResponseCall`, :class:`Rejected`), who calls and what they
  hold open (:class:`Caller`, :class:`Channel`, :class:`Exchange`), and the
  error a handler raises (:class:`JsonRpcError`);
* the registry below ``tracked()``: :func:`track` / :func:`untrack` for
  code that cannot use ``async with tracked(...)``, :class:`Tracking` built
  directly for an id checked once already (:func:`validate_request_id`,
  which raises :class:`InvalidRequestId`), the tracked request and its
  :class:`Cancellation`, what ``notify_cancelled`` reports
  (:class:`CancelOutcome`), the registry's :class:`EventHub`, the thread
  token and limit, and the namespaces a transport keys requests by;
* two settings objects a server rarely changes: :class:`SubscriptionLimits`
  (``ServerLimits(subscriptions=...)``) and :class:`TaskManager`
  (``McpServer(tasks=...)``).

The protocol's constants (versions, error codes, ``_meta`` keys, headers)
are in :mod:`trio_mcp_cancel.lowlevel.wire`.  Stable, but expect to read
the source next to them.
"""

from __future__ import annotations

from .._core.context import current_request
from .._core.errors import InvalidRequestId
from .._core.events import EventHub
from .._core.namespace import namespace_for, namespace_from_asgi
from .._core.registry import CancelOutcome, Tracking, current_registry, track, untrack
from .._core.request import Cancellation, TrackedRequest
from .._core.validation import validate_request_id
from .._protocol.calls import (
    Call,
    ClientResponseCall,
    NotificationCall,
    Rejected,
    RequestCall,
)
from .._protocol.dispatcher import Dispatcher, Served
from .._protocol.exchange import Caller, Channel, Exchange
from .._protocol.lifespan import LifespanFailed
from .._protocol.registration import Registration
from .._protocol.subscriptions import SubscriptionLimits
from .._public import fixup_module_metadata
from .._tasks import TaskManager
from .._wire.jsonrpc import JsonRpcError
from .._work.threads import CancelToken, ThreadLimit

__all__ = [
    "LifespanFailed",
    "Call",
    "CancelOutcome",
    "CancelToken",
    "Cancellation",
    "Caller",
    "Channel",
    "ClientResponseCall",
    "Dispatcher",
    "EventHub",
    "Exchange",
    "InvalidRequestId",
    "JsonRpcError",
    "NotificationCall",
    "Registration",
    "Rejected",
    "RequestCall",
    "Served",
    "SubscriptionLimits",
    "TaskManager",
    "ThreadLimit",
    "TrackedRequest",
    "Tracking",
    "current_registry",
    "current_request",
    "namespace_for",
    "namespace_from_asgi",
    "track",
    "untrack",
    "validate_request_id",
]

fixup_module_metadata(__name__, __all__, globals())
