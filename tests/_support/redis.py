"""Scaffolding for the tests against a real redis-server, in one place.

The ``redis`` and ``prefix`` fixtures (import them into a test module, as
``__all__`` there says for pytest), a backend running for one ``async
with``, a stored task record, one "server process" (a backend of its own
and the server's task manager on it, sharing one Redis), a client of a
server and polling a task until it reaches a status; a one-node Redis Cluster
on a free port pair (the Cluster tests and the hostile ones share it).
"""

from __future__ import annotations

import random
import secrets
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_mcp_cancel import RegistryConfig
from trio_mcp_cancel.backends import TaskRecord
from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.server import McpServer, Tasks
from trio_mcp_cancel.testing import McpTestClient, PendingCall, open_test_client

from _support.deploy import WITH_TASKS, RedisServer, _ping, redis_server, require_redis_server

__all__ = [
    "CLUSTER_BUS_OFFSET",
    "client_of",
    "free_cluster_port",
    "prefix",
    "record",
    "redis",
    "running",
    "start_cluster_node",
    "task_process",
    "wait_status",
]


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture
def prefix() -> str:
    """Each test its own keys, so tests sharing one Redis never see each other."""
    return "t" + secrets.token_hex(4)


@asynccontextmanager
async def running(*backends: RedisBackend) -> AsyncIterator[RedisBackend]:
    """Run *backends* for the block; it gets the first (``as backend``)."""
    async with trio.open_nursery() as nursery:
        for backend in backends:
            await nursery.start(backend.run)
        yield backends[0]
        nursery.cancel_scope.cancel()


def record(
    task_id: str,
    *,
    owner: str = "o",
    instance: str = "i",
    ttl_ms: int | None = 60_000,
    now: float | None = None,
) -> TaskRecord:
    """A working task record created *now* (default: the wall-clock time)."""
    now = time.time() if now is None else now
    return TaskRecord(
        task_id=task_id,
        owner=owner,
        created_at=now,
        updated_at=now,
        ttl_ms=ttl_ms,
        instance=instance,
    )


@asynccontextmanager
async def task_process(
    redis: RedisServer, prefix: str, server: McpServer, *, counters: bool = False
) -> AsyncIterator[RedisBackend]:
    """One "server process": *server*'s task manager on a backend of its own.

    *counters*: the manager also counts its quotas in Redis (across processes).
    """
    backend = RedisBackend(redis.url, prefix=prefix, op_timeout=1.0, reconnect_delay=0.2)
    async with running(backend), trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: server.dispatcher.extension(Tasks).manager.run(
                store=backend.tasks,
                bus=backend.bus,
                instance_id=backend.instance_id,
                counters=backend.counters if counters else None,
                task_status=task_status,
            )
        )
        yield backend
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def client_of(
    server: McpServer,
    *,
    namespace: str = "session:same-caller",
    capabilities: Mapping[str, Any] = WITH_TASKS,
    **registry_config: Any,
) -> AsyncIterator[McpTestClient]:
    """A client of *server*; the same *namespace* on every process is the same caller."""
    async with open_test_client(
        server,
        namespace=namespace,
        client_capabilities=capabilities,
        registry_config=RegistryConfig(**registry_config),
    ) as client:
        yield client


async def wait_status(client: McpTestClient, task_id: str, want: str) -> dict[str, Any]:
    """``tasks/get`` until the task is in *want*; its status then."""
    with trio.fail_after(15):
        while True:
            status = await client.request("tasks/get", {"taskId": task_id})
            if status["status"] == want:
                return status
            await trio.sleep(0.02)


async def wait_tracked(client: McpTestClient, call: PendingCall) -> None:
    """Until *call* runs as a tracked request.

    ``client.wait_in_flight`` judges once every task is blocked, but a task
    waiting on Redis's socket is blocked too: with real I/O in between (a
    listen stream checks its ``taskIds`` in the store first) poll instead.
    """
    with trio.fail_after(15):
        while not client.registry.in_flight(call.id, client.namespace):
            if call.answered:
                raise AssertionError(f"request {call.id} was answered: {call.response!r}")
            await trio.sleep(0.01)


# -- a one-node Redis Cluster (tests/scale/test_redis_topologies.py, tests/hostile/) ----


def _command(port: int, *words: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        conn.sendall(" ".join(words).encode() + b"\r\n")
        return conn.recv(65536)


#: Redis Cluster binds its bus on the client port plus this.
CLUSTER_BUS_OFFSET = 10_000


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port() -> int:
    """A port whose cluster bus port (+10000) is free too, both below the ephemeral range.

    A node needs both.  A kernel-picked port's bus port can be taken or past
    65535, and anything in the ephemeral range can be grabbed by some
    client's outgoing connection meanwhile, or, while a backend keeps
    connecting to a port where nothing listens yet, by that very connection
    (TCP simultaneous open connects the socket to itself).  Below the range
    no outgoing connection ever gets a port, so a probed pair stays free.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    top = low - CLUSTER_BUS_OFFSET
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(1025, top) if top > 1025 else 0
        if port and _bindable(port) and _bindable(port + CLUSTER_BUS_OFFSET):
            return port
    raise RuntimeError("no free port pair below the ephemeral range")


def start_cluster_node(
    folder: Path, port: int | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """A one-node Redis Cluster owning every slot, on *port* or a free pair picked here."""
    binary = require_redis_server()
    for _ in range(5):
        chosen = port or free_cluster_port()
        process = subprocess.Popen(
            [binary, "--port", str(chosen), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--cluster-enabled", "yes",
             "--cluster-config-file", str(folder / f"nodes-{chosen}.conf")],
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 5
        while not _ping(chosen) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if _ping(chosen):
            break
        process.kill()
        process.wait()
    else:
        raise RuntimeError("the cluster node did not start")
    try:
        assert _command(chosen, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").startswith(b"+OK")
        deadline = time.monotonic() + 10
        while b"cluster_state:ok" not in _command(chosen, "CLUSTER", "INFO"):
            assert time.monotonic() < deadline, "the one-node cluster never became ok"
            time.sleep(0.05)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return process, chosen
