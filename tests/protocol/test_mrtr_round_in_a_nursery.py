"""A modern ``ctx.elicit`` asked from a task of the tool's own nursery is still an MRTR round.

The round travels out of the tool as an exception; a nursery wraps it in
an exception group, which must not turn the question into a failed tool.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_mcp_cancel.client import ClientHandlers
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import open_test_client

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def make_server() -> McpServer:
    server = McpServer("nursery-asker")

    @server.tool()
    async def helpers(ctx: Context) -> str:
        names: list[str] = []

        async def ask() -> None:
            answer = await ctx.elicit("Your name?", NAME)
            assert answer.content is not None
            names.append(answer.content["name"])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            nursery.start_soon(trio.sleep, 1)  # a sibling the round cancels
        return f"hello {names[0]}"

    @server.tool()
    async def nested(ctx: Context) -> str:
        async with trio.open_nursery() as outer:

            async def inner() -> None:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(ctx.elicit, "Deep?", NAME)

            outer.start_soon(inner)
        return "asked"

    @server.tool()
    async def ask_and_fail(ctx: Context) -> str:
        async def fail() -> None:
            raise ValueError("broken helper")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ctx.elicit, "Name?", NAME)
            nursery.start_soon(fail)
        return "unreachable"

    return server


async def answer(params: dict[str, Any]) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": "Ada"}}


@pytest.mark.parametrize("tool", ["helpers", "nested"])
async def test_a_round_from_a_nursery_task_is_input_required(
    tool: str, autojump_clock: MockClock
) -> None:
    async with open_test_client(make_server(), client_capabilities={"elicitation": {}}) as client:
        result = await client.call_tool(tool)
    assert result["resultType"] == "input_required"
    assert list(result["inputRequests"]) == ["ctx-0"]
    assert result["inputRequests"]["ctx-0"]["method"] == "elicitation/create"


async def test_the_client_completes_a_tool_that_asks_from_a_nursery_task(
    autojump_clock: MockClock,
) -> None:
    handlers = ClientHandlers(elicitation=answer)
    async with open_test_client(make_server(), handlers=handlers) as client:
        result = await client.call_tool("helpers")
    assert result["content"][0]["text"] == "hello Ada"


async def test_a_round_beside_a_real_failure_is_the_failure(autojump_clock: MockClock) -> None:
    async with open_test_client(make_server(), client_capabilities={"elicitation": {}}) as client:
        result = await client.call_tool("ask_and_fail")
    assert result["isError"] is True
    assert result["resultType"] == "complete"
