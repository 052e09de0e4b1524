"""McpServer without a transport: dispatch, validation, tools, cancellation, progress.

Every test runs a real registry and checks that it is left empty.  Tests
where timing matters take ``autojump_clock`` as an argument, so grace
periods cost no real time.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trio.testing import MockClock

from trio_mcp_cancel import (
    HardCancelEvent,
    Registry,
    RequestCancelledEvent,
    checkpoint_cancelled,
    open_registry,
)
from trio_mcp_cancel._core.validation import is_valid_request_id
from trio_mcp_cancel._protocol.calls import RequestCall
from trio_mcp_cancel._protocol.registration import OnCancel
from trio_mcp_cancel._wire import jsonrpc
from trio_mcp_cancel._wire.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    JsonRpcError,
)
from trio_mcp_cancel.lowlevel import Caller, Exchange, current_request
from trio_mcp_cancel.lowlevel.wire import LATEST_LEGACY_VERSION, LEGACY_VERSIONS, REQUEST_CANCELLED
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import EventRecorder, assert_no_leaks

from _support.cancellation_tools import probe_server

Message = dict[str, Any]
SCOPE = "session:test"


# -- the server under test --------------------------------------------------


def make_server(on_cancel: OnCancel = "error") -> McpServer:
    server = probe_server("test-server", "9.9.9", instructions="Be nice.", on_cancel=on_cancel)

    @server.tool(description="Every JSON type.")
    async def typed(
        ctx: Context,
        i: int,
        f: float,
        s: str,
        b: bool,
        items: list,  # type: ignore[type-arg]
        obj: dict,  # type: ignore[type-arg]
        anything: Any,
        opt: int = 3,
    ) -> dict[str, Any]:
        return {"i": i, "f": f, "s": s, "b": b, "items": items, "obj": obj, "opt": opt}

    @server.tool()
    async def structured(ctx: Context) -> dict[str, Any]:
        return {"answer": 42, "text": "héllo"}

    @server.tool()
    async def nothing(ctx: Context) -> None:
        return None

    @server.tool()
    async def number(ctx: Context) -> int:
        return 5

    @server.tool()
    async def fails(ctx: Context) -> str:
        raise RuntimeError("kaput")

    @server.tool()
    async def not_json(ctx: Context, what: str) -> object:
        return {"set": {1, 2}} if what == "set" else [float("nan")]

    @server.tool()
    async def listing(ctx: Context) -> list[object]:
        return [1, "two", None]

    @server.tool()
    async def backwards(ctx: Context) -> str:
        await ctx.report_progress(2)
        await ctx.report_progress(1)
        return "unreachable"

    return server


SERVER = make_server()


def request(request_id: object, method: str, params: object = None) -> Message:
    message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def call(request_id: object, name: str, arguments: object = None, **params: Any) -> Message:
    body: Message = {"name": name, **params}
    if arguments is not None:
        body["arguments"] = arguments
    return request(request_id, "tools/call", body)


def cancel_note(request_id: object, reason: object = None) -> Message:
    params: Message = {"requestId": request_id}
    if reason is not None:
        params["reason"] = reason
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


def error_code(reply: Message | None) -> int:
    assert reply is not None
    assert "result" not in reply
    code = reply["error"]["code"]
    assert isinstance(code, int)
    return code


async def wait_in_flight(registry: Registry, request_id: object, namespace: str = SCOPE) -> None:
    with trio.fail_after(10):
        while not registry.in_flight(request_id, namespace):  # type: ignore[arg-type]
            await trio.sleep(0.001)


async def handle(message: object, server: McpServer = SERVER) -> Message | None:
    """One message through a fresh registry that must be left empty."""
    async with open_registry() as registry:
        reply = await server.dispatcher.handle(message, Caller(SCOPE, registry))
        assert_no_leaks(registry)
    return reply


# -- initialize, ping, tools/list -------------------------------------------


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
async def test_initialize_echoes_a_supported_version(version: str) -> None:
    reply = await handle(request(1, "initialize", {"protocolVersion": version}))
    assert reply == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}, "logging": {}},
            "serverInfo": {"name": "test-server", "version": "9.9.9"},
            "instructions": "Be nice.",
        },
    }


@pytest.mark.parametrize("version", ["1999-01-01", "", 20250618, None, ["2025-06-18"], {}])
async def test_initialize_falls_back_to_the_latest_version(version: object) -> None:
    params = {} if version is None else {"protocolVersion": version}
    reply = await handle(request("init", "initialize", params))
    assert reply is not None and reply["id"] == "init"
    assert reply["result"]["protocolVersion"] == LATEST_LEGACY_VERSION


async def test_initialize_without_instructions_omits_them() -> None:
    reply = await handle(request(1, "initialize", {}), McpServer("bare", "1"))
    assert reply is not None
    assert reply["result"]["serverInfo"] == {"name": "bare", "version": "1"}
    assert "instructions" not in reply["result"]


async def test_ping() -> None:
    assert await handle(request(3, "ping")) == {"jsonrpc": "2.0", "id": 3, "result": {}}
    # params: null counts as no params.
    assert await handle(request("p", "ping", None) | {"params": None}) == {
        "jsonrpc": "2.0",
        "id": "p",
        "result": {},
    }


async def test_tools_list_schemas_come_from_annotations() -> None:
    reply = await handle(request(2, "tools/list"))
    assert reply is not None and reply["id"] == 2
    tools = {tool["name"]: tool for tool in reply["result"]["tools"]}
    assert list(tools) == list(SERVER.registration.tools)
    assert tools["echo"] == {
        "name": "echo",
        "description": "Repeat text.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "times": {"type": "integer", "default": 1},
            },
            "required": ["text"],
            "additionalProperties": False,
        },
    }
    typed = tools["typed"]
    assert typed["description"] == "Every JSON type."
    assert typed["inputSchema"] == {
        "type": "object",
        "properties": {
            "i": {"type": "integer"},
            "f": {"type": "number"},
            "s": {"type": "string"},
            "b": {"type": "boolean"},
            "items": {"type": "array", "items": {}},
            "obj": {"type": "object", "additionalProperties": True},
            "anything": {},
            "opt": {"type": "integer", "default": 3},
        },
        "required": ["i", "f", "s", "b", "items", "obj", "anything"],
        "additionalProperties": False,
    }
    # Only defaults: no "required" key at all.
    assert tools["count"]["inputSchema"] == {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "default": 1000},
            "delay": {"type": "number", "default": 1.0},
        },
        "additionalProperties": False,
    }
    assert tools["nothing"]["inputSchema"] == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    # No docstring: no description (a made-up one tells a model nothing), as the official SDK.
    assert "description" not in tools["nothing"]


# -- tools/call -------------------------------------------------------------


async def test_call_returning_text() -> None:
    reply = await handle(call(1, "echo", {"text": "ab", "times": 2}))
    assert reply == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"content": [{"type": "text", "text": "abab"}], "isError": False},
    }


async def test_call_returning_a_dict_gives_structured_content() -> None:
    reply = await handle(call("s", "structured"))
    assert reply is not None
    result = reply["result"]
    assert result["structuredContent"] == {"answer": 42, "text": "héllo"}
    assert result["isError"] is False
    [content] = result["content"]
    assert content["type"] == "text"
    assert json.loads(content["text"]) == {"answer": 42, "text": "héllo"}


async def test_call_returning_none_or_other_values() -> None:
    reply = await handle(call(1, "nothing", {}))
    assert reply is not None
    assert reply["result"] == {"content": [], "isError": False}
    reply = await handle(call(2, "number"))
    assert reply is not None
    assert reply["result"] == {"content": [{"type": "text", "text": "5"}], "isError": False}


async def test_a_list_result_is_json_text_not_a_repr() -> None:
    reply = await handle(call(1, "listing"))
    assert reply is not None
    assert reply["result"]["content"] == [{"type": "text", "text": '[1,"two",null]'}]
    assert "structuredContent" not in reply["result"]


@pytest.mark.parametrize("what", ["set", "nan"])
async def test_a_result_that_is_not_json_is_a_tool_error(what: str) -> None:
    reply = await handle(call(1, "not_json", {"what": what}))
    assert reply is not None
    assert reply["result"]["isError"] is True
    jsonrpc.encode(reply)  # and the reply itself is strict JSON


async def test_call_accepts_every_json_type() -> None:
    arguments = {
        "i": 1,
        "f": 2,  # an integer is a JSON number
        "s": "x",
        "b": False,
        "items": [1],
        "obj": {"k": None},
        "anything": [None, True],
    }
    reply = await handle(call(1, "typed", arguments))
    assert reply is not None
    assert reply["result"]["structuredContent"] == {
        "i": 1,
        "f": 2,
        "s": "x",
        "b": False,
        "items": [1],
        "obj": {"k": None},
        "opt": 3,
    }


async def test_a_failing_tool_is_a_tool_error_not_a_protocol_error() -> None:
    reply = await handle(call(4, "fails"))
    assert reply == {
        "jsonrpc": "2.0",
        "id": 4,
        "result": {"content": [{"type": "text", "text": "RuntimeError: kaput"}], "isError": True},
    }


GOOD_TYPED = {"i": 1, "f": 1.5, "s": "", "b": True, "items": [], "obj": {}, "anything": 0}


@pytest.mark.parametrize(
    ("name", "arguments", "needle"),
    [
        ("echo", {}, "missing argument 'text'"),
        ("echo", None, "missing argument 'text'"),
        ("echo", {"text": "a", "loud": True}, "unknown argument 'loud'"),
        ("echo", {"text": 5}, "'text': Input should be a valid string"),
        ("echo", {"text": "a", "times": "2"}, "'times': Input should be a valid integer"),
        ("echo", {"text": "a", "times": 2.0}, "'times': Input should be a valid integer"),
        ("echo", {"text": "a", "times": True}, "'times': Input should be a valid integer"),
        ("typed", GOOD_TYPED | {"f": "1"}, "'f': Input should be a valid number"),
        ("typed", GOOD_TYPED | {"f": False}, "'f': Input should be a valid number"),
        ("typed", GOOD_TYPED | {"b": 1}, "'b': Input should be a valid boolean"),
        ("typed", GOOD_TYPED | {"items": {}}, "'items': Input should be a valid array"),
        ("typed", GOOD_TYPED | {"obj": []}, "'obj': Input should be an object"),
        ("echo", ["a"], "arguments must be an object"),
        ("echo", "text=a", "arguments must be an object"),
    ],
)
async def test_invalid_arguments(name: str, arguments: object, needle: str) -> None:
    # SEP-1303: a tool called with bad arguments answers a tool error the
    # model can read and correct, not a protocol error.
    message = call(9, name)
    if arguments is not None:
        message["params"]["arguments"] = arguments
    reply = await handle(message)
    assert reply is not None and reply["id"] == 9
    result = reply["result"]
    assert result["isError"] is True
    assert needle in result["content"][0]["text"]


async def test_the_typed_tool_accepts_the_good_arguments() -> None:
    # The base of the parametrized failures above is itself valid.
    reply = await handle(call(9, "typed", GOOD_TYPED))
    assert reply is not None and reply["result"]["isError"] is False


@pytest.mark.parametrize("name", ["nope", None, 5, ["echo"]])
async def test_unknown_tool(name: object) -> None:
    message = request(3, "tools/call", {"arguments": {}} if name is None else {"name": name})
    reply = await handle(message)
    assert error_code(reply) == INVALID_PARAMS
    assert reply is not None and reply["id"] == 3
    assert reply["error"]["message"] == f"Unknown tool: {name}"
    assert reply["error"]["data"] == {"name": str(name)}


# -- JSON-RPC shape -----------------------------------------------------------


async def test_unknown_method() -> None:
    reply = await handle(request("x", "sampling/createMessage"))
    assert reply == {
        "jsonrpc": "2.0",
        "id": "x",
        "error": {
            "code": METHOD_NOT_FOUND,
            "message": "Method not found",
            "data": {"method": "sampling/createMessage"},
        },
    }
    # A notification's method sent as a request is still unknown as a request.
    reply = await handle(request(1, "notifications/cancelled", {"requestId": 1}))
    assert error_code(reply) == METHOD_NOT_FOUND


@pytest.mark.parametrize(
    "bad_id",
    [None, True, False, 1.5, 1.0, [1], {"id": 1}, "x" * 257, "é" * 129, 10**300, -(10**300)],
)
async def test_invalid_ids_are_refused_with_a_null_id(bad_id: object) -> None:
    reply = await handle(request(bad_id, "ping"))
    assert error_code(reply) == INVALID_REQUEST
    assert reply is not None and reply["id"] is None
    # Not even tools/call gets as far as the tool.
    reply = await handle(call(bad_id, "echo", {"text": "a"}))
    assert error_code(reply) == INVALID_REQUEST
    assert reply is not None and reply["id"] is None


@pytest.mark.parametrize("good_id", [0, -1, 10**255, "", "x" * 256, "é" * 128])
async def test_edge_ids_are_accepted_and_echoed(good_id: object) -> None:
    reply = await handle(request(good_id, "ping"))
    assert reply == {"jsonrpc": "2.0", "id": good_id, "result": {}}


@pytest.mark.parametrize("params", [[1], "x", 5, True])
async def test_params_must_be_an_object(params: object) -> None:
    reply = await handle(request(7, "ping", params))
    assert error_code(reply) == INVALID_PARAMS
    assert reply is not None and reply["id"] == 7


async def test_batches_are_refused() -> None:
    reply = await handle([request(1, "ping"), request(2, "ping")])
    assert error_code(reply) == INVALID_REQUEST
    assert reply is not None and reply["id"] is None
    assert error_code(await handle([])) == INVALID_REQUEST


@pytest.mark.parametrize("message", ["ping", 5, None, True])
async def test_non_objects_are_refused(message: object) -> None:
    reply = await handle(message)
    assert error_code(reply) == INVALID_REQUEST
    assert reply is not None and reply["id"] is None


@pytest.mark.parametrize("version", [None, "1.0", 2.0, "2", "2.0 "])
async def test_jsonrpc_must_be_2_0(version: object) -> None:
    message = request(5, "ping")
    if version is None:
        del message["jsonrpc"]
    else:
        message["jsonrpc"] = version
    reply = await handle(message)
    assert error_code(reply) == INVALID_REQUEST
    assert reply is not None and reply["id"] == 5  # the id was valid: echo it


async def test_a_message_without_method_or_result_is_refused() -> None:
    reply = await handle({"jsonrpc": "2.0", "id": 1})
    assert error_code(reply) == INVALID_REQUEST
    reply = await handle({"jsonrpc": "2.0", "id": 1, "method": 5})
    assert error_code(reply) == INVALID_REQUEST


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": "a", "error": {"code": -1, "message": "no"}},
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "?"}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}},
        cancel_note(1, "nothing is running"),
        cancel_note([1], "invalid id"),
        {"jsonrpc": "2.0", "method": "notifications/cancelled"},
    ],
)
async def test_client_responses_and_notifications_get_no_reply(
    message: Message, mcp_registry: Registry, mcp_events: EventRecorder
) -> None:
    # An address namespace keeps no early cancels (a session would keep
    # "nothing is running" a few seconds, in case its request comes late).
    assert await SERVER.dispatcher.handle(message, Caller("ip:192.0.2.1", mcp_registry)) is None
    assert mcp_events.events == []
    assert_no_leaks(mcp_registry)


# -- cancellation -------------------------------------------------------------


async def run_call(
    server: McpServer,
    message: Message,
    caller: Caller,
    replies: list[Message | None],
    exchange: Exchange | None = None,
) -> None:
    replies.append(await server.dispatcher.handle(message, caller, exchange))


async def call_and_cancel(
    registry: Registry, request_id: Any, tool: str, reason: str | None = None
) -> tuple[Message | None, float]:
    """Run *tool* as request *request_id*, cancel it once in flight.

    Returns the reply and the (virtual) seconds from the cancel to the reply.
    """
    caller = Caller(SCOPE, registry)
    replies: list[Message | None] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_call, SERVER, call(request_id, tool), caller, replies)
        await wait_in_flight(registry, request_id)
        start = trio.current_time()
        assert await SERVER.dispatcher.handle(cancel_note(request_id, reason), caller) is None
    [reply] = replies
    return reply, trio.current_time() - start


@pytest.mark.mcp_registry(grace_period=5)
async def test_cancel_by_notification_answers_request_cancelled(
    autojump_clock: MockClock,
    mcp_registry: Registry,
    mcp_events: EventRecorder,
) -> None:
    reply, elapsed = await call_and_cancel(mcp_registry, 7, "count", "user pressed stop")
    assert reply == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": REQUEST_CANCELLED,
            "message": "Request cancelled",
            "data": {"reason": "user pressed stop"},
        },
    }
    # The tool stopped by itself at its next checkpoint, not at the hard cancel.
    assert elapsed <= 1.0 + 1e-6
    assert mcp_events.of_type(HardCancelEvent) == []
    [cancelled] = mcp_events.of_type(RequestCancelledEvent)
    assert (cancelled.request_id, cancelled.namespace, cancelled.kind) == (7, SCOPE, "client")
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=5)
async def test_cancel_without_reason_has_no_data(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    reply, _ = await call_and_cancel(mcp_registry, "c", "count")
    assert reply == {
        "jsonrpc": "2.0",
        "id": "c",
        "error": {"code": REQUEST_CANCELLED, "message": "Request cancelled"},
    }
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=5)
async def test_a_tool_ignoring_the_flag_is_hard_cancelled_after_the_grace_period(
    autojump_clock: MockClock,
    mcp_registry: Registry,
    mcp_events: EventRecorder,
) -> None:
    reply, elapsed = await call_and_cancel(mcp_registry, 8, "stubborn", "too slow")
    assert elapsed == pytest.approx(5)
    assert error_code(reply) == REQUEST_CANCELLED
    assert reply is not None and reply["error"]["data"] == {"reason": "too slow"}
    [hard] = mcp_events.of_type(HardCancelEvent)
    assert (hard.request_id, hard.kind) == (8, "client")
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=5)
async def test_silent_on_cancel_sends_nothing_unless_silence_is_not_allowed(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    silent = make_server(on_cancel="silent")
    caller = Caller(SCOPE, mcp_registry)
    replies: list[Message | None] = []
    loud: list[Message | None] = []

    async def respond_loudly() -> None:
        dispatcher = silent.dispatcher
        prepared = dispatcher.prepare(call(2, "count"), caller)
        assert isinstance(prepared, RequestCall)
        loud.append(await dispatcher.answer(prepared, caller, Exchange(), allow_silence=False))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_call, silent, call(1, "count"), caller, replies)
        nursery.start_soon(respond_loudly)
        await wait_in_flight(mcp_registry, 1)
        await wait_in_flight(mcp_registry, 2)
        await silent.dispatcher.handle(cancel_note(1, "stop one"), caller)
        await silent.dispatcher.handle(cancel_note(2, "stop two"), caller)
    assert replies == [None]
    assert loud == [
        {
            "jsonrpc": "2.0",
            "id": 2,
            "error": {
                "code": REQUEST_CANCELLED,
                "message": "Request cancelled",
                "data": {"reason": "stop two"},
            },
        }
    ]
    # Silence is only for cancellations: everything else is still answered.
    reply = await silent.dispatcher.handle(call(3, "echo", {"text": "hi"}), caller)
    assert reply is not None and reply["result"]["content"][0]["text"] == "hi"
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=0)
async def test_a_notification_from_another_scope_does_not_cancel(
    autojump_clock: MockClock,
    mcp_registry: Registry,
    mcp_events: EventRecorder,
) -> None:
    alice = Caller("session:alice", mcp_registry)
    mallory = Caller("session:mallory", mcp_registry)
    replies: list[Message | None] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_call, SERVER, call(1, "count", {"n": 3}), alice, replies)
        await wait_in_flight(mcp_registry, 1, "session:alice")
        assert await SERVER.dispatcher.handle(cancel_note(1, "not yours"), mallory) is None
        # At most an early cancel kept in Mallory's own namespace (see
        # test_an_early_cancel_*): nothing of Alice's is touched.
        assert mcp_registry.namespace_row_count("session:alice") == 0
        assert not mcp_registry.requests()[0].cancelled
    assert replies == [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {"content": [{"type": "text", "text": "counted 3"}], "isError": False},
        }
    ]
    assert mcp_events.events == []
    # Mallory's kept cancel expires unused.
    await trio.sleep(mcp_registry.config.early_cancel_ttl or 0)
    mcp_registry.cleanup()
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=None)
async def test_a_helper_task_stopping_at_the_flag_still_answers_request_cancelled(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    # grace_period=None: no hard cancel, so only the helper's RequestCancelled
    # (wrapped in the nursery's ExceptionGroup) can end the tool.
    caller = Caller(SCOPE, mcp_registry)
    replies: list[Message | None] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_call, SERVER, call(5, "helpers"), caller, replies)
        await wait_in_flight(mcp_registry, 5)
        await SERVER.dispatcher.handle(cancel_note(5, "stop the helpers"), caller)
    assert replies == [
        {
            "jsonrpc": "2.0",
            "id": 5,
            "error": {
                "code": REQUEST_CANCELLED,
                "message": "Request cancelled",
                "data": {"reason": "stop the helpers"},
            },
        }
    ]
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=None)
async def test_exchange_cancel_before_the_tool_starts_applies_when_it_starts(
    autojump_clock: MockClock,
    mcp_registry: Registry,
    mcp_events: EventRecorder,
) -> None:
    exchange = Exchange()
    exchange.cancel("stream gone", kind="disconnect")
    assert exchange.request is None
    reply = await SERVER.dispatcher.handle(call(6, "count"), Caller(SCOPE, mcp_registry), exchange)
    assert reply == {
        "jsonrpc": "2.0",
        "id": 6,
        "error": {
            "code": REQUEST_CANCELLED,
            "message": "Request cancelled",
            "data": {"reason": "stream gone"},
        },
    }
    [cancelled] = mcp_events.of_type(RequestCancelledEvent)
    assert (cancelled.request_id, cancelled.kind) == (6, "disconnect")
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=100)
async def test_exchange_cancel_while_running_hard_cancels_after_its_grace(
    autojump_clock: MockClock,
    mcp_registry: Registry,
    mcp_events: EventRecorder,
) -> None:
    exchange = Exchange()
    replies: list[Message | None] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            run_call, SERVER, call(6, "stubborn"), Caller(SCOPE, mcp_registry), replies, exchange
        )
        await wait_in_flight(mcp_registry, 6)
        assert exchange.request is not None and exchange.request.request_id == 6
        start = trio.current_time()
        exchange.cancel("connection closed", kind="disconnect", grace_period=0.5)
    assert trio.current_time() - start == pytest.approx(0.5)
    assert error_code(replies[0]) == REQUEST_CANCELLED
    [hard] = mcp_events.of_type(HardCancelEvent)
    assert hard.kind == "disconnect"
    assert_no_leaks(mcp_registry)


# -- progress ---------------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)


@pytest.mark.parametrize("token", ["tok", 0, 17])
async def test_progress_is_sent_with_a_progress_token(
    autojump_clock: MockClock, token: object, mcp_registry: Registry
) -> None:
    sink = Sink()
    message = call(1, "count", {"n": 2, "delay": 0.5}, _meta={"progressToken": token})
    reply = await SERVER.dispatcher.handle(
        message, Caller(SCOPE, mcp_registry), Exchange(send=sink)
    )
    assert reply is not None and reply["result"]["content"][0]["text"] == "counted 2"
    assert_no_leaks(mcp_registry)
    assert sink.messages == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": token, "progress": i, "total": 2, "message": f"step {i}"},
        }
        for i in (1, 2)
    ]


@pytest.mark.parametrize(
    "params",
    [{}, {"_meta": {}}, {"_meta": "tok"}, {"_meta": {"progressToken": 1.5}}, {"_meta": None}],
)
async def test_no_progress_without_a_valid_token(
    autojump_clock: MockClock, params: Message, mcp_registry: Registry
) -> None:
    sink = Sink()
    message = call(1, "count", {"n": 2, "delay": 0.5}, **params)
    reply = await SERVER.dispatcher.handle(
        message, Caller(SCOPE, mcp_registry), Exchange(send=sink)
    )
    assert reply is not None and reply["result"]["isError"] is False
    assert_no_leaks(mcp_registry)
    assert sink.messages == []


async def test_progress_must_increase(mcp_registry: Registry) -> None:
    sink = Sink()
    ctx = Context(1, Caller(SCOPE, mcp_registry), "t", Exchange(sink))
    await ctx.report_progress(1)
    await ctx.report_progress(1.5, total=3)
    for bad in (1.5, 1, float("nan")):
        with pytest.raises(ValueError, match="progress must increase"):
            await ctx.report_progress(bad)
    await ctx.report_progress(2, message="still fine")
    for progress, total in ((float("inf"), None), (3, float("inf")), (3, float("nan"))):
        with pytest.raises(ValueError, match="finite"):
            await ctx.report_progress(progress, total=total)
    assert [m["params"] for m in sink.messages] == [
        {"progressToken": "t", "progress": 1},
        {"progressToken": "t", "progress": 1.5, "total": 3},
        {"progressToken": "t", "progress": 2, "message": "still fine"},
    ]
    assert_no_leaks(mcp_registry)


async def test_progress_going_backwards_in_a_tool_is_a_tool_error(mcp_registry: Registry) -> None:
    sink = Sink()
    message = call(1, "backwards", _meta={"progressToken": "b"})
    reply = await SERVER.dispatcher.handle(
        message, Caller(SCOPE, mcp_registry), Exchange(send=sink)
    )
    assert reply is not None
    assert reply["result"]["isError"] is True
    assert reply["result"]["content"][0]["text"].startswith("ValueError: progress must")
    assert len(sink.messages) == 1
    assert_no_leaks(mcp_registry)


async def test_tool_context_outside_a_running_tool(mcp_registry: Registry) -> None:
    ctx = Context(1, Caller(SCOPE, mcp_registry))
    with pytest.raises(RuntimeError, match="not running"):
        _ = ctx.request
    await ctx.report_progress(1)  # no token, no sink: nothing to do, no error


async def test_a_non_cancellable_tool_is_not_tracked(mcp_registry: Registry) -> None:
    server = McpServer()
    seen: list[object] = []

    @server.tool(cancellable=False)
    async def quick(ctx: Context) -> str:
        seen.append(ctx.registry.in_flight_count)
        await trio.lowlevel.checkpoint()
        seen.append(current_request(None))  # not tracked: there is no flag to look at
        return "quick"

    exchange = Exchange()
    exchange.cancel("too late")  # nothing to apply it to
    reply = await server.dispatcher.handle(call(1, "quick"), Caller(SCOPE, mcp_registry), exchange)
    assert reply is not None and reply["result"]["content"][0]["text"] == "quick"
    assert seen == [0, None]
    caller = Caller(SCOPE, mcp_registry)

    def tracked(on: McpServer, message: Message) -> bool:
        prepared = on.dispatcher.prepare(message, caller)
        return isinstance(prepared, RequestCall) and prepared.tracked

    assert tracked(server, call(1, "quick")) is False
    assert tracked(server, call(1, "x")) is False
    assert tracked(SERVER, call(1, "count")) is True
    assert tracked(SERVER, request(1, "ping", {"name": "count"})) is False
    assert_no_leaks(mcp_registry)


# -- tool registration ------------------------------------------------------


def test_tools_must_be_functions_not_generators() -> None:
    # A plain def is a sync tool (tests/test_threads.py); a generator is neither.
    server = McpServer()
    with pytest.raises(TypeError, match="async function or a plain function"):

        @server.tool()
        async def agen(ctx: Context) -> Any:
            yield "no"

    assert server.registration.tools == {}


def test_duplicate_tool_names_are_refused() -> None:
    server = McpServer()

    @server.tool()
    async def first(ctx: Context) -> str:
        return "1"

    with pytest.raises(ValueError, match="already registered"):

        @server.tool("first")
        async def second(ctx: Context) -> str:
            return "2"

    assert server.registration.tools["first"].fn is first


@pytest.mark.parametrize("kind", ["args", "kwargs", "positional_only"])
def test_tool_parameters_must_be_named(kind: str) -> None:
    async def with_args(ctx: Context, *args: int) -> None:
        pass

    async def with_kwargs(ctx: Context, **kwargs: int) -> None:
        pass

    async def positional_only(ctx: Context, x: int, /) -> None:
        pass

    tools: dict[str, Callable[..., Awaitable[None]]] = {
        "args": with_args,
        "kwargs": with_kwargs,
        "positional_only": positional_only,
    }
    fn = tools[kind]
    server = McpServer()
    with pytest.raises(TypeError, match="must be named"):
        server.tool()(fn)
    assert server.registration.tools == {}


def test_on_cancel_is_checked() -> None:
    with pytest.raises(ValueError, match="on_cancel"):
        McpServer(on_cancel="ignore")  # type: ignore[arg-type]


# -- fuzzing ----------------------------------------------------------------

FUZZ_SERVER = McpServer("fuzz", "0")


@FUZZ_SERVER.tool()
async def fast(ctx: Context, x: int = 0, s: str = "") -> dict[str, Any]:
    await checkpoint_cancelled()
    await ctx.report_progress(1)
    return {"x": x, "s": s}


@FUZZ_SERVER.tool()
async def boom(ctx: Context, s: str = "") -> str:
    raise ValueError(s)


# Strings with lone surrogates: JSON's "\ud800" escape decodes to one.
texts = st.text(st.characters(exclude_categories=()), max_size=20)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(),
    texts,
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """``one_of`` with weights: well-formed messages reach deeper code."""
    return st.sampled_from([s for weight, s in choices for _ in range(weight)]).flatmap(lambda s: s)


good_ids = st.one_of(st.integers(), st.text(max_size=5))
ids = weighted(
    (3, good_ids),
    (1, st.integers(min_value=10**255, max_value=10**300)),
    (1, st.text(min_size=250, max_size=300)),
    (1, st.sampled_from([None, True, 1.5, [1], {"id": 1}, "é" * 129, "\ud800"])),
    (1, json_values),
)
methods = weighted(
    (
        4,
        st.sampled_from(
            [
                "initialize",
                "ping",
                "tools/list",
                "tools/call",
                "notifications/cancelled",
                "bogus",
                "bogus\ud800",
            ]
        ),
    ),
    (1, texts),
    (1, json_values),
)
tool_params = st.fixed_dictionaries(
    {"name": weighted((4, st.sampled_from(["fast", "boom", "nope", "\udfff"])), (1, json_values))},
    optional={
        "arguments": weighted(
            (
                4,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "x": weighted((3, st.integers()), (1, json_values)),
                        "s": texts,
                        "y": json_values,
                    },
                ),
            ),
            (1, json_values),
        ),
        "_meta": weighted(
            (3, st.fixed_dictionaries({}, optional={"progressToken": ids})), (1, json_values)
        ),
    },
)
other_params = st.fixed_dictionaries(
    {},
    optional={
        "requestId": ids,
        "reason": json_values,
        "protocolVersion": weighted((1, st.sampled_from(LEGACY_VERSIONS)), (1, json_values)),
    },
)
near_misses = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": weighted(
            (3, st.just("2.0")), (1, st.sampled_from(["1.0", "2", 2.0, None])), (1, json_values)
        ),
        "id": ids,
        "method": methods,
        "params": st.one_of(tool_params, other_params, json_values),
        "result": json_values,
        "error": json_values,
    },
)
well_formed = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": methods},
    optional={
        "id": weighted((4, good_ids), (1, ids)),
        "params": weighted((3, other_params), (1, json_values)),
    },
)
tool_calls = st.fixed_dictionaries(
    {
        "jsonrpc": st.just("2.0"),
        "id": weighted((4, good_ids), (1, ids)),
        "method": st.just("tools/call"),
        "params": weighted((5, tool_params), (1, json_values)),
    }
)
messages = weighted(
    (6, tool_calls),
    (3, well_formed),
    (2, near_misses),
    (1, json_values),
    (1, st.lists(near_misses, max_size=2)),
)

raw_bodies = st.one_of(
    messages.map(lambda m: json.dumps(m).encode()),
    # Truncated JSON: always a parse error.
    messages.map(lambda m: json.dumps(m).encode()[:-1]),
    st.binary(max_size=64),
    texts.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from(
        [
            b"",
            b"   ",
            b"[" * 100_000,
            b'{"a":' * 50_000,
            b"1" * 5000,
            b"NaN",
            b"-Infinity",
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":NaN}}',
            b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":1,"method":"\\ud800"}',
            b'{"jsonrpc":"2.0","id":"\\udfff","method":"ping"}',
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\\ud800x"}}',
            b"\xef\xbb\xbf{}",
            b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":1,"method":"ping"} {}',
            b"\xff\xfe\x00{",
        ]
    ),
)

FUZZ_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def check_reply(reply: Message, message: object = None) -> None:
    """A well-formed JSON-RPC 2.0 response that any JSON parser accepts."""
    assert isinstance(reply, dict)
    assert reply["jsonrpc"] == "2.0"
    assert "id" in reply
    assert reply["id"] is None or is_valid_request_id(reply["id"])
    assert ("result" in reply) != ("error" in reply)
    assert set(reply) <= {"jsonrpc", "id", "result", "error"}
    if "error" in reply:
        error = reply["error"]
        assert type(error["code"]) is int
        assert isinstance(error["message"], str)
        assert set(error) <= {"code", "message", "data"}
    json.dumps(reply, allow_nan=False)
    # What the transports send: UTF-8 JSON text that parses back to the reply.
    assert json.loads(jsonrpc.encode(reply).decode("utf-8")) == reply
    if isinstance(message, dict) and is_valid_request_id(message.get("id")):
        assert reply["id"] == message["id"]


def is_cancel_notification(message: object) -> bool:
    return (
        isinstance(message, dict)
        and message.get("method") == "notifications/cancelled"
        and "id" not in message
    )


def is_request(message: object) -> bool:
    return (
        isinstance(message, dict)
        and message.get("jsonrpc") == "2.0"
        and "id" in message
        and "method" in message
    )


def iter_notifications(sink: Sink) -> Iterator[Message]:
    for note in sink.messages:
        assert "id" not in note
        assert note["method"] == "notifications/progress"
        jsonrpc.encode(note)
        yield note


async def handle_fuzzed(message: object) -> Message | None:
    sink = Sink()
    async with open_registry(grace_period=0) as registry:
        caller = Caller("session:fuzz", registry)
        with trio.fail_after(5):
            reply = await FUZZ_SERVER.dispatcher.handle(message, caller, Exchange(send=sink))
        if is_cancel_notification(message):
            # A cancel for a request not (yet) here is kept as a row, by design:
            # the bounded table of early cancels. Only that one row may remain.
            assert registry.in_flight_count == 0 and registry.row_count <= 1
        else:
            assert_no_leaks(registry)
    list(iter_notifications(sink))
    if reply is not None:
        check_reply(reply, message)
    elif is_request(message):
        # A request whose shape passed gets an answer; only these get none.
        assert isinstance(message, dict)
        assert message["method"] is None
        assert "result" in message or "error" in message
    return reply


@FUZZ_SETTINGS
@given(messages)
def test_fuzz_handle_never_crashes_and_answers_valid_json_rpc(message: object) -> None:
    trio.run(handle_fuzzed, message)


async def decode_and_handle(body: bytes) -> None:
    bodies: list[bytes | str] = [body]
    try:
        bodies.append(body.decode("utf-8"))  # a WebSocket text frame
    except UnicodeDecodeError:
        pass
    for data in bodies:
        try:
            decoded = jsonrpc.decode(data)
        except JsonRpcError as exc:
            assert exc.code == PARSE_ERROR
            check_reply(exc.to_message())
            assert exc.to_message()["id"] is None
            continue
        try:
            parsed = jsonrpc.classify(decoded)
        except JsonRpcError as exc:
            assert exc.code in (INVALID_REQUEST, INVALID_PARAMS)
            check_reply(exc.to_message(), decoded)
        else:
            assert isinstance(
                parsed, (jsonrpc.Request, jsonrpc.Notification, jsonrpc.ClientResponse)
            )
        await handle_fuzzed(decoded)


@FUZZ_SETTINGS
@given(raw_bodies)
def test_fuzz_decode_and_classify_raw_bytes(body: bytes) -> None:
    trio.run(decode_and_handle, body)


def test_encode_escapes_lone_surrogates() -> None:
    # Regression: "\ud800" is valid JSON, decodes to a lone surrogate, and an
    # error echoing it (the unknown method) used to crash the transport.
    decoded = jsonrpc.decode(b'{"jsonrpc":"2.0","id":1,"method":"\\ud800"}')
    reply = trio.run(handle_fuzzed, decoded)
    assert reply is not None and reply["error"]["data"] == {"method": "\ud800"}
    assert jsonrpc.encode(reply) == (
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32601,'
        b'"message":"Method not found","data":{"method":"\\ud800"}}}'
    )
    assert jsonrpc.encode({"text": "é"}) == b'{"text":"\\u00e9"}'
    assert json.loads(jsonrpc.encode({"text": "é"})) == {"text": "é"}
    with pytest.raises(ValueError):
        jsonrpc.encode({"progress": float("nan")})
