"""What an upstream sends back during a call, relayed to the gateway's caller.

One :class:`Relay` per gateway call (a proxied tool, resource read or
prompt): the upstream's progress and log messages for the call go to the
caller's own request stream (``ctx.report_progress``, ``ctx.log``: the
caller's progress token, its log level, nothing after it cancelled), and
the upstream's questions (elicitation, sampling, roots) are asked of the
caller (``ctx.ask``) and the answer sent back; when the caller cancels,
the upstream call is cancelled, and with it the question.

**Which call a message belongs to.**  The relay is a context variable set
around the upstream call, so what runs in the call's context finds it:
an MRTR round (modern: the client answers in the calling task), and
whatever the HTTP client reads from the call's own POST stream (its reader
task is started by the call, so it inherits the context).  A message
stream (stdio, in memory) reads everything in one task: there the relay is
the upstream's only call in flight, when it has one; with several a log
message cannot be told apart and goes to the gateway's logger, and a
question is refused (an error answer the upstream sees).  A question asked
from such a reader task of a modern caller cannot wait for its answer (the
modern era asks by ending the run, MRTR): the upstream call is cancelled and
the gateway's run ends with the round; on the caller's retry the upstream is
called again, asks again, and the answer is there.

**Bounded.**  Relayed notifications wait in a queue of at most
:data:`MAX_QUEUED_BYTES` bytes (their JSON size) per call; an upstream that
floods faster than the caller reads loses the excess (counted, logged
once per call), never the gateway's memory.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import attrs
import trio

from .._client.errors import McpError
from .._protocol.client_requests import InputRound
from .._protocol.client_table import ClientRequestError
from .._protocol.context import Context
from .._wire.names import INTERNAL_ERROR
from ..client import ClientHandlers

__all__ = ["MAX_QUEUED_BYTES", "Relay", "RelayRoutes", "current_relay"]

logger = logging.getLogger("trio_mcp_cancel.gateway")

MAX_QUEUED_BYTES: Final = 1 << 20
"""Relayed notifications waiting for one caller, in bytes of JSON at most."""

current_relay: contextvars.ContextVar[Relay | None] = contextvars.ContextVar(
    "trio_mcp_cancel.gateway.relay", default=None
)


@attrs.define(eq=False)
class Relay:
    """One gateway call's way back to its caller; see the module docstring."""

    ctx: Context
    label: str
    _queue: tuple[
        trio.MemorySendChannel[tuple[str, Any]], trio.MemoryReceiveChannel[tuple[str, Any]]
    ] = attrs.field(factory=lambda: trio.open_memory_channel[tuple[str, Any]](float("inf")))
    queued_bytes: int = 0
    """Bytes of JSON waiting for the caller (at most :data:`MAX_QUEUED_BYTES`)."""
    dropped: int = 0
    """Notifications dropped because the caller's queue was full."""
    _scope: trio.CancelScope | None = None
    _round: InputRound | None = None

    def progress(self, params: Mapping[str, Any]) -> None:
        self._put("progress", params)

    def notify(self, message: Mapping[str, Any]) -> None:
        """An upstream notification for this call: log messages are relayed."""
        params = message.get("params")
        if message.get("method") == "notifications/message" and isinstance(params, dict):
            self._put("log", params)

    def _put(self, kind: str, params: Mapping[str, Any]) -> None:
        size = len(json.dumps(params, default=str))
        if self.queued_bytes + size > MAX_QUEUED_BYTES:
            if not self.dropped:
                logger.warning(
                    "%s: the caller reads too slowly; relayed messages dropped", self.label
                )
            self.dropped += 1
            return
        self.queued_bytes += size
        self._queue[0].send_nowait((kind, (size, dict(params))))

    async def forward(self) -> None:
        """Send what was queued to the caller, until the call ends (cancelled then)."""
        async for kind, (size, params) in self._queue[1]:
            self.queued_bytes -= size
            try:
                if kind == "progress":
                    await self._progress(params)
                else:
                    await self._log(params)
            except ValueError:
                pass  # not increasing, not finite, an unknown level: the upstream's mistake

    async def _progress(self, params: dict[str, Any]) -> None:
        progress, total, message = (
            params.get("progress"),
            params.get("total"),
            params.get("message"),
        )
        if not isinstance(progress, int | float) or isinstance(progress, bool):
            return
        await self.ctx.report_progress(
            float(progress),
            float(total)
            if isinstance(total, int | float) and not isinstance(total, bool)
            else None,
            message[:1000] if isinstance(message, str) else None,
        )

    async def _log(self, params: dict[str, Any]) -> None:
        level, name = params.get("level"), params.get("logger")
        if isinstance(level, str):
            await self.ctx.log(level, params.get("data"), name if isinstance(name, str) else None)

    def interrupt(self, round_: InputRound) -> None:
        """The caller must answer a question on its retry (a modern MRTR round), asked from
        a reader task: end the upstream call (cancelled there) and this run with the round."""
        if self._round is None:
            self._round = round_
        if self._scope is not None:
            self._scope.cancel()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Forward for the block, with this relay the current one."""
        token = current_relay.set(self)
        try:
            with trio.CancelScope() as self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self.forward)
                    try:
                        yield
                    finally:
                        nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The nursery is ours (the forwarder never raises): what the call raised
            # (RequestCancelled, an InputRound, a ToolError) comes out as itself.
            if len(group.exceptions) != 1:
                raise
            raise group.exceptions[0] from None
        finally:
            current_relay.reset(token)
        if self._round is not None:
            raise self._round


@attrs.define(eq=False)
class RelayRoutes:
    """The relays of one upstream's calls in flight, and its client handlers."""

    label: str
    active: set[Relay] = attrs.field(factory=set)

    def route(self) -> Relay | None:
        """The relay a message belongs to: the current one, else the only one in flight."""
        relay = current_relay.get()
        if relay is not None:
            return relay
        if len(self.active) == 1:
            return next(iter(self.active))
        return None

    def notify(self, message: Mapping[str, Any]) -> bool:
        """Relay *message* to its call; ``False``: no call to relay it to."""
        relay = self.route()
        if relay is None:
            return False
        relay.notify(message)
        return True

    def handlers(self) -> ClientHandlers:
        """Client handlers that ask the caller each upstream question."""

        def asking(method: str) -> Any:
            async def handler(params: dict[str, Any]) -> Mapping[str, Any]:
                relay = self.route()
                if relay is None:
                    raise McpError(
                        INTERNAL_ERROR,
                        f"{method}: the gateway cannot tell which of its callers to ask",
                    )
                try:
                    return await relay.ctx.ask(method, params)
                except ClientRequestError as exc:
                    raise McpError(INTERNAL_ERROR, f"the gateway's caller: {exc}") from None
                except InputRound as round_:
                    if current_relay.get() is relay:
                        raise  # an MRTR round of the call's own task: it ends the run itself
                    relay.interrupt(round_)
                    raise McpError(
                        INTERNAL_ERROR, "the gateway's caller answers on its retry"
                    ) from None

            return handler

        return ClientHandlers(
            elicitation=asking("elicitation/create"),
            sampling=asking("sampling/createMessage"),
            roots=asking("roots/list"),
        )
