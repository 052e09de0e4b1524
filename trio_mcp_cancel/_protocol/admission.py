"""Admission: the server-wide and per-tenant counts of what runs, and the refusal over a cap.

The :class:`~.dispatcher.Dispatcher` keeps two :class:`Slots`: one for tool
calls (and the other requests that run tracked work), one for open
``subscriptions/listen`` streams.  A listen stream is not a call: it is
meant to stay open for hours, so counting it against the call caps would
let a client's listeners starve its own calls, and a call-sized cap would
be far too low for them.  The caps themselves are the server's
configuration (:class:`~.limits.ServerLimits`, ``registration.limits``),
read at each check, so limits replaced while serving apply to the next call.
"""

from __future__ import annotations

from typing import Final, Literal

import attrs

from .._core.validation import RequestId
from .._wire.jsonrpc import JsonRpcError, Message, error_message
from .._wire.names import LEGACY_TOO_MANY_REQUESTS, TOO_MANY_REQUESTS, Era

__all__ = [
    "CALL_LIMITS",
    "LEGACY_TOO_MANY_REQUESTS",
    "LISTEN_LIMITS",
    "TOO_MANY_REQUESTS",
    "Limit",
    "Slots",
    "SubscriptionLimit",
    "over_limit",
    "too_many_requests",
    "too_many_requests_code",
    "too_many_sessions",
    "too_many_subscribed_bytes",
]

#: Which admission limit a refused call hit, in the error's ``data.limit``.
#: ``listen_server`` / ``listen_tenant``: the separate bounds of open
#: ``subscriptions/listen`` streams.
Limit = Literal["server", "tenant", "channel", "listen_server", "listen_tenant"]

#: The ``data.limit`` of a refused call, by the :class:`Slots` cap it hit.
CALL_LIMITS: Final[dict[str, Limit]] = {"server": "server", "tenant": "tenant"}
#: The ``data.limit`` of a refused listen stream, by the :class:`Slots` cap it hit.
LISTEN_LIMITS: Final[dict[str, Limit]] = {"server": "listen_server", "tenant": "listen_tenant"}


def too_many_requests_code(era: Era) -> int:
    """The error code of every admission refusal in *era* (the one place it is chosen).

    Modern: :data:`~.wire.TOO_MANY_REQUESTS`, outside the ranges 2026-07-28
    reserves, so no client reads it as its own local timeout (``-32001``).
    Legacy: :data:`~.wire.LEGACY_TOO_MANY_REQUESTS`, as it always was.
    """
    return TOO_MANY_REQUESTS if era == "modern" else LEGACY_TOO_MANY_REQUESTS


def over_limit(era: Era, message: str, limit: str, cap: int | None) -> JsonRpcError:
    """The refusal of work over an admission bound, to raise: ``data`` names *limit* and *cap*."""
    return JsonRpcError(too_many_requests_code(era), message, {"limit": limit, "max": cap})


def too_many_requests(
    request_id: RequestId, era: Era, limit: Limit = "channel", cap: int = 0
) -> Message:
    """The answer to a call of *era* over one of the admission limits."""
    refusal = over_limit(era, "Too many concurrent requests", limit, cap)
    return error_message(request_id, refusal.code, refusal.message, refusal.data)


def too_many_sessions(
    request_id: RequestId | None, limit: Literal["tenant", "server"], cap: int
) -> Message:
    """The answer to an ``initialize`` refused a legacy session (*limit*: which bound).

    The same code as a legacy call over a cap: the client should retry later.
    """
    refusal = over_limit("legacy", "Too many sessions", limit, cap)
    return error_message(request_id, refusal.code, refusal.message, refusal.data)


#: The ``data.limit`` of a subscription refused by a byte budget
#: (:class:`~.subscriptions.SubscriptionLimits`): the session's, the tenant's
#: or the server's.
SubscriptionLimit = Literal[
    "subscription_bytes_session", "subscription_bytes_tenant", "subscription_bytes_server"
]


def too_many_subscribed_bytes(era: Era, limit: SubscriptionLimit, cap: int) -> JsonRpcError:
    """A ``resources/subscribe`` (legacy) or listen stream (modern) over a byte budget.

    The same code (of *era*) and ``data`` as every admission limit: the client
    may retry once it (or the tenant) has unsubscribed or closed a listen stream.
    """
    return over_limit(era, "Too many subscribed bytes", limit, cap)


@attrs.define(eq=False)
class Slots:
    """How many are held, in total and per tenant.

    *tenant* ``None`` (stdio, tests: nobody to count it against) is counted
    in the total only.
    """

    held: int = 0
    by_tenant: dict[str, int] = attrs.field(factory=dict)

    def full(
        self, tenant: str | None, total_cap: int | None, tenant_cap: int | None
    ) -> tuple[str, int] | None:
        """Which cap taking one more slot would exceed (``"server"``/``"tenant"``), if any.

        ``None`` caps nothing.
        """
        if total_cap is not None and self.held >= total_cap:
            return "server", total_cap
        if tenant_cap is not None and tenant is not None:
            if self.by_tenant.get(tenant, 0) >= tenant_cap:
                return "tenant", tenant_cap
        return None

    def take(self, tenant: str | None) -> None:
        self.held += 1
        if tenant is not None:
            self.by_tenant[tenant] = self.by_tenant.get(tenant, 0) + 1

    def give(self, tenant: str | None) -> None:
        self.held -= 1
        if tenant is not None:
            left = self.by_tenant[tenant] - 1
            if left:
                self.by_tenant[tenant] = left
            else:
                del self.by_tenant[tenant]
