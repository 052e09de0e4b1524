"""Hostile: a worker killed under ``trio-mcp-cancel run --workers 2`` (issue 20).

The runner's supervisor serves this module's ``server`` with two workers on
one real ``redis-server``.  Each round starts a task, reads which worker runs
it (the task's ``statusMessage`` names the pid), and ``kill -9``\\s that worker
while a client keeps sending requests over fresh connections.  Reported: the
time from the kill to the supervisor's "serving" line for the replacement,
the time until the dead worker's task reads ``failed`` (``tasks/get``, polled),
and how many of the requests sent meanwhile were answered (all of them,
since the other worker keeps accepting on the shared socket).  A full run
spaces the rounds past the supervisor's backoff reset (10 s); ``--quick``
does one round.  Without ``redis-server`` the row says it was not run.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from trio_mcp_cancel.server import Context, McpServer, Tasks

from ._common import Row
from .bench_cross_process import _headers, _message, _redis, _result

BENCH = "9 hostile"
ROOT = Path(__file__).resolve().parent.parent
_LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
_SERVING = re.compile(r"worker \d+ \(pid (\d+)\) serving")

server = McpServer("hostile-workers-bench", extensions=[Tasks()])


@server.tool()
async def whoami(ctx: Context) -> str:
    """The pid of the worker that answered."""
    return str(os.getpid())


@server.tool(task="optional")
async def hold(ctx: Context) -> str:
    """Name this worker in the task's statusMessage, then run until stopped."""
    await ctx.report_progress(1, message=f"pid {os.getpid()}")
    await trio.sleep_forever()
    raise AssertionError("unreachable")


class _Supervisor:
    """The ``trio-mcp-cancel run`` process and its log lines, each with when it arrived."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.lines: list[tuple[float, str]] = []
        self.url = ""

    def serving(self) -> list[tuple[float, int]]:
        return [(at, int(m[1])) for at, line in self.lines if (m := _SERVING.search(line))]

    async def wait(self, pattern: re.Pattern[str], count: int = 1) -> list[re.Match[str]]:
        with trio.fail_after(60):
            while True:
                found = [m for _, line in self.lines if (m := pattern.search(line))]
                if len(found) >= count:
                    return found
                if self.process.poll() is not None:
                    raise RuntimeError("the supervisor exited: " + self._tail())
                await trio.sleep(0.01)

    def _tail(self) -> str:
        return "\n".join(line for _, line in self.lines[-30:])


@asynccontextmanager
async def _supervisor(redis_url: str) -> AsyncIterator[_Supervisor]:
    command = [
        sys.executable, "-m", "trio_mcp_cancel", "run", "benchmarks.hostile_workers:server",
        "--transport", "http", "--port", "0", "--workers", "2", "--log-level", "info",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MCP_REDIS_URL": redis_url}
    process = await trio.lowlevel.open_process(
        command, cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    stderr = process.stderr
    supervisor = _Supervisor(process)
    try:
        async with trio.open_nursery() as nursery:

            async def read_log() -> None:
                buffer = b""
                async for chunk in stderr:
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    now = time.monotonic()
                    supervisor.lines += [(now, line.decode(errors="replace")) for line in lines]

            nursery.start_soon(read_log)
            (listening,) = await supervisor.wait(_LISTENING)
            supervisor.url = f"http://127.0.0.1:{listening[1]}/mcp"
            await supervisor.wait(_SERVING, 2)
            yield supervisor
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(20):
                await process.wait()
            nursery.cancel_scope.cancel()
    finally:
        if process.poll() is None:
            process.kill()
            await process.wait()


async def _call(url: str, i: int, method: str, params: dict[str, Any]) -> Any:
    """One request over a fresh connection (a kept-alive one may be the killed worker's)."""
    name = params.get("name") or params.get("taskId") or ""
    async with httpx.AsyncClient(timeout=10) as client:
        reply = await client.post(url, headers=_headers(method, name),
                                  json=_message(i, method, params))  # fmt: skip
    return _result(reply)


async def _round(supervisor: _Supervisor, i: int) -> dict[str, Any]:
    url = supervisor.url
    created = await _call(url, i, "tools/call", {"name": "hold", "arguments": {}})
    task_id = created["taskId"]
    with trio.fail_after(30):
        while True:  # until the task names its worker
            status = await _call(url, i, "tasks/get", {"taskId": task_id})
            if "pid" in (status.get("statusMessage") or ""):
                break
            await trio.sleep(0.02)
    victim = int(status["statusMessage"].rsplit(" ", 1)[1])
    servings = len(supervisor.serving())
    sent = answered = 0
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    failed_after = serving_after = None
    with trio.fail_after(60):
        while failed_after is None or serving_after is None:
            if failed_after is None:
                got = await _call(url, i, "tasks/get", {"taskId": task_id})
                if got["status"] == "failed":
                    failed_after = time.monotonic() - killed
            if serving_after is None and len(supervisor.serving()) > servings:
                serving_after = supervisor.serving()[-1][0] - killed
            sent += 1
            try:
                await _call(url, i, "tools/call", {"name": "whoami", "arguments": {}})
                answered += 1
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            await trio.sleep(0.01)
    return {"serving": serving_after, "failed": failed_after, "sent": sent, "answered": answered}


async def rows(quick: bool) -> list[Row]:
    label = "worker kill -9 under trio-mcp-cancel run --workers 2"
    if shutil.which("redis-server") is None:
        return [Row(BENCH, label, "not run: no redis-server installed")]
    results = []
    async with _redis() as redis_url, _supervisor(redis_url) as supervisor:
        for i in range(1 if quick else 3):
            if i:
                await trio.sleep(10.5)  # past the backoff reset: each round is a first death
            results.append(await _round(supervisor, 100 * i))
    serving = statistics.median(r["serving"] for r in results)
    failed = statistics.median(r["failed"] for r in results)
    sent, answered = sum(r["sent"] for r in results), sum(r["answered"] for r in results)
    rounds = f"median of {len(results)}" if len(results) > 1 else "1 round"
    return [
        Row(
            BENCH,
            f"{label}: to the replacement serving / to the dead worker's task reading failed",
            f"{serving:.2f} s / {failed * 1000:.0f} ms ({rounds})",
        ),
        Row(
            BENCH,
            f"{label}: requests answered meanwhile (fresh connections)",
            f"{answered}/{sent}",
            f"{sent}/{sent}",
            "PASS" if answered == sent else "MISS",
        ),
    ]
