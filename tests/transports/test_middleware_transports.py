"""Middleware runs on every transport, in both eras, because it sits in the dispatcher.

stdio over an in-memory stream pair, HTTP in memory (asgi_harness), WebSocket on
127.0.0.1 (its framing lives in the socket layer); the in-memory client is in
tests/protocol/test_middleware.py.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from trio_websocket import open_websocket_url

from trio_mcp_cancel import Registry, checkpoint_cancelled
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.middleware import CallNext, JsonRpcError, MiddlewareRequest, Outcome
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.websocket import serve_mcp_websocket

from _support.asgi import (
    cancelled,
    headers_of,
    initialize,
    legacy_call,
    legacy_headers,
    modern_call,
    served,
)
from _support.stdio import call as stdio_call
from _support.stdio import encode
from _support.stdio import request as stdio_request


class Seen:
    """Middleware that tags results, refuses the tool ``forbidden`` and keeps outcomes."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[str, Outcome | None]] = []

    async def __call__(self, request: MiddlewareRequest, call_next: CallNext) -> Any:
        try:
            if request.target == "forbidden":
                raise JsonRpcError(-31000, "Not allowed")
            result = await call_next()
            if request.method == "tools/call":
                result["content"][0]["text"] += f" via {request.era}"
            return result
        finally:
            self.outcomes.append((request.method, request.outcome))


def make_server(seen: Seen) -> McpServer:
    server = McpServer("mw-transports", middleware=[seen])

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    @server.tool()
    async def forbidden(ctx: Context) -> str:
        return "never"

    @server.tool()
    async def polite_sleep(ctx: Context) -> str:
        while not await checkpoint_cancelled():
            await trio.sleep(0.1)
        return "stopped"

    return server


def text_of(answer: dict[str, Any]) -> str:
    text: str = answer["result"]["content"][0]["text"]
    return text


async def test_stdio_runs_the_middleware_in_both_eras(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    seen = Seen()
    client, server_end = trio.testing.memory_stream_pair()
    answers: dict[object, dict[str, Any]] = {}

    async def read() -> None:
        buffer = b""
        while data := await client.receive_some():
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                message = json.loads(line)
                if "id" in message:
                    answers[message["id"]] = message

    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(
                serve_mcp_stdio,
                make_server(seen),
                mcp_registry,
                stdin=server_end,
                stdout=server_end,
            )
        )
        nursery.start_soon(read)
        await client.send_all(encode(stdio_call(1, "echo", {"text": "hi"})))
        await client.send_all(encode(stdio_call(2, "forbidden")))
        await client.send_all(
            encode(stdio_request(3, "initialize", {"protocolVersion": "2025-06-18"}))
        )
        await client.send_all(
            encode(stdio_request(4, "tools/call", {"name": "echo", "arguments": {"text": "yo"}}))
        )
        await trio.sleep(1)
        await client.send_eof()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert text_of(answers[1]) == "hi via modern"
    assert answers[2]["error"]["code"] == -31000
    assert text_of(answers[4]) == "yo via legacy"
    # The refusing middleware never called call_next: no outcome for it to read.
    assert ("tools/call", None) in seen.outcomes


async def test_http_runs_the_middleware_in_both_eras_and_sees_a_closed_stream(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    seen = Seen()
    app = McpHttpApp(make_server(seen), mcp_registry)
    async with served(app) as client:
        message = modern_call(1, "echo", {"text": "hi"})
        modern = await client.post(headers_of(message), message)
        assert text_of(modern.json()) == "hi via modern"
        message = modern_call(2, "forbidden")
        refused = await client.post(headers_of(message), message)
        assert refused.json()["error"]["code"] == -31000
        session = await initialize(client)
        legacy = await client.post(legacy_headers(session), legacy_call(3, "echo", {"text": "yo"}))
        assert text_of(legacy.json()) == "yo via legacy"
        # A legacy cancel by notification: the middleware sees the client's cancel.
        pending = client.start("POST", legacy_headers(session), legacy_call(4, "polite_sleep"))
        await trio.sleep(0.5)
        await client.post(legacy_headers(session), cancelled(4, "stop"))
        await pending.done.wait()
    cancels = [o for _, o in seen.outcomes if o is not None and o.status == "cancelled"]
    assert [(o.cancel_kind, o.cancel_cause, o.reason) for o in cancels] == [
        ("client", "client", "stop")
    ]


async def test_websocket_runs_the_middleware(mcp_registry: Registry) -> None:
    seen = Seen()
    async with trio.open_nursery() as nursery:
        ws_server = await nursery.start(
            partial(serve_mcp_websocket, make_server(seen), mcp_registry, "127.0.0.1", 0)
        )
        url = f"ws://127.0.0.1:{ws_server.port}/mcp"
        with trio.fail_after(10):
            async with open_websocket_url(url) as ws:
                await ws.send_message(json.dumps(stdio_call(1, "echo", {"text": "hi"})))
                answer = json.loads(await ws.get_message())
                await ws.send_message(json.dumps(stdio_call(2, "forbidden")))
                refused = json.loads(await ws.get_message())
        nursery.cancel_scope.cancel()
    assert text_of(answer) == "hi via modern"
    assert refused["error"]["code"] == -31000


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_http_answers_a_refusal_like_any_json_rpc_error(
    era: str, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    app = McpHttpApp(make_server(Seen()), mcp_registry)
    async with served(app) as client:
        if era == "modern":
            message = modern_call(1, "forbidden")
            exchange = await client.post(headers_of(message), message)
        else:
            session = await initialize(client)
            exchange = await client.post(legacy_headers(session), legacy_call(1, "forbidden"))
    assert exchange.status == 200
    assert exchange.json()["error"] == {"code": -31000, "message": "Not allowed"}
