"""Hung Redis: what a tool call costs while Redis answers nothing (issue 20).

A ``redis-server`` of its own on 127.0.0.1, the app with the Redis backend
(default ``op_timeout``, 2 s) served by hypercorn's Trio worker, one httpx
client calling sequentially over one connection: plain ``echo`` calls and
calls of a task-capable tool made the ordinary way (both pass the shared
per-tenant quota, which waited out ``op_timeout`` on every call before the
circuit breaker).  Measured healthy, then with the Redis process stopped
(``SIGSTOP``: it keeps its sockets and answers nothing), then how long after
``SIGCONT`` the backend reports itself back.  The first call of the outage
is reported on its own: it is the one that finds Redis hung (it waits the
backend's ``hot_timeout``); the breaker spares every later one.

Skipped without ``redis-server`` on the PATH.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import trio

from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import Context, McpServer, Tasks

from ._common import Row
from ._hostile_serve import serving, until

BENCH = "9 hostile"
MODERN = "2026-07-28"
TARGET_MS = 100.0
"""A call during the outage (after the first) must stay far below ``op_timeout`` (2 s)."""


@contextlib.contextmanager
def _redis(binary: str) -> Iterator[subprocess.Popen[bytes]]:
    """A throw-away redis-server on a free port of 127.0.0.1 (``.args[2]`` is the port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield process
    finally:
        os.kill(process.pid, signal.SIGCONT)
        process.kill()
        process.wait()


def _server() -> McpServer:
    server = McpServer("bench-hung-redis", extensions=[Tasks()])

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    @server.tool(task="optional")
    async def optional(ctx: Context, text: str) -> str:
        return text

    return server


def _call(request_id: int, name: str) -> tuple[dict[str, str], bytes]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    }
    params = {"name": name, "arguments": {"text": str(request_id)}, "_meta": meta}
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": name,
    }
    return headers, json.dumps(body).encode()


def _ms(samples: list[float]) -> str:
    if not samples:
        return "no samples"
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"


async def _measure(calls: int) -> dict[str, Any]:
    # Imported here: bench_hostile imports this module.

    binary = shutil.which("redis-server")
    assert binary is not None
    with _redis(binary) as redis:
        url = f"redis://127.0.0.1:{redis.args[2]}/0"  # type: ignore[index]
        backend = RedisBackend(url, prefix="bench" + secrets.token_hex(4))
        app = McpHttpApp(_server(), backend=backend)
        async with serving(app, keep_alive=2.0) as port, httpx.AsyncClient(timeout=30) as client:
            base = f"http://127.0.0.1:{port}/mcp"
            wrong = 0
            n = 0

            async def timed(name: str) -> float:
                nonlocal wrong, n
                n += 1
                headers, body = _call(n, name)
                start = time.perf_counter()
                reply = await client.post(base, headers=headers, content=body)
                took = time.perf_counter() - start
                if reply.status_code != 200 or f'"text":"{n}"' not in reply.text.replace(" ", ""):
                    wrong += 1
                return took

            for _ in range(5):  # warm-up
                await timed("echo")
            healthy = {
                name: [await timed(name) for _ in range(calls)] for name in ("echo", "optional")
            }
            os.kill(redis.pid, signal.SIGSTOP)
            try:
                first = await timed("echo")
                hung = {
                    name: [await timed(name) for _ in range(calls)] for name in ("echo", "optional")
                }
            finally:
                os.kill(redis.pid, signal.SIGCONT)
            thawed = time.perf_counter()
            with trio.move_on_after(30):
                await until(lambda: not backend.health_down)
            back = time.perf_counter() - thawed if not backend.health_down else None
    return {"healthy": healthy, "hung": hung, "first": first, "back": back, "wrong": wrong}


async def rows(quick: bool) -> list[Row]:
    if shutil.which("redis-server") is None:
        return [Row(BENCH, "hung Redis: tools/call latency", "skipped (no redis-server)")]
    calls = 20 if quick else 300
    r = await _measure(calls)
    worst = max(sorted(s)[min(len(s) - 1, int(len(s) * 0.99))] for s in r["hung"].values())
    ok = worst * 1000 < TARGET_MS and not r["wrong"]
    back = "never (30 s)" if r["back"] is None else f"{r['back']:.2f} s"
    return [
        Row(
            BENCH,
            f"hung Redis: tools/call, healthy Redis ({calls} each): plain | task-capable",
            f"{_ms(r['healthy']['echo'])} | {_ms(r['healthy']['optional'])}",
        ),
        Row(
            BENCH,
            f"hung Redis: tools/call, Redis SIGSTOPped ({calls} each): plain | task-capable",
            f"{_ms(r['hung']['echo'])} | {_ms(r['hung']['optional'])}; {r['wrong']} wrong answers",
            f"p99 < {TARGET_MS:g} ms (op_timeout 2 s)",
            "PASS" if ok else "MISS",
        ),
        Row(
            BENCH,
            "hung Redis: the first call of the outage (finds it hung); backend back after SIGCONT",
            f"{r['first'] * 1000:.1f} ms; {back}",
        ),
    ]
