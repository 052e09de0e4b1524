"""Benchmark 4: requests/s of a no-op ``tools/call`` through hypercorn.

One server (hypercorn's Trio worker on 127.0.0.1, ``McpHttpApp``) serves two
tools with the same empty body: ``noop`` is tracked like every cancellable
tool (a cancel scope, a registry entry, and a task watching for
``http.disconnect`` while it runs), ``noop_untracked`` is registered with
``cancellable=False`` and answered with none of that.  Concurrent httpx
clients on keep-alive connections call one tool, then the other, round by
round; the median of the rounds' paired time ratios is the cost of
tracking (target: under 5%).  The server runs in a process of its own, so
the client's work is not counted against it.

What tracking costs per call is mostly one Trio task: the watcher that waits
for ``http.disconnect`` while the tool runs (disconnect is cancellation, and
a ``send()`` cannot detect it).  A tool that finishes in microseconds can
opt out with ``cancellable=False``.
"""

from __future__ import annotations

import json
import sys
import time
from functools import partial
from pathlib import Path
from statistics import median
from typing import Any

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from trio_mcp_cancel import open_registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer, ToolContext

from ._common import Row, Timer, interleave, paired_ratio

NAME = "e2e"
ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.05
CLIENTS = 8
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

server = McpServer("bench")


@server.tool()
async def noop(ctx: ToolContext) -> str:
    return "ok"


@server.tool(cancellable=False)
async def noop_untracked(ctx: ToolContext) -> str:
    return "ok"


async def _measure(url: str, n: int, repeats: int) -> dict[str, list[float]]:
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
        reply = await client.post(url, headers=HEADERS, json=init)
        headers = {**HEADERS, "mcp-session-id": reply.headers["mcp-session-id"]}
        return await interleave(
            {
                "tracked": _timer(client, url, headers, "noop"),
                "untracked": _timer(client, url, headers, "noop_untracked"),
            },
            n,
            repeats,
        )


def _timer(client: httpx.AsyncClient, url: str, headers: dict[str, str], tool: str) -> Timer:
    async def timed(n: int) -> float:
        per_client = n // CLIENTS
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": tool}}

        async def worker(offset: int) -> None:
            for i in range(per_client):
                reply = await client.post(url, headers=headers, json={**body, "id": offset + i})
                assert _final(reply)["result"]["content"][0]["text"] == "ok"

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for c in range(CLIENTS):
                nursery.start_soon(worker, c * per_client)
        return time.perf_counter() - start

    return timed


def _final(reply: httpx.Response) -> Any:
    """The JSON-RPC response: the body, or the last event of an SSE stream.

    A cancellable call is answered on an SSE stream opened at once (so a
    silent tool survives read timeouts); the untracked one with plain JSON.
    """
    if reply.headers["content-type"].startswith("text/event-stream"):
        data = [line for line in reply.text.splitlines() if line.startswith("data: ")]
        return json.loads(data[-1][6:])
    return reply.json()


def serve_forever() -> None:
    """The server process: hypercorn on 127.0.0.1, its URL printed on stdout."""

    async def main() -> None:
        async with open_registry() as registry, trio.open_nursery() as nursery:
            config = Config()
            config.bind = ["127.0.0.1:0"]
            config.errorlog = None
            app = McpHttpApp(server, registry)
            binds = await nursery.start(partial(serve, app, config))  # type: ignore[arg-type]
            print(binds[0], flush=True)

    trio.run(main)


async def run(quick: bool) -> list[Row]:
    n, repeats = (200, 3) if quick else (320, 21)
    # The server gets a process (and a core) of its own, so the client's work
    # does not count against it and the rates are the server's.
    code = "from benchmarks.bench_e2e import serve_forever; serve_forever()"
    process = await trio.lowlevel.open_process([sys.executable, "-c", code], cwd=ROOT, stdout=-1)
    try:
        assert process.stdout is not None
        with trio.fail_after(30):
            url = b""
            while not url.endswith(b"\n"):
                chunk = await process.stdout.receive_some()
                if not chunk:
                    raise RuntimeError("the benchmark server exited")
                url += chunk
        samples = await _measure(url.decode().strip() + "/mcp", n, repeats)
    finally:
        process.terminate()
        with trio.move_on_after(10):
            await process.wait()
    overhead = paired_ratio(samples["tracked"], samples["untracked"]) - 1
    rate = {name: 1 / median(values) for name, values in samples.items()}
    return [
        Row(
            "4 e2e",
            "no-op `tools/call` via hypercorn, untracked",
            f"{rate['untracked']:,.0f} req/s",
        ),
        Row("4 e2e", "no-op `tools/call` via hypercorn, tracked", f"{rate['tracked']:,.0f} req/s"),
        Row(
            "4 e2e",
            "tracking overhead (time per request, tracked / untracked - 1)",
            f"{overhead:+.1%}",
            f"< {TARGET:.0%}",
            "PASS" if overhead < TARGET else "MISS",
        ),
    ]
