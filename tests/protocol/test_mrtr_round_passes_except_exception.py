"""A modern ``ctx.elicit`` round is not an ``Exception``: ``except Exception`` lets it through.

The round travels out of the tool as an exception (the tool is run again
with the answer); a tool that guards its work with ``try/except
Exception`` -- common, and right for its own failures -- must not swallow
the question and break the round.
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
    server = McpServer("guarded-asker")

    @server.tool()
    async def guarded(ctx: Context) -> str:
        try:
            answer = await ctx.elicit("Your name?", NAME)
        except Exception as exc:  # the tool's own failures only
            return f"swallowed {type(exc).__name__}"
        assert answer.content is not None
        return f"hello {answer.content['name']}"

    @server.tool()
    async def guarded_in_a_nursery(ctx: Context) -> str:
        names: list[str] = []

        async def ask() -> None:
            try:
                answer = await ctx.elicit("Your name?", NAME)
            except Exception:
                names.append("swallowed")
                return
            assert answer.content is not None
            names.append(answer.content["name"])

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask)
        except Exception as exc:
            return f"swallowed group {exc!r}"
        return f"hello {names[0]}"

    @server.prompt()
    async def greeting(ctx: Context) -> str:
        try:
            answer = await ctx.elicit("Your name?", NAME)
        except Exception:
            return "swallowed"
        assert answer.content is not None
        return f"Greet {answer.content['name']}"

    return server


async def answer(params: dict[str, Any]) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": "Ada"}}


async def test_a_tool_catching_exception_around_elicit_still_asks(
    autojump_clock: MockClock,
) -> None:
    async with open_test_client(make_server(), client_capabilities={"elicitation": {}}) as client:
        result = await client.call_tool("guarded")
    assert result["resultType"] == "input_required"
    assert result["inputRequests"]["ctx-0"]["method"] == "elicitation/create"


async def test_the_client_completes_the_round_of_a_tool_catching_exception(
    autojump_clock: MockClock,
) -> None:
    handlers = ClientHandlers(elicitation=answer)
    async with open_test_client(make_server(), handlers=handlers) as client:
        first = await client.call_tool("guarded")
        nested = await client.call_tool("guarded_in_a_nursery")
    assert first["content"][0]["text"] == "hello Ada"
    assert nested["content"][0]["text"] == "hello Ada"


async def test_a_prompt_catching_exception_around_elicit_still_asks(
    autojump_clock: MockClock,
) -> None:
    async with open_test_client(make_server(), client_capabilities={"elicitation": {}}) as client:
        result = await client.request("prompts/get", {"name": "greeting"})
    assert result["resultType"] == "input_required"
    assert result["inputRequests"]["ctx-0"]["method"] == "elicitation/create"


async def test_a_completer_that_asks_fails_the_request_and_the_client_keeps_working(
    autojump_clock: MockClock,
) -> None:
    server = make_server()

    @server.completion("prompt", "greeting", "who")
    async def names(ctx: Context, value: str, context: Any) -> list[str]:
        await ctx.elicit("Your name?", NAME)
        return ["unreachable"]

    async with open_test_client(server, client_capabilities={"elicitation": {}}) as client:
        params = {
            "ref": {"type": "ref/prompt", "name": "greeting"},
            "argument": {"name": "who", "value": "A"},
        }
        with pytest.raises(Exception, match="Internal error"):
            await client.request("completion/complete", params)
        result = await client.call_tool("guarded")
    assert result["resultType"] == "input_required"
