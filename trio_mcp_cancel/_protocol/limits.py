"""The server-wide admission caps, as one typed value: :class:`ServerLimits`.

Each channel's own cap (``ConnectionLimits.max_concurrent_calls``, per
connection or session) is the transport's; these count across every
transport and session of one server, so they are the dispatcher's, which
reads them at each admission.
"""

from __future__ import annotations

from typing import Any

import attrs

from .subscriptions import DEFAULT_SUBSCRIPTION_LIMITS, SubscriptionLimits

__all__ = ["DEFAULT_SERVER_LIMITS", "ServerLimits"]


def _cap(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A cap is an int of at least 1 (not a bool or a float), or ``None``: no cap."""
    if value is not None and (type(value) is not int or value < 1):
        raise ValueError(f"{attribute.name} must be an int >= 1 or None, not {value!r}")


@attrs.frozen(kw_only=True)
class ServerLimits:
    """What one server admits at once, across every transport and session.

    ``McpServer(limits=ServerLimits(max_calls=...))``; ``server.limits = ...``
    replaces them while serving (the next admission reads the new ones).
    A call over a cap is answered at once with the refusal (``-31429``;
    ``-32001`` in the legacy era; HTTP ``429`` with ``Retry-After``;
    ``data.limit`` says which), never queued: a queue would turn a flood
    into a hang for everyone behind it.  ``None`` disables a cap.
    """

    max_calls: int | None = attrs.field(default=4096, validator=_cap)
    """Tool calls (and tracked ``resources/read``, ``prompts/get``) in flight, server-wide
    (``data.limit`` ``"server"``).  Each call holds a task, a cancel scope and its
    arguments; 4096 is far above what one process serves usefully at once, and
    well below what exhausts its memory."""
    max_calls_per_tenant: int | None = attrs.field(default=1024, validator=_cap)
    """Calls in flight of one tenant (a principal, or a client address bucket when
    unauthenticated; ``"tenant"``), however many sessions or connections it opens:
    a quarter of ``max_calls``, so one tenant cannot take the whole server."""
    max_listen_streams: int | None = attrs.field(default=4096, validator=_cap)
    """Open ``subscriptions/listen`` streams (and legacy GET streams), server-wide
    (``"listen_server"``).  They are not calls: they stay open for hours, so they
    have their own bound, and the transports' ``max_request_time`` does not end them."""
    max_listen_streams_per_tenant: int | None = attrs.field(default=32, validator=_cap)
    """Open listen streams of one tenant (``"listen_tenant"``): a client needs one or
    a few; 32 leaves room for many tabs or workers, not for a flood."""
    subscriptions: SubscriptionLimits = DEFAULT_SUBSCRIPTION_LIMITS
    """What resource subscriptions (legacy ``resources/subscribe``, listen streams'
    ``resourceSubscriptions``) may hold, in bytes as well as in count, per session,
    per tenant and in total; its fields give the defaults and why."""

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.subscriptions, SubscriptionLimits):
            raise TypeError("subscriptions must be a SubscriptionLimits")


DEFAULT_SERVER_LIMITS = ServerLimits()
