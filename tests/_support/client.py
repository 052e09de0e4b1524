"""What the client's tests share: a server over real sockets, and cancelling a relayed call.

Used by ``tests/client/test_client.py``, ``tests/tasks/test_client_tasks.py`` and the
Node-client tests of ``tests/interop``.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio

from trio_mcp_cancel import Registry, open_registry
from trio_mcp_cancel.http import McpHttpApp, serve
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.testing import McpTestClient, PendingCall, assert_no_leaks

from _support.repo_paths import ROOT

__all__ = ["cancel_relay", "http_server", "hypercorn_checked", "node_report"]


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


@asynccontextmanager
async def hypercorn_checked(server: McpServer, registry: Registry) -> AsyncIterator[str]:
    """*server* on plain hypercorn (its own ``serve``, no guard) on a random 127.0.0.1 port.

    Yields the endpoint URL; when the block ends normally, every request has
    finished and nothing leaked (the Node-client tests end with it).
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.accesslog = None
    config.graceful_timeout = 0.5
    async with trio.open_nursery() as nursery:
        app = McpHttpApp(server, registry)
        binds = await nursery.start(partial(hypercorn_serve, app, config))
        try:
            yield f"{binds[0]}/mcp"
            await registry.wait_idle()
            assert_no_leaks(registry)
        finally:
            nursery.cancel_scope.cancel()


async def node_report(node: Path, script: Path, *args: str) -> dict[str, Any]:
    """Run a Node client *script* (copied next to the pinned packages) and read its report.

    The script prints one JSON report as its last line; a non-zero exit fails
    the test with the end of its stderr.
    """
    sys.path.insert(0, str(ROOT / "conformance"))
    import node_tools

    copied = shutil.copy(script, node_tools.TOOLS / script.name)
    done = await trio.run_process(
        [str(node), str(copied), *args],
        cwd=node_tools.TOOLS,
        env=node_tools.env(),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return report
