"""A task settled by another process while it still runs here (real redis-server).

A worker paused past its liveness (a VM freeze, a blocking loop) has its
tasks settled ``failed`` by whoever notices; when it resumes, its janitor
re-reads the records of the tasks it runs, cancels the run of one whose
record is already terminal (logged), and drops what the run ends with: the
first terminal state stands, so a client told "failed" is never handed a
result whose side effects it may now repeat.
"""

from __future__ import annotations

import logging

import pytest
import trio

from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, McpServer, Tasks

from _support.deploy import RedisServer
from _support.redis import client_of, prefix, redis, running, task_process, wait_status

__all__ = ["prefix", "redis"]  # the fixtures, for pytest


async def test_a_task_settled_failed_elsewhere_is_cancelled_here_and_its_late_result_dropped(
    redis: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    started, flagged = trio.Event(), trio.Event()
    server = McpServer(
        "settled-elsewhere", extensions=[Tasks(TaskManager(cancel_poll_interval=0.1))]
    )

    @server.tool(task="optional")
    async def pay(ctx: Context) -> str:
        started.set()
        while not ctx.request.cancelled:  # a well-behaved tool: it stops when flagged
            await trio.sleep(0.01)
        flagged.set()
        return "paid"  # the late result: it must not replace the terminal state

    caplog.set_level(logging.WARNING, "trio_mcp_cancel.tasks")
    async with task_process(redis, prefix, server) as here, client_of(server) as client:
        task_id = (await client.request("tools/call", {"name": "pay", "arguments": {}}))["taskId"]
        with trio.fail_after(10):
            await started.wait()
        # What a supervisor (or a tasks/get seeing the lapsed liveness key) does.
        async with running(RedisBackend(redis.url, prefix=prefix)) as other:
            failed = await other.tasks.fail_tasks_of(here.instance_id, "its process stopped")
        assert failed == 1
        with trio.fail_after(5):
            await flagged.wait()
        with trio.fail_after(5):
            while not any(
                "result dropped" in r.getMessage() and task_id[:8] in r.getMessage()
                for r in caplog.records
            ):
                await trio.sleep(0.02)
        status = await wait_status(client, task_id, "failed")
        assert status["statusMessage"] == "its process stopped"
        assert status["error"]["message"] == "The server process running it stopped"
        assert "result" not in status
        messages = [r.getMessage() for r in caplog.records]
        assert any(
            "settled failed elsewhere while it still ran here" in m and task_id[:8] in m
            for m in messages
        ), messages
