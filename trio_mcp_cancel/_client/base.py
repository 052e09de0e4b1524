"""The two small interfaces between the client engine and a transport.

The engine knows the protocol and nothing about the wire; a transport
knows the wire and nothing about the protocol.  They meet here, the way
httpx's client and its transports do (``httpx/_transports/base.py``):

* :class:`ClientTransport` is what the engine asks of a transport: queue
  a message, cancel a call the way the wire cancels, send and wait;
* :class:`Receiver` is what a transport hands back to the engine: what
  arrived, and that the connection is gone.  The engine gives it out as
  ``engine.inbound``, so a transport never calls the engine's private
  methods and the engine is never subclassed to be wired up.

Neither side imports the other: a new transport (the in-memory one of
:mod:`trio_mcp_cancel.testing`, a scripted one in a test) is written
against these two protocols alone.
"""

from __future__ import annotations

from typing import Protocol

from .._wire.names import Era
from .calls import PendingCall
from .errors import McpTransportError, Message

__all__ = ["ClientTransport", "Receiver"]


class ClientTransport(Protocol):
    """What the engine needs from a wire."""

    def transmit(self, message: Message, call: PendingCall | None) -> None:
        """Queue *message* for the server (*call*: the request it is); never blocks.

        Never blocking is what lets the engine send a cancel from an
        ``except trio.Cancelled`` block, where it cannot wait.
        """

    def cancel(self, call: PendingCall, reason: str | None) -> None:
        """Cancel *call* on the server the way this wire does (never blocks):
        ``notifications/cancelled``, or closing the request's stream."""

    async def send(self, message: Message) -> None:
        """Send *message* (which expects no answer) and wait until the wire took it."""


class Receiver(Protocol):
    """What a transport needs from the engine it carries messages for."""

    @property
    def era(self) -> Era:
        """The era the engine speaks (it may change once, during an ``"auto"`` handshake)."""

    @property
    def session_version(self) -> str | None:
        """The protocol version ``initialize`` negotiated; ``None`` before it, and when modern."""

    def receive(self, message: object) -> None:
        """One decoded message from the server (a response, a notification, a request)."""

    def receive_text(self, text: str) -> None:
        """One message as text off the wire; what is not JSON is kept as unexpected."""

    def fail_all(self, failure: McpTransportError) -> None:
        """The connection is gone: every call still waiting fails with *failure*."""
