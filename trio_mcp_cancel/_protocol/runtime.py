"""What a server holds while it serves: its runtime services, apart from its configuration.

:class:`~.server.McpServer` is what the author registered and how it is
configured; it changes only when the author changes it.  What changes as
the server serves lives here, in one :class:`ServerRuntime` per server,
owned by the server's :class:`~.dispatcher.Dispatcher` (reach it as
``server.dispatcher.runtime``):

* ``subscriptions``: the :class:`~.subscriptions.SubscriptionHub` fanning
  notifications out to open ``subscriptions/listen`` (and legacy GET)
  streams; the server's registration changes reach it through
  ``registration.on_change``, set here;
* ``subscription_bytes``: the :class:`~.subscriptions.SubscriptionBytes` that
  every session's and listen stream's resource URIs are counted in, so the
  server's ``limits.subscriptions`` bound them per tenant and in total;
* ``used_states``: the :class:`~.replay.UsedStates` set that makes each MRTR
  ``requestState`` single-use;
* ``failures``: unexpected failures, logged once per kind and interval.

Two things a server builds from its settings stay on it, because they are
configuration, not state: the MRTR :class:`~.mrtr.StateSigner` (the secrets
and TTL, fixed unless the author rotates them; every process behind a load
balancer must be configured with the same one), and the sync-tool
:class:`~.._work.threads.ThreadLimit` (a validated number: the limiter it
stands for is made per Trio run, and each tool binds it at registration, so
a call never looks it up).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import attrs
import trio

from .._core.ratelog import RateLimitedLog
from .lifespan import LifespanState
from .registration import Registration
from .replay import UsedStates
from .subscriptions import SubscriptionBytes, SubscriptionHub

__all__ = ["ServerRuntime"]

logger = logging.getLogger("trio_mcp_cancel.server")


@attrs.define(eq=False)
class ServerRuntime:
    """The runtime services of one server; see the module docstring.

    Made once per server by its dispatcher (:meth:`for_server`); a test or an
    application reads open listen streams here.  (What an extension keeps,
    the Tasks extension's running tasks say, is the extension's own.)
    """

    subscriptions: SubscriptionHub = attrs.field(factory=SubscriptionHub)
    """The ``subscriptions/listen`` (and legacy GET stream) fan-out."""
    subscription_bytes: SubscriptionBytes = attrs.field(factory=SubscriptionBytes)
    """Bytes of resource URIs subscribed to, server-wide and per tenant (legacy sessions'
    ``resources/subscribe`` and open listen streams), against ``limits.subscriptions``."""
    used_states: UsedStates = attrs.field(factory=UsedStates)
    """MRTR states used already (single use; shared across workers with a backend)."""
    failures: RateLimitedLog = attrs.field(factory=lambda: RateLimitedLog(logger))
    """Where unexpected failures are logged, once per kind and interval."""
    lifespan: LifespanState = attrs.field(factory=LifespanState)
    """What ``McpServer(lifespan=...)`` yielded, while entered (``ctx.lifespan``)."""
    services: list[Callable[[trio.TaskStatus[None]], Awaitable[None]]] = attrs.field(factory=list)
    """What runs beside the server for as long as it serves, started once per process
    by every transport (``services_served``): a mount's upstream connections."""

    @classmethod
    def for_server(cls, registration: Registration) -> ServerRuntime:
        """The runtime of a server, its registration's changes told to the hub."""
        runtime = cls()
        registration.on_change = runtime.subscriptions.publish
        return runtime
