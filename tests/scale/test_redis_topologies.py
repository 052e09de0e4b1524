"""The Redis backend on Redis Cluster and Sentinel, and the key design that makes Cluster work.

A one-node Cluster (``redis-server --cluster-enabled yes`` owning every
slot) and a Sentinel watching the suite's standalone server, both started
here on ports the kernel picked; real time, every wait bounded.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import coredis
import pytest
import trio
from coredis._utils import hash_slot
from coredis.connection import TCPLocation

from trio_mcp_cancel.backends import TaskStoreFull, TaskStoreUnavailable
from trio_mcp_cancel.backends import redis as redis_module
from trio_mcp_cancel.backends.redis import RedisBackend, _Keys

from _support.deploy import RedisServer, _free_port, _ping, redis_server, require_redis_server
from _support.redis import (
    free_cluster_port,
    record,
    running,
    start_cluster_node,
)

# -- the key design ------------------------------------------------------------------


def every_key(keys: _Keys) -> list[str]:
    return [
        keys.task("t" * 43),
        keys.alive("0123456789abcdef"),
        keys.owner("principal:alice"),
        keys.session("f" * 64),
        keys.sessions_of("ip:10.0.0.0/24"),
        keys.sessions_of(None),
        keys.quota("tasks:principal:alice"),
        keys.channel,
    ]


@pytest.mark.parametrize("prefix", ["tmc", "a:b", "{tenant-7}:mcp", "x{y}z"])
def test_every_key_of_a_deployment_is_in_one_hash_slot(prefix: str) -> None:
    keys = _Keys(prefix)
    slots = {hash_slot(key.encode()) for key in every_key(keys)}
    assert len(slots) == 1, slots
    assert all(key.startswith(keys.base + ":") for key in every_key(keys))
    # Different deployments may land on different slots (spread over a cluster).
    assert keys.base == (prefix if "{" in prefix else "{" + prefix + "}")


def test_every_script_touches_only_the_keys_it_declares() -> None:
    scripts = {
        name: text
        for name, text in vars(redis_module).items()
        if name.startswith("_")
        and name.isupper()
        and isinstance(text, str)
        and "redis.call" in text
    }
    assert {"_CREATE", "_SETTLE", "_REQUEST_CANCEL", "_PUT_SESSION", "_ACQUIRE"} <= set(scripts)
    for name, text in scripts.items():
        calls = re.findall(r"redis\.call\('(\w+)',\s*([^,)]+)", text)
        assert calls, name
        # KEYS[i] only inside a loop over every declared key.
        declared = r"KEYS\[(\d+|i)\]" if "for i = 1, #KEYS do" in text else r"KEYS\[\d+\]"
        for command, key in calls:
            assert re.fullmatch(declared, key.strip()), (name, command, key)


# -- a one-node Redis Cluster ----------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    process, port = start_cluster_node(tmp_path_factory.mktemp("cluster"))
    try:
        yield port
    finally:
        process.kill()
        process.wait()


async def exercise(a: RedisBackend, b: RedisBackend) -> None:
    """Every script and every operation of the backend, seen from two instances."""
    with trio.fail_after(20):
        # Task records: create (capped per owner), read anywhere, cancel, settle once.
        await a.tasks.create(record("one", instance=a.instance_id), 2)
        await a.tasks.create(record("two", instance=a.instance_id), 2)
        with pytest.raises(TaskStoreFull):
            await b.tasks.create(record("three"), 2)
        got = await b.tasks.get("one")
        assert got is not None and got.status == "working" and not await b.tasks.orphaned(got)
        asked = await b.tasks.request_cancel("one")
        assert asked is not None and asked.cancel_requested
        settled = await a.tasks.settle("one", "cancelled", message="stopped")
        assert settled is not None and settled.status == "cancelled"
        again = await b.tasks.settle("one", "failed", error={"code": 1, "message": "x"})
        assert again is not None and again.status == "cancelled"
        # Sessions, capped per tenant across instances.
        assert await a.sessions.put("s1", {"v": 1}, 30.0, tenant="t", cap=1)
        assert not await b.sessions.put("s2", {"v": 2}, 30.0, tenant="t", cap=1)
        assert await b.sessions.get("s1") == {"v": 1}
        await b.sessions.touch("s1", 30.0, tenant="t")
        await a.sessions.delete("s1", tenant="t")
        assert await b.sessions.get("s1") is None
        assert await b.sessions.put("s2", {"v": 2}, 30.0, tenant="t", cap=1)
        # Quotas summed over instances; the heartbeat's resync keeps the count.
        assert await a.counters.acquire("calls:t", 2)
        assert await b.counters.acquire("calls:t", 2)
        assert not await a.counters.acquire("calls:t", 2)
        await a.counters.resync()
        await b.counters.release("calls:t")
        assert await a.counters.acquire("calls:t", 2)
        # The cancel bus reaches the other instance.
        seen: list[dict[str, Any]] = []
        unsubscribe = b.bus.subscribe(seen.append)
        try:
            while not seen:
                await a.bus.publish({"type": "task.cancel", "task": "two"})
                await trio.sleep(0.05)
        finally:
            unsubscribe()
        assert seen[0]["task"] == "two" and seen[0]["origin"] == a.instance_id


async def test_the_backend_runs_on_a_redis_cluster(cluster: int) -> None:
    prefix = "c" + secrets.token_hex(4)
    url = f"redis+cluster://127.0.0.1:{cluster}"
    a = RedisBackend(url, prefix=prefix)
    b = RedisBackend(url, prefix=prefix)
    async with running(a, b):
        await exercise(a, b)
        assert not a.health_down and not b.health_down


@pytest.mark.redis
async def test_a_cluster_down_at_startup_is_connected_once_it_is_up(tmp_path: Path) -> None:
    port = free_cluster_port()
    backend = RedisBackend(
        f"redis+cluster://127.0.0.1:{port}", prefix="late", op_timeout=0.5, reconnect_delay=0.1
    )
    names: list[str] = []
    backend.events.subscribe(lambda event: names.append(event.name))
    process = None
    try:
        async with running(backend):
            # The server starts anyway; what needs Redis says it is unavailable.
            with pytest.raises(TaskStoreUnavailable):
                await backend.tasks.get("x")
            assert names[:1] == ["backend.unavailable"]
            process, _ = start_cluster_node(tmp_path, port)
            with trio.fail_after(15):
                while True:
                    try:
                        await backend.tasks.create(record("late"))
                        break
                    except TaskStoreUnavailable:
                        await trio.sleep(0.1)
            assert await backend.tasks.get("late") is not None
            assert "backend.recovered" in names
    finally:
        if process is not None:
            process.kill()
            process.wait()


# -- Sentinel --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def standalone() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture(scope="module")
def sentinel(standalone: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    binary = require_redis_server()
    folder: Path = tmp_path_factory.mktemp("sentinel")
    for _ in range(5):
        port = _free_port()
        config = folder / f"sentinel-{port}.conf"
        config.write_text(
            f"port {port}\nbind 127.0.0.1\nsentinel monitor main 127.0.0.1 {standalone.port} 1\n"
        )
        process = subprocess.Popen(
            [binary, str(config), "--sentinel"],
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 5
        while not _ping(port) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if _ping(port):
            break
        process.kill()
        process.wait()
    else:
        raise RuntimeError("redis-server --sentinel did not start")
    try:
        yield port
    finally:
        process.kill()
        process.wait()


async def test_the_backend_finds_its_primary_through_sentinel(
    sentinel: int, standalone: RedisServer
) -> None:
    prefix = "s" + secrets.token_hex(4)
    url = f"redis+sentinel://127.0.0.1:{sentinel}/main/0"
    a = RedisBackend(url, prefix=prefix)
    b = RedisBackend(standalone.url, prefix=prefix)  # the same data, reached directly
    async with running(a, b):
        await exercise(a, b)
        assert not a.health_down


async def test_from_client_takes_a_coredis_client_built_by_hand(
    sentinel: int, standalone: RedisServer
) -> None:
    prefix = "h" + secrets.token_hex(4)
    guard = coredis.Sentinel([TCPLocation("127.0.0.1", sentinel)], decode_responses=True)
    primary = guard.primary_for("main")
    a = RedisBackend.from_client(primary, connect=[guard, primary], prefix=prefix)
    b = RedisBackend.from_client(coredis.Redis.from_url(standalone.url, decode_responses=True))
    assert a.url is None and b.keys.base == "{tmc}"
    b = RedisBackend.from_client(
        coredis.Redis.from_url(standalone.url, decode_responses=True), prefix=prefix
    )
    async with running(a, b):
        await exercise(a, b)
