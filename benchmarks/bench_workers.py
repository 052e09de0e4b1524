"""Benchmark 11: ``trio-mcp-cancel run --workers 2`` against one worker, and what Redis costs.

The runner (``trio-mcp-cancel run benchmarks._workers_app:server
--transport http``) with one worker and with two, both on the Redis
backend (``MCP_REDIS_URL``, a ``redis-server`` of its own), driven by wrk
with modern stateless no-op ``tools/call`` requests at 16 and 64
connections, the two deployments interleaved round by round.

Stated as what it is: this machine has two cores, and wrk (pinned to the
second) shares them with the workers, which are not pinned (the
supervisor's workers are scheduled by the kernel) and with redis-server.
Two workers can then at best use the core wrk leaves them; the expected
scaling on N dedicated cores is close to N x one worker, since workers
share nothing on a no-op call but the listening socket and Redis.  The
Redis cost is reported as a count, independent of the load: Redis
commands per call (``INFO stats`` ``total_commands_processed`` before and
after a run, divided by the calls wrk counted).  Without ``redis-server``
or ``wrk`` the rows say so.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from . import _client, _wrk
from ._client import Server
from ._common import Row
from ._redis import free_port, redis_server

NAME = "workers"
BENCH = "11 workers"
ROOT = Path(__file__).resolve().parent.parent
TARGET = "benchmarks._workers_app:server"


def _redis_commands(port: int) -> int:
    """``total_commands_processed`` of the Redis on *port* (its own INFO included)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"INFO stats\r\n")
        data = b""
        while b"total_commands_processed:" not in data or not data.endswith(b"\r\n\r\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    for line in data.decode().splitlines():
        if line.startswith("total_commands_processed:"):
            return int(line.split(":", 1)[1])
    raise RuntimeError("redis INFO without total_commands_processed")


@asynccontextmanager
async def _runner(workers: int, redis_port: int) -> AsyncIterator[Server]:
    port = free_port()
    command = [
        sys.executable, "-m", "trio_mcp_cancel", "run", TARGET, "--transport", "http",
        "--port", str(port), "--workers", str(workers), "--log-level", "warning",
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "MCP_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
    }
    process = await trio.lowlevel.open_process(
        command, cwd=str(ROOT), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    server = Server(f"workers-{workers}", process, port)
    try:
        with trio.fail_after(60):
            while True:
                try:
                    reply = await _client.call(server, "noop", modern=True)
                    if reply and "result" in reply:
                        break
                except (OSError, EOFError, ValueError):
                    pass
                if process.returncode is not None:
                    raise RuntimeError(f"the runner with {workers} workers exited")
                await trio.sleep(0.2)
        yield server
    finally:
        process.terminate()
        with trio.move_on_after(15) as waited:
            await process.wait()
        if waited.cancelled_caught:
            process.kill()
            await process.wait()


async def run(quick: bool) -> list[Row]:
    if shutil.which("redis-server") is None:
        return [Row(BENCH, "--workers rows", "not run: no redis-server installed")]
    if (_wrk.path() if quick else _wrk.ensure_installed()) is None:
        return [Row(BENCH, "--workers rows", "not run: wrk not installed")]
    rounds, seconds = (1, 1) if quick else (3, 2)
    connections = (16,) if quick else (16, 64)
    rates: dict[tuple[int, int], list[float]] = {}
    commands: list[float] = []
    async with redis_server() as redis_port, _runner(1, redis_port) as one:
        async with _runner(2, redis_port) as two:
            deployments = {1: one, 2: two}
            lua = _wrk.script(one, "noop", modern=True)
            for server in deployments.values():
                await _wrk.run(lua, server.port, 16, 1)  # warm up
            for round_ in range(rounds):
                for conns in connections:
                    order = (1, 2) if round_ % 2 == 0 else (2, 1)
                    for workers in order:
                        before = _redis_commands(redis_port)
                        result = await _wrk.run(lua, deployments[workers].port, conns, seconds)
                        after = _redis_commands(redis_port)
                        if result.errors or not result.requests:
                            raise RuntimeError(
                                f"--workers {workers} x{conns}: {result.errors} errors,"
                                f" {result.requests} responses"
                            )
                        rates.setdefault((workers, conns), []).append(result.rate)
                        commands.append((after - before - 2) / result.requests)
            legacy = await _legacy_commands(redis_port, deployments, seconds)
    rows = []
    for workers in (1, 2):
        cells = ", ".join(
            f"{c}: {statistics.median(rates[(workers, c)]):,.0f}" for c in connections
        )
        rows.append(
            Row(
                BENCH,
                f"runner `--workers {workers}` (Redis backend, modern stateless no-op,"
                f" workers unpinned, wrk on the second of 2 cores): req/s at connections",
                cells,
            )
        )
    for conns in connections:
        values = [a / b for a, b in zip(rates[(2, conns)], rates[(1, conns)], strict=True)]
        rows.append(
            Row(
                BENCH,
                f"`--workers 2` / `--workers 1`, {conns} conn (2 cores shared with wrk"
                " and redis-server: at most ~1.5x here; ~N x on N dedicated cores)",
                f"{statistics.median(values):.2f}x",
                "info",
            )
        )
    rows.append(
        Row(
            BENCH,
            "Redis commands per modern no-op `tools/call` (a count, load-independent)",
            f"{max(0.0, statistics.median(commands)):.2f}",
            "info",
        )
    )
    for workers, (per_call, errors, requests) in legacy.items():
        rows.append(
            Row(
                BENCH,
                f"Redis commands per legacy-session no-op `tools/call`, `--workers {workers}`"
                f" ({errors} wrk errors in {requests:,} responses)",
                f"{max(0.0, per_call):.2f}",
                "info",
            )
        )
    return rows


async def _legacy_commands(
    redis_port: int, deployments: dict[int, Server], seconds: int
) -> dict[int, tuple[float, int, int]]:
    """Redis commands per call in a legacy session (its record lives in Redis), per deployment."""
    found = {}
    for workers, server in deployments.items():
        await _client.initialize(server)
        lua = _wrk.script(server, "noop", modern=False)
        before = _redis_commands(redis_port)
        result = await _wrk.run(lua, server.port, 16, seconds)
        after = _redis_commands(redis_port)
        if not result.requests:
            raise RuntimeError(f"--workers {workers} legacy: no responses")
        found[workers] = ((after - before - 2) / result.requests, result.errors, result.requests)
    return found
