"""Cross-process cancel latency: ``tasks/cancel`` sent to process B, the tool in A sees the flag.

Two ``hypercorn --worker-class trio`` processes (one worker each) serve
``benchmarks._cross_app:app`` on one real ``redis-server`` (``MCP_REDIS_URL``).
Each round starts a task on A, then sends its ``tasks/cancel`` either to A
itself (**same process**: the flag is set while A handles the request) or
to B (**cross process**: B checks the record in Redis and publishes the
cancel; A's subscription delivers it and A sets the flag).  The latency is
from just before the cancel's POST is sent to the moment A's registry sets
the polled flag, both read from the wall clock of the one machine (A
prints its moment on stdout).  Both variants include one HTTP request, so
the difference is what crossing processes through Redis costs.  The two
variants alternate round by round.

Needs ``redis-server`` (Debian package); without it the rows say so.
"""

from __future__ import annotations

import json
import os
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

from ._common import Row
from ._redis import redis_server

NAME = "cross_process"
ROOT = Path(__file__).resolve().parent.parent
PV = "2026-07-28"
TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


@asynccontextmanager
async def _redis() -> AsyncIterator[str]:
    async with redis_server() as port:
        yield f"redis://127.0.0.1:{port}/0"


class _Server:
    def __init__(self, process: trio.Process, url: str) -> None:
        self.process = process
        self.url = url
        self.flags: dict[str, float] = {}
        self.changed = trio.Event()


@asynccontextmanager
async def _hypercorn(redis_url: str) -> AsyncIterator[_Server]:
    command = [
        sys.executable, "-m", "hypercorn", "--worker-class", "trio", "--workers", "1",
        "--bind", "127.0.0.1:0", "benchmarks._cross_app:app",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MCP_REDIS_URL": redis_url}
    env["MCP_GRACE_PERIOD"] = "30"
    process = await trio.lowlevel.open_process(
        command, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    stdout, stderr = process.stdout, process.stderr
    log = bytearray()
    try:
        async with trio.open_nursery() as nursery:
            server = _Server(process, "")

            async def read_log() -> None:
                async for chunk in stderr:
                    log.extend(chunk)

            async def read_flags() -> None:
                buffer = b""
                async for chunk in stdout:
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        parts = line.decode().split()
                        if len(parts) == 3 and parts[0] == "FLAG":
                            server.flags[parts[1]] = float(parts[2])
                            server.changed.set()

            nursery.start_soon(read_log)
            nursery.start_soon(read_flags)
            with trio.fail_after(30):
                while b"Running on http://127.0.0.1:" not in log:
                    if process.poll() is not None:
                        raise RuntimeError(f"hypercorn exited: {log.decode()[-2000:]}")
                    await trio.sleep(0.05)
            port = log.split(b"Running on http://127.0.0.1:")[1].split(b" ")[0].decode()
            server.url = f"http://127.0.0.1:{port}/mcp"
            yield server
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(10):
                await process.wait()
            nursery.cancel_scope.cancel()
    finally:
        if process.poll() is None:
            process.kill()
            await process.wait()


def _message(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": PV,
            "io.modelcontextprotocol/clientCapabilities": TASKS}  # fmt: skip
    return {"jsonrpc": "2.0", "id": request_id, "method": method,
            "params": {**params, "_meta": meta}}  # fmt: skip


def _headers(method: str, name: str) -> dict[str, str]:
    return {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": PV,
        "mcp-method": method,
        "mcp-name": name,
    }


def _result(response: httpx.Response) -> Any:
    text = response.text
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()["result"]
    data = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    return json.loads(data[-1])["result"]


async def _round(client: httpx.AsyncClient, a: _Server, target: _Server, i: int) -> float:
    created = await client.post(
        a.url, headers=_headers("tools/call", "spin"),
        json=_message(i, "tools/call", {"name": "spin", "arguments": {}}),
    )  # fmt: skip
    task_id = _result(created)["taskId"]
    await trio.sleep(0.01)  # the task is running
    sent = time.time()
    ack = await client.post(
        target.url, headers=_headers("tasks/cancel", task_id),
        json=_message(i + 1, "tasks/cancel", {"taskId": task_id}),
    )  # fmt: skip
    assert "result" in ack.json(), ack.text
    with trio.fail_after(10):
        while task_id not in a.flags:
            a.changed = trio.Event()
            await a.changed.wait()
    return a.flags.pop(task_id) - sent


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


async def rows(quick: bool) -> list[Row]:
    if shutil.which("redis-server") is None:
        return [Row("6 cross-process", "cancel latency", "not run: no redis-server installed")]
    rounds = 20 if quick else 300
    samples: dict[str, list[float]] = {"same": [], "cross": []}
    async with _redis() as url, _hypercorn(url) as a, _hypercorn(url) as b:
        async with httpx.AsyncClient(timeout=10) as client:
            for i in range(rounds + 5):
                order = [("same", a), ("cross", b)] if i % 2 else [("cross", b), ("same", a)]
                for name, target in order:
                    latency = await _round(client, a, target, 10 * i)
                    if i >= 5:  # warm-up rounds are not counted
                        samples[name].append(latency)
    out: list[Row] = []
    labels = {
        "same": "`tasks/cancel` to the process running the task -> flag set",
        "cross": "`tasks/cancel` to another process -> Redis pub/sub -> flag set",
    }
    for name in ("same", "cross"):
        values = samples[name]
        out.append(Row("6 cross-process", f"{labels[name]}: p50", _ms(statistics.median(values))))
        out.append(Row("6 cross-process", f"{labels[name]}: p99", _ms(_percentile(values, 0.99))))
    extra = statistics.median(samples["cross"]) - statistics.median(samples["same"])
    out.append(Row("6 cross-process", "p50 cost of crossing processes", _ms(extra), "info"))
    count = len(samples["same"])
    out.append(Row("6 cross-process", "rounds per variant", f"{count} (2 processes, 1 Redis)"))
    return out
