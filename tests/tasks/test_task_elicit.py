"""``ctx.elicit`` inside a task (Tasks extension, modern era): the task parks, no re-run.

The question parks the task in ``input_required`` with ``inputRequests``
``{"ctx-0": ...}``; ``tasks/update`` answers it and the same call returns
the answer, the tool going on from there (it is not run again).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing

from trio_mcp_cancel.backends.memory import MemoryTaskStore
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, McpServer, Tasks

from _support.tasks import get, serving

CAPABILITIES = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


async def test_a_task_parks_on_ctx_elicit_and_goes_on_with_the_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = McpServer("task-elicit", extensions=[Tasks(TaskManager(store=MemoryTaskStore()))])
    runs: list[str] = []

    @server.tool(task="required")
    async def onboard(ctx: Context) -> str:
        runs.append("started")
        answer = await ctx.elicit("Your name?", NAME)
        assert answer.content is not None
        await trio.sleep(1.0)
        return f"welcome {answer.content['name']}"

    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        created = await client.request("tools/call", {"name": "onboard", "arguments": {}})
        task_id = created["taskId"]
        await trio.sleep(0.5)
        parked = await get(client, task_id)
        assert parked["status"] == "input_required"
        assert list(parked["inputRequests"]) == ["ctx-0"]
        assert parked["inputRequests"]["ctx-0"]["method"] == "elicitation/create"
        answer = {"action": "accept", "content": {"name": "Dee"}}
        await client.request(
            "tasks/update", {"taskId": task_id, "inputResponses": {"ctx-0": answer}}
        )
        await trio.sleep(2.0)
        done = await get(client, task_id)
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "welcome Dee"
    assert runs == ["started"]  # parked and resumed, never run again


def before_task_server(ask_first: Callable[[Context], Awaitable[None]]) -> McpServer:
    """A task-required tool whose ``before_task`` is *ask_first*."""
    server = McpServer("before-elicit", extensions=[Tasks(TaskManager(store=MemoryTaskStore()))])

    @server.tool(task="required", before_task=ask_first)
    async def later(ctx: Context) -> str:
        return "ran"

    return server


async def first_round(client: Any) -> dict[str, Any]:
    """Call the tool once: the question comes back as an MRTR round, before any task."""
    first: dict[str, Any] = await client.request("tools/call", {"name": "later", "arguments": {}})
    assert first["resultType"] == "input_required" and "taskId" not in first
    assert list(first["inputRequests"]) == ["ctx-0"]
    return first


async def test_ctx_elicit_in_before_task_is_an_mrtr_round_before_the_task_exists(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def ask_first(ctx: Context) -> None:
        await ctx.elicit("Your name?", NAME)

    async with serving(before_task_server(ask_first), capabilities=CAPABILITIES) as (client, _):
        first = await first_round(client)
        answers = {"ctx-0": {"action": "accept", "content": {"name": "Eve"}}}
        retry = {
            "name": "later",
            "arguments": {},
            "inputResponses": answers,
            "requestState": first["requestState"],
        }
        created = await client.request("tools/call", retry)
        assert created["resultType"] == "task"
        await trio.sleep(1.0)
        done = await get(client, created["taskId"])
    assert done["status"] == "completed"


async def test_ctx_elicit_in_a_task_of_before_tasks_own_nursery_is_the_same_round(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def ask_first(ctx: Context) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ctx.elicit, "Your name?", NAME)

    async with serving(before_task_server(ask_first), capabilities=CAPABILITIES) as (client, _):
        await first_round(client)
