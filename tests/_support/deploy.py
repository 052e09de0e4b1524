"""Real parts for deployment tests: a ``redis-server`` and ``hypercorn`` CLI processes.

Both listen on 127.0.0.1 only, on ports nobody chose in advance: hypercorn
binds port 0 and we read the port it got from its log; Redis is given a
port the kernel just handed out (and the start is retried on a clash).

``redis-server`` comes from the Debian package of that name.  Without it,
the tests that need it are skipped with a visible reason, except in CI
(``CI=true``), where a missing Redis is a broken machine and fails loudly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import attrs
import httpx
import pytest
import trio

from _support.asgi import headers_of, modern_request
from _support.repo_paths import ROOT

TASKS = "io.modelcontextprotocol/tasks"
WITH_TASKS = {"extensions": {TASKS: {}}}
_RUNNING_ON = re.compile(rb"Running on http://127\.0\.0\.1:(\d+)")


def require_redis_server() -> str:
    path = shutil.which("redis-server")
    if path is not None:
        return path
    if os.environ.get("CI") == "true":
        pytest.fail(
            "redis-server is not installed; CI must provide it (.ci/run installs the"
            " Debian package redis-server)",
            pytrace=False,
        )
    pytest.skip("redis-server is not installed (apt-get install redis-server)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@attrs.define(eq=False)
class RedisServer:
    """One ``redis-server`` on 127.0.0.1, no persistence; can be killed and restarted."""

    binary: str
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert self.process is None
        for _ in range(5):
            port = self.port or _free_port()
            process = subprocess.Popen(
                [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--protected-mode", "yes"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            for _ in range(100):
                if _ping(port):
                    self.port, self.process = port, process
                    return
                if process.poll() is not None:
                    break  # the port was taken meanwhile: try another
                time.sleep(0.05)
            process.kill()
            process.wait()
            if self.port:
                raise RuntimeError(f"redis-server could not restart on port {self.port}")
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        """Stop it abruptly (SIGKILL), as a crash would."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self) -> None:
        self.kill()
        self.start()


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(require_redis_server())
    server.start()
    try:
        yield server
    finally:
        server.kill()


@attrs.define(eq=False)
class Hypercorn:
    """A ``hypercorn --worker-class trio`` process serving ``examples.slow_server:app``."""

    process: trio.Process
    port: int
    log: bytearray

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


@asynccontextmanager
async def run_hypercorn(
    workers: int = 1, env: dict[str, str] | None = None, app: str = "examples.slow_server:app"
) -> AsyncIterator[Hypercorn]:
    """Start the hypercorn CLI, wait until every worker listens, stop it with SIGTERM."""
    command = [
        sys.executable, "-m", "hypercorn", "--worker-class", "trio", "--workers", str(workers),
        "--bind", "127.0.0.1:0", "--graceful-timeout", "2", app,
    ]  # fmt: skip
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    process = await trio.lowlevel.open_process(
        command, cwd=str(ROOT), env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    log = bytearray()
    assert process.stderr is not None
    stderr = process.stderr
    try:
        async with trio.open_nursery() as nursery:

            async def drain() -> None:
                async for chunk in stderr:
                    log.extend(chunk)

            nursery.start_soon(drain)
            with trio.fail_after(30):
                while len(_RUNNING_ON.findall(log)) < workers:
                    if process.poll() is not None:
                        raise AssertionError(f"hypercorn exited: {log.decode()[-3000:]}")
                    await trio.sleep(0.05)
            ports = {int(p) for p in _RUNNING_ON.findall(log)}
            assert len(ports) == 1, ports  # the workers share one socket
            yield Hypercorn(process, ports.pop(), log)
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(20):
                await process.wait()
            nursery.cancel_scope.cancel()
    finally:
        if process.poll() is None:
            process.kill()
            await process.wait()


def answer(response: httpx.Response) -> Any:
    """The JSON-RPC answer of a reply: its JSON body, or its SSE stream's last message."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return json.loads(data[-1]) if data else None


async def modern(
    client: httpx.AsyncClient,
    url: str,
    method: str,
    params: dict[str, Any],
    *,
    capabilities: dict[str, Any] | None = None,
    request_id: int = 1,
) -> Any:
    """POST one modern request (headers that agree with it); its JSON-RPC answer."""
    message = modern_request(request_id, method, params, capabilities=capabilities)
    response = await client.post(url, headers=headers_of(message), json=message)
    return answer(response)


async def task_request(client: httpx.AsyncClient, url: str, method: str, task_id: str) -> Any:
    """``tasks/get`` or ``tasks/cancel`` from a client that declares the extension."""
    return await modern(client, url, method, {"taskId": task_id}, capabilities=WITH_TASKS)
