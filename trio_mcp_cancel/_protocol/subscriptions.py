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

What subscriptions hold is bounded in bytes, not only in count
(:class:`SubscriptionLimits`, ``ServerLimits(subscriptions=...)``): a
resource URI's length, the URIs of one legacy session
(``resources/subscribe``) or one listen stream, and what every session and
stream of a tenant, and of the whole server, hold together
(:class:`SubscriptionBytes`, one per server, in its runtime).  A URI costs
its UTF-8 length plus :data:`URI_OVERHEAD`, what Python spends keeping it,
so a flood of short URIs counts too.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Container, Mapping
from typing import Any, Final

import attrs
import trio

from .._wire.jsonrpc import INVALID_PARAMS, JsonRpcError
from .._wire.names import META_SUBSCRIPTION_ID, Era
from .admission import SubscriptionLimit, too_many_subscribed_bytes

__all__ = [
    "DEFAULT_SUBSCRIPTION_LIMITS",
    "FORWARDED",
    "MAX_SUBSCRIPTIONS",
    "META_SUBSCRIPTION_ID",
    "URI_OVERHEAD",
    "Filter",
    "LegacyFilter",
    "Listener",
    "ResourceSubscriptions",
    "SubscriptionBytes",
    "SubscriptionHub",
    "SubscriptionLimits",
    "check_uri",
    "listen_bytes",
    "read_filter",
    "uri_bytes",
]

_LIST_CHANGED: Final = {
    "toolsListChanged": "notifications/tools/list_changed",
    "promptsListChanged": "notifications/prompts/list_changed",
    "resourcesListChanged": "notifications/resources/list_changed",
}
#: Resource URIs one listen request, or one legacy session, may subscribe to, by default.
MAX_SUBSCRIPTIONS: Final = 1000
#: Bytes counted for each subscribed URI besides its own: the ``str`` object's
#: header and its slot in a set, roughly, so a thousand one-byte URIs cost
#: what they hold.
URI_OVERHEAD: Final = 96
#: What other server processes are told about (task changes travel with the tasks).
FORWARDED: Final = frozenset({*_LIST_CHANGED.values(), "notifications/resources/updated"})


def _at_least_one(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be an int >= 1, not {value!r}")


@attrs.frozen(kw_only=True)
class SubscriptionLimits:
    """What resource subscriptions may hold, in bytes as well as in URIs.

    A URI is counted as its UTF-8 length plus :data:`URI_OVERHEAD`.  Over
    ``max_uri_bytes`` or ``max_uris`` a request is malformed (``-32602``);
    over a byte budget it is refused like any admission limit (``-32001``,
    ``data.limit`` naming the budget, ``data.max`` its size; a listen stream
    over the tenant's or server's budget is HTTP ``429``), and unsubscribing
    or closing a listen stream gives the bytes back.  The defaults hold a
    thousand ordinary URIs per session; raise them for trusted clients that
    need more.
    """

    max_uri_bytes: int = attrs.field(default=4096, validator=_at_least_one)
    """UTF-8 bytes of one resource URI given to ``resources/subscribe`` or
    ``subscriptions/listen``; longer is ``-32602``.  Resource URIs are names,
    far shorter than this; without a bound, 120 URIs of 900 KB held 107 MB."""
    max_uris: int = attrs.field(default=MAX_SUBSCRIPTIONS, validator=_at_least_one)
    """URIs one legacy session subscribes to, or one listen request names;
    more is ``-32602``."""
    max_bytes_per_session: int = attrs.field(default=256 * 1024, validator=_at_least_one)
    """Bytes of the URIs one legacy session subscribes to (``data.limit``
    ``"subscription_bytes_session"``), or one listen request names (more is
    ``-32602``: the request alone is too large).  256 KiB holds ``max_uris``
    URIs of 160 bytes."""
    max_bytes_per_tenant: int = attrs.field(default=4 << 20, validator=_at_least_one)
    """Bytes every session and listen stream of one tenant (a principal, or a
    client address bucket) hold together (``"subscription_bytes_tenant"``),
    so one tenant's hundred sessions cannot each fill their own budget."""
    max_bytes: int = attrs.field(default=64 << 20, validator=_at_least_one)
    """Bytes all subscriptions of the server hold together
    (``"subscription_bytes_server"``): memory that never grows with the
    number of tenants."""


#: The defaults, shared (the object is frozen).
DEFAULT_SUBSCRIPTION_LIMITS: Final = SubscriptionLimits()


def _utf8_length(uri: str) -> int:
    return len(uri) if uri.isascii() else len(uri.encode("utf-8", "surrogatepass"))


def uri_bytes(uri: str) -> int:
    """What holding *uri* costs against the budgets: its UTF-8 length plus the overhead."""
    return _utf8_length(uri) + URI_OVERHEAD


def listen_bytes(params: Mapping[str, Any]) -> int:
    """What a listen request's ``resourceSubscriptions`` hold (checked by :func:`read_filter`)."""
    wanted = params.get("notifications")
    uris = wanted.get("resourceSubscriptions") if isinstance(wanted, dict) else None
    if not isinstance(uris, list):
        return 0
    return sum(uri_bytes(uri) for uri in uris if isinstance(uri, str))


@attrs.define(eq=False)
class SubscriptionBytes:
    """The bytes of subscribed URIs held, server-wide and per tenant (one per server).

    Taken by a legacy session's :class:`ResourceSubscriptions` and by each
    open listen stream, given back when they unsubscribe, end or close.
    *tenant* ``None`` (stdio, tests) is counted in the total only.
    :meth:`take` and :meth:`give` allocate no container, so a garbage
    collection (and with it a dropped session's finalizer, which gives) never
    runs in the middle of one.
    """

    held: int = 0
    by_tenant: dict[str, int] = attrs.field(factory=dict)

    def refusal(
        self, tenant: str | None, size: int, limits: SubscriptionLimits, era: Era
    ) -> JsonRpcError | None:
        """Why *size* more bytes for *tenant* would exceed a budget, if they would.

        *era* picks the refusal's code: a listen stream is modern, a
        ``resources/subscribe`` legacy.
        """
        limit: SubscriptionLimit
        tenant_held = 0 if tenant is None else self.by_tenant.get(tenant, 0)
        if tenant is not None and tenant_held + size > limits.max_bytes_per_tenant:
            limit, cap = "subscription_bytes_tenant", limits.max_bytes_per_tenant
        elif self.held + size > limits.max_bytes:
            limit, cap = "subscription_bytes_server", limits.max_bytes
        else:
            return None
        return too_many_subscribed_bytes(era, limit, cap)

    def take(self, tenant: str | None, size: int) -> None:
        self.held += size
        if tenant is not None:
            self.by_tenant[tenant] = self.by_tenant.get(tenant, 0) + size

    def give(self, tenant: str | None, size: int) -> None:
        if not size:
            return  # an account that holds nothing any more (its tenant may be gone)
        self.held -= size
        if tenant is not None:
            left = self.by_tenant[tenant] - size
            if left:
                self.by_tenant[tenant] = left
            else:
                del self.by_tenant[tenant]


@attrs.define(eq=False)
class _Account:
    """What one session took from a :class:`SubscriptionBytes`, to give back at once."""

    budget: SubscriptionBytes
    tenant: str | None
    held: int = 0

    def close(self) -> None:
        self.budget.give(self.tenant, self.held)
        self.held = 0


@attrs.define(eq=False)
class ResourceSubscriptions:
    """A legacy session's ``resources/subscribe`` URIs and the bytes they hold.

    The bytes are counted against the session's budget here and against its
    tenant's and the server's in the server's :class:`SubscriptionBytes`,
    under the tenant of the first subscription.  :meth:`clear` gives them
    back; the transports call it when the session or connection ends, and a
    session dropped without it (an app thrown away with its sessions) gives
    them back when it is collected.
    """

    uris: set[str] = attrs.field(factory=set)
    _account: _Account | None = attrs.field(default=None, init=False)
    _finalizer: weakref.finalize[Any, Any] | None = attrs.field(default=None, init=False)

    @property
    def held(self) -> int:
        """Bytes held (:func:`uri_bytes` of every URI)."""
        return 0 if self._account is None else self._account.held

    def __contains__(self, uri: object) -> bool:
        return uri in self.uris

    def __len__(self) -> int:
        return len(self.uris)

    def add(
        self, uri: str, budget: SubscriptionBytes, tenant: str | None, limits: SubscriptionLimits
    ) -> None:
        """Subscribe to *uri*, or raise the refusal (``-32602`` or a byte budget's)."""
        if uri in self.uris:
            return
        check_uri(uri, limits)
        if len(self.uris) >= limits.max_uris:
            raise JsonRpcError(
                INVALID_PARAMS, f"Invalid params: at most {limits.max_uris} subscriptions"
            )
        size = uri_bytes(uri)
        if self.held + size > limits.max_bytes_per_session:
            raise too_many_subscribed_bytes(
                "legacy", "subscription_bytes_session", limits.max_bytes_per_session
            )
        account = self._account
        if account is None:
            account = self._account = _Account(budget, tenant)
            self._finalizer = weakref.finalize(self, account.close)
            self._finalizer.atexit = False  # nothing to give back once the process ends
        refused = budget.refusal(account.tenant, size, limits, "legacy")
        if refused is not None:
            raise refused
        budget.take(account.tenant, size)
        account.held += size
        self.uris.add(uri)

    def discard(self, uri: str) -> None:
        if uri in self.uris:
            self.uris.discard(uri)
            account = self._account
            assert account is not None  # it took the URI's bytes
            size = uri_bytes(uri)
            account.budget.give(account.tenant, size)
            account.held -= size

    def clear(self) -> None:
        """Unsubscribe from everything and give the bytes back."""
        self.uris.clear()
        if self._finalizer is not None:
            self._finalizer()  # account.close(), once
        self._account = self._finalizer = None


def check_uri(uri: str, limits: SubscriptionLimits) -> None:
    """``-32602`` when *uri* is longer than ``max_uri_bytes`` (the message says the bound)."""
    if _utf8_length(uri) > limits.max_uri_bytes:
        raise JsonRpcError(
            INVALID_PARAMS,
            f"Invalid params: a resource URI is longer than {limits.max_uri_bytes} bytes",
        )


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

    uris: Container[str]

    def wants(self, method: str, key: str | None) -> bool:
        if method == "notifications/resources/updated":
            return key is not None and key in self.uris
        return method in _LIST_CHANGED.values()


def read_filter(
    params: Mapping[str, Any],
    supported: frozenset[str],
    limits: SubscriptionLimits = DEFAULT_SUBSCRIPTION_LIMITS,
) -> Filter:
    """The granted part of a listen request's ``notifications`` (``-32602`` when malformed).

    *supported* names the filter keys this server can deliver; a request for
    anything else is simply not granted (the acknowledgement says so).  The
    resource URIs are held to *limits*: each at most ``max_uri_bytes``, at
    most ``max_uris`` of them, together at most ``max_bytes_per_session``.
    """
    wanted = params.get("notifications")
    if not isinstance(wanted, dict):
        raise JsonRpcError(INVALID_PARAMS, "Invalid params: notifications must be an object")
    methods = frozenset(
        method
        for key, method in _LIST_CHANGED.items()
        if wanted.get(key) is True and key in supported
    )
    key = "resourceSubscriptions"
    uris = _granted_strings(wanted, key, "resource URIs", supported, limits.max_uris)
    listed: list[str] = wanted.get(key, [])  # strings: checked just above
    for uri in listed:
        check_uri(uri, limits)
    if sum(map(uri_bytes, listed)) > limits.max_bytes_per_session:
        raise JsonRpcError(
            INVALID_PARAMS,
            f"Invalid params: {key} hold more than {limits.max_bytes_per_session} bytes",
        )
    tasks = _granted_strings(wanted, "taskIds", "task ids", supported, MAX_SUBSCRIPTIONS)
    return Filter(methods, uris, tasks)


def _granted_strings(
    wanted: Mapping[str, Any], key: str, what: str, supported: frozenset[str], most: int
) -> frozenset[str]:
    """The strings under *key* (bounded; ``-32602`` when malformed), none if unsupported."""
    values = wanted.get(key, [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise JsonRpcError(INVALID_PARAMS, f"Invalid params: {key} must be strings")
    if len(values) > most:
        raise JsonRpcError(INVALID_PARAMS, f"Invalid params: at most {most} {what}")
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
