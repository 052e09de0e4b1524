"""Server notifications across workers: list changes and resource updates over the bus.

A legacy session's GET stream (and a ``subscriptions/listen`` stream) may
be open on another worker than the one where a tool is registered or a
resource changes.  With a shared backend the app hands every such
notification of its server's hub to the bus, and publishes what other
workers hand over into its own hub (``forwarded``: not handed on again),
so each stream hears every worker's changes once.

Bounded: at most :data:`QUEUE` notifications wait to be published; more
are dropped (logged at debug level), as a listener that falls behind is:
they tell clients to re-list or re-read, and a burst says that once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

import attrs
import trio

from ..._protocol.subscriptions import FORWARDED, SubscriptionHub
from ...backends.base import BackendUnavailable, BusMessage, CancelBus

__all__ = ["QUEUE", "HubFanout"]

logger = logging.getLogger("trio_mcp_cancel.http")

#: Notifications waiting to be published to the other workers.
QUEUE: Final = 256
KIND: Final = "hub.publish"


@attrs.define(eq=False)
class HubFanout:
    """Hands *hub*'s notifications to the other workers and theirs to *hub*."""

    hub: SubscriptionHub
    bus: CancelBus

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        send, receive = trio.open_memory_channel[BusMessage](QUEUE)

        def forward(method: str, params: Mapping[str, Any] | None) -> None:
            try:
                send.send_nowait({"type": KIND, "method": method, "params": dict(params or {})})
            except trio.WouldBlock:
                logger.debug("notification %s not handed to other workers: queue full", method)

        if self.hub.forward is not None or not self.bus.shared:
            task_status.started()
            return  # another app of this process does it already, or nobody to tell
        self.hub.forward = forward
        try:
            task_status.started()
            async for message in receive:
                try:
                    await self.bus.publish(message)
                except BackendUnavailable as exc:
                    logger.debug("notification not handed to other workers: %s", exc)
        finally:
            self.hub.forward = None

    def on_bus(self, message: BusMessage) -> None:
        if message.get("type") != KIND:
            return
        method, params = message.get("method"), message.get("params")
        if method in FORWARDED and isinstance(params, dict):
            self.hub.publish(method, params, forwarded=True)
