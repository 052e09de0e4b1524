"""Task progress (``statusMessage``) in the Redis store (real redis-server).

The write is one Lua step that never touches a terminal record, and a
process that does not run the task sees the progress in ``tasks/get`` and
gets it as ``notifications/tasks`` through the bus.
"""

from __future__ import annotations

import time

import trio

from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, McpServer, Tasks

from _support.deploy import RedisServer
from _support.redis import (
    client_of,
    prefix,
    record,
    redis,
    running,
    task_process,
    wait_status,
    wait_tracked,
)

__all__ = ["prefix", "redis"]  # the fixtures, for pytest

OWNER = "same-owner"


async def test_set_message_is_atomic_and_never_overwrites_a_terminal_task(
    redis: RedisServer, prefix: str
) -> None:
    async with running(RedisBackend(redis.url, prefix=prefix)) as backend:
        store = backend.tasks
        created_at = time.time() - 5.0
        await store.create(record("a", now=created_at))
        changed = await store.set_message("a", "3/10: copying")
        assert changed is not None and changed.status == "working"
        assert changed.status_message == "3/10: copying" and changed.updated_at > created_at
        loaded = await store.get("a")
        assert loaded is not None and loaded.to_wire()["statusMessage"] == "3/10: copying"
        await store.settle("a", "cancelled", message="cancelled by the client")
        assert await store.set_message("a", "4/10: late") is None
        settled = await store.get("a")
        assert settled is not None and settled.status == "cancelled"
        assert settled.status_message == "cancelled by the client"
        assert await store.set_message("missing", "1") is None
        assert await backend.client.exists([f"{prefix}:task:missing"]) == 0


def make_server(release: trio.Event) -> McpServer:
    server = McpServer(
        "redis-task-progress",
        extensions=[Tasks(TaskManager(cancel_poll_interval=1000, progress_interval=0.05))],
    )

    @server.tool(task="optional")
    async def halfway(ctx: Context) -> str:
        await ctx.report_progress(5, 10, "halfway")
        await release.wait()
        await ctx.report_progress(10, 10, "all done")
        return "done"

    return server


async def test_progress_on_one_process_is_seen_and_heard_on_another(
    redis: RedisServer, prefix: str
) -> None:
    release = trio.Event()
    a, b = make_server(release), make_server(release)
    async with task_process(redis, prefix, a), task_process(redis, prefix, b):
        async with client_of(a, namespace=OWNER) as on_a, client_of(b, namespace=OWNER) as on_b:
            task_id = (await on_a.request("tools/call", {"name": "halfway", "arguments": {}}))[
                "taskId"
            ]
            listen = on_b.start_request(
                "subscriptions/listen", {"notifications": {"taskIds": [task_id]}}
            )
            await wait_tracked(on_b, listen)
            with trio.fail_after(15):
                while True:
                    polled = await on_b.request("tasks/get", {"taskId": task_id})
                    if polled.get("statusMessage") == "5/10: halfway":
                        break
                    await trio.sleep(0.02)
            assert polled["status"] == "working"
            release.set()
            done = await wait_status(on_b, task_id, "completed")
            assert done["statusMessage"] == "10/10: all done"
            with trio.fail_after(15):
                while len(listen.notifications) < 2 or not any(
                    m["params"]["status"] == "completed" for m in listen.notifications[1:]
                ):
                    await trio.sleep(0.02)
            heard = [m["params"].get("statusMessage") for m in listen.notifications[1:]]
            assert "10/10: all done" in heard
            await listen.cancel()
