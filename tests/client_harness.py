"""What the client's tests share: a server over real sockets, and cancelling a relayed call.

Used by ``tests/client/test_client.py`` and ``tests/tasks/test_client_tasks.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from trio_mcp_cancel import Registry, open_registry
from trio_mcp_cancel.http import McpHttpApp, serve
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.testing import McpTestClient, PendingCall

__all__ = ["cancel_relay", "http_server"]


async def cancel_relay(to_a: McpTestClient, started: trio.Event) -> tuple[PendingCall, float]:
    """Call A's ``relay``, cancel it a second after B's tool started: ``(call, when)``."""
    call = to_a.start_call("relay")
    await started.wait()
    await trio.sleep(1)
    cancelled_at = trio.current_time()
    await call.cancel("user pressed stop")
    return call, cancelled_at


@asynccontextmanager
async def http_server(
    server: McpServer, **registry_config: Any
) -> AsyncIterator[tuple[str, Registry]]:
    """*server* over hypercorn on a random 127.0.0.1 port: ``(url, registry)``."""
    from hypercorn.config import Config

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.graceful_timeout = 0.5
    async with open_registry(**registry_config) as registry, trio.open_nursery() as nursery:
        binds = await nursery.start(serve, McpHttpApp(server, registry), config)
        yield f"{binds[0]}/mcp", registry
        nursery.cancel_scope.cancel()
