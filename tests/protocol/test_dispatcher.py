"""The dispatcher serves transports; the server stays configuration.

Typed call states from ``prepare``, one dispatcher per server (admission is
server-wide), admission taken once when the transport admits first, and
handlers that take one argument.
"""

from __future__ import annotations

from typing import Any

import trio
from trio.testing import MockClock

from trio_mcp_cancel import Registry
from trio_mcp_cancel._protocol.calls import (
    ClientResponseCall,
    HandlerInput,
    Method,
    NotificationCall,
    Rejected,
    RequestCall,
)
from trio_mcp_cancel._wire import jsonrpc
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.lowlevel import Caller, Exchange
from trio_mcp_cancel.lowlevel.wire import (
    LEGACY_TOO_MANY_REQUESTS,
    TOO_MANY_REQUESTS,
    too_many_requests_code,
)
from trio_mcp_cancel.server import McpServer, ServerLimits

from _support.asgi import headers_of, modern_call, modern_headers, modern_meta, served
from _support.cancellation_tools import probe_server

Message = dict[str, Any]


def tool_call(request_id: int, name: str, **arguments: Any) -> Message:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def test_prepare_returns_exactly_one_typed_state_per_kind_of_message(
    mcp_registry: Registry,
) -> None:
    server = probe_server()
    dispatcher = server.dispatcher
    caller = Caller("ns", mcp_registry)
    request = dispatcher.prepare(tool_call(1, "echo"), caller)
    assert isinstance(request, RequestCall)
    assert (
        request.tool is server.registration.tools["echo"]
        and request.tracked
        and request.era == "legacy"
    )
    unknown = dispatcher.prepare(tool_call(2, "nope"), caller)
    assert isinstance(unknown, Rejected)
    assert unknown.request is not None and unknown.error.request_id == 2
    malformed = dispatcher.prepare({"jsonrpc": "2.0", "id": 3}, caller)
    assert isinstance(malformed, Rejected) and malformed.request is None
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert isinstance(dispatcher.prepare(note, caller), NotificationCall)
    answer = {"jsonrpc": "2.0", "id": 9, "result": {}}
    response = dispatcher.prepare(answer, caller)
    assert isinstance(response, ClientResponseCall) and response.response is not None
    assert (response.response.id, response.response.result) == (9, {})


async def test_an_admission_refusal_carries_the_code_of_its_era(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    """Modern: outside the ranges 2026-07-28 reserves (clients read -32001 as their own
    timeout); legacy: the -32001 of earlier releases.  Same data either way."""
    server = probe_server(limits=ServerLimits(max_calls=1))
    dispatcher = server.dispatcher
    caller = Caller("ns", mcp_registry)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dispatcher.handle, tool_call(1, "stubborn"), caller)
        await trio.sleep(1)
        modern = tool_call(2, "echo")
        modern["params"]["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        codes = {}
        for message in (modern, tool_call(3, "echo")):
            call = dispatcher.prepare(message, caller)
            assert isinstance(call, RequestCall)
            refused = dispatcher.admit(call, caller, Exchange())
            assert refused is not None
            assert refused["error"]["data"] == {"limit": "server", "max": 1}
            codes[call.era] = refused["error"]["code"]
        assert codes == {"modern": TOO_MANY_REQUESTS, "legacy": LEGACY_TOO_MANY_REQUESTS}
        assert TOO_MANY_REQUESTS == too_many_requests_code("modern") == -31429
        assert not -32768 <= TOO_MANY_REQUESTS <= -32000
        nursery.cancel_scope.cancel()


def test_every_transport_of_a_server_gets_the_same_dispatcher() -> None:
    server, other = probe_server(), probe_server()
    assert server.dispatcher is server.dispatcher
    assert server.dispatcher is not other.dispatcher


async def test_a_call_the_transport_admitted_is_counted_once_and_released_once(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    server = probe_server(limits=ServerLimits(max_calls=1))
    dispatcher = server.dispatcher
    caller = Caller("ns", mcp_registry)
    call = dispatcher.prepare(tool_call(1, "echo", text="once"), caller)
    assert isinstance(call, RequestCall)
    exchange = Exchange()
    assert dispatcher.admit(call, caller, exchange) is None
    assert dispatcher.calls_in_flight == 1
    # Counted once: with a cap of one, a second admission would refuse it.
    reply = await dispatcher.answer(call, caller, exchange, admitted=True)
    assert reply is not None and reply["result"]["content"][0]["text"] == "once"
    assert dispatcher.calls_in_flight == 0


async def test_a_call_over_the_server_cap_is_refused_by_admit_and_takes_nothing(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    server = probe_server(limits=ServerLimits(max_calls=1))
    dispatcher = server.dispatcher
    caller = Caller("ns", mcp_registry)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dispatcher.handle, tool_call(1, "stubborn"), caller)
        await trio.sleep(1)
        assert dispatcher.calls_in_flight == 1
        second = dispatcher.prepare(tool_call(2, "echo"), caller)
        assert isinstance(second, RequestCall)
        refused = dispatcher.admit(second, caller, Exchange())
        assert refused is not None and refused["error"]["code"] == LEGACY_TOO_MANY_REQUESTS
        assert refused["error"]["data"] == {"limit": "server", "max": 1}
        assert dispatcher.calls_in_flight == 1
        nursery.cancel_scope.cancel()
    assert dispatcher.calls_in_flight == 0


async def test_a_cap_changed_on_the_server_applies_to_the_next_call(mcp_registry: Registry) -> None:
    server = probe_server(limits=ServerLimits(max_calls=None))
    dispatcher = server.dispatcher
    caller = Caller("ns", mcp_registry)
    call = dispatcher.prepare(tool_call(1, "echo"), caller)
    assert isinstance(call, RequestCall)
    first, second = Exchange(), Exchange()
    assert dispatcher.admit(call, caller, first) is None
    server.limits = ServerLimits(max_calls=1)
    refused = dispatcher.admit(call, caller, second)
    assert refused is not None and refused["error"]["data"]["limit"] == "server"
    dispatcher.release(call, caller, first)
    assert dispatcher.calls_in_flight == 0


async def test_a_handler_gets_one_input_with_the_call_the_caller_and_the_exchange(
    mcp_registry: Registry,
) -> None:
    server = probe_server()
    dispatcher = server.dispatcher
    seen: list[HandlerInput] = []

    async def probe(h: HandlerInput) -> dict[str, Any]:
        seen.append(h)
        return {"method": h.request.method, "echo": h.params.get("x")}

    dispatcher.methods["test/probe"] = Method(probe)
    caller = Caller("ns", mcp_registry)
    exchange = Exchange()
    message = {"jsonrpc": "2.0", "id": 5, "method": "test/probe", "params": {"x": 1}}
    reply = await dispatcher.handle(message, caller, exchange)
    assert reply == {"jsonrpc": "2.0", "id": 5, "result": {"method": "test/probe", "echo": 1}}
    [h] = seen
    assert (h.registration, h.caller, h.exchange, h.era) == (
        server.registration,
        caller,
        exchange,
        "legacy",
    )
    # Another server's table is untouched.
    assert "test/probe" not in probe_server().dispatcher.methods


async def test_a_modern_post_of_a_response_is_an_invalid_request_not_a_crash(
    mcp_server: McpServer, mcp_registry: Registry
) -> None:
    async with served(McpHttpApp(mcp_server, mcp_registry)) as client:
        body = {"jsonrpc": "2.0", "id": 1, "result": {}, "params": {"_meta": modern_meta()}}
        exchange = await client.request("POST", modern_headers(None), body)
        assert exchange.status == 400
        assert exchange.json()["error"]["code"] == jsonrpc.INVALID_REQUEST
        # The server keeps serving.
        ok = modern_call(2, "echo", {"text": "hi"})
        reply = await client.request("POST", headers_of(ok), ok)
        assert reply.json()["result"]["content"][0]["text"] == "hi"
