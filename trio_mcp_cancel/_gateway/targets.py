"""Opening a client to what a mount names: a server in this process, a URL, a command.

Every upstream is reached through the library's own client
(:mod:`trio_mcp_cancel.client`), whatever carries it, so cancellation
crosses the hop the one way the client does it: a gateway tool's flag
cancels the upstream call at once, in the form the upstream's era and
transport need (``notifications/cancelled``, or closing the request's
stream on modern HTTP), and the client numbers its own requests, so the
ids of two gateway callers never meet upstream.

* an :class:`~trio_mcp_cancel.server.McpServer` (anything served: it has a
  ``dispatcher``): served in memory, in the gateway's nursery, exactly as a
  test client connects to it (the real message path, no sockets);
* ``http(s)://`` (and ``ws(s)://``) URLs: :func:`~trio_mcp_cancel.client.open_client`;
* a command (a list of arguments): a stdio server in a child process.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal

import trio

from .._client.handlers import ServerRequests
from .._client.streams import MessageTransport
from .._core.registry import Registry, current_registry_var
from .._protocol.dispatcher import Served
from ..client import ClientHandlers, McpClient, open_client
from ..transports.memory import memory_transport_pair, serve_mcp_memory

__all__ = ["Era", "Target", "describe_target", "open_target"]

Era = Literal["modern", "legacy", "auto"]
Target = Served | str | Sequence[str]


def describe_target(target: Target) -> str:
    """What a log line or an error says the upstream is (never a credential of a URL)."""
    if isinstance(target, str):
        return target.split("?", 1)[0][:200]
    if isinstance(target, Sequence):
        return " ".join(str(arg) for arg in target)[:200]
    registration = getattr(target, "registration", None)
    name = getattr(registration, "name", None)
    return f"in-process server {name!r}" if name else "in-process server"


def check_target(target: object) -> None:
    """``TypeError``/``ValueError`` at mount time for what could never be opened."""
    if isinstance(target, str):
        if not target.startswith(("http://", "https://", "ws://", "wss://")):
            raise ValueError(
                f"mount: {target[:100]!r} is not an http(s):// or ws(s):// URL"
                " (a stdio server is a list of arguments)"
            )
    elif isinstance(target, Sequence):
        if not target or not all(isinstance(arg, str) for arg in target):
            raise TypeError("mount: a stdio command is a non-empty list of strings")
    elif not hasattr(target, "dispatcher"):
        raise TypeError("mount: the target is an McpServer, a URL or a stdio command")


@contextlib.asynccontextmanager
async def open_target(
    target: Target,
    *,
    era: Era,
    handlers: ClientHandlers,
    log_level: str | None,
    lost: trio.Event,
    client_options: Mapping[str, Any],
) -> AsyncIterator[McpClient]:
    """A connected, handshaken client of *target* for the block; *lost* is set when the
    connection ends by itself (an in-process server that stopped)."""
    if isinstance(target, str | Sequence):
        async with open_client(
            target,
            era=era,
            handlers=handlers,
            log_level=log_level,
            forward_cancel=True,
            **client_options,
        ) as client:
            yield client
        return
    async with _in_memory(target, era, handlers, log_level, lost) as client:
        yield client


@contextlib.asynccontextmanager
async def _in_memory(
    server: Served, era: Era, handlers: ClientHandlers, log_level: str | None, lost: trio.Event
) -> AsyncIterator[McpClient]:
    client_end, server_end = memory_transport_pair(math.inf)
    client = McpClient(
        "legacy" if era == "legacy" else "modern",
        handlers.capabilities(),
        keep_history=False,
        forward_cancel=True,
        handlers=handlers,
    )
    client.log_level = log_level
    async with trio.open_nursery() as nursery:
        registry = current_registry_var.get(None)
        if registry is None or not registry.running:
            # Served outside any registry (an HTTP lifespan runs its own privately):
            # the in-process upstream gets one of its own, with the default grace.
            registry = Registry()
            await nursery.start(registry.run)

        async def serve() -> None:
            try:
                await serve_mcp_memory(server, server_end, registry)
            finally:
                lost.set()

        nursery.start_soon(serve)
        transport = MessageTransport(
            client_end.send.send, client_end.receive, "in-process upstream", client.inbound
        )
        client.transport = transport

        def reply(message: dict[str, Any]) -> None:
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                transport.transmit(message, None)

        client.server_requests = ServerRequests(handlers, nursery, reply)
        nursery.start_soon(transport.write)
        nursery.start_soon(transport.read)
        try:
            if client.era == "legacy":
                await client.initialize()
            yield client
        finally:
            client.transport = None
            client.server_requests = None
            nursery.cancel_scope.cancel()
