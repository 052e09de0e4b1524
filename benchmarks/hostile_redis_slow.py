"""Slow Redis: what legacy sessions shared by two workers get (issue 36, item 7).

A ``redis-server`` of its own behind a latency-injecting proxy
(``tests/_support/latency_proxy.py``: every chunk half a round trip late each way),
two apps with the Redis backend (default ``hot_timeout``, 100 ms) served by
hypercorn's Trio worker, and a few clients, each opening a session on one
worker and calling ``echo`` on both alternately (so every session is looked
up in Redis by the worker that did not create it), opening a new session
every few calls.  Counted per round trip added: answers ``200``, the
retryable ``503`` (the session could not be confirmed: Redis too slow), and
``404`` (the session was declared unknown: the client must start over,
which a slow Redis must never cause), and how often a breaker opened.

At 80 ms (below the timeout) every call should succeed (a ``503`` there
means the event loop of this one process, which runs both workers, the
proxy and the clients, was starved past the timeout); at 300 ms (above) a
session a worker holds is served and one it cannot confirm gets 503.
``initialize`` refusals (``429``: the tenant, every client here, holds its
100 sessions across the workers) are counted on their own.

Skipped without ``redis-server`` on the PATH.
"""

from __future__ import annotations

import collections
import json
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

import httpx
import trio

from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer

from ._client import INITIALIZE, LEGACY
from ._common import Row
from ._hostile_serve import serving
from .hostile_redis import _redis

BENCH = "9 hostile"
CLIENTS = 6
CALLS_PER_SESSION = 4

# The proxy is a test harness module (tests/_support holds the shared harnesses).
sys.path.append(str(Path(__file__).resolve().parent.parent / "tests"))
from _support.latency_proxy import latency_proxy  # noqa: E402


def _server() -> McpServer:
    server = McpServer("bench-slow-redis")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    return server


def _headers(session: str | None) -> dict[str, str]:
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": LEGACY,
    }
    if session is not None:
        headers["mcp-session-id"] = session
    return headers


async def _measure(redis_port: int, delay: float, seconds: float) -> dict[str, Any]:
    counts: collections.Counter[str] = collections.Counter()
    opened = 0

    def on_event(event: Any) -> None:
        nonlocal opened
        opened += event.name == "backend.unavailable"

    async with latency_proxy(redis_port) as proxy:
        prefix = "bench" + secrets.token_hex(4)
        backends = [RedisBackend(proxy.url, prefix=prefix) for _ in range(2)]
        for backend in backends:
            backend.events.subscribe(on_event)
        apps = [McpHttpApp(_server(), backend=backend) for backend in backends]
        async with (
            serving(apps[0], keep_alive=5.0) as port_a,
            serving(apps[1], keep_alive=5.0) as port_b,
            httpx.AsyncClient(timeout=30) as client,
        ):
            urls = [f"http://127.0.0.1:{port}/mcp" for port in (port_a, port_b)]
            await trio.sleep(0.5)  # the backends connect (and load their scripts)
            proxy.delay = delay
            end = trio.current_time() + seconds

            async def session_loop(k: int) -> None:
                n = 0
                while trio.current_time() < end:
                    home = urls[k % 2]
                    reply = await client.post(home, headers=_headers(None), content=INITIALIZE)
                    session = reply.headers.get("mcp-session-id")
                    if reply.status_code != 200 or session is None:
                        counts[f"initialize {reply.status_code}"] += 1
                        continue
                    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                    await client.post(home, headers=_headers(session), json=note)
                    for _ in range(CALLS_PER_SESSION):
                        n += 1
                        params = {"name": "echo", "arguments": {"text": str(n)}}
                        body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
                        reply = await client.post(
                            urls[n % 2], headers=_headers(session), content=json.dumps(body)
                        )
                        counts[str(reply.status_code)] += 1

            async with trio.open_nursery() as nursery:
                for k in range(CLIENTS):
                    nursery.start_soon(session_loop, k)
            proxy.delay = 0.0
            await trio.sleep(0.5)  # what runs after an answer (a quota release) ends first
    return {"counts": counts, "opened": opened}


async def rows(quick: bool) -> list[Row]:
    name = "session errors under a slow Redis"
    if shutil.which("redis-server") is None:
        return [Row(BENCH, name, "skipped (no redis-server)")]
    binary = shutil.which("redis-server")
    assert binary is not None
    seconds = 2.0 if quick else 20.0
    table = []
    for delay in (0.08, 0.3):
        with _redis(binary) as redis:
            r = await _measure(int(redis.args[2]), delay, seconds)  # type: ignore[index]
        counts = r["counts"]
        calls = ("200", "503", "404")
        other = sum(v for k, v in counts.items() if k not in calls and not k.startswith("init"))
        refused = sum(v for k, v in counts.items() if k.startswith("initialize"))
        table.append(
            Row(
                BENCH,
                f"{name}: legacy calls over 2 workers, Redis +{delay * 1000:.0f} ms round trip,"
                f" {seconds:g} s: 404 | 503 | ok (| other); initialize refused; breaker openings",
                f"{counts['404']} | {counts['503']} | {counts['200']}"
                + (f" | {other}" if other else "")
                + f"; {refused}; {r['opened']}",
                "no 404 (503 only where Redis is slower than the hot timeout or the loop starved)",
                "PASS" if counts["404"] == 0 and not other else "MISS",
            )
        )
    return table
