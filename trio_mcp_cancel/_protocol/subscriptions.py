"""``subscriptions/listen``: the modern era's notification stream, and its fan-out.

A client opens a listen request naming what it wants (``toolsListChanged``,
``promptsListChanged``, ``resourcesListChanged``, ``resourceSubscriptions``,
and with the Tasks extension ``taskIds``: ``notifications/tasks`` whenever
one of its tasks changes status);
the server first acknowledges what it accepted
(``notifications/subscriptions/acknowledged``), then sends each matching
notification tagged with ``_meta["io.modelcontextprotocol/subscriptionId"]``.
It is an ordinary tracked request, so it ends the way any request is
cancelled: the client closes its HTTP stream, or sends
``notifications/cancelled`` on stdio (and nothing more is sent after either),
or the server shuts down.

The :class:`SubscriptionHub` never blocks a publisher: each listener has a
bounded queue, and one that falls too far behind is ended (with a complete
result, so the client knows to re-list) instead of buffering without bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import trio

from .jsonrpc import INVALID_PARAMS, JsonRpcError
from .wire import META_SUBSCRIPTION_ID

__all__ = [
    "FORWARDED",
    "MAX_SUBSCRIPTIONS",
    "META_SUBSCRIPTION_ID",
    "Filter",
    "LegacyFilter",
    "Listener",
    "SubscriptionHub",
    "read_filter",
]

_LIST_CHANGED: Final = {
    "toolsListChanged": "notifications/tools/list_changed",
    "promptsListChanged": "notifications/prompts/list_changed",
    "resourcesListChanged": "notifications/resources/list_changed",
}
#: Resource URIs one listen request, or one legacy session, may subscribe to.
MAX_SUBSCRIPTIONS: Final = 1000
_MAX_URIS: Final = MAX_SUBSCRIPTIONS
#: What other server processes are told about (task changes travel with the tasks).
FORWARDED: Final = frozenset({*_LIST_CHANGED.values(), "notifications/resources/updated"})


@attrs.frozen
class Filter:
    """What one listener asked for (and was granted)."""

    methods: frozenset[str] = frozenset()
    resource_uris: frozenset[str] = frozenset()
    task_ids: frozenset[str] = frozenset()

    def wants(self, method: str, key: str | None) -> bool:
        """*key*: the notification's ``uri`` (resources) or ``taskId`` (tasks)."""
        if method == "notifications/resources/updated":
            return key is not None and key in self.resource_uris
        if method == "notifications/tasks":
            return key is not None and key in self.task_ids
        return method in self.methods

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            key: True for key, method in _LIST_CHANGED.items() if method in self.methods
        }
        if self.resource_uris:
            wire["resourceSubscriptions"] = sorted(self.resource_uris)
        if self.task_ids:
            wire["taskIds"] = sorted(self.task_ids)
        return wire


@attrs.frozen
class LegacyFilter:
    """A legacy session's GET stream: every list change, and the URIs it subscribed to.

    *uris* is the session's own set (``resources/subscribe`` changes it), read
    at each publish, so a subscription applies to the open stream at once.
    """

    uris: set[str]

    def wants(self, method: str, key: str | None) -> bool:
        if method == "notifications/resources/updated":
            return key is not None and key in self.uris
        return method in _LIST_CHANGED.values()


def read_filter(params: Mapping[str, Any], supported: frozenset[str]) -> Filter:
    """The granted part of a listen request's ``notifications`` (``-32602`` when malformed).

    *supported* names the filter keys this server can deliver; a request for
    anything else is simply not granted (the acknowledgement says so).
    """
    wanted = params.get("notifications")
    if not isinstance(wanted, dict):
        raise JsonRpcError(INVALID_PARAMS, "Invalid params: notifications must be an object")
    methods = frozenset(
        method
        for key, method in _LIST_CHANGED.items()
        if wanted.get(key) is True and key in supported
    )
    granted = _granted_strings(wanted, "resourceSubscriptions", "resource URIs", supported)
    tasks = _granted_strings(wanted, "taskIds", "task ids", supported)
    return Filter(methods, granted, tasks)


def _granted_strings(
    wanted: Mapping[str, Any], key: str, what: str, supported: frozenset[str]
) -> frozenset[str]:
    """The strings under *key* (bounded; ``-32602`` when malformed), none if unsupported."""
    values = wanted.get(key, [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise JsonRpcError(INVALID_PARAMS, f"Invalid params: {key} must be strings")
    if len(values) > _MAX_URIS:
        raise JsonRpcError(INVALID_PARAMS, f"Invalid params: at most {_MAX_URIS} {what}")
    return frozenset(values) if key in supported else frozenset()


@attrs.define(eq=False)
class Listener:
    """One open listen stream's queue (or a legacy session's GET stream's)."""

    filter: Filter | LegacyFilter
    send: trio.MemorySendChannel[dict[str, Any]]
    receive: trio.MemoryReceiveChannel[dict[str, Any]]
    overflowed: bool = False


@attrs.define(eq=False)
class SubscriptionHub:
    """Fans server notifications out to the listen streams that asked for them."""

    queue_size: int = 64
    listeners: set[Listener] = attrs.field(factory=set)
    forward: Callable[[str, Mapping[str, Any] | None], object] | None = None
    """Also hands every list change and resource update to other server processes
    (set by an HTTP app with a shared backend; must not block)."""

    def open(self, filter: Filter | LegacyFilter) -> Listener:
        send, receive = trio.open_memory_channel[dict[str, Any]](self.queue_size)
        listener = Listener(filter, send, receive)
        self.listeners.add(listener)
        return listener

    def close(self, listener: Listener) -> None:
        self.listeners.discard(listener)
        listener.send.close()
        listener.receive.close()

    def publish(
        self, method: str, params: Mapping[str, Any] | None = None, *, forwarded: bool = False
    ) -> int:
        """Queue a notification for every listener that wants it; never blocks.

        Returns how many listeners got it.  A listener whose queue is full is
        marked overflowed (its stream then ends).  *forwarded*: it came from
        another process (so it is not handed on again).
        """
        if self.forward is not None and not forwarded and method in FORWARDED:
            self.forward(method, params)
        key = None
        if params is not None:
            key = params.get("taskId" if method == "notifications/tasks" else "uri")
        delivered = 0
        for listener in list(self.listeners):
            if listener.overflowed or not listener.filter.wants(method, key):
                continue
            message: dict[str, Any] = {"method": method, "params": dict(params or {})}
            try:
                listener.send.send_nowait(message)
                delivered += 1
            except trio.WouldBlock:
                listener.overflowed = True
                listener.send.close()  # wakes its stream, which then ends
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                self.listeners.discard(listener)
        return delivered
