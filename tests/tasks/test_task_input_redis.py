"""A task parked for input, answered through another process (real redis-server).

The record (with its pending ``inputRequests``) lives in Redis, so any
process answers ``tasks/get``; ``tasks/update`` landing on a process that
does not run the task reaches the one that does through the bus, and its
status changes reach ``subscriptions/listen`` streams on other processes.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import trio

from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, InputRequired, McpServer, Tasks
from trio_mcp_cancel.testing import McpTestClient

from _support.deploy import WITH_TASKS, RedisServer
from _support.redis import client_of, prefix, redis, task_process, wait_status, wait_tracked

__all__ = ["prefix", "redis"]  # the fixtures, for pytest

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
CAPABILITIES = {"elicitation": {}, **WITH_TASKS}


def make_server() -> McpServer:
    server = McpServer(
        "redis-task-input", extensions=[Tasks(TaskManager(cancel_poll_interval=1000))]
    )

    @server.tool(task="optional")
    async def confirm(ctx: Context) -> str | InputRequired:
        answer = (ctx.input_responses or {}).get("ok")
        if answer is None:
            return InputRequired({"ok": InputRequired.elicit("Go ahead?", SCHEMA)})
        return f"confirmed: {answer['content']['ok']}"

    return server


def answering(server: McpServer) -> AbstractAsyncContextManager[McpTestClient]:
    """The same caller on every process, one that can answer an elicitation."""
    return client_of(server, capabilities=CAPABILITIES, grace_period=30)


async def test_input_for_a_task_on_one_instance_arrives_through_another(
    redis: RedisServer, prefix: str
) -> None:
    a, b = make_server(), make_server()
    async with task_process(redis, prefix, a), task_process(redis, prefix, b):
        async with answering(a) as on_a, answering(b) as on_b:
            created = await on_a.request("tools/call", {"name": "confirm", "arguments": {}})
            task_id = created["taskId"]
            parked = await wait_status(on_b, task_id, "input_required")
            # A listener on B hears about A's task through the bus.
            wanted = {"notifications": {"taskIds": [task_id]}}
            listen = on_b.start_request("subscriptions/listen", wanted)
            await wait_tracked(on_b, listen)
            assert parked["inputRequests"]["ok"]["method"] == "elicitation/create"
            assert a.dispatcher.extension(Tasks).manager.running_here(
                task_id
            ) and not b.dispatcher.extension(Tasks).manager.running_here(task_id)
            answer = {"ok": {"action": "accept", "content": {"ok": True}}}
            ack = await on_b.request("tasks/update", {"taskId": task_id, "inputResponses": answer})
            assert ack["resultType"] == "complete"
            done = await wait_status(on_b, task_id, "completed")
            assert done["result"]["content"][0]["text"] == "confirmed: True"
            assert "inputRequests" not in done
            with trio.fail_after(10):
                while "completed" not in (statuses := _statuses(listen.notifications[1:])):
                    await trio.sleep(0.02)
            # The parked status may reach B's bus after the stream opened (pub/sub
            # has no ordering with our own requests): only that may come first.
            while statuses and statuses[0] == "input_required":
                statuses.pop(0)
            assert statuses == ["working", "completed"]
            await listen.cancel()
            assert on_a.registry.in_flight_count == 0


def _statuses(notifications: list[dict[str, object]]) -> list[str]:
    return [str(m["params"]["status"]) for m in notifications]  # type: ignore[index]
