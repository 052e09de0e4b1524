"""The in-memory test client (``trio_mcp_cancel.testing.open_test_client``).

It drives a server through the real connection layer, so these tests are
also the transport-level versions of test_server.py's cancellation and
progress tests: every message crosses as JSON text, in order, through
``MessageConnection``.  All run on ``autojump_clock``: grace periods and
the tools' sleeps take no real time, and ``trio.current_time()`` shows
exactly how long (virtually) something took.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_mcp_cancel import (
    HardCancelEvent,
    Registry,
    RegistryConfig,
    RequestCancelled,
    RequestCancelledEvent,
    checkpoint_cancelled,
    open_registry,
)
from trio_mcp_cancel._protocol.registration import OnCancel
from trio_mcp_cancel._wire.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, PARSE_ERROR
from trio_mcp_cancel.lowlevel.wire import (
    LATEST_LEGACY_VERSION,
    REQUEST_CANCELLED,
    TOO_MANY_REQUESTS,
)
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.testing import (
    EventRecorder,
    McpError,
    advance_past_grace_period,
    assert_no_leaks,
    open_test_client,
)

from _support.cancellation_tools import probe_server

Message = dict[str, Any]


def make_server(on_cancel: OnCancel = "silent") -> McpServer:
    server = probe_server("memory-test", on_cancel=on_cancel)

    @server.tool()
    async def chatty(ctx: Context) -> str:
        for level in ("debug", "info", "error"):
            await ctx.log(level, f"a {level} line")
        return "logged"

    @server.tool(client_capabilities={"elicitation": {}})
    async def needs_elicitation(ctx: Context) -> str:
        return "ok"

    return server


SERVER = make_server()
LOUD = make_server(on_cancel="error")


def text_of(result: Message) -> str:
    text = result["content"][0]["text"]
    assert isinstance(text, str)
    return text


# -- basic calls, both eras -----------------------------------------------------


async def test_modern_call_carries_the_envelope_and_gets_a_modern_result(
    autojump_clock: MockClock,
) -> None:
    async with open_test_client(SERVER) as client:
        result = await client.call_tool("whoami")
        assert result["structuredContent"] == {"namespace": client.namespace, "era": "modern"}
        assert result["resultType"] == "complete"
        assert result["_meta"]["io.modelcontextprotocol/serverInfo"] == SERVER.registration.info
        assert client.namespace.startswith("session:memory-")
        assert client.legacy is None
        assert client.unexpected == []
        assert_no_leaks(client.registry)


async def test_legacy_client_initializes_and_the_connection_becomes_a_session(
    autojump_clock: MockClock,
) -> None:
    async with open_test_client(SERVER, era="legacy", client_capabilities={"roots": {}}) as client:
        assert client.initialize_result is not None
        assert client.initialize_result["protocolVersion"] == LATEST_LEGACY_VERSION
        assert client.legacy is not None
        assert client.legacy.client_capabilities == {"roots": {}}
        result = await client.call_tool("whoami")
        assert result["structuredContent"]["era"] == "legacy"
        assert "resultType" not in result
        assert await client.request("ping") == {}


async def test_errors_raise_mcp_error_with_code_message_and_data(
    autojump_clock: MockClock,
) -> None:
    async with open_test_client(SERVER) as client:
        with pytest.raises(McpError) as info:
            await client.call_tool("no-such-tool")
        assert (info.value.code, info.value.data) == (INVALID_PARAMS, {"name": "no-such-tool"})
        with pytest.raises(McpError) as info:
            await client.request("ping")  # legacy only
        assert info.value.code == METHOD_NOT_FOUND
        with pytest.raises(McpError) as info:
            await client.call_tool("needs_elicitation")
        assert info.value.code == -32021
        assert info.value.data == {"requiredCapabilities": {"elicitation": {}}}
        # A failing tool is a result, not an error.
        result = await client.call_tool("echo", {"text": 5})
        assert result["isError"] is True


async def test_declared_capabilities_reach_the_server(autojump_clock: MockClock) -> None:
    async with open_test_client(SERVER, client_capabilities={"elicitation": {}}) as client:
        assert text_of(await client.call_tool("needs_elicitation")) == "ok"


async def test_raw_text_and_messages(autojump_clock: MockClock) -> None:
    async with open_test_client(SERVER) as client:
        await client.send_text("{not json")
        await client.send({"jsonrpc": "2.0", "id": 99, "method": "tools/list"})  # no envelope
        await client.settle()
        codes = [m["error"]["code"] for m in client.unexpected if "error" in m]
        assert codes == [PARSE_ERROR]
        # A legacy-looking tools/list without a session is still answered.
        [listing] = [m for m in client.unexpected if m.get("id") == 99]
        assert {t["name"] for t in listing["result"]["tools"]} >= {"echo", "count"}


async def test_progress_reaches_the_callback_and_the_call(autojump_clock: MockClock) -> None:
    seen: list[Message] = []
    async with open_test_client(SERVER) as client:
        result = await client.call_tool("count", {"n": 3, "delay": 0.5}, progress=seen.append)
        assert text_of(result) == "counted 3"
        assert [(p["progress"], p["total"], p["message"]) for p in seen] == [
            (1, 3, "step 1"),
            (2, 3, "step 2"),
            (3, 3, "step 3"),
        ]
        assert {p["progressToken"] for p in seen} == {max(client.calls)}
        # Without a callback call_tool asks for no progress, so none is sent.
        await client.call_tool("count", {"n": 2, "delay": 0.5})
        assert client.unexpected == []


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_log_level_is_honoured_in_both_eras(autojump_clock: MockClock, era: Any) -> None:
    async with open_test_client(SERVER, era=era, log_level="info") as client:
        await client.call_tool("chatty")
        assert [m["level"] for m in client.log_messages] == ["info", "error"]


# -- cancellation (ported from test_server.py, over the connection) ------------


async def test_cancel_stops_a_polling_tool_at_its_next_checkpoint_and_nothing_is_sent(
    autojump_clock: MockClock,
) -> None:
    async with open_test_client(SERVER, registry_config=RegistryConfig(grace_period=5)) as client:
        events = EventRecorder.attach(client.registry)
        call = client.start_call("count", {"delay": 1.0})
        await trio.sleep(2.5)
        assert len(call.progress) == 2
        start = trio.current_time()
        await call.cancel("user pressed stop")
        await client.assert_no_answer(call)
        await client.registry.wait_idle()
        # Stopped by itself at its next checkpoint (<= one step), long before the grace.
        assert trio.current_time() - start <= 1.0
        assert len(call.progress) == 2  # and no progress after the cancel
        [cancelled] = events.of_type(RequestCancelledEvent)
        assert (cancelled.request_id, cancelled.namespace, cancelled.kind) == (
            call.id,
            client.namespace,
            "client",
        )
        assert cancelled.reason == "user pressed stop"
        assert events.of_type(HardCancelEvent) == []
        assert client.unexpected == []
        assert_no_leaks(client.registry)


async def test_a_tool_ignoring_the_flag_is_hard_cancelled_after_the_grace_period(
    autojump_clock: MockClock,
) -> None:
    async with open_test_client(SERVER, registry_config=RegistryConfig(grace_period=5)) as client:
        events = EventRecorder.attach(client.registry)
        call = client.start_call("stubborn")
        await client.wait_in_flight(call)
        start = trio.current_time()
        await call.cancel("too slow")
        await client.registry.wait_idle()
        assert trio.current_time() - start == pytest.approx(5)
        [hard] = events.of_type(HardCancelEvent)
        assert (hard.request_id, hard.kind) == (call.id, "client")
        await client.assert_no_answer(call)
        assert_no_leaks(client.registry)


async def test_with_on_cancel_error_the_cancelled_call_is_answered_32800(
    autojump_clock: MockClock,
) -> None:
    async with open_test_client(LOUD, registry_config=RegistryConfig(grace_period=5)) as client:
        polite = client.start_call("count")
        stubborn = client.start_call("stubborn")
        await polite.cancel("stop one")
        await stubborn.cancel()
        with pytest.raises(McpError) as info:
            await polite.result()
        assert (info.value.code, info.value.data) == (REQUEST_CANCELLED, {"reason": "stop one"})
        with pytest.raises(McpError) as info:
            await stubborn.result()
        assert (info.value.code, info.value.data) == (REQUEST_CANCELLED, None)
        assert_no_leaks(client.registry)


async def test_a_helper_task_stopping_at_the_flag_ends_the_call(
    autojump_clock: MockClock,
) -> None:
    # grace_period=None: no hard cancel, so only the helper's RequestCancelled
    # (inside the tool's nursery's exception group) can end the tool.
    async with open_test_client(LOUD, registry_config=RegistryConfig(grace_period=None)) as client:
        call = client.start_call("helpers")
        await client.wait_in_flight(call)
        await call.cancel("stop the helpers")
        with pytest.raises(McpError) as info:
            await call.result()
        assert info.value.data == {"reason": "stop the helpers"}
        assert_no_leaks(client.registry)


@pytest.mark.mcp_registry(grace_period=0)
async def test_a_cancel_from_another_connection_does_not_cancel(
    autojump_clock: MockClock,
    mcp_registry: Registry,
    mcp_events: EventRecorder,
) -> None:
    async with (
        open_test_client(SERVER, registry=mcp_registry) as alice,
        open_test_client(SERVER, registry=mcp_registry) as mallory,
    ):
        assert alice.namespace != mallory.namespace
        call = alice.start_call("count", {"n": 3})
        await alice.wait_in_flight(call)
        await mallory.notify("notifications/cancelled", {"requestId": call.id})
        await mallory.settle()
        assert mcp_registry.row_count == 0
        assert text_of(await call.result()) == "counted 3"
    assert mcp_events.events == []
    assert_no_leaks(mcp_registry)


async def test_cancelling_the_caller_sends_notifications_cancelled(
    autojump_clock: MockClock,
) -> None:
    async with open_test_client(SERVER, registry_config=RegistryConfig(grace_period=5)) as client:
        events = EventRecorder.attach(client.registry)
        with trio.move_on_after(2.5) as scope:
            await client.call_tool("count")
        assert scope.cancelled_caught
        await client.registry.wait_idle()
        [cancelled] = events.of_type(RequestCancelledEvent)
        assert (cancelled.kind, cancelled.reason) == ("client", "caller cancelled")
        # The connection stays usable.
        assert text_of(await client.call_tool("echo", {"text": "still here"})) == "still here"
        assert client.unexpected == []


@pytest.mark.mcp_registry(grace_period=3)
async def test_leaving_the_block_disconnects_and_cancels_what_still_runs(
    autojump_clock: MockClock,
    mcp_registry: Registry,
    mcp_events: EventRecorder,
) -> None:
    start = trio.current_time()
    async with open_test_client(SERVER, registry=mcp_registry) as client:
        client.start_call("count")
        client.start_call("stubborn")
        await client.settle()
        assert mcp_registry.in_flight_count == 2
        start = trio.current_time()
    # The block ended once both stopped: the stubborn one at the grace period.
    assert trio.current_time() - start == pytest.approx(3)
    assert {e.kind for e in mcp_events.of_type(RequestCancelledEvent)} == {"disconnect"}
    [hard] = mcp_events.of_type(HardCancelEvent)
    assert hard.kind == "disconnect"
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=100)
async def test_connection_grace_overrides_the_registry_for_disconnects(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    async with open_test_client(
        SERVER, registry=mcp_registry, limits=ConnectionLimits(disconnect_grace_period=0.5)
    ) as client:
        client.start_call("stubborn")
        await client.settle()
        start = trio.current_time()
    assert trio.current_time() - start == pytest.approx(0.5)
    assert_no_leaks(mcp_registry)


async def test_max_request_time_cancels_server_side_with_an_answer(
    autojump_clock: MockClock,
) -> None:
    async with open_test_client(
        SERVER,
        limits=ConnectionLimits(max_request_time=2.5),
        registry_config=RegistryConfig(grace_period=5),
    ) as client:
        with pytest.raises(McpError) as info:
            await client.call_tool("count")
        assert info.value.code == REQUEST_CANCELLED
        assert info.value.data == {"reason": "request time limit reached"}
        assert trio.current_time() == pytest.approx(3)  # the next checkpoint after 2.5


async def test_the_concurrency_limit_refuses_the_call_over_it(
    autojump_clock: MockClock,
) -> None:
    async with open_test_client(SERVER, limits=ConnectionLimits(max_concurrent_calls=2)) as client:
        calls = [client.start_call("count") for _ in range(3)]
        with pytest.raises(McpError) as info:
            await calls[2].result()
        assert info.value.code == TOO_MANY_REQUESTS
        for call in calls[:2]:
            await call.cancel()
        await client.registry.wait_idle()
        assert text_of(await client.call_tool("echo", {"text": "room again"})) == "room again"


async def test_helpers_work_with_the_client(autojump_clock: MockClock) -> None:
    async with open_test_client(SERVER, registry_config=RegistryConfig(grace_period=2)) as client:
        call = client.start_call("stubborn")
        await client.wait_in_flight(call)
        await call.cancel()
        assert client.registry.in_flight_count == 1
        await advance_past_grace_period(client.registry)
        await client.settle()
        assert_no_leaks(client.registry)
        with pytest.raises(AssertionError, match="not in flight"):
            await client.wait_in_flight(call)


async def test_assert_no_answer_fails_when_an_answer_came(autojump_clock: MockClock) -> None:
    async with open_test_client(SERVER) as client:
        call = client.start_call("echo", {"text": "hi"})
        with pytest.raises(AssertionError, match="was answered"):
            await client.assert_no_answer(call)


async def test_an_exception_in_the_block_comes_out_unwrapped(autojump_clock: MockClock) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with open_test_client(SERVER) as client:
            client.start_call("stubborn")
            raise Boom


def test_registry_and_registry_settings_are_exclusive() -> None:
    async def main() -> None:
        async with open_registry() as registry:
            with pytest.raises(TypeError):
                async with open_test_client(
                    SERVER, registry=registry, registry_config=RegistryConfig(grace_period=1)
                ):
                    pass

    trio.run(main)


async def test_a_tool_sees_request_cancelled_with_the_reason(autojump_clock: MockClock) -> None:
    server = McpServer("probe")
    seen: list[tuple[str | None, str]] = []

    @server.tool()
    async def probe(ctx: Context) -> str:
        try:
            while True:
                await checkpoint_cancelled()
                await trio.sleep(1)
        except RequestCancelled as exc:
            seen.append((exc.reason, exc.kind))
            raise

    async with open_test_client(server) as client:
        call = client.start_call("probe")
        await call.cancel("enough")
        await client.assert_no_answer(call)
    assert seen == [("enough", "client")]
