"""The built-in middleware: RequestLog, Timing, RateLimit, ResponseCache (and their bounds)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_mcp_cancel import Registry, checkpoint_cancelled
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.middleware import (
    MiddlewareRequest,
    RateLimit,
    RequestLog,
    ResponseCache,
    Timing,
)
from trio_mcp_cancel.server import Context, McpServer, ToolError
from trio_mcp_cancel.testing import McpError, open_test_client

from _support.asgi import headers_of, modern_call, served

ERAS = ["modern", "legacy"]


def make_server(*middleware: Any, runs: list[str] | None = None) -> McpServer:
    server = McpServer("builtins", middleware=middleware)
    ran = runs if runs is not None else []

    @server.tool(annotations={"readOnlyHint": True})
    async def lookup(ctx: Context, key: str) -> str:
        ran.append(key)
        if key == "bad":
            raise ToolError("no such key")
        if key == "huge":
            return "x" * 200_000
        return f"value of {key}"

    @server.tool()
    async def write(ctx: Context, key: str) -> str:
        ran.append(f"write {key}")
        return "written"

    @server.tool()
    async def polite_sleep(ctx: Context) -> str:
        while not await checkpoint_cancelled():
            await trio.sleep(0.1)
        return "stopped"

    return server


# -- RequestLog and Timing -------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_request_log_writes_one_line_per_request_with_its_outcome(
    era: str, caplog: pytest.LogCaptureFixture, autojump_clock: MockClock
) -> None:
    caplog.set_level(logging.INFO, "trio_mcp_cancel.requests")
    async with open_test_client(make_server(RequestLog()), era=era) as client:  # type: ignore[arg-type]
        caplog.clear()
        await client.call_tool("lookup", {"key": "a"})
        call = client.start_call("polite_sleep")
        await client.wait_in_flight(call)
        await trio.sleep(1)
        await call.cancel("stop")
        await client.settle()
    records = [r for r in caplog.records if r.name == "trio_mcp_cancel.requests"]
    first, second = (r.mcp for r in records)  # type: ignore[attr-defined]
    assert (first["method"], first["target"], first["outcome"]) == ("tools/call", "lookup", "ok")
    assert second["target"] == "polite_sleep" and second["outcome"] == "cancelled"
    assert (second["cancel_kind"], second["cancel_cause"]) == ("client", "client")
    assert second["duration"] >= 1.0
    assert "method='tools/call'" in records[0].getMessage()


async def test_timing_records_the_duration_in_state_and_calls_back(
    autojump_clock: MockClock,
) -> None:
    durations: list[tuple[str | None, float]] = []
    states: list[dict[str, Any]] = []

    def record(request: MiddlewareRequest, seconds: float) -> None:
        durations.append((request.target, seconds))
        states.append(request.state)

    async with open_test_client(make_server(Timing(record))) as client:
        await client.call_tool("lookup", {"key": "a"})
    assert durations[-1][0] == "lookup"
    assert states[-1] == {"duration": durations[-1][1]}


# -- RateLimit ---------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_rate_limit_refuses_past_the_burst_and_refills_with_time(
    era: str, autojump_clock: MockClock
) -> None:
    limit = RateLimit(rate=1.0, burst=2, methods={"tools/call"})
    server = make_server(limit)
    async with open_test_client(server, era=era, principal="alice") as client:  # type: ignore[arg-type]
        await client.call_tool("lookup", {"key": "a"})
        await client.call_tool("lookup", {"key": "b"})
        with pytest.raises(McpError) as refused:
            await client.call_tool("lookup", {"key": "c"})
        await client.request("tools/list")  # not counted
        await trio.sleep(1.0)
        await client.call_tool("lookup", {"key": "d"})  # one token back
    assert refused.value.code == (-31429 if era == "modern" else -32001)
    assert refused.value.data == {"limit": "rate", "max": 2, "retryAfter": 1}


async def test_rate_limit_keeps_a_bucket_per_principal() -> None:
    limit = RateLimit(rate=0.001, burst=1)
    server = make_server(limit)
    async with open_test_client(server, principal="alice") as alice:
        async with open_test_client(server, principal="bob") as bob:
            await alice.call_tool("lookup", {"key": "a"})
            await bob.call_tool("lookup", {"key": "a"})  # bob's own bucket
            with pytest.raises(McpError):
                await alice.call_tool("lookup", {"key": "a"})


async def test_rate_limit_is_a_429_with_retry_after_on_http(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    app = McpHttpApp(make_server(RateLimit(rate=0.5, burst=1)), mcp_registry)
    async with served(app) as client:
        message = modern_call(1, "lookup", {"key": "a"})
        first = await client.post(headers_of(message), message)
        message = modern_call(2, "lookup", {"key": "a"})
        second = await client.post(headers_of(message), message)
        listed = modern_call(3, "write", {"key": "a"})
        third = await client.post(headers_of(listed), listed)
    assert first.status == 200
    assert second.status == 429 and second.headers["retry-after"] == "2"  # its own wait
    assert second.json()["error"]["code"] == -31429
    assert second.json()["error"]["data"]["retryAfter"] == 2
    assert third.status == 429  # same client address bucket


def test_a_flood_of_distinct_principals_keeps_the_bucket_table_bounded() -> None:
    async def main() -> None:
        limit = RateLimit(rate=1.0, burst=1, max_keys=100)
        for n in range(5_000):
            request = MiddlewareRequest(
                "tools/call", {}, "modern", n, None, f"p{n}" + "x" * 1000, None, "ns", None
            )
            await limit(request, _ok)
        assert limit.keys == 100
        # Long principals are kept as their digest: bounded bytes per bucket.
        assert all(len(key or "") <= 71 for key in limit._buckets)

    trio.run(main)


async def _ok() -> dict[str, Any]:
    return {}


def test_rate_limit_refuses_nonsense_settings() -> None:
    with pytest.raises(ValueError, match="rate"):
        RateLimit(rate=0)
    with pytest.raises(ValueError, match="max_keys"):
        RateLimit(rate=1, max_keys=0)


# -- ResponseCache -----------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_the_cache_answers_a_read_only_tool_again_without_running_it(
    era: str, autojump_clock: MockClock
) -> None:
    runs: list[str] = []
    cache = ResponseCache(ttl=10)
    server = make_server(cache, runs=runs)
    async with open_test_client(server, era=era, principal="alice") as client:  # type: ignore[arg-type]
        first = await client.call_tool("lookup", {"key": "a"})
        again = await client.call_tool("lookup", {"key": "a"})
        await client.call_tool("lookup", {"key": "b"})
        await client.call_tool("write", {"key": "a"})
        await client.call_tool("write", {"key": "a"})  # not read-only: never cached
        await trio.sleep(11)
        await client.call_tool("lookup", {"key": "a"})  # expired
    assert again == first
    assert runs == ["a", "b", "write a", "write a", "a"]
    assert (cache.hits, cache.misses) == (1, 3)


async def test_the_cache_is_per_principal() -> None:
    runs: list[str] = []
    server = make_server(ResponseCache(), runs=runs)
    async with open_test_client(server, principal="alice") as alice:
        await alice.call_tool("lookup", {"key": "a"})
    async with open_test_client(server, principal="bob") as bob:
        await bob.call_tool("lookup", {"key": "a"})
    assert runs == ["a", "a"]


async def test_the_cache_never_keeps_a_tool_error_or_a_cancelled_call(
    autojump_clock: MockClock,
) -> None:
    runs: list[str] = []
    cache = ResponseCache()
    server = make_server(cache, runs=runs)

    @server.tool(annotations={"readOnlyHint": True})
    async def slow_read(ctx: Context) -> str:
        runs.append("slow")
        await trio.sleep(5)
        return "late"

    async with open_test_client(server) as client:
        for _ in range(2):
            result = await client.call_tool("lookup", {"key": "bad"})
            assert result["isError"] is True
        call = client.start_call("slow_read")
        await client.wait_in_flight(call)
        await call.cancel("stop")
        await trio.sleep(6)
        await client.assert_no_answer(call)
    assert runs == ["bad", "bad", "slow"]
    assert cache.entries == 0


async def test_a_huge_result_is_not_cached_beyond_the_byte_bound() -> None:
    runs: list[str] = []
    cache = ResponseCache(max_entry_bytes=100_000, max_bytes=150_000)
    server = make_server(cache, runs=runs)
    async with open_test_client(server) as client:
        await client.call_tool("lookup", {"key": "huge"})
        await client.call_tool("lookup", {"key": "huge"})
        for n in range(40):
            await client.call_tool("lookup", {"key": f"k{n}" + "y" * 5000})
    assert runs.count("huge") == 2  # over max_entry_bytes: never kept
    assert 0 < cache.size <= 150_000  # the least recently used went
    assert cache.entries < 40


async def test_the_cache_keeps_at_most_max_entries() -> None:
    cache = ResponseCache(max_entries=3)
    async with open_test_client(make_server(cache)) as client:
        for n in range(10):
            await client.call_tool("lookup", {"key": str(n)})
    assert cache.entries == 3


async def test_a_cache_hit_over_http_is_one_whole_response_without_running_the_tool(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    runs: list[str] = []
    app = McpHttpApp(make_server(ResponseCache(), runs=runs), mcp_registry)
    async with served(app) as client:
        replies = []
        for request_id in (1, 2):
            message = modern_call(request_id, "lookup", {"key": "a"})
            replies.append(await client.post(headers_of(message), message))
    first, second = (reply.json()["result"] for reply in replies)
    assert runs == ["a"]
    assert second["content"] == first["content"] and second["resultType"] == "complete"


@pytest.mark.parametrize(
    ("data", "header"),
    [
        ({"retryAfter": 7}, b"7"),
        ({"retryAfter": 10**9}, b"1"),  # absurd: the default
        ({"retryAfter": True}, b"1"),
        ({"retryAfter": "7\r\nX-Evil: 1"}, b"1"),  # never a header injection
        ({"retryAfter": 0}, b"1"),
        (None, b"1"),
    ],
)
def test_retry_after_is_the_refusals_own_wait_only_when_it_is_sane(
    data: object, header: bytes
) -> None:
    from trio_mcp_cancel.transports.http.answer import _retry_after

    reply = {"jsonrpc": "2.0", "id": 1, "error": {"code": -31429, "message": "x", "data": data}}
    assert _retry_after(reply) == [(b"retry-after", header)]
