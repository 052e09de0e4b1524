"""Hostile answers to a tool's questions (``ctx.elicit``): never a crash, a hang or a leak.

Ids of every wrong shape, results that are not objects, invalid actions and
error objects that are not objects: each is matched to nothing, or becomes a
clear ``ClientRequestError`` in the tool, and the connection goes on.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from trio_mcp_cancel import Registry
from trio_mcp_cancel.server import ClientRequestError, Context, McpServer
from trio_mcp_cancel.testing import assert_no_leaks
from trio_mcp_cancel.transports.memory import memory_transport_pair, serve_mcp_memory

Message = dict[str, Any]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def make_server() -> McpServer:
    server = McpServer("hostile-answers")

    @server.tool()
    async def ask(ctx: Context) -> str:
        try:
            answer = await ctx.elicit("Name?", SCHEMA)
        except ClientRequestError as exc:
            return f"error: {exc}"
        return f"action {answer.action}"

    return server


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"result": 5}, "error: elicitation/create: the client's result is not an object"),
        ({"result": {"action": "maybe"}}, "error: elicitation/create: the client's action 'maybe'"),
        (
            {"error": "boom"},
            "error: elicitation/create: the client answered with a malformed error",
        ),
        (
            {"error": {"code": "x", "message": "m" * 10_000}},
            "error: elicitation/create: the client answered x: ",
        ),
        ({"result": {"action": "accept", "content": [1]}}, "action accept"),
    ],
)
async def test_malformed_answers_are_clear_errors(
    mcp_registry: Registry, answer: Message, expected: str
) -> None:
    client, server_end = memory_transport_pair()

    async def send(message: Message) -> None:
        await client.send.send(json.dumps(message))

    async def receive() -> Message:
        message: Message = json.loads(await client.receive.receive())
        return message

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_mcp_memory, make_server(), server_end, mcp_registry)
            await send(INITIALIZE)
            await receive()
            await send(
                {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask"}}
            )
            asked = await receive()
            for bad_id in ([asked["id"]], {"id": asked["id"]}, None, 1.5, asked["id"] + "x"):
                await send({"jsonrpc": "2.0", "id": bad_id, "result": {"action": "accept"}})
            await send({"jsonrpc": "2.0", "id": asked["id"], **answer})
            reply = await receive()
            await client.send.aclose()
    text = reply["result"]["content"][0]["text"]
    assert text.startswith(expected)
    assert len(text) < 400  # a huge error message is cut
    assert_no_leaks(mcp_registry)
