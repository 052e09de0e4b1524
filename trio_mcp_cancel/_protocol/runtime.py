"""What a server holds while it serves: its runtime services, apart from its configuration.

:class:`~.server.McpServer` is what the author registered and how it is
configured; it changes only when the author changes it.  What changes as
the server serves lives here, in one :class:`ServerRuntime` per server,
owned by the server's :class:`~.dispatcher.Dispatcher` (reach it as
``server.dispatcher.runtime``):

* ``tasks``: the :class:`~.tasks.TaskManager` (its nursery, running tasks and
  store), the one given as ``McpServer(tasks=...)`` or a default one; its
  status changes go to the subscription hub as ``notifications/tasks``;
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
from typing import Any

import attrs
import trio

from .._core.ratelog import RateLimitedLog
from .registration import Registration
from .replay import UsedStates
from .subscriptions import SubscriptionBytes, SubscriptionHub
from .tasks import TaskManager

__all__ = ["ServerRuntime"]

logger = logging.getLogger("trio_mcp_cancel.server")


@attrs.define(eq=False)
class ServerRuntime:
    """The runtime services of one server; see the module docstring.

    Made once per server by its dispatcher (:meth:`for_server`); a test or an
    application reads task state or open listen streams here, and runs the
    task manager itself with ``await nursery.start(runtime.tasks.run)`` to
    give it a lifetime of its own.
    """

    tasks: TaskManager = attrs.field(factory=TaskManager)
    """Runs task-capable tools as tasks (Tasks extension); see :mod:`.tasks`."""
    subscriptions: SubscriptionHub = attrs.field(factory=SubscriptionHub)
    """The ``subscriptions/listen`` (and legacy GET stream) fan-out."""
    subscription_bytes: SubscriptionBytes = attrs.field(factory=SubscriptionBytes)
    """Bytes of resource URIs subscribed to, server-wide and per tenant (legacy sessions'
    ``resources/subscribe`` and open listen streams), against ``limits.subscriptions``."""
    used_states: UsedStates = attrs.field(factory=UsedStates)
    """MRTR states used already (single use; shared across workers with a backend)."""
    failures: RateLimitedLog = attrs.field(factory=lambda: RateLimitedLog(logger))
    """Where unexpected failures are logged, once per kind and interval."""
    services: list[Callable[[trio.TaskStatus[None]], Awaitable[None]]] = attrs.field(factory=list)
    """What runs beside the server for as long as it serves, started once per process
    by every transport (``services_served``): a mount's upstream connections."""

    def __attrs_post_init__(self) -> None:
        # Task status changes reach the subscriptions/listen streams that asked (taskIds).
        self.tasks.on_change = self._task_changed

    def _task_changed(self, task: dict[str, Any]) -> None:
        self.subscriptions.publish("notifications/tasks", task)

    @classmethod
    def for_server(cls, registration: Registration, tasks: TaskManager | None) -> ServerRuntime:
        """The runtime of a server: *tasks* (``None``: a new task manager), and its
        registration's changes told to the hub."""
        runtime = cls() if tasks is None else cls(tasks=tasks)
        registration.on_change = runtime.subscriptions.publish
        return runtime
