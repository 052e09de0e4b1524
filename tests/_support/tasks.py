"""A Tasks server in memory on MockClock, and the calls every Tasks test makes.

Shared by the Tasks tests (``tests/tasks/``): :func:`make_server` (tools that
count, ignore the flag, fail, or need a task), :func:`serving` (the server's
task manager running, a test client with the Tasks capability), and the
requests (:func:`start_task`, :func:`get`, :func:`refusal`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from trio_mcp_cancel import RegistryConfig, cancelled, checkpoint_cancelled
from trio_mcp_cancel.backends.memory import MemoryTaskStore
from trio_mcp_cancel.lowlevel import JsonRpcError, TaskManager
from trio_mcp_cancel.server import Context, McpServer, Tasks
from trio_mcp_cancel.testing import McpError, McpTestClient, open_test_client

__all__ = [
    "EPOCH",
    "GRACE",
    "TASKS",
    "WITH_TASKS",
    "Seen",
    "get",
    "make_server",
    "refusal",
    "serving",
    "start_task",
    "wall_clock",
]

TASKS = "io.modelcontextprotocol/tasks"
WITH_TASKS = {"extensions": {TASKS: {}}}
EPOCH = 1_800_000_000.0
GRACE = 3.0


def wall_clock() -> float:
    """Wall-clock seconds that MockClock drives (stores keep wall-clock times)."""
    return EPOCH + trio.current_time()


class Seen:
    def __init__(self) -> None:
        self.flagged_at: float | None = None
        self.stopped = trio.Event()


def make_server(seen: Seen, **manager: Any) -> McpServer:
    tasks = TaskManager(store=MemoryTaskStore(clock=wall_clock), **manager)
    server = McpServer("tasks-test", extensions=[Tasks(tasks)])

    @server.tool(task="optional")
    async def count(ctx: Context, n: int = 10, delay: float = 1.0) -> str:
        try:
            for _ in range(n):
                if cancelled() and seen.flagged_at is None:
                    seen.flagged_at = trio.current_time()
                await checkpoint_cancelled()
                await trio.sleep(delay)
        finally:
            seen.stopped.set()
        return f"counted to {n}"

    @server.tool(task="optional")
    async def stubborn(ctx: Context, seconds: float = 100.0) -> str:
        try:
            await trio.sleep(seconds)
        finally:
            seen.flagged_at = trio.current_time() if cancelled() else None
            seen.stopped.set()
        return "finished anyway"

    @server.tool(task="optional")
    async def protocol_error_job(ctx: Context) -> str:
        raise JsonRpcError(-32603, "backend exploded", {"why": "test"})

    @server.tool(task="optional")
    async def failing_job(ctx: Context) -> str:
        raise ValueError("bad input")

    @server.tool(task="required")
    async def only_task(ctx: Context) -> str:
        return "done"

    @server.tool()
    async def plain(ctx: Context) -> str:
        return "plain"

    return server


@asynccontextmanager
async def serving(
    server: McpServer, *, capabilities: Any = WITH_TASKS, **options: Any
) -> AsyncIterator[tuple[McpTestClient, trio.Nursery]]:
    async with trio.open_nursery() as nursery:
        await nursery.start(server.dispatcher.extension(Tasks).manager.run)
        async with open_test_client(
            server,
            client_capabilities=capabilities,
            **options,
            registry_config=RegistryConfig(grace_period=GRACE),
        ) as client:
            yield client, nursery
        nursery.cancel_scope.cancel()


async def start_task(client: McpTestClient, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.request("tools/call", {"name": name, "arguments": arguments})
    assert result["resultType"] == "task", result
    return result


async def get(client: McpTestClient, task_id: str) -> dict[str, Any]:
    return await client.request("tasks/get", {"taskId": task_id})


async def refusal(client: McpTestClient, method: str, params: dict[str, Any]) -> McpError:
    """The error *client* gets for *method* (the test fails if it succeeds)."""
    with pytest.raises(McpError) as caught:
        await client.request(method, params)
    return caught.value
