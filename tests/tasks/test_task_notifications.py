"""``notifications/tasks`` on ``subscriptions/listen`` (SEP-2663), in memory on MockClock.

A listen request naming ``taskIds`` gets each status change of those tasks
as a full ``DetailedTask``; only the caller's own tasks are granted (the
acknowledgement echoes them), and asking without the extension is ``-32021``.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel.backends.memory import MemoryTaskStore
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, InputRequired, McpServer, Tasks
from trio_mcp_cancel.testing import McpError, open_test_client

from _support.tasks import serving

CAPABILITIES = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
SUB_ID = "io.modelcontextprotocol/subscriptionId"


def make_server() -> McpServer:
    server = McpServer(
        "task-notifications", extensions=[Tasks(TaskManager(store=MemoryTaskStore()))]
    )

    @server.tool(task="optional")
    async def confirm(ctx: Context) -> str | InputRequired:
        await trio.sleep(1.0)
        if not ctx.input_responses:
            return InputRequired(
                {"ok": InputRequired.elicit("Go?", {"type": "object", "properties": {}})}
            )
        return "confirmed"

    return server


async def test_listeners_get_each_status_of_their_own_tasks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = make_server()
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        task_id = (await client.request("tools/call", {"name": "confirm", "arguments": {}}))[
            "taskId"
        ]
        async with open_test_client(
            server, namespace="someone-else", client_capabilities=CAPABILITIES
        ) as other:
            theirs = (await other.request("tools/call", {"name": "confirm", "arguments": {}}))[
                "taskId"
            ]
            wanted = {"taskIds": [task_id, theirs, "no-such-task"]}
            listen = client.start_request("subscriptions/listen", {"notifications": wanted})
            await client.wait_in_flight(listen)
            await trio.sleep(1.5)  # parks for input
            await client.request(
                "tasks/update", {"taskId": task_id, "inputResponses": {"ok": {"action": "accept"}}}
            )
            await trio.sleep(1.5)  # runs again, completes
            await other.request("tasks/cancel", {"taskId": theirs})
            await trio.sleep(0.5)
            ack, *changes = listen.notifications
            assert ack["params"]["notifications"] == {"taskIds": [task_id]}
            statuses: list[dict[str, Any]] = [m["params"] for m in changes]
            assert [m["method"] for m in changes] == ["notifications/tasks"] * 3
            assert [s["status"] for s in statuses] == ["input_required", "working", "completed"]
            assert all(
                s["taskId"] == task_id and s["_meta"] == {SUB_ID: listen.id} for s in statuses
            )
            assert list(statuses[0]["inputRequests"]) == ["ok"]
            assert statuses[2]["result"]["content"][0]["text"] == "confirmed"
            await listen.cancel()
            await trio.sleep(1)
            assert server.dispatcher.runtime.subscriptions.listeners == set()


async def test_task_notifications_need_the_extension(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = make_server()
    async with serving(server, capabilities={"elicitation": {}}) as (client, _):
        listen = client.start_request("subscriptions/listen", {"notifications": {"taskIds": ["x"]}})
        with pytest.raises(McpError) as caught:
            await listen.result()
        assert caught.value.code == -32021
        with pytest.raises(McpError) as caught:
            await client.request("subscriptions/listen", {"notifications": {"taskIds": [3]}})
        assert caught.value.code == -32602
