"""Middleware (``@server.middleware``, ``McpServer(middleware=[...])``): order, rewrite,
refusal, and the outcome it reads after the request, in memory, in both eras.

The transports (stdio, HTTP, WebSocket) are in tests/transports/test_middleware_transports.py.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_mcp_cancel import RegistryConfig, checkpoint_cancelled
from trio_mcp_cancel.middleware import CallNext, JsonRpcError, MiddlewareRequest, Outcome
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.testing import McpError, open_test_client

ERAS = ["modern", "legacy"]


def make_server(*middleware: Any) -> McpServer:
    server = McpServer("mw", middleware=middleware)

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    @server.tool()
    async def shout(ctx: Context, text: str) -> str:
        return text.upper()

    @server.tool()
    async def polite_sleep(ctx: Context) -> str:
        while not await checkpoint_cancelled():
            await trio.sleep(0.1)
        return "stopped"

    @server.tool()
    async def stubborn(ctx: Context) -> str:
        await trio.sleep_forever()  # ignores the flag: only the hard cancel stops it
        return "never"

    return server


class Recorder:
    """A middleware that records what it saw, before and (in ``finally``) after."""

    def __init__(self, label: str, seen: list[Any]) -> None:
        self.label = label
        self.seen = seen
        self.requests: list[MiddlewareRequest] = []

    async def __call__(self, request: MiddlewareRequest, call_next: CallNext) -> Any:
        self.requests.append(request)
        self.seen.append(f"{self.label} before {request.method}")
        try:
            return await call_next()
        finally:
            self.seen.append((f"{self.label} after", request.outcome))


@pytest.mark.parametrize("era", ERAS)
async def test_middleware_wraps_every_request_in_order_first_given_outermost(era: str) -> None:
    seen: list[Any] = []
    server = make_server(Recorder("outer", seen))
    server.middleware(Recorder("inner", seen))  # the decorator adds inside those given
    async with open_test_client(server, era=era) as client:  # type: ignore[arg-type]
        seen.clear()  # initialize (legacy) went through it too
        result = await client.call_tool("echo", {"text": "hi"})
        await client.request("tools/list")
    assert result["content"][0]["text"] == "hi"
    ok = Outcome("ok")
    assert seen == [
        "outer before tools/call",
        "inner before tools/call",
        ("inner after", ok),
        ("outer after", ok),
        "outer before tools/list",
        "inner before tools/list",
        ("inner after", ok),
        ("outer after", ok),
    ]


@pytest.mark.parametrize("era", ERAS)
async def test_middleware_sees_the_caller_and_the_request(era: str) -> None:
    recorder = Recorder("r", [])
    async with open_test_client(
        make_server(recorder),
        era=era,
        principal="alice",  # type: ignore[arg-type]
    ) as client:
        await client.call_tool("echo", {"text": "hi"})
    request = recorder.requests[-1]
    assert (request.method, request.era, request.target) == ("tools/call", era, "echo")
    assert request.principal == "alice" and request.namespace == client.namespace
    assert request.request_id is not None
    with pytest.raises(AttributeError):
        request.method = "other"  # type: ignore[misc]


@pytest.mark.parametrize("era", ERAS)
async def test_middleware_rewrites_params_and_results(era: str) -> None:
    async def rewrite(request: MiddlewareRequest, call_next: CallNext) -> Any:
        if request.method == "tools/call":
            request.params = {**request.params, "name": "shout"}
            request.params["arguments"] = {"text": "quiet"}
        result = await call_next()
        if request.method == "tools/call":
            result["content"][0]["text"] += "!"
        return result

    async with open_test_client(make_server(rewrite), era=era) as client:  # type: ignore[arg-type]
        result = await client.call_tool("echo", {"text": "hi"})
    assert result["content"][0]["text"] == "QUIET!"


@pytest.mark.parametrize("era", ERAS)
async def test_a_middleware_refuses_with_a_json_rpc_error(era: str) -> None:
    outer = Recorder("outer", [])

    async def deny(request: MiddlewareRequest, call_next: CallNext) -> Any:
        if request.method == "tools/call":
            raise JsonRpcError(-31000, "Not allowed", {"why": "policy"})
        return await call_next()

    async with open_test_client(make_server(outer, deny), era=era) as client:  # type: ignore[arg-type]
        with pytest.raises(McpError) as refused:
            await client.call_tool("echo", {"text": "hi"})
        refused_outcome = outer.requests[-1].outcome
        listed = await client.request("tools/list")  # the server goes on
    assert {tool["name"] for tool in listed["tools"]} >= {"echo"}
    assert (refused.value.code, refused.value.message) == (-31000, "Not allowed")
    assert refused.value.data == {"why": "policy"}
    assert refused_outcome == Outcome("error", error_code=-31000)


@pytest.mark.parametrize("era", ERAS)
async def test_a_middleware_that_raises_any_other_exception_fails_only_that_request(
    era: str,
) -> None:
    async def broken(request: MiddlewareRequest, call_next: CallNext) -> Any:
        if request.params.get("name") == "echo":
            raise KeyError("a bug in the middleware")
        return await call_next()

    async with open_test_client(make_server(broken), era=era) as client:  # type: ignore[arg-type]
        with pytest.raises(McpError) as failed:
            await client.call_tool("echo", {"text": "hi"})
        assert (await client.call_tool("shout", {"text": "on"}))["content"][0]["text"] == "ON"
    assert failed.value.code == -32603


async def test_a_middleware_calling_call_next_twice_fails_the_request_not_the_tool_twice() -> None:
    calls: list[str] = []

    async def twice(request: MiddlewareRequest, call_next: CallNext) -> Any:
        calls.append("x")
        await call_next()
        return await call_next()

    async with open_test_client(make_server(twice)) as client:
        with pytest.raises(McpError) as failed:
            await client.call_tool("echo", {"text": "hi"})
    assert failed.value.code == -32603


async def test_a_rewrite_to_an_unknown_tool_is_invalid_params() -> None:
    async def rename(request: MiddlewareRequest, call_next: CallNext) -> Any:
        request.params = {**request.params, "name": "nope"}
        return await call_next()

    async with open_test_client(make_server(rename)) as client:
        with pytest.raises(McpError) as refused:
            await client.call_tool("echo", {"text": "hi"})
    assert refused.value.code == -32602


@pytest.mark.parametrize("era", ERAS)
async def test_outcome_after_a_client_cancel_names_the_client(
    era: str, autojump_clock: MockClock
) -> None:
    seen: list[Any] = []
    async with open_test_client(make_server(Recorder("r", seen)), era=era) as client:  # type: ignore[arg-type]
        call = client.start_call("polite_sleep")
        await client.wait_in_flight(call)
        await call.cancel("user pressed stop")
        await client.assert_no_answer(call)
    (outcome,) = [o for label, o in (s for s in seen if isinstance(s, tuple)) if o.status != "ok"]
    assert outcome == Outcome(
        "cancelled",
        cancel_kind="client",
        cancel_cause="client",
        cancel_phase="flag",
        reason="user pressed stop",
    )


async def test_outcome_after_a_time_limit_names_the_server_and_the_cause(
    autojump_clock: MockClock,
) -> None:
    recorder = Recorder("r", [])
    limits = ConnectionLimits(max_request_time=1.0)
    async with open_test_client(make_server(recorder), limits=limits) as client:
        with pytest.raises(McpError) as cancelled:
            await client.call_tool("polite_sleep")
    assert cancelled.value.code == -32800
    outcome = recorder.requests[-1].outcome
    assert outcome is not None
    assert (outcome.status, outcome.cancel_kind, outcome.cancel_cause, outcome.cancel_phase) == (
        "cancelled",
        "server",
        "time_limit",
        "flag",
    )


async def test_finally_runs_with_the_outcome_after_a_hard_cancel(
    autojump_clock: MockClock,
) -> None:
    finished: list[Outcome | None] = []

    async def watch(request: MiddlewareRequest, call_next: CallNext) -> Any:
        try:
            return await call_next()
        finally:
            finished.append(request.outcome)

    config = RegistryConfig(grace_period=2.0)
    async with open_test_client(make_server(watch), registry_config=config) as client:
        call = client.start_call("stubborn")
        await client.wait_in_flight(call)
        finished.clear()
        await call.cancel("stop")
        await client.settle()
        assert finished == []  # the flag is set, the tool ignores it: still running
        await trio.sleep(2.5)  # past the grace period: the hard cancel
        await client.assert_no_answer(call)
    assert finished == [
        Outcome(
            "cancelled",
            cancel_kind="client",
            cancel_cause="client",
            cancel_phase="hard_cancel",
            reason="stop",
        )
    ]


async def test_a_disconnect_shows_as_a_disconnect(autojump_clock: MockClock) -> None:
    recorder = Recorder("r", [])
    async with open_test_client(make_server(recorder)) as client:
        call = client.start_call("polite_sleep")
        await client.wait_in_flight(call)
        client.disconnect()
    outcome = recorder.requests[-1].outcome
    assert outcome is not None
    assert (outcome.status, outcome.cancel_kind, outcome.cancel_cause) == (
        "cancelled",
        "disconnect",
        "disconnect",
    )


async def _pass(request: MiddlewareRequest, call_next: CallNext) -> Any:
    return await call_next()


@pytest.mark.parametrize("layers", [0, 1])
async def test_no_middleware_adds_no_frame_to_a_call(layers: int) -> None:
    server = make_server(*[_pass] * layers)
    frames: list[str] = []

    @server.tool()
    async def where(ctx: Context) -> str:
        frames.extend(frame.function for frame in inspect.stack())
        return "here"

    async with open_test_client(server) as client:
        await client.call_tool("where")
    assert ("run_chain" in frames) is bool(layers)


async def test_params_set_to_something_not_a_dict_fail_that_request_only() -> None:
    async def garble(request: MiddlewareRequest, call_next: CallNext) -> Any:
        if request.params.get("name") == "echo":
            request.params = ["not", "a", "dict"]  # type: ignore[assignment]
        return await call_next()

    async with open_test_client(make_server(garble)) as client:
        with pytest.raises(McpError) as failed:
            await client.call_tool("echo", {"text": "hi"})
        assert (await client.call_tool("shout", {"text": "on"}))["content"][0]["text"] == "ON"
    assert failed.value.code == -32603
