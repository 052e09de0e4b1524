"""The client's message-stream transports: stdio (a child process) and WebSocket.

Both carry one JSON-RPC message per frame (a line on stdio, a text message
on WebSocket) in both directions, so cancellation is
``notifications/cancelled`` on the same stream.
Outgoing messages go through an unbounded queue drained by a writer task:
the engine must be able to send a cancel from an ``except trio.Cancelled``
block, where it cannot wait.  A stream that ends fails every call still
waiting with :class:`McpTransportError`, so nobody waits forever.
"""

from __future__ import annotations

import json
import math
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable

import attrs
import trio

from .base import Receiver
from .calls import PendingCall, cancel_notification, fail
from .errors import McpTransportError, Message

__all__ = ["MessageTransport", "read_lines", "stop_child"]


@attrs.define(eq=False)
class MessageTransport:
    """A queue to one ``send(text)`` and a reader of ``receive()`` texts
    (a :class:`~._client.base.ClientTransport` feeding *receiver*)."""

    send_text: Callable[[str], Awaitable[object]]
    texts: AsyncIterator[str]
    name: str
    receiver: Receiver
    _outbox: tuple[trio.MemorySendChannel[str], trio.MemoryReceiveChannel[str]] = attrs.field(
        factory=lambda: trio.open_memory_channel[str](math.inf)
    )
    _gone_with: McpTransportError | None = None
    """Why the stream ended, once it has: a call sent after that fails at once
    (``fail_all`` only reaches the calls waiting when it ended)."""

    def transmit(self, message: Message, call: PendingCall | None) -> None:
        if self._gone_with is not None:
            if call is not None:
                fail(call, self._gone_with)
            return
        self._outbox[0].send_nowait(json.dumps(message))

    def cancel(self, call: PendingCall, reason: str | None) -> None:
        # MCP: never cancel what has finished (the id may be reused by then).
        if not call.finished:
            self.transmit(cancel_notification(call.id, reason), None)

    async def send(self, message: Message) -> None:
        self.transmit(message, None)
        await trio.lowlevel.checkpoint()

    async def write(self) -> None:
        try:
            async for text in self._outbox[1]:
                await self.send_text(text)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._gone(f"{self.name}: sending failed: {exc!r}")

    async def read(self) -> None:
        try:
            async for text in self.texts:
                self.receiver.receive_text(text)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ValueError) as exc:
            self._gone(f"{self.name}: receiving failed: {exc!r}")
        else:
            self._gone(f"{self.name}: the server closed the connection")

    def _gone(self, why: str) -> None:
        if self._gone_with is None:
            self._gone_with = McpTransportError(why)
        self.receiver.fail_all(self._gone_with)


async def read_lines(stream: trio.abc.ReceiveStream, max_line: int) -> AsyncIterator[str]:
    """Newline-delimited text from *stream*; a longer line than *max_line* is an error."""
    buffer = bytearray()
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        buffer += chunk
        while (end := buffer.find(b"\n")) >= 0:
            line = bytes(buffer[:end]).rstrip(b"\r")
            del buffer[: end + 1]
            if line.strip():
                yield line.decode("utf-8", "replace")
        if len(buffer) > max_line:
            raise ValueError(f"a message longer than {max_line} bytes")


async def stop_child(process: trio.Process, patience: float) -> None:
    """Stop a stdio server the way MCP asks: close its stdin, then SIGTERM, then SIGKILL.

    Each step waits up to *patience* seconds; the child is always reaped.
    Shielded: it runs while the client is being cancelled.
    """
    with trio.CancelScope(shield=True):
        if process.stdin is not None:
            await process.stdin.aclose()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                try:
                    os.killpg(process.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            with trio.move_on_after(patience if sig != signal.SIGKILL else math.inf):
                await process.wait()
                break
        try:  # whatever it left in its process group goes with it
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
