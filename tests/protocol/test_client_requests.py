"""ctx.elicit / ctx.sample / ctx.list_roots: one tool body, both eras, cancellation both ways.

Legacy (here over the in-memory transport, the real message path of stdio
and WebSocket): the tool's question is a JSON-RPC request on the
connection, the client's response wakes the tool; a cancelled tool sends
``notifications/cancelled`` for its outstanding question, and a late
answer is ignored.  Modern: the same call is an MRTR round.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio
from trio.testing import MockClock

from trio_mcp_cancel import Registry
from trio_mcp_cancel.server import (
    ClientRequestError,
    ClientRequestTimeout,
    ConnectionLimits,
    Context,
    McpServer,
)
from trio_mcp_cancel.testing import assert_no_leaks
from trio_mcp_cancel.transports.memory import MemoryEnd, memory_transport_pair, serve_mcp_memory

Message = dict[str, Any]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
ALL_CAPABILITIES = {"elicitation": {}, "sampling": {}, "roots": {}}
MODERN = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": ALL_CAPABILITIES,
}


def make_server(seen: list[str]) -> McpServer:
    server = McpServer("asker")

    @server.tool()
    async def greet(ctx: Context) -> str:
        """Asks a name, then greets; what it did goes to *seen*."""
        try:
            answer = await ctx.elicit("Your name?", SCHEMA)
        except ClientRequestError as exc:
            seen.append(f"error: {exc}")
            raise
        seen.append(f"{answer.action} {answer.content}")
        if not answer.accepted:
            return f"no name ({answer.action})"
        assert answer.content is not None
        return f"Hello {answer.content['name']}"

    @server.tool()
    async def two_questions(ctx: Context) -> str:
        first = await ctx.elicit("First?", SCHEMA)
        sampled = await ctx.sample("Say hi", 10)
        roots = await ctx.list_roots()
        seen.append("side effect")  # after the last question: runs once
        assert first.content is not None
        return f"{first.content['name']} / {sampled['content']['text']} / {len(roots)} roots"

    @server.tool()
    async def impatient(ctx: Context) -> str:
        try:
            await ctx.elicit("Quick?", SCHEMA, answer_within=5)
        except ClientRequestTimeout as exc:
            return f"timed out: {exc}"
        return "answered"

    return server


class Peer:
    """The client's side of the memory connection, speaking raw JSON-RPC."""

    def __init__(self, end: MemoryEnd) -> None:
        self.end = end

    async def send(self, message: Message) -> None:
        await self.end.send.send(json.dumps(message))

    async def receive(self) -> Message:
        message: Message = json.loads(await self.end.receive.receive())
        return message

    async def initialize(
        self, capabilities: Message = ALL_CAPABILITIES, version: str = "2025-11-25"
    ) -> None:
        await self.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": version,
                    "capabilities": capabilities,
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        assert "result" in await self.receive()
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def call(self, request_id: object, name: str, meta: Message | None = None) -> None:
        params: Message = {"name": name, "arguments": {}}
        if meta is not None:
            params["_meta"] = meta
        await self.send(
            {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        )


@asynccontextmanager
async def connected(
    registry: Registry, seen: list[str], limits: ConnectionLimits | None = None
) -> AsyncIterator[Peer]:
    client_end, server_end = memory_transport_pair()
    async with trio.open_nursery() as nursery:
        serve = partial(serve_mcp_memory, make_server(seen), server_end, registry)
        if limits is not None:
            serve = partial(serve, limits=limits)
        await nursery.start(serve)
        yield Peer(client_end)
        await client_end.send.aclose()


async def test_a_legacy_tool_asks_the_client_and_gets_its_answer(mcp_registry: Registry) -> None:
    seen: list[str] = []
    async with connected(mcp_registry, seen) as peer:
        await peer.initialize()
        await peer.call(1, "greet")
        asked = await peer.receive()
        assert asked["method"] == "elicitation/create"
        assert asked["params"] == {
            "mode": "form",
            "message": "Your name?",
            "requestedSchema": SCHEMA,
        }
        await peer.send(
            {
                "jsonrpc": "2.0",
                "id": asked["id"],
                "result": {"action": "accept", "content": {"name": "Ada"}},
            }
        )
        reply = await peer.receive()
    assert reply["id"] == 1
    assert reply["result"]["content"] == [{"type": "text", "text": "Hello Ada"}]
    assert_no_leaks(mcp_registry)


async def test_a_decline_is_a_value_and_an_error_answer_is_an_exception(
    mcp_registry: Registry,
) -> None:
    seen: list[str] = []
    async with connected(mcp_registry, seen) as peer:
        await peer.initialize()
        await peer.call(1, "greet")
        asked = await peer.receive()
        await peer.send({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "decline"}})
        declined = await peer.receive()
        await peer.call(2, "greet")
        asked = await peer.receive()
        await peer.send(
            {"jsonrpc": "2.0", "id": asked["id"], "error": {"code": -32603, "message": "no UI"}}
        )
        failed = await peer.receive()
    assert declined["result"]["content"][0]["text"] == "no name (decline)"
    assert failed["result"]["isError"] is True
    assert "-32603: no UI" in failed["result"]["content"][0]["text"]
    assert seen[0] == "decline None"


async def test_answers_for_unknown_ids_are_ignored_and_several_questions_are_asked_in_order(
    mcp_registry: Registry,
) -> None:
    seen: list[str] = []
    async with connected(mcp_registry, seen) as peer:
        await peer.initialize()
        await peer.send({"jsonrpc": "2.0", "id": "srv-nobody-1", "result": {"action": "accept"}})
        await peer.call(1, "two_questions")
        first = await peer.receive()
        await peer.send({"jsonrpc": "2.0", "id": 12345, "result": {}})  # matches nothing
        await peer.send(
            {
                "jsonrpc": "2.0",
                "id": first["id"],
                "result": {"action": "accept", "content": {"name": "Bo"}},
            }
        )
        second = await peer.receive()
        assert second["method"] == "sampling/createMessage"
        assert second["params"]["maxTokens"] == 10
        await peer.send(
            {
                "jsonrpc": "2.0",
                "id": second["id"],
                "result": {
                    "role": "assistant",
                    "content": {"type": "text", "text": "hi"},
                    "model": "m",
                },
            }
        )
        third = await peer.receive()
        assert third["method"] == "roots/list"
        await peer.send(
            {"jsonrpc": "2.0", "id": third["id"], "result": {"roots": [{"uri": "file:///a"}]}}
        )
        reply = await peer.receive()
    assert reply["result"]["content"][0]["text"] == "Bo / hi / 1 roots"
    assert len({first["id"], second["id"], third["id"]}) == 3


async def test_a_capability_the_client_did_not_declare_is_never_asked(
    mcp_registry: Registry,
) -> None:
    seen: list[str] = []
    async with connected(mcp_registry, seen) as peer:
        await peer.initialize({"sampling": {}})
        await peer.call(1, "greet")
        reply = await peer.receive()  # no elicitation/create came first
    assert reply["id"] == 1
    assert reply["result"]["isError"] is True
    assert "did not declare the 'elicitation' capability" in reply["result"]["content"][0]["text"]


async def test_a_cancelled_tool_cancels_its_question_and_a_late_answer_is_ignored(
    mcp_registry: Registry,
) -> None:
    seen: list[str] = []
    async with connected(mcp_registry, seen) as peer:
        await peer.initialize()
        await peer.call(1, "greet")
        asked = await peer.receive()
        await peer.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 1, "reason": "user pressed stop"},
            }
        )
        told = await peer.receive()
        # A late answer matches nothing; the connection goes on.
        await peer.send({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept"}})
        await peer.send({"jsonrpc": "2.0", "id": 2, "method": "ping"})
        pong = await peer.receive()
    assert told == {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": asked["id"], "reason": "user pressed stop"},
    }
    assert pong == {"jsonrpc": "2.0", "id": 2, "result": {}}  # and no reply to request 1
    assert seen == []
    assert_no_leaks(mcp_registry)


async def test_a_server_time_limit_cancels_the_question_and_answers_the_call(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    seen: list[str] = []
    limits = ConnectionLimits(max_request_time=30)
    async with connected(mcp_registry, seen, limits) as peer:
        await peer.initialize()
        await peer.call(1, "greet")
        asked = await peer.receive()
        told = await peer.receive()
        reply = await peer.receive()
    assert told["method"] == "notifications/cancelled"
    assert told["params"] == {"requestId": asked["id"], "reason": "request time limit reached"}
    assert reply["error"]["code"] == -32800


async def test_no_answer_within_the_timeout_is_an_exception_and_the_client_is_told(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    seen: list[str] = []
    async with connected(mcp_registry, seen) as peer:
        await peer.initialize()
        await peer.call(1, "impatient")
        asked = await peer.receive()
        told = await peer.receive()
        reply = await peer.receive()
    assert told["params"] == {"requestId": asked["id"], "reason": "no answer within 5s"}
    assert reply["result"]["content"][0]["text"].startswith("timed out: elicitation/create")


async def test_a_trio_cancel_reaching_the_wait_still_tells_the_client(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    """The wait is a plain Trio checkpoint: a cancel scope (here the tool's own,
    as the hard cancel's would) ends it, and the client is still told."""
    server = McpServer("scoped")

    @server.tool()
    async def scoped(ctx: Context) -> str:
        with trio.move_on_after(3):
            await ctx.elicit("Within 3s?", SCHEMA, answer_within=None)
        return "gave up"

    client_end, server_end = memory_transport_pair()
    peer = Peer(client_end)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_mcp_memory, server, server_end, mcp_registry)
        await peer.initialize()
        await peer.call(1, "scoped")
        asked = await peer.receive()
        told = await peer.receive()
        reply = await peer.receive()
        await client_end.send.aclose()
    assert told["method"] == "notifications/cancelled"
    assert told["params"] == {"requestId": asked["id"], "reason": "cancelled"}
    assert reply["result"]["content"][0]["text"] == "gave up"
    assert_no_leaks(mcp_registry)


async def test_a_modern_call_asks_through_mrtr_rounds_and_runs_the_tool_again(
    mcp_registry: Registry,
) -> None:
    seen: list[str] = []
    async with connected(mcp_registry, seen) as peer:
        await peer.call(1, "two_questions", MODERN)
        first = (await peer.receive())["result"]
        assert first["resultType"] == "input_required"
        assert list(first["inputRequests"]) == ["ctx-0"]
        assert first["inputRequests"]["ctx-0"]["method"] == "elicitation/create"

        async def retry(request_id: int, state: str, responses: Message) -> Message:
            meta = {"name": "two_questions", "arguments": {}, "_meta": MODERN}
            params = {**meta, "requestState": state, "inputResponses": responses}
            await peer.send(
                {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
            )
            result: Message = (await peer.receive())["result"]
            return result

        second = await retry(
            2, first["requestState"], {"ctx-0": {"action": "accept", "content": {"name": "Cy"}}}
        )
        assert list(second["inputRequests"]) == ["ctx-1"]
        assert second["inputRequests"]["ctx-1"]["method"] == "sampling/createMessage"
        third = await retry(
            3,
            second["requestState"],
            {
                "ctx-1": {
                    "role": "assistant",
                    "content": {"type": "text", "text": "yo"},
                    "model": "m",
                }
            },
        )
        assert list(third["inputRequests"]) == ["ctx-2"]
        done = await retry(4, third["requestState"], {"ctx-2": {"roots": []}})
    assert done["content"][0]["text"] == "Cy / yo / 0 roots"
    assert seen == ["side effect"]  # the side effect after the last question ran once


async def test_a_modern_question_the_client_cannot_answer_is_refused_with_32021(
    mcp_registry: Registry,
) -> None:
    seen: list[str] = []
    meta = {**MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    async with connected(mcp_registry, seen) as peer:
        await peer.call(1, "greet", meta)
        reply = await peer.receive()
    assert reply["error"]["code"] == -32021
    assert reply["error"]["data"] == {"requiredCapabilities": {"elicitation": {}}}


async def test_a_full_table_refuses_one_more_question(mcp_registry: Registry) -> None:
    seen: list[str] = []
    async with connected(mcp_registry, seen) as peer:
        await peer.initialize()
        for request_id in range(33):
            await peer.call(request_id + 1, "greet")
        asked = [await peer.receive() for _ in range(32)]
        refused = await peer.receive()
        assert refused["id"] == 33
        assert "too many requests to the client" in refused["result"]["content"][0]["text"]
        for question in asked:
            await peer.send(
                {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "cancel"}}
            )
        replies = [await peer.receive() for _ in range(32)]
    assert {reply["result"]["content"][0]["text"] for reply in replies} == {"no name (cancel)"}


async def test_a_prompt_asks_through_mrtr_too(mcp_registry: Registry) -> None:
    server = McpServer("prompter")

    @server.prompt()
    async def topic(ctx: Context) -> str:
        answer = await ctx.elicit("Topic?", SCHEMA)
        assert answer.content is not None
        return f"Write about {answer.content['name']}"

    client_end, server_end = memory_transport_pair()
    peer = Peer(client_end)
    params: Message = {"name": "topic", "arguments": {}, "_meta": MODERN}
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_mcp_memory, server, server_end, mcp_registry)
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": params})
        first = (await peer.receive())["result"]
        answers = {"ctx-0": {"action": "accept", "content": {"name": "trio"}}}
        retry = {**params, "requestState": first["requestState"], "inputResponses": answers}
        await peer.send({"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": retry})
        done = (await peer.receive())["result"]
        await client_end.send.aclose()
    assert first["resultType"] == "input_required"
    assert done["messages"][0]["content"]["text"] == "Write about trio"


async def test_a_2025_06_18_client_is_asked_without_the_newer_mode_field(
    mcp_registry: Registry,
) -> None:
    seen: list[str] = []
    async with connected(mcp_registry, seen) as peer:
        await peer.initialize(version="2025-06-18")
        await peer.call(1, "greet")
        asked = await peer.receive()
        await peer.send({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "cancel"}})
        await peer.receive()
    assert asked["params"] == {"message": "Your name?", "requestedSchema": SCHEMA}
