"""``ctx.elicit`` on the legacy era over each real transport: stdio, WebSocket, HTTP (SSE + POST).

The question travels on the calling request's stream, the answer comes
back the transport's way (a line, a frame, a POST with the session id
answered ``202``), and a cancelled tool tells the client.  The protocol
rules themselves are in ``tests/protocol/test_client_requests.py``.
"""

from __future__ import annotations

import json
from typing import Any

import trio
import trio.testing
from trio.testing import MockClock
from trio_websocket import open_websocket_url

from trio_mcp_cancel import Registry, RequestCancelled
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import assert_no_leaks
from trio_mcp_cancel.websocket import serve_mcp_websocket

from _support.asgi import (
    AsgiClient,
    cancelled,
    initialize,
    legacy_call,
    legacy_headers,
)

Message = dict[str, Any]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
CAPABILITIES = {"elicitation": {}}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": CAPABILITIES,
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def make_server(seen: list[str]) -> McpServer:
    server = McpServer("transports")

    @server.tool()
    async def greet(ctx: Context) -> str:
        try:
            answer = await ctx.elicit("Your name?", SCHEMA)
        except RequestCancelled as exc:
            seen.append(f"cancelled: {exc.kind}")
            raise
        assert answer.content is not None
        return f"Hello {answer.content['name']}"

    return server


def accept(request_id: object, name: str) -> Message:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"action": "accept", "content": {"name": name}},
    }


def call(request_id: object) -> Message:
    return legacy_call(request_id, "greet")


async def test_stdio_carries_the_question_and_the_answer(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    client, server_stream = trio.testing.memory_stream_pair()
    lines: list[Message] = []
    buffer = bytearray()

    async def next_message() -> Message:
        nonlocal buffer
        while not lines:
            buffer += await client.receive_some()
            *complete, rest = buffer.split(b"\n")
            lines.extend(json.loads(line) for line in complete if line.strip())
            buffer = bytearray(rest)
        return lines.pop(0)

    async def send(message: Message) -> None:
        await client.send_all(json.dumps(message).encode() + b"\n")

    seen: list[str] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_mcp_stdio(
                make_server(seen),
                mcp_registry,
                stdin=server_stream,
                stdout=server_stream,
                task_status=task_status,
            )
        )
        await send(INITIALIZE)
        assert (await next_message())["id"] == 0
        await send(call(1))
        asked = await next_message()
        assert asked["method"] == "elicitation/create"
        await send(accept(asked["id"], "Ada"))
        reply = await next_message()
        assert reply["result"]["content"][0]["text"] == "Hello Ada"
        # A cancelled call cancels its question.
        await send(call(2))
        asked = await next_message()
        await send(cancelled(2, "stop"))
        told = await next_message()
        await client.send_eof()
    assert told["params"] == {"requestId": asked["id"], "reason": "stop"}
    assert seen == ["cancelled: client"]


async def test_websocket_carries_the_question_and_the_answer(mcp_registry: Registry) -> None:
    seen: list[str] = []

    async def rpc_receive(ws: Any) -> Message:
        message: Message = json.loads(await ws.get_message())
        return message

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            ws_server = await nursery.start(
                serve_mcp_websocket, make_server(seen), mcp_registry, "127.0.0.1", 0
            )
            async with open_websocket_url(f"ws://127.0.0.1:{ws_server.port}/mcp") as ws:
                await ws.send_message(json.dumps(INITIALIZE))
                assert (await rpc_receive(ws))["id"] == 0
                await ws.send_message(json.dumps(call(1)))
                asked = await rpc_receive(ws)
                assert asked["method"] == "elicitation/create"
                await ws.send_message(json.dumps(accept(asked["id"], "Bo")))
                reply = await rpc_receive(ws)
            nursery.cancel_scope.cancel()
    assert reply["result"]["content"][0]["text"] == "Hello Bo"


async def test_legacy_http_asks_on_the_calls_stream_and_takes_the_answer_as_a_post(
    autojump_clock: MockClock,
) -> None:
    seen: list[str] = []
    app = McpHttpApp(make_server(seen))
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        async with client.lifespan():
            session = await initialize(client, capabilities=CAPABILITIES)
            stream = client.start("POST", legacy_headers(session), call(1))
            asked = await stream.next_message()
            assert asked["method"] == "elicitation/create"
            assert isinstance(asked["id"], str)
            unknown = await client.post(legacy_headers(session), accept("srv-unknown-1", "X"))
            assert unknown.status == 202
            answered = await client.post(legacy_headers(session), accept(asked["id"], "Cy"))
            assert answered.status == 202
            reply = await stream.next_message()
            await stream.wait_complete()
            assert reply["result"]["content"][0]["text"] == "Hello Cy"
            # The client cancels a call whose question is pending: the question is
            # cancelled on the same stream, and a late answer is only acknowledged.
            stream = client.start("POST", legacy_headers(session), call(2))
            asked = await stream.next_message()
            notified = await client.post(legacy_headers(session), cancelled(2, "user stop"))
            assert notified.status == 202
            told = await stream.next_message()
            await stream.wait_complete()
            late = await client.post(legacy_headers(session), accept(asked["id"], "late"))
            assert late.status == 202
            await app.registry.wait_idle()
            assert_no_leaks(app.registry)
    assert told == {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": asked["id"], "reason": "user stop"},
    }
    assert stream.messages() == [asked, told]  # and no reply to the cancelled call
    assert seen == ["cancelled: client"]


async def test_legacy_http_without_a_stream_cannot_ask_and_says_so(
    autojump_clock: MockClock,
) -> None:
    app = McpHttpApp(make_server([]), json_response=True)
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        async with client.lifespan():
            session = await initialize(client, capabilities=CAPABILITIES)
            reply = (await client.post(legacy_headers(session), call(1))).json()
    assert reply["result"]["isError"] is True
    assert "no stream and session to ask the client on" in reply["result"]["content"][0]["text"]
