"""Deploying like any ASGI app: the hypercorn CLI with 1 and N workers, configured from env."""

from __future__ import annotations

from typing import Any

import coredis
import httpx
import pytest
import trio

from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import app_from_env, backend_from_env
from trio_mcp_cancel.server import McpServer, Tasks

from _support.deploy import WITH_TASKS, modern, run_hypercorn, task_request


async def poll_status(
    client: httpx.AsyncClient, url: str, task_id: str, want: str, *, within: float = 15.0
) -> dict[str, Any]:
    with trio.fail_after(within):
        while True:
            reply = await task_request(client, url, "tasks/get", task_id)
            assert "result" in reply, reply
            if reply["result"]["status"] == want:
                return reply["result"]
            await trio.sleep(0.05)


@pytest.mark.subprocess
@pytest.mark.parametrize("workers", [1, 2])
async def test_hypercorn_cli_serves_the_example_with_its_own_registry(workers: int) -> None:
    env = {"MCP_GRACE_PERIOD": "0.5"}
    async with run_hypercorn(workers, env) as server, httpx.AsyncClient(timeout=10) as client:
        # Modern requests are stateless: whichever worker gets one serves it.
        for i in range(6):
            arguments = {"n": 2, "delay": 0.01}
            params = {"name": "count", "arguments": arguments}
            reply = await modern(client, server.url, "tools/call", params, request_id=i)
            assert reply["result"]["content"][0]["text"] == "counted to 2", reply
        if workers == 1:
            # In memory, a task lives in its worker: with one worker it is all here.
            created = await modern(
                client, server.url, "tools/call",
                {"name": "count", "arguments": {"n": 10_000, "delay": 0.01}},
                capabilities=WITH_TASKS,
            )  # fmt: skip
            task = created["result"]
            assert task["resultType"] == "task" and task["status"] == "working"
            ack = await task_request(client, server.url, "tasks/cancel", task["taskId"])
            assert ack["result"]["resultType"] == "complete"
            await poll_status(client, server.url, task["taskId"], "cancelled")
    assert server.process.returncode == 0, server.log.decode()[-3000:]
    log = server.log.decode()
    assert "no registry" not in log and "Traceback" not in log, log[-3000:]


def test_app_from_env_reads_the_settings_and_refuses_bad_ones() -> None:
    server = McpServer(extensions=[Tasks()])
    app = app_from_env(
        server,
        {
            "MCP_GRACE_PERIOD": "2.5",
            "MCP_PATH": "/rpc",
            "MCP_ALLOWED_ORIGINS": "https://a.example, https://b.example",
            "MCP_MAX_REQUEST_TIME": "30",
            "MCP_TASK_TTL": "60",
        },
    )
    assert app.registry_config is not None and app.registry_config.grace_period == 2.5
    assert app.path == "/rpc" and app.limits.max_request_time == 30.0
    assert app.allowed_origins == {"https://a.example", "https://b.example"}
    assert app.backend is None and server.dispatcher.extension(Tasks).manager.ttl_ms == 60_000
    defaults = app_from_env(McpServer(), {})
    assert defaults.registry_config is not None and defaults.registry_config.grace_period == 5.0
    assert app_from_env(McpServer(), {"MCP_GRACE_PERIOD": "none"}).registry_config == (
        app_from_env(McpServer(), {"MCP_GRACE_PERIOD": "NONE"}).registry_config
    )
    for name, value in [
        ("MCP_GRACE_PERIOD", "soon"),
        ("MCP_GRACE_PERIOD", "-1"),
        ("MCP_MAX_REQUEST_TIME", "inf"),
        ("MCP_PATH", "mcp"),
        ("MCP_REDIS_URL", "http://localhost:6379"),
    ]:
        with pytest.raises(ValueError, match=name):
            app_from_env(McpServer(), {name: value})


def test_mcp_redis_url_selects_the_redis_backend() -> None:
    backend = backend_from_env({"MCP_REDIS_URL": "redis://127.0.0.1:1/3", "MCP_REDIS_PREFIX": "x"})
    assert isinstance(backend, RedisBackend)
    assert backend.url == "redis://127.0.0.1:1/3" and backend.bus.channel == "{x}:cancel"
    assert backend_from_env({}) is None and backend_from_env({"MCP_REDIS_URL": " "}) is None
    # Cluster and Sentinel through coredis's own clients (nothing connects before run()).
    cluster = backend_from_env({"MCP_REDIS_URL": "redis+cluster://127.0.0.1:1"})
    assert isinstance(cluster, RedisBackend) and isinstance(cluster.client, coredis.RedisCluster)
    sentinel = backend_from_env(
        {"MCP_REDIS_URL": "redis+sentinel://:pw@127.0.0.1:1,[::1]:2/main/2"}
    )
    assert isinstance(sentinel, RedisBackend) and isinstance(sentinel.client, coredis.Redis)
    for bad in ("redis+sentinel://127.0.0.1:1", "redis+sentinel://127.0.0.1/main"):
        with pytest.raises(ValueError, match="Sentinel"):
            backend_from_env({"MCP_REDIS_URL": bad})
