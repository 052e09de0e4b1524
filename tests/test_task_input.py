"""Tasks and client input (SEP-2663 + SEP-2322), in memory on MockClock.

A task cannot ask for input while it runs here, so a task-capable tool
gathers it first: ``before_task`` answers ``InputRequired`` in the request
itself (no task yet), and the retry that carries the answers creates the
task, whose tool sees them.  A tool that still returns ``InputRequired``
from inside a task fails the task clearly instead of "completing" it with
something that is not a tool result.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from test_tasks import get, serving

from trio_mcp_cancel._core.tasks import MemoryTaskStore
from trio_mcp_cancel.server import InputRequired, McpServer, TaskManager, ToolContext, elicit
from trio_mcp_cancel.testing import McpError

CAPABILITIES = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def answered_name(ctx: ToolContext) -> str | None:
    answer = (ctx.input_responses or {}).get("user_name")
    content = answer.get("content") if isinstance(answer, dict) else None
    name = content.get("name") if isinstance(content, dict) else None
    return name if isinstance(name, str) else None


def make_server() -> tuple[McpServer, list[str]]:
    server = McpServer("task-input-test", tasks=TaskManager(store=MemoryTaskStore()))
    asked: list[str] = []

    async def ask_name(ctx: ToolContext, greeting: str = "Hello") -> InputRequired | None:
        asked.append(greeting)
        if answered_name(ctx) is None:
            return InputRequired({"user_name": elicit("What is your name?", NAME)}, state="r1")
        return None

    @server.tool(task="required", before_task=ask_name)
    async def greet_later(ctx: ToolContext, greeting: str = "Hello") -> str:
        await trio.sleep(5.0)
        return f"{greeting}, {answered_name(ctx)} (state {ctx.request_state})"

    @server.tool(task="optional")
    async def asks_inside(ctx: ToolContext) -> str | InputRequired:
        await trio.sleep(1.0)
        return InputRequired({"user_name": elicit("What is your name?", NAME)})

    return server, asked


async def test_input_is_gathered_before_the_task_and_reaches_its_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, asked = make_server()
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        params: dict[str, Any] = {"name": "greet_later", "arguments": {"greeting": "Hi"}}
        first = await client.request("tools/call", params)
        assert first["resultType"] == "input_required" and "taskId" not in first
        assert list(first["inputRequests"]) == ["user_name"]
        assert server.tasks.running_count == 0  # no task yet
        retry = {
            **params,
            "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Alice"}}},
            "requestState": first["requestState"],
        }
        created = await client.request("tools/call", retry)
        assert created["resultType"] == "task" and created["status"] == "working"
        assert "requestState" not in created and "inputRequests" not in created
        assert asked == ["Hi", "Hi"]  # before_task got the call's arguments both times
        await trio.sleep(6.0)
        done = await get(client, created["taskId"])
        assert done["status"] == "completed"
        assert done["result"]["content"][0]["text"] == "Hi, Alice (state r1)"
        assert client.registry.in_flight_count == 0


async def test_a_tampered_state_creates_no_task(autojump_clock: trio.testing.MockClock) -> None:
    server, _ = make_server()
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        params: dict[str, Any] = {"name": "greet_later", "arguments": {}}
        first = await client.request("tools/call", params)
        forged = first["requestState"][:-4] + (
            "AAAA" if first["requestState"][-4:] != "AAAA" else "BBBB"
        )
        answers = {"user_name": {"action": "accept", "content": {"name": "Mallory"}}}
        with pytest.raises(McpError) as caught:
            await client.request(
                "tools/call", {**params, "inputResponses": answers, "requestState": forged}
            )
        assert caught.value.code == -32602
        assert server.tasks.running_count == 0


async def test_input_asked_inside_a_task_fails_the_task_clearly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, _ = make_server()
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        created = await client.request("tools/call", {"name": "asks_inside", "arguments": {}})
        assert created["resultType"] == "task"
        await trio.sleep(2.0)
        done = await get(client, created["taskId"])
        assert done["status"] == "failed" and "result" not in done
        assert done["error"]["code"] == -32603
        assert "asked for client input while running as a task" in done["error"]["message"]
        assert server.tasks.running_count == 0 and client.registry.in_flight_count == 0


def test_before_task_needs_a_task_capable_tool() -> None:
    server = McpServer("x")

    async def never(ctx: ToolContext) -> None:
        return None

    with pytest.raises(ValueError, match="before_task"):
        server.tool(before_task=never)
