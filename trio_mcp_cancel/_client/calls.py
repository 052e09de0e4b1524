"""One request the client sent: the object the engine and its transport share.

The engine makes a :class:`PendingCall` for every request and hands it to
the transport with the message; whichever side learns how the call ended
settles it with :func:`deliver` or :func:`fail` (the engine for an answer
read off a stream, the HTTP transport for an answer or a failure of the
POST itself), and the caller waits on :meth:`PendingCall.result`.  The
settling functions live here, beside the class, so neither side reaches
into the other's private state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .errors import McpError, McpTransportError, Message

if TYPE_CHECKING:
    from .._telemetry.client import ClientSpan

__all__ = [
    "Canceller",
    "PendingCall",
    "ProgressCallback",
    "add_progress",
    "cancel_notification",
    "deliver",
    "fail",
    "unwrap",
]

ProgressCallback = Callable[[Message], object]

Canceller = Callable[["PendingCall", "str | None"], None]
"""How the engine cancels a call on the server (through its transport)."""


@attrs.define(eq=False)
class PendingCall:
    """A request the client sent, and what came back for it.

    ``progress`` collects the params of every ``notifications/progress``
    for it; ``response`` is the raw JSON-RPC answer once it came
    (``answered``).  After :meth:`cancel` MCP forbids any answer.
    """

    id: int
    method: str
    _canceller: Canceller
    _on_progress: ProgressCallback | None = None
    progress: list[Message] = attrs.field(factory=list)
    notifications: list[Message] = attrs.field(factory=list)
    """For a ``subscriptions/listen`` call: every notification tagged with its id."""
    response: Message | None = None
    cancelled: bool = False
    """The client cancelled it."""
    failure: McpTransportError | None = None
    """Why no answer can come, when the transport gave up."""
    task_capabilities: Mapping[str, Any] | None = None
    """A ``tools/call`` that declared the Tasks extension: the capabilities it sent."""
    headers: dict[str, str] = attrs.field(factory=dict)
    """HTTP headers of this request only (a modern ``tools/call``'s ``Mcp-Param-*``)."""
    detached: bool = False
    """Nobody waits for the answer (forgotten once it came)."""
    span: ClientSpan | None = None
    """Its ``CLIENT`` span while it is open (telemetry), ended when the call settles."""
    _done: trio.Event = attrs.field(factory=trio.Event)

    @property
    def answered(self) -> bool:
        return self.response is not None

    @property
    def finished(self) -> bool:
        """Answered, or failed for good."""
        return self._done.is_set()

    async def cancel(self, reason: str | None = None) -> None:
        """Cancel this request on the server, the way the transport does it."""
        self.cancel_nowait(reason)
        await trio.lowlevel.checkpoint()

    def cancel_nowait(self, reason: str | None = None) -> None:
        """:meth:`cancel` without a checkpoint: queued right behind what was
        sent before, so a call and its cancel can go back to back."""
        self.cancelled = True
        if self.span is not None:
            self.span.cancelled()
        self._canceller(self, reason)

    async def result(self) -> Message:
        """Wait for the answer; its ``result``, or :class:`McpError` for an error.

        After a cancel a server answers nothing (unless it is configured to
        answer ``-32800``), so this would wait forever: bound it.
        """
        await self._done.wait()
        if self.failure is not None:
            raise self.failure
        assert self.response is not None
        return unwrap(self.response)


def deliver(call: PendingCall, message: Message) -> None:
    """*message* (a JSON-RPC response) answers *call*."""
    call.response = message
    if call.span is not None:
        call.span.answered(message)
    call._done.set()


def fail(call: PendingCall, failure: McpTransportError) -> None:
    """No answer can come for *call* (unless one already did): its waiter gets *failure*."""
    if not call._done.is_set():
        call.failure = failure
        if call.span is not None:
            call.span.failed(failure)
        call._done.set()


def add_progress(call: PendingCall, params: Message) -> None:
    """A ``notifications/progress`` for *call*: kept, and passed to its callback."""
    call.progress.append(params)
    if call._on_progress is not None:
        call._on_progress(params)


def unwrap(response: Message) -> Message:
    """A response's ``result``, or :class:`McpError` for an error (or a malformed answer)."""
    error = response.get("error")
    if isinstance(error, dict):
        raise McpError(error.get("code", 0), str(error.get("message", "")), error.get("data"))
    result = response.get("result")
    if not isinstance(result, dict):
        raise McpError(0, f"malformed response: {response!r}"[:500])
    return result


def cancel_notification(request_id: int, reason: str | None) -> Message:
    """``notifications/cancelled`` for *request_id*: how stream transports cancel."""
    params: Message = {"requestId": request_id}
    if reason is not None:
        params["reason"] = reason
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
