"""Ordering on message-stream connections: no cancel is ever lost to a race.

A stdio or WebSocket client may write ``tools/call`` and, right behind it,
``notifications/cancelled`` for it.  The connection must not read the
cancel before the call is registered, or the cancel finds nothing and the
call runs on.  Each test below sends many such pairs back to back on one
connection, with the registry's safety net for early cancels switched off
(``early_cancel_ttl=None``, so a cancel that arrives first is simply
dropped), the hard cancel switched off (``grace_period=None``), and a tool
that only stops when its flag is set.  Every call must then end with
``-32800`` carrying its own reason; a lost cancel would leave its tool
running until ``fail_after`` fires.  A control test shows that spawning
calls without waiting for their registration does lose cancels here.

The same connections must not let one slow request hold up the read loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from trio.testing import MockClock
from trio_websocket import open_websocket_url

from trio_mcp_cancel import (
    Registry,
    RegistryConfig,
    RequestCancelledEvent,
    checkpoint_cancelled,
)
from trio_mcp_cancel._protocol.calls import HandlerInput, Method, NotificationCall, RequestCall
from trio_mcp_cancel._protocol.exchange import Exchange
from trio_mcp_cancel.lowlevel.wire import REQUEST_CANCELLED
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import EventRecorder, McpError, assert_no_leaks, open_test_client
from trio_mcp_cancel.transports._connection import MessageConnection
from trio_mcp_cancel.websocket import serve_mcp_websocket

Message = dict[str, Any]
PAIRS = 200
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
#: No hard cancel and no early-cancel rows: only a cancel that finds its
#: call in flight can stop it.
STRICT = {"grace_period": None, "early_cancel_ttl": None}
STRICT_CONFIG = RegistryConfig(**STRICT)


async def _slow_method(h: HandlerInput) -> dict[str, Any]:
    await trio.sleep(100)
    return {"slow": True}


def make_server() -> McpServer:
    server = McpServer("ordering", on_cancel="error")

    @server.tool()
    async def wait(ctx: Context, delay: float = 1.0) -> str:
        """Runs until its flag is set, and only then."""
        while True:
            await checkpoint_cancelled()
            await trio.sleep(delay)

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    @server.tool(client_capabilities={"elicitation": {}})
    async def needs_elicitation(ctx: Context) -> str:
        return "ok"

    # A test-only request that is not a tool and takes long to answer.
    server.dispatcher.methods["test/slow"] = Method(_slow_method)
    return server


SERVER = make_server()


def pair_messages(i: int, delay: float = 1.0) -> tuple[Message, Message]:
    request = {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {"name": "wait", "arguments": {"delay": delay}, "_meta": ENVELOPE},
    }
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": i, "reason": f"stop {i}"},
    }
    return request, cancel


def assert_every_call_cancelled_by_its_own_cancel(
    answers: list[Message], ids: list[int], events: EventRecorder, registry: Registry
) -> None:
    assert sorted(a["id"] for a in answers) == ids
    for answer in answers:
        assert answer["error"] == {
            "code": REQUEST_CANCELLED,
            "message": "Request cancelled",
            "data": {"reason": f"stop {answer['id']}"},
        }
    cancelled = events.of_type(RequestCancelledEvent)
    assert sorted(e.request_id for e in cancelled) == ids  # type: ignore[type-var]
    assert {e.kind for e in cancelled} == {"client"}
    assert_no_leaks(registry)


# -- memory transport -------------------------------------------------------------


async def test_memory_back_to_back_pairs_lose_no_cancel(autojump_clock: MockClock) -> None:
    with trio.fail_after(1000):
        async with open_test_client(
            SERVER,
            registry_config=STRICT_CONFIG,
            limits=ConnectionLimits(max_concurrent_calls=PAIRS + 1),
        ) as client:
            events = EventRecorder.attach(client.registry)
            calls = []
            for _ in range(PAIRS):
                call = client.start_call("wait")
                call.cancel_nowait(f"stop {call.id}")  # queued right behind its call
                calls.append(call)
            for call in calls:
                with pytest.raises(McpError):
                    await call.result()
            answers = [call.response for call in calls if call.response is not None]
            ids = [call.id for call in calls]
            assert_every_call_cancelled_by_its_own_cancel(answers, ids, events, client.registry)


async def test_control_spawning_calls_without_waiting_loses_cancels(
    autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``nursery.start`` the same traffic does lose cancels: the test
    above can see the race it guards against."""

    async def racy_dispatch(
        self: MessageConnection, data: str | bytes, nursery: trio.Nursery
    ) -> None:
        call = self.dispatcher.prepare(json.loads(data), self.caller)
        if isinstance(call, NotificationCall):
            self.dispatcher.notify(call.notification, self.caller)
        elif isinstance(call, RequestCall):
            exchange = Exchange(send=self.send)
            assert self.dispatcher.admit(call, self.caller, exchange) is None
            nursery.start_soon(self._run, call, exchange)

    monkeypatch.setattr(MessageConnection, "dispatch", racy_dispatch)
    async with open_test_client(
        SERVER,
        registry_config=STRICT_CONFIG,
        limits=ConnectionLimits(max_concurrent_calls=PAIRS + 1),
    ) as client:
        for _ in range(PAIRS):
            client.start_call("wait").cancel_nowait("stop")
        await client.settle()
        # Calls whose cancel was read before they were registered run on
        # (until the block disconnects, which flags them all).
        assert client.registry.in_flight_count > 0


# -- stdio ----------------------------------------------------------------------


@pytest.mark.mcp_registry(**STRICT)
@pytest.mark.parametrize(
    "pair", [trio.testing.memory_stream_pair, trio.testing.lockstep_stream_pair]
)
@pytest.mark.parametrize("chunking", ["all-at-once", "pair-by-pair", "7-byte-pieces"])
async def test_stdio_back_to_back_pairs_lose_no_cancel(
    autojump_clock: MockClock,
    pair: Callable[[], tuple[Any, Any]],
    chunking: str,
    mcp_registry: Registry,
) -> None:
    lines = [
        json.dumps(message).encode() + b"\n" for i in range(PAIRS) for message in pair_messages(i)
    ]
    if chunking == "all-at-once":
        chunks = [b"".join(lines)]
    elif chunking == "pair-by-pair":
        chunks = [lines[i] + lines[i + 1] for i in range(0, len(lines), 2)]
    else:
        data = b"".join(lines)
        chunks = [data[i : i + 7] for i in range(0, len(data), 7)]
    client, server_stream = pair()
    answers: list[Message] = []
    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            events = EventRecorder.attach(mcp_registry)
            await nursery.start(
                partial(
                    serve_mcp_stdio,
                    SERVER,
                    mcp_registry,
                    stdin=server_stream,
                    stdout=server_stream,
                    limits=ConnectionLimits(max_concurrent_calls=PAIRS + 1),
                )
            )

            async def read() -> None:
                buffer = b""
                while len(answers) < PAIRS:
                    buffer += await client.receive_some()
                    *complete, buffer = buffer.split(b"\n")
                    answers.extend(json.loads(line) for line in complete)

            async def write() -> None:
                for chunk in chunks:
                    await client.send_all(chunk)

            async with trio.open_nursery() as io:
                io.start_soon(read)
                io.start_soon(write)
            assert_every_call_cancelled_by_its_own_cancel(
                answers, list(range(PAIRS)), events, mcp_registry
            )
            await client.send_eof()


# -- WebSocket (real sockets, real clock) ----------------------------------------


@pytest.mark.mcp_registry(**STRICT)
async def test_websocket_back_to_back_pairs_lose_no_cancel(mcp_registry: Registry) -> None:
    answers: list[Message] = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            events = EventRecorder.attach(mcp_registry)
            ws_server = await nursery.start(
                partial(
                    serve_mcp_websocket,
                    SERVER,
                    mcp_registry,
                    "127.0.0.1",
                    0,
                    limits=ConnectionLimits(max_concurrent_calls=PAIRS + 1),
                )
            )
            url = f"ws://127.0.0.1:{ws_server.port}/mcp"
            async with open_websocket_url(url) as ws:
                for i in range(PAIRS):
                    for message in pair_messages(i, delay=0.01):
                        await ws.send_message(json.dumps(message))
                while len(answers) < PAIRS:
                    answers.append(json.loads(await ws.get_message()))
            await mcp_registry.wait_idle()
            assert_every_call_cancelled_by_its_own_cancel(
                answers, list(range(PAIRS)), events, mcp_registry
            )
            nursery.cancel_scope.cancel()


# -- a slow request does not block the read loop ---------------------------------


async def test_memory_a_slow_non_tool_request_does_not_block_the_read_loop(
    autojump_clock: MockClock,
) -> None:
    async with open_test_client(SERVER) as client:
        slow = client.start_request("test/slow")
        assert await client.call_tool("echo", {"text": "fast"}) is not None
        assert trio.current_time() == 0 and not slow.answered
        # A call behind the slow request is still cancellable at once.
        waiting = client.start_call("wait")
        await waiting.cancel("not blocked")
        with pytest.raises(McpError) as info:
            await waiting.result()
        assert info.value.data == {"reason": "not blocked"}
        assert trio.current_time() < 100
        assert (await slow.result())["slow"] is True
        assert trio.current_time() == pytest.approx(100)


async def test_stdio_a_slow_non_tool_request_does_not_block_the_read_loop(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    client, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(
                serve_mcp_stdio, SERVER, mcp_registry, stdin=server_stream, stdout=server_stream
            )
        )
        slow = {
            "jsonrpc": "2.0",
            "id": "slow",
            "method": "test/slow",
            "params": {"_meta": ENVELOPE},
        }
        fast = {
            "jsonrpc": "2.0",
            "id": "fast",
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": ENVELOPE},
        }
        await client.send_all(json.dumps(slow).encode() + b"\n" + json.dumps(fast).encode() + b"\n")
        first = json.loads(await client.receive_some())
        assert first["id"] == "fast" and trio.current_time() == 0
        second = json.loads(await client.receive_some())
        assert (second["id"], second["result"]["slow"]) == ("slow", True)
        assert trio.current_time() == pytest.approx(100)
        await client.send_eof()


async def test_initialize_still_applies_before_the_next_message(
    autojump_clock: MockClock,
) -> None:
    """``initialize`` is ordered: a legacy call sent right behind it is checked
    against the capabilities it declared (none), so it is refused."""
    async with open_test_client(SERVER) as client:
        init = client.start_request(
            "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}}, envelope=False
        )
        call = client.start_request("tools/call", {"name": "needs_elicitation"}, envelope=False)
        await init.result()
        with pytest.raises(McpError) as info:
            await call.result()
        assert info.value.code == -32021
