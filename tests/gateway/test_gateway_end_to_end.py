"""A gateway on HTTP in front of an upstream on HTTP and one on stdio, driven by the official SDK.

The gateway (``McpHttpApp`` on hypercorn, 127.0.0.1) mounts ``web`` (another
``McpHttpApp`` in this process, modern era), ``old`` (the same, legacy era)
and ``cli`` (``tests/_support/gateway_upstream.py``, a stdio server in a child process).  Each
test starts a call of an upstream's ``wait`` tool through the gateway,
cancels it one way, and reads the upstream's own log: the upstream request
stopped at its flag, within the grace period of the cancel.

* the SDK client in the legacy era cancels with ``notifications/cancelled``;
* the SDK client in the modern era, and this library's client, close the
  request's stream;
* a raw modern POST whose connection is closed.

Real clock and sockets, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx2
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp import Client

from trio_mcp_cancel import Registry, RequestCancelled, checkpoint_cancelled
from trio_mcp_cancel.client import open_http_client
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import Context, McpServer

from _support.repo_paths import ROOT

GRACE = 1.0
TIMEOUT = 20
UPSTREAM_APP = Path(__file__).parent.parent / "_support" / "gateway_upstream.py"

pytestmark = [
    pytest.mark.mcp_registry(grace_period=GRACE),
    pytest.mark.slow,
    pytest.mark.subprocess,
]


@attrs.define
class Running:
    url: str
    web_log: list[str]
    cli_log: Path

    def lines(self, upstream: str) -> list[str]:
        if upstream in ("web", "old"):
            return list(self.web_log)
        return self.cli_log.read_text().splitlines() if self.cli_log.exists() else []

    async def wait_for(self, upstream: str, prefix: str) -> str:
        while True:
            for line in self.lines(upstream):
                if line.startswith(prefix):
                    return line
            await trio.sleep(0.01)


def web_upstream(log: list[str]) -> McpServer:
    server = McpServer("web-upstream")

    @server.tool()
    async def wait(ctx: Context, label: str = "") -> str:
        log.append(f"started {label}")
        try:
            while True:
                await trio.sleep(0.02)
                await checkpoint_cancelled()
        except RequestCancelled as exc:
            log.append(f"stopped {label} {exc.kind}")
            raise

    return server


async def serve_app(nursery: trio.Nursery, app: Any) -> str:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.accesslog = None
    config.graceful_timeout = 0.5
    binds = await nursery.start(partial(serve, app, config))
    return f"{binds[0]}/mcp"


@asynccontextmanager
async def running(registry: Registry, tmp_path: Path) -> AsyncIterator[Running]:
    web_log: list[str] = []
    cli_log = tmp_path / "cli-upstream.log"
    async with trio.open_nursery() as nursery:
        web_url = await serve_app(nursery, McpHttpApp(web_upstream(web_log), registry))
        gateway = McpServer("gateway")
        web = gateway.mount(web_url, namespace="web")
        old = gateway.mount(web_url, namespace="old", era="legacy")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "UPSTREAM_LOG": str(cli_log)}
        env["MCP_GRACE_PERIOD"] = str(GRACE)
        cli = gateway.mount(
            [sys.executable, str(UPSTREAM_APP)],
            namespace="cli",
            client_options={"env": env, "cwd": str(ROOT)},
        )
        url = await serve_app(nursery, McpHttpApp(gateway, registry))
        assert web.client is not None, web.error
        assert old.client is not None and old.client.era == "legacy", old.error
        assert cli.client is not None, cli.error
        try:
            yield Running(url, web_log, cli_log)
        finally:
            nursery.cancel_scope.cancel()


async def cancel_with_sdk(url: str, mode: str, tool: str, label: str, fx: Running) -> None:
    async with Client(url, mode=mode) as client, trio.open_nursery() as nursery:
        nursery.start_soon(client.call_tool, tool, {"label": label})
        await fx.wait_for(tool.split("_")[0], f"started {label}")
        nursery.cancel_scope.cancel()


async def cancel_with_our_client(url: str, tool: str, label: str, fx: Running) -> None:
    async with open_http_client(url, era="modern") as client, trio.open_nursery() as nursery:
        nursery.start_soon(client.call_tool, tool, {"label": label})
        await fx.wait_for(tool.split("_")[0], f"started {label}")
        nursery.cancel_scope.cancel()


async def close_the_connection(url: str, tool: str, label: str, fx: Running) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": {"label": label},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    http = httpx2.AsyncClient()
    async with http.stream("POST", url, json=body, headers=headers) as response:
        assert response.status_code == 200
        await fx.wait_for(tool.split("_")[0], f"started {label}")
    await http.aclose()  # the connection goes with it


WAYS = ["sdk-legacy", "sdk-modern", "our-client-modern", "connection-close"]


@pytest.mark.parametrize("upstream", ["web", "old", "cli"])
async def test_every_cancel_at_the_gateway_stops_the_upstream_tool_within_the_grace_period(
    upstream: str, mcp_registry: Registry, tmp_path: Path
) -> None:
    tool = f"{upstream}_wait"
    with trio.fail_after(TIMEOUT):
        async with running(mcp_registry, tmp_path) as fx:
            for way in WAYS:
                if way == "sdk-legacy":
                    await cancel_with_sdk(fx.url, "legacy", tool, way, fx)
                elif way == "sdk-modern":
                    await cancel_with_sdk(fx.url, "2026-07-28", tool, way, fx)
                elif way == "our-client-modern":
                    await cancel_with_our_client(fx.url, tool, way, fx)
                else:
                    await close_the_connection(fx.url, tool, way, fx)
                cancelled_at = trio.current_time()
                with trio.fail_after(GRACE):
                    stopped = await fx.wait_for(upstream, f"stopped {way}")
                assert trio.current_time() - cancelled_at < GRACE
                # It stopped at its flag (the polite phase), cancelled by the gateway's client.
                # Modern HTTP closes the upstream request's stream; legacy HTTP and
                # stdio send notifications/cancelled.
                expected_kind = "disconnect" if upstream == "web" else "client"
                assert stopped == f"stopped {way} {expected_kind}"
