"""Benchmark 11: ``trio-mcp-cancel run --workers N`` scaling, and what the Redis backend costs.

The runner (``trio-mcp-cancel run benchmarks._workers_app:server
--transport http``) with one worker and with two, each on the in-memory
backend (``--allow-unshared``) and on Redis (``MCP_REDIS_URL``, a
``redis-server`` of its own), driven by wrk with modern stateless no-op
``tools/call`` requests at 16 and 64 connections, the four deployments
interleaved round by round.

**Core layout** (this machine has two cores; stated in the rows too): one
worker is pinned to core 0 and wrk to core 1, so one worker has a core of
its own.  Two workers are pinned one to each core (the supervisor's
children, pinned by PID once they run), and wrk stays on core 1, so the
second worker shares its core with wrk (and redis-server, pinned to core 1
as well).  The target, 2 workers >= 0.85 x 2 x one worker, assumes wrk on a
third core; here two workers can at best use two cores less what wrk and
redis-server take.  So the rows also say where the difference goes, from
counts that do not depend on the machine's load: the CPU time each process
used during the run (``/proc/PID/stat`` for the workers, wrk's rusage, and
Redis's own ``INFO cpu``), giving

    efficiency = (CPU the two workers got / 2 x one worker's)
                 x (calls per worker CPU-second, two workers / one).

The first factor is the cores the layout leaves the workers; the second is
what a worker loses by having a sibling (the shared listening socket, Redis
traffic between them), the part the library can change.

**The Redis backend's cost per call** (one worker, 16 connections, memory
and Redis interleaved): req/s on Redis / in memory and the Redis commands
per call (``INFO commandstats`` before and after: a count, independent of
the load) for four workloads: modern stateless no-op calls, no-op calls in
a legacy session (its record lives in Redis), ``notifications/cancelled``
for a request not running here (on Redis it is published for the other
workers), and task-augmented calls (the task record is written to Redis).
Every response of these runs is checked (status and body).  Without
``redis-server`` or ``wrk`` the rows say so.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from . import _client, _wrk
from ._client import MODERN, Server
from ._common import Row
from ._redis import free_port, redis_server

NAME = "workers"
BENCH = "11 workers"
ROOT = Path(__file__).resolve().parent.parent
TARGET = "benchmarks._workers_app:server"
EFFICIENCY_TARGET = 0.85
TASKS = "io.modelcontextprotocol/tasks"
_TICK = os.sysconf("SC_CLK_TCK")


def _redis_info(port: int) -> dict[str, str]:
    """``INFO cpu commandstats`` of the Redis on *port*, as ``{key: value}``."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"INFO cpu commandstats\r\n")
        data = b""
        while True:
            chunk = conn.recv(65536)
            data += chunk
            if not chunk or (data.startswith(b"$") and _complete(data)):
                break
    lines = data.decode().splitlines()[1:]
    return dict(line.split(":", 1) for line in lines if ":" in line and not line.startswith("#"))


def _complete(data: bytes) -> bool:
    """Whether a RESP bulk string (``$<n>\\r\\n<n bytes>\\r\\n``) is all in *data*."""
    head, _, rest = data.partition(b"\r\n")
    return len(rest) >= int(head[1:]) + 2


def _commands(info: dict[str, str]) -> dict[str, int]:
    """Calls per Redis command (``INFO`` itself left out: the harness asks it)."""
    found = {}
    for key, value in info.items():
        if key.startswith("cmdstat_") and key != "cmdstat_info":
            found[key[8:]] = int(value.split("calls=", 1)[1].split(",", 1)[0])
    return found


def _redis_cpu(info: dict[str, str]) -> float:
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) process *pid* has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return sorted(found)


@dataclass
class Deployment:
    """A runner: *workers* worker processes (*pids*) on one backend."""

    workers: int
    backend: str
    server: Server
    pids: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"--workers {self.workers}, {self.backend}"


@asynccontextmanager
async def _runner(workers: int, redis_port: int | None) -> AsyncIterator[Deployment]:
    """The runner with *workers* on Redis (*redis_port*) or in memory, pinned as the doc says."""
    port = free_port()
    command = [
        sys.executable, "-m", "trio_mcp_cancel", "run", TARGET, "--transport", "http",
        "--port", str(port), "--workers", str(workers), "--log-level", "warning",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MCP_REDIS_URL", None)
    if redis_port is not None:
        env["MCP_REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
        # What is measured is Redis's cost while healthy: with the default 0.1 s, a
        # loaded machine can open the circuit breaker mid-run, and task-augmented
        # calls then fall back to ordinary ones (the response check would fail).
        env["MCP_REDIS_HOT_TIMEOUT"] = "2"
    elif workers > 1:
        command.append("--allow-unshared")  # stateless calls need nothing shared
    server_core, _ = _client.cores()
    if workers == 1:  # no supervisor: the runner is the worker
        command = _client.pinned(command, server_core)
    process = await trio.lowlevel.open_process(
        command, cwd=str(ROOT), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    backend = "Redis" if redis_port is not None else "memory"
    deployment = Deployment(workers, backend, Server(f"workers-{workers}-{backend}", process, port))
    try:
        with trio.fail_after(60):
            await _ready(deployment)
        yield deployment
    finally:
        process.terminate()
        with trio.move_on_after(15) as waited:
            await process.wait()
        if waited.cancelled_caught:
            process.kill()
            await process.wait()


async def _ready(deployment: Deployment) -> None:
    """Wait until every worker runs and the deployment answers; pin two workers apart."""
    process = deployment.server.process
    while True:
        if process.returncode is not None:
            raise RuntimeError(f"the runner ({deployment.name}) exited")
        pids = [process.pid] if deployment.workers == 1 else _children(process.pid)
        if len(pids) == deployment.workers:
            try:
                reply = await _client.call(deployment.server, "noop", modern=True)
            except (OSError, EOFError, ValueError):
                reply = None
            if reply and "result" in reply:
                break
        await trio.sleep(0.2)
    deployment.pids = pids
    cores = [int(core) for core in _client.cores() if core is not None]
    if deployment.workers > 1 and cores:  # worker i on core i (0: the server's, 1: wrk's)
        for index, pid in enumerate(pids):
            os.sched_setaffinity(pid, {cores[index % len(cores)]})
    for _ in range(10):  # a few fresh connections, so each worker has accepted and answered
        await _client.call(deployment.server, "noop", modern=True)


@dataclass
class Sample:
    """One wrk run and the CPU each process used during it."""

    rate: float
    requests: int
    seconds: float
    workers_cpu: list[float]
    wrk_cpu: float
    redis_cpu: float
    commands: dict[str, int]


async def _sample(
    deployment: Deployment, lua: str, conns: int, seconds: int, redis_port: int
) -> Sample:
    before_info = _redis_info(redis_port)
    before_cpu = [_cpu(pid) for pid in deployment.pids]
    before_wrk = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = await _wrk.run(lua, deployment.server.port, conns, seconds)
    after_wrk = resource.getrusage(resource.RUSAGE_CHILDREN)
    after_cpu = [_cpu(pid) for pid in deployment.pids]
    after_info = _redis_info(redis_port)
    if result.errors or result.unexpected or not result.requests:
        raise RuntimeError(
            f"{deployment.name} x{conns}: {result.errors} errors, {result.unexpected} unexpected"
            f" answers in {result.requests} responses"
        )
    before, after = _commands(before_info), _commands(after_info)
    wrk = (after_wrk.ru_utime + after_wrk.ru_stime) - (before_wrk.ru_utime + before_wrk.ru_stime)
    return Sample(
        result.rate,
        result.requests,
        result.seconds,
        [(a - b) / result.seconds for a, b in zip(after_cpu, before_cpu, strict=True)],
        wrk / result.seconds,
        (_redis_cpu(after_info) - _redis_cpu(before_info)) / result.seconds,
        {k: n - before.get(k, 0) for k, n in after.items() if n - before.get(k, 0)},
    )


def _modern(tool: str, capabilities: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A modern ``tools/call`` of *tool* and its headers."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    }
    params = {"name": tool, "arguments": {}, "_meta": meta}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return message, {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": tool}


def _workload_scripts(server: Server) -> dict[str, str]:
    """The Lua scripts of the Redis-cost workloads (*server* has a legacy session open)."""
    modern, modern_headers = _modern("noop", {})
    task, task_headers = _modern("instant", {"extensions": {TASKS: {}}})
    legacy = _client.call_body("noop", {}, modern=False, progress=False)
    session = _client.call_headers(server, "noop", modern=False)
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 0, "reason": "bench"},
    }
    return {
        "modern stateless no-op `tools/call`": _wrk.lua(
            modern, modern_headers, status=200, needle='"ok"'
        ),
        "legacy-session no-op `tools/call`": _wrk.lua(
            json.loads(legacy), session, status=200, needle='"ok"'
        ),
        "legacy `notifications/cancelled` of a request not running here": _wrk.lua(
            cancel, session, status=202
        ),
        "task-augmented `tools/call` (modern; answered with the created task)": _wrk.lua(
            task, task_headers, status=200, needle='"taskId"'
        ),
    }


async def run(quick: bool) -> list[Row]:
    if shutil.which("redis-server") is None:
        return [Row(BENCH, "--workers rows", "not run: no redis-server installed")]
    if (_wrk.path() if quick else _wrk.ensure_installed()) is None:
        return [Row(BENCH, "--workers rows", "not run: wrk not installed")]
    rounds, cost_rounds, seconds = (1, 1, 1) if quick else (5, 3, 2)
    connections = (16,) if quick else (16, 64)
    _, client_core = _client.cores()
    async with redis_server(client_core) as redis_port, AsyncExitStack() as stack:
        deployments = {
            (workers, backend): await stack.enter_async_context(
                _runner(workers, redis_port if backend == "Redis" else None)
            )
            for workers in (1, 2)
            for backend in ("memory", "Redis")
        }
        scaling = await _scaling(deployments, redis_port, connections, rounds, seconds)
        costs = await _costs(deployments, redis_port, cost_rounds, seconds)
    return _layout_rows() + _scaling_rows(scaling, connections) + _cost_rows(costs)


Key = tuple[int, str]
Scaling = dict[tuple[int, str, int], list[Sample]]


async def _scaling(
    deployments: dict[Key, Deployment],
    redis_port: int,
    connections: tuple[int, ...],
    rounds: int,
    seconds: int,
) -> Scaling:
    modern, headers = _modern("noop", {})
    lua = _wrk.lua(modern, headers)  # no response check: it would cost wrk's core more
    for deployment in deployments.values():
        await _wrk.run(lua, deployment.server.port, 16, 1)  # warm up
    samples: Scaling = {}
    keys = list(deployments)
    for round_ in range(rounds):
        for conns in connections:
            for key in keys if round_ % 2 == 0 else keys[::-1]:
                sample = await _sample(deployments[key], lua, conns, seconds, redis_port)
                samples.setdefault((*key, conns), []).append(sample)
    return samples


Costs = dict[tuple[str, str], list[Sample]]


async def _costs(
    deployments: dict[Key, Deployment], redis_port: int, rounds: int, seconds: int
) -> Costs:
    """Each workload on one worker, memory and Redis interleaved, at 16 connections."""
    scripts = {}
    for backend in ("memory", "Redis"):
        server = deployments[(1, backend)].server
        await _client.initialize(server)
        scripts[backend] = _workload_scripts(server)
    samples: Costs = {}
    order = ["memory", "Redis"]
    for round_ in range(rounds):
        for workload in scripts["memory"]:
            for backend in order if round_ % 2 == 0 else order[::-1]:
                lua = scripts[backend][workload]
                deployment = deployments[(1, backend)]
                sample = await _sample(deployment, lua, 16, seconds, redis_port)
                samples.setdefault((workload, backend), []).append(sample)
    return samples


def _layout_rows() -> list[Row]:
    server, client = _client.cores()
    if server is None:
        layout = "not pinned (fewer than two CPUs, or no `taskset`): the kernel places everything"
    else:
        layout = (
            f"1 worker: the worker on CPU {server}; 2 workers: one on CPU {server}, one on CPU"
            f" {client}; wrk (one thread), redis-server and the benchmark's own process on CPU"
            f" {client} throughout (of {os.cpu_count()} CPUs: the second worker shares its core"
            " with wrk)"
        )
    return [Row(BENCH, "core layout", layout, "info")]


def _median(samples: list[Sample], value: Callable[[Sample], float]) -> float:
    return statistics.median(value(sample) for sample in samples)


def _scaling_rows(samples: Scaling, connections: tuple[int, ...]) -> list[Row]:
    rows = []
    for workers in (1, 2):
        for backend in ("memory", "Redis"):
            cells = ", ".join(
                f"{c}: {_median(samples[(workers, backend, c)], lambda s: s.rate):,.0f}"
                for c in connections
            )
            rows.append(
                Row(
                    BENCH,
                    f"runner `--workers {workers}`, {backend} backend, modern stateless no-op:"
                    " req/s at connections",
                    cells,
                )
            )
    for backend in ("memory", "Redis"):
        for conns in connections:
            rows += _efficiency_rows(samples, backend, conns)
    return rows


def _efficiency_rows(samples: Scaling, backend: str, conns: int) -> list[Row]:
    one, two = samples[(1, backend, conns)], samples[(2, backend, conns)]
    efficiency = [b.rate / (2 * a.rate) for a, b in zip(one, two, strict=True)]
    cores = [sum(b.workers_cpu) / (2 * sum(a.workers_cpu)) for a, b in zip(one, two, strict=True)]
    work = [
        (b.rate / sum(b.workers_cpu)) / (a.rate / sum(a.workers_cpu))
        for a, b in zip(one, two, strict=True)
    ]
    got = _median(two, lambda s: sum(s.workers_cpu))
    per_worker = zip(*(s.workers_cpu for s in two), strict=True)
    split = "/".join(f"{statistics.median(cpu):.2f}" for cpu in per_worker)
    value = statistics.median(efficiency)
    return [
        Row(
            BENCH,
            f"per-worker efficiency, {backend}, {conns} conn: req/s of 2 workers / (2 x 1 worker)"
            f" (round spread {min(efficiency):.2f}-{max(efficiency):.2f})",
            f"{value:.2f}",
            f">= {EFFICIENCY_TARGET:.2f} (wrk on a core of its own)",
            "PASS" if value >= EFFICIENCY_TARGET else "MISS",
        ),
        Row(
            BENCH,
            f"where it goes, {backend}, {conns} conn: efficiency = cores the 2 workers got / 2 x"
            " 1 worker's  x  calls per worker CPU-second, 2 workers / 1",
            f"{statistics.median(cores):.2f} x {statistics.median(work):.2f}"
            f" (2 workers used {got:.2f} CPUs, {split} per worker; 1 worker"
            f" {_median(one, lambda s: sum(s.workers_cpu)):.2f}; wrk"
            f" {_median(two, lambda s: s.wrk_cpu):.2f}, redis-server"
            f" {_median(two, lambda s: s.redis_cpu):.2f})",
            "info",
        ),
    ]


def _cost_rows(samples: Costs) -> list[Row]:
    rows = []
    workloads = list(dict.fromkeys(workload for workload, _ in samples))
    for workload in workloads:
        memory, redis = samples[(workload, "memory")], samples[(workload, "Redis")]
        ratios = [b.rate / a.rate for a, b in zip(memory, redis, strict=True)]
        rows.append(
            Row(
                BENCH,
                f"Redis backend / in memory, {workload}: req/s, 1 worker, 16 conn"
                f" (round spread {min(ratios):.2f}-{max(ratios):.2f};"
                f" {_median(memory, lambda s: s.rate):,.0f} vs"
                f" {_median(redis, lambda s: s.rate):,.0f} req/s)",
                f"{statistics.median(ratios):.2f}x",
                "info",
            )
        )
        rows.append(
            Row(
                BENCH,
                f"Redis commands per operation, {workload} (a count, load-independent)",
                _per_call(redis),
                "info",
            )
        )
    return rows


def _per_call(samples: list[Sample]) -> str:
    """Commands per operation over every run of a workload, the busiest named."""
    requests = sum(s.requests for s in samples)
    totals: dict[str, int] = {}
    for sample in samples:
        for command, calls in sample.commands.items():
            totals[command] = totals.get(command, 0) + calls
    if not totals:
        return "0.00"
    named = sorted(totals.items(), key=lambda item: -item[1])[:4]
    detail = ", ".join(f"{command} {calls / requests:.2f}" for command, calls in named)
    return f"{sum(totals.values()) / requests:.2f} ({detail})"
