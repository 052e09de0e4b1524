"""Tasks and client input (SEP-2663 + SEP-2322), in memory on MockClock.

A task cannot ask for input while it runs here: a tool that returns
``InputRequired`` from inside a task fails the task clearly instead of
"completing" it with something that is not a tool result.
"""

from __future__ import annotations

import trio
import trio.testing
from test_tasks import get, serving

from trio_mcp_cancel._core.tasks import MemoryTaskStore
from trio_mcp_cancel.server import InputRequired, McpServer, TaskManager, ToolContext, elicit

CAPABILITIES = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def make_server() -> McpServer:
    server = McpServer("task-input-test", tasks=TaskManager(store=MemoryTaskStore()))

    @server.tool(task="optional")
    async def asks_inside(ctx: ToolContext) -> str | InputRequired:
        await trio.sleep(1.0)
        return InputRequired({"user_name": elicit("What is your name?", NAME)})

    return server


async def test_input_asked_inside_a_task_fails_the_task_clearly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = make_server()
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        created = await client.request("tools/call", {"name": "asks_inside", "arguments": {}})
        assert created["resultType"] == "task"
        await trio.sleep(2.0)
        done = await get(client, created["taskId"])
        assert done["status"] == "failed" and "result" not in done
        assert done["error"]["code"] == -32603
        assert "asked for client input while running as a task" in done["error"]["message"]
        assert server.tasks.running_count == 0 and client.registry.in_flight_count == 0
