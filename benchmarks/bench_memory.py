"""Benchmark 6: memory per in-flight call, ours and the MCP SDK's.

A fresh server process (pinned to its core) is warmed up (no-op calls, and
slow calls started and cancelled, so every code path and free list exists),
collected (``gc.collect()`` in the server), and its resident set size read
from ``/proc/PID/status``.  Then *N* concurrent ``slow`` calls are started,
each on its own keep-alive connection of one legacy session (HTTP/1.1: one
call in flight per connection), and once every one of them has reported
progress (so it runs, and the server counts *N* in flight) the RSS is read
again.  The row is the growth divided by *N*: everything one more in-flight
call costs the server process (connection, request, stream, tool task,
registry entry), measured at N = 1,000 and 10,000.  Target: <= 30 KiB (issue 27).  Where the
heap of a call goes, independent of the machine's load: :mod:`.memory_sites`.
"""

from __future__ import annotations

import resource

import trio

from . import _client
from ._client import Connection, Server
from ._common import Row

NAME = "memory"
BENCH = "6 memory"
TARGET = 30 * 1024
#: Connections being opened at once (the server's listen backlog is larger).
OPENING = 64


async def _open_calls(server: Server, n: int) -> list[Connection]:
    conns: list[Connection] = []
    limiter = trio.CapacityLimiter(OPENING)

    async def one(i: int) -> None:
        async with limiter:
            conn = await Connection.open(server.port)
            conns.append(conn)
            body = _client.call_body("slow", {"key": f"m{i}"}, modern=False, progress=True)
            await conn.send(body, _client.call_headers(server, "slow", modern=False))
            await conn.read_until(b"notifications/progress")

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    return conns


async def warm(server: _client.Server) -> None:
    """Initialize *server* and take every path a measured call takes once."""
    from .bench_latency import notification

    if server.kind != "floor":
        await _client.initialize(server)
    for _ in range(50):
        await _client.call(server, "noop")
    if server.kind != "floor":
        await notification(server, 20)  # start and cancel slow calls: warm every path


async def per_call(kind: str, n: int) -> tuple[float, int]:
    """(RSS growth per in-flight call in bytes, calls the server had in flight)."""
    async with _client.server(kind) as server:
        await warm(server)
        await _client.stats(server, "gc")
        before = server.rss()
        conns = await _open_calls(server, n)
        in_flight = (await _client.stats(server, "gc"))["in_flight"]
        after = server.rss()
        for conn in conns:
            await conn.aclose()
    return (after - before) / n, in_flight


async def run(quick: bool) -> list[Row]:
    from .bench_e2e import sdk_installed

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sizes = (50,) if quick else (1000, 10_000)
    sizes = tuple(n for n in sizes if n + 100 < hard)
    kinds = ["floor", "ours"] + (["sdk-uvicorn"] if sdk_installed() else [])
    rows: list[Row] = []
    results: dict[tuple[str, int], float] = {}
    for n in sizes:
        for kind in kinds:
            growth, in_flight = await per_call(kind, n)
            results[(kind, n)] = growth
            who = {"floor": "floor (bare hypercorn, an SSE stream held open)", "ours": "ours"}.get(
                kind, "MCP SDK (uvicorn)"
            )
            label = (
                f"{who}: RSS growth per in-flight call, {n:,} slow calls ({in_flight:,} in flight)"
            )
            if kind == "ours":
                ok = growth <= TARGET and in_flight == n
                rows.append(
                    Row(
                        BENCH,
                        label,
                        f"{growth / 1024:.1f} KiB",
                        f"<= {TARGET // 1024} KiB",
                        "PASS" if ok else "MISS",
                    )
                )
            else:
                rows.append(Row(BENCH, label, f"{growth / 1024:.1f} KiB", "info"))
        rows.append(
            Row(
                BENCH,
                f"ours - floor: what the library adds per in-flight call at {n:,}",
                f"{(results[('ours', n)] - results[('floor', n)]) / 1024:.1f} KiB",
                "info",
            )
        )
        if ("sdk-uvicorn", n) in results:
            ratio = results[("ours", n)] / results[("sdk-uvicorn", n)]
            rows.append(
                Row(BENCH, f"ours / MCP SDK, per in-flight call at {n:,}", f"{ratio:.2f}x", "info")
            )
    if not sdk_installed():
        rows.append(Row(BENCH, "MCP SDK rows (`pip install mcp`)", "not available"))
    return rows
