"""The in-memory wire of the test client: text messages on a Trio memory channel.

Used by :func:`trio_mcp_cancel.testing.open_test_client`.  The channel to
the server is unbounded (the test decides how much it sends), so
transmitting never blocks and keeps back-to-back messages back to back.
A cancel is always sent, even for a call that has finished: a test may
check what a server does with a late cancel.
"""

from __future__ import annotations

import json

import attrs
import trio

from .calls import PendingCall, cancel_notification
from .errors import Message

__all__ = ["ChannelTransport"]


@attrs.define(eq=False)
class ChannelTransport:
    """A :class:`~._client.base.ClientTransport` writing JSON text to *channel*.

    What the server sends back is read by whoever holds the other channel
    and fed to the engine's ``inbound``.
    """

    channel: trio.MemorySendChannel[str]

    def transmit(self, message: Message, call: PendingCall | None) -> None:
        self.channel.send_nowait(json.dumps(message))

    def cancel(self, call: PendingCall, reason: str | None) -> None:
        self.transmit(cancel_notification(call.id, reason), None)

    async def send(self, message: Message) -> None:
        self.transmit(message, None)
        await trio.lowlevel.checkpoint()
