"""MCP over Trio memory channels: a whole session in one process, no sockets.

This is the transport behind :func:`trio_mcp_cancel.testing.open_test_client`.
It exists so that tests of a server (the library's and its users') exercise
the *real* message path, :class:`~trio_mcp_cancel.transports._connection.MessageConnection`
with its ordering, concurrency limit and cancel-on-close, rather than calling
the dispatcher directly, while staying entirely in Trio's scheduler: nothing
waits on the operating system, so ``trio.testing.MockClock`` (pytest-trio's
``autojump_clock``) can skip every grace period and every ``trio.sleep``.

Messages cross as encoded JSON text, exactly as on stdio or WebSocket, so a
result that does not serialise fails here as it would in production.
Closing the client's send channel is the client disconnecting: every request
still running is cancelled (kind ``"disconnect"``).  So is a client that
stops receiving from a bounded pair (``memory_transport_pair(n)``) for
longer than ``write_timeout``, or long enough for ``max_buffered_bytes`` of
notifications to pile up, exactly as on a socket whose peer stopped reading.
"""

from __future__ import annotations

import logging

import attrs
import trio

from .._core.registry import Registry, current_registry
from .._protocol.dispatcher import Served
from .._protocol.exchange import Caller
from .._protocol.lifespan import lifespan_served
from ._connection import MessageConnection, connection_caller
from ._extensions import extensions_served
from ._startup import require_running
from .limits import DEFAULT_CONNECTION_LIMITS, ConnectionLimits

__all__ = ["MemoryEnd", "memory_transport_pair", "serve_mcp_memory"]

logger = logging.getLogger("trio_mcp_cancel.memory")


@attrs.define(eq=False)
class MemoryEnd:
    """One side of an in-memory connection: what it sends and what it receives."""

    send: trio.MemorySendChannel[str]
    receive: trio.MemoryReceiveChannel[str]

    async def aclose(self) -> None:
        """Close both channels: the peer sees the end of the stream."""
        await self.send.aclose()
        await self.receive.aclose()


def memory_transport_pair(max_buffer_size: int | float = 256) -> tuple[MemoryEnd, MemoryEnd]:
    """A connected ``(client_end, server_end)`` pair.

    *max_buffer_size* bounds each direction (``math.inf`` for unbounded);
    a full buffer makes the sender wait, as a full socket would.
    """
    to_server_send, to_server_receive = trio.open_memory_channel[str](max_buffer_size)
    to_client_send, to_client_receive = trio.open_memory_channel[str](max_buffer_size)
    return MemoryEnd(to_server_send, to_client_receive), MemoryEnd(
        to_client_send, to_server_receive
    )


async def serve_mcp_memory(
    server: Served,
    end: MemoryEnd,
    registry: Registry | None = None,
    *,
    namespace: str | None = None,
    principal: str | None = None,
    limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
    task_status: trio.TaskStatus[Caller] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve one client on *end* (the server's side) until the client closes its side.

    ``task_status.started`` receives the connection's :class:`Caller`.  The
    namespace is a fresh ``session:memory-<random>`` unless *namespace* is
    given (to test what two connections sharing one would do, say).
    *principal* stands for an authenticated peer: the connection's tenant
    (per-tenant caps) is ``principal:<it>``, else ``global``.  When
    the client closes its send channel every request still running is
    cancelled (the flag at once, the hard cancel ``limits.disconnect_grace_period``
    later); this returns
    once they have all finished, and then closes *end*, so the client's
    receive loop ends too.

    ``limits.write_timeout`` and ``limits.max_buffered_bytes`` bound how long, and how much,
    the server waits for a client that does not receive (see
    :class:`~trio_mcp_cancel.transports._connection.MessageConnection`): a
    tool never blocks on a slow client; past either bound the client counts
    as disconnected and serving ends.  They matter only with a bounded
    pair, since an unbounded one never makes the server wait.
    """
    if registry is None:
        registry = current_registry()
    require_running(registry, "serve_mcp_memory")
    caller = connection_caller(
        "memory",
        registry,
        max_concurrent_calls=limits.max_concurrent_calls,
        principal=principal,
    )
    if namespace is not None:
        caller.namespace = namespace
    connection = MessageConnection(
        server,
        caller,
        end.send.send,
        limits=limits,
        ends_tasks=namespace is None,
    )
    async with lifespan_served(server), extensions_served(server), end.send, end.receive:
        task_status.started(caller)
        await connection.serve(end.receive)
