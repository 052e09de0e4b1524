"""McpHttpApp in memory, both eras on one endpoint, under pytest-trio's MockClock.

Every request goes through :mod:`_support.asgi` (no sockets), so grace
periods, keep-alive intervals and time limits are exact: ``autojump_clock``
skips over them and the tests assert *when* things happen, not only that
they do.  Each test runs its app inside :func:`serving`, which at the end
waits for every request, fails on any ASGI protocol violation and asserts
the registry leaked nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from mcp_types._v2026_07_28 import CallToolResult, DiscoverResult, ListToolsResult

from trio_mcp_cancel import (
    HardCancelEvent,
    Registry,
    RequestCancelled,
    RequestCancelledEvent,
    checkpoint_cancelled,
)
from trio_mcp_cancel.http import McpHttpApp, bearer_auth
from trio_mcp_cancel.lowlevel import current_request
from trio_mcp_cancel.lowlevel.wire import REQUEST_CANCELLED
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.testing import EventRecorder

from _support.asgi import (
    LEGACY,
    MODERN,
    SERVER_INFO,
    AsgiClient,
    HttpExchange,
    b64_header,
    cancelled,
    headers_of,
    initialize,
    initialize_message,
    legacy_call,
    legacy_headers,
    modern_call,
    modern_headers,
    modern_request,
    notification,
    request,
    served,
)

HEADER_MISMATCH = -32020
MISSING_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
GRACE = 5.0


# -- the server under test ------------------------------------------------------


@attrs.define
class Probe:
    """What the tools did, and when (mock time)."""

    log: list[tuple[float, str]] = attrs.field(factory=list)
    started_cancelled: dict[object, bool] = attrs.field(factory=dict)

    def note(self, text: str) -> None:
        self.log.append((trio.current_time(), text))

    def texts(self) -> list[str]:
        return [text for _, text in self.log]

    def at(self, text: str) -> float:
        (when,) = [at for at, t in self.log if t == text]
        return when


def build_server(probe: Probe, **options: Any) -> McpServer:
    server = McpServer("eras-test", "1.2.3", instructions="A test server.", **options)

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        """Echoes its text."""
        return text

    @server.tool()
    async def nodoc(ctx: Context) -> str:
        return "ok"

    @server.tool(cancellable=False)
    async def instant(ctx: Context) -> dict[str, int]:
        """Answers at once; not cancellable."""
        return {"answer": 42}

    @server.tool()
    async def polite(ctx: Context, steps: int = 100, delay: float = 1.0) -> str:
        """Polls the flag and reports progress every step."""
        probe.started_cancelled[ctx.request_id] = current_request().cancelled
        try:
            for i in range(1, steps + 1):
                await checkpoint_cancelled()
                await ctx.report_progress(i, total=steps)
                await trio.sleep(delay)
        except RequestCancelled as exc:
            probe.note(f"polite {ctx.request_id} stopped ({exc.kind})")
            raise
        probe.note(f"polite {ctx.request_id} finished")
        return f"counted to {steps}"

    @server.tool()
    async def stubborn(ctx: Context, seconds: int = 100) -> str:
        """Ignores the flag, reporting progress every second; only a hard cancel stops it."""
        seen = False
        try:
            for i in range(1, seconds + 1):
                if current_request().cancelled and not seen:
                    seen = True
                    probe.note(f"stubborn {ctx.request_id} saw the flag")
                await ctx.report_progress(i)
                await trio.sleep(1)
        except trio.Cancelled:
            probe.note(f"stubborn {ctx.request_id} hard-cancelled")
            raise
        probe.note(f"stubborn {ctx.request_id} finished")
        return "done"

    @server.tool()
    async def silent(ctx: Context, seconds: float = 40.0) -> str:
        """Says nothing for a while."""
        await trio.sleep(seconds)
        return "quiet"

    @server.tool()
    async def chatty(ctx: Context) -> str:
        """Logs one line at each of four levels."""
        for level in ("debug", "info", "warning", "error"):
            await ctx.log(level, f"{level} line")
        return "logged"

    @server.tool(client_capabilities={"sampling": {}})
    async def samples(ctx: Context) -> str:
        """Needs the client's sampling capability."""
        return "sampled"

    return server


@attrs.define
class Served:
    client: AsgiClient
    registry: Registry
    events: EventRecorder
    probe: Probe
    app: McpHttpApp

    def cancels(self) -> list[RequestCancelledEvent]:
        return self.events.of_type(RequestCancelledEvent)

    def hard_cancels(self) -> list[HardCancelEvent]:
        return self.events.of_type(HardCancelEvent)


#: The registry of every test here (``mcp_registry``), unless a test's own marker differs.
pytestmark = pytest.mark.mcp_registry(grace_period=GRACE)


@asynccontextmanager
async def serving(
    registry: Registry, server_options: dict[str, Any] | None = None, **app_options: Any
) -> AsyncIterator[Served]:
    """An app on the test's registry; on exit every request must have ended cleanly."""
    probe = Probe()
    server = build_server(probe, **(server_options or {}))
    events = EventRecorder.attach(registry)
    app = McpHttpApp(server, registry, **app_options)
    async with served(app) as client:
        yield Served(client, registry, events, probe, app)


async def post_modern(client: AsgiClient, message: dict[str, Any]) -> HttpExchange:
    """POST *message* with the modern headers that agree with it."""
    return await client.post(headers_of(message), message)


def start_modern(client: AsgiClient, message: dict[str, Any]) -> HttpExchange:
    return client.start("POST", headers_of(message), message)


def error_of(exchange: HttpExchange) -> dict[str, Any]:
    body = exchange.json()
    assert "result" not in body, body
    error: dict[str, Any] = body["error"]
    return error


async def final_of(exchange: HttpExchange) -> dict[str, Any]:
    """The response of a cancellable call: the last message of its SSE stream, which has
    an ``id`` (the only one that does), or its one JSON body (a call that finished before
    it suspended or sent anything: MCP lets the server answer either way)."""
    await exchange.done.wait()
    assert exchange.complete
    if not exchange.is_sse:
        body: dict[str, Any] = exchange.json()
        assert "id" in body, body
        return body
    messages = exchange.messages()
    assert messages and "id" in messages[-1], messages
    assert all("id" not in m for m in messages[:-1]), messages
    final: dict[str, Any] = messages[-1]
    return final


def progress_of(exchange: HttpExchange) -> list[Any]:
    return [
        m["params"]["progress"]
        for m in exchange.messages()
        if m.get("method") == "notifications/progress"
    ]


async def settle() -> None:
    """Let every task react, without the clock moving."""
    before = trio.current_time()
    await trio.testing.wait_all_tasks_blocked()
    assert trio.current_time() == before


# -- modern era: results ------------------------------------------------------------


async def test_modern_discover_shape(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await post_modern(s.client, modern_request(1, "server/discover"))
        assert exchange.status == 200
        body = exchange.json()
        assert body["id"] == 1
        result = body["result"]
        DiscoverResult.model_validate(result)
        assert result["resultType"] == "complete"
        assert result["supportedVersions"] == [MODERN]
        assert result["_meta"][SERVER_INFO] == {"name": "eras-test", "version": "1.2.3"}
        assert result["instructions"] == "A test server."
        assert "tools" in result["capabilities"]
        assert "mcp-session-id" not in exchange.headers
        assert len(s.app.sessions or ()) == 0


async def test_modern_tools_list_shape_and_descriptions(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await post_modern(s.client, modern_request("list", "tools/list"))
        assert exchange.status == 200
        result = exchange.json()["result"]
        ListToolsResult.model_validate(result)
        assert result["resultType"] == "complete"
        assert isinstance(result["ttlMs"], int) and result["ttlMs"] > 0
        assert result["cacheScope"] in ("public", "private")
        assert result["_meta"][SERVER_INFO]["name"] == "eras-test"
        tools = {tool["name"]: tool for tool in result["tools"]}
        assert tools["echo"]["description"] == "Echoes its text."
        # No docstring: no description (issue 36: a placeholder tells a model nothing);
        # the official SDK's schema accepts the tool without one.
        assert "description" not in tools["nodoc"]
        assert all(tool["description"].strip() for tool in tools.values() if "description" in tool)
        assert tools["echo"]["inputSchema"]["required"] == ["text"]


async def test_legacy_tools_list_has_no_modern_fields(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        exchange = await s.client.post(legacy_headers(session), request(2, "tools/list"))
        result = exchange.json()["result"]
        assert "resultType" not in result
        assert "ttlMs" not in result
        assert "_meta" not in result


async def test_modern_call_results_carry_result_type_and_server_info(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        # A non-cancellable tool answers with one JSON body.
        exchange = await post_modern(s.client, modern_call(1, "instant"))
        assert exchange.status == 200
        assert not exchange.is_sse
        result = exchange.json()["result"]
        CallToolResult.model_validate(result)
        assert result["resultType"] == "complete"
        assert result["structuredContent"] == {"answer": 42}
        assert result["_meta"][SERVER_INFO] == {"name": "eras-test", "version": "1.2.3"}
        # A cancellable one that finished at once answers the same way, with the same shape.
        exchange = await post_modern(s.client, modern_call(2, "echo", {"text": "hi"}))
        final = await final_of(exchange)
        assert final["id"] == 2
        CallToolResult.model_validate(final["result"])
        assert final["result"]["resultType"] == "complete"
        assert final["result"]["content"] == [{"type": "text", "text": "hi"}]
        assert final["result"]["_meta"][SERVER_INFO]["version"] == "1.2.3"


async def test_modern_ignores_and_never_mints_session_ids(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        message = modern_call(1, "echo", {"text": "x"})
        headers = {**headers_of(message), "mcp-session-id": "no-such-session"}
        exchange = await s.client.post(headers, message)
        assert exchange.status == 200  # not 404: the header is ignored
        assert "mcp-session-id" not in exchange.headers
        assert (await final_of(exchange))["result"]["content"][0]["text"] == "x"
        # A legacy session's id on a modern request gives it no session either.
        session = await initialize(s.client)
        message = modern_request(2, "tools/list")
        exchange = await s.client.post({**headers_of(message), "mcp-session-id": session}, message)
        assert exchange.status == 200
        assert "mcp-session-id" not in exchange.headers
        assert s.app.sessions is not None and len(s.app.sessions) == 1


# -- modern era: refusals -------------------------------------------------------


def _mismatches() -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    call = modern_call(7, "echo", {"text": "x"})
    listing = modern_request(7, "tools/list")
    good_call = headers_of(call)
    return [
        ("no MCP-Protocol-Version", modern_headers("tools/list", version=None), listing),
        ("version differs", modern_headers("tools/list", version="2025-06-18"), listing),
        ("no Mcp-Method", modern_headers(None), listing),
        ("wrong Mcp-Method", modern_headers("tools/call", "echo"), listing),
        ("no Mcp-Name", modern_headers("tools/call"), call),
        ("wrong Mcp-Name", {**good_call, "mcp-name": "other"}, call),
        ("wrong base64 Mcp-Name", {**good_call, "mcp-name": b64_header("other")}, call),
    ]


@pytest.mark.parametrize(("case", "headers", "message"), _mismatches(), ids=lambda v: str(v)[:20])
async def test_modern_header_mismatch(
    case: str,
    headers: dict[str, str],
    message: dict[str, Any],
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await s.client.post(headers, message)
        assert exchange.status == 400, case
        assert exchange.json()["id"] == 7
        assert error_of(exchange)["code"] == HEADER_MISMATCH
        assert s.registry.in_flight_count == 0
        assert s.events.events == []


async def test_modern_base64_mcp_name_is_decoded(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        message = modern_call(1, "echo", {"text": "y"})
        headers = {**headers_of(message), "mcp-name": b64_header("echo")}
        exchange = await s.client.post(headers, message)
        assert (await final_of(exchange))["result"]["content"][0]["text"] == "y"


@pytest.mark.parametrize(
    "meta",
    [
        {"io.modelcontextprotocol/protocolVersion": MODERN},
        {"io.modelcontextprotocol/clientCapabilities": {}},
        None,
    ],
)
async def test_modern_missing_required_meta_is_400_invalid_params(
    meta: dict[str, Any] | None, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        params: dict[str, Any] = {} if meta is None else {"_meta": meta}
        exchange = await s.client.post(
            modern_headers("tools/list"), request(3, "tools/list", params)
        )
        assert exchange.status == 400
        assert error_of(exchange)["code"] == INVALID_PARAMS
        assert exchange.json()["id"] == 3


async def test_modern_unsupported_version(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        message = modern_request(4, "tools/list", version="2099-01-01")
        exchange = await s.client.post(modern_headers("tools/list", version="2099-01-01"), message)
        assert exchange.status == 400
        error = error_of(exchange)
        assert error["code"] == UNSUPPORTED_PROTOCOL_VERSION
        assert error["data"] == {"supported": [MODERN], "requested": "2099-01-01"}


async def test_modern_missing_client_capability(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await post_modern(s.client, modern_call(5, "samples"))
        assert exchange.status == 400
        error = error_of(exchange)
        assert error["code"] == MISSING_CLIENT_CAPABILITY
        assert error["data"] == {"requiredCapabilities": {"sampling": {}}}
        assert s.registry.in_flight_count == 0
        # Declared on this request: served (nothing is remembered between requests).
        message = modern_call(6, "samples", capabilities={"sampling": {}})
        exchange = await post_modern(s.client, message)
        assert (await final_of(exchange))["result"]["content"][0]["text"] == "sampled"
        exchange = await post_modern(s.client, modern_call(7, "samples"))
        assert error_of(exchange)["code"] == MISSING_CLIENT_CAPABILITY


async def test_legacy_missing_client_capability_uses_initialize(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        without = await initialize(s.client)
        exchange = await s.client.post(legacy_headers(without), legacy_call(1, "samples"))
        assert exchange.status == 200  # legacy answers protocol errors inside a 200
        assert error_of(exchange)["code"] == MISSING_CLIENT_CAPABILITY
        with_sampling = await initialize(s.client, capabilities={"sampling": {}})
        exchange = await s.client.post(legacy_headers(with_sampling), legacy_call(1, "samples"))
        assert (await final_of(exchange))["result"]["content"][0]["text"] == "sampled"


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("no/such/method", {}),
        ("initialize", {"protocolVersion": LEGACY, "capabilities": {}}),
        ("ping", {}),
        ("logging/setLevel", {"level": "debug"}),
    ],
)
async def test_modern_unknown_method_is_404(
    method: str,
    params: dict[str, Any],
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await post_modern(s.client, modern_request(8, method, params))
        assert exchange.status == 404
        assert exchange.json()["id"] == 8
        assert error_of(exchange)["code"] == METHOD_NOT_FOUND
        assert len(s.app.sessions or ()) == 0  # a modern "initialize" opened nothing


async def test_legacy_methods_are_served_in_the_legacy_era(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        exchange = await s.client.post(legacy_headers(session), request(1, "ping"))
        assert exchange.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        exchange = await s.client.post(legacy_headers(session), request(2, "no/such"))
        assert exchange.status == 200
        assert error_of(exchange)["code"] == METHOD_NOT_FOUND


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
async def test_modern_get_and_delete_are_405(
    method: str, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await s.client.request(method, modern_headers(None))
        assert exchange.status == 405
        assert exchange.headers["allow"] == "POST"


async def test_get_without_sse_in_its_accept_is_406_in_the_legacy_era(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    # A legacy GET opens the session's SSE stream (see test_get_stream.py).
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        headers = {**legacy_headers(session), "accept": "application/json"}
        exchange = await s.client.request("GET", headers)
        assert exchange.status == 406


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_origin_is_checked(
    era: str, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        if era == "modern":
            message = modern_request(1, "tools/list")
            headers = headers_of(message)
        else:
            message = initialize_message()
            headers = legacy_headers(version=None)
        exchange = await s.client.post({**headers, "origin": "https://evil.example"}, message)
        assert exchange.status == 403
        assert len(s.app.sessions or ()) == 0
        exchange = await s.client.post({**headers, "origin": "http://localhost:6274"}, message)
        assert exchange.status == 200
    async with serving(mcp_registry, allowed_origins=["https://app.example"]) as s:
        exchange = await s.client.post({**headers, "origin": "http://localhost:6274"}, message)
        assert exchange.status == 403
        exchange = await s.client.post({**headers, "origin": "https://app.example"}, message)
        assert exchange.status == 200


async def test_modern_tool_argument_errors_are_tool_results(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        for request_id, arguments in enumerate([{"text": 5}, {}, {"text": "x", "extra": 1}]):
            exchange = await post_modern(s.client, modern_call(request_id, "echo", arguments))
            assert exchange.status == 200
            result = (await final_of(exchange))["result"]
            CallToolResult.model_validate(result)
            assert result["isError"] is True
            assert result["resultType"] == "complete"
            assert "echo" in result["content"][0]["text"]


async def test_legacy_tool_argument_errors_are_tool_results(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        exchange = await s.client.post(
            legacy_headers(session), legacy_call(1, "polite", {"steps": "many"})
        )
        result = (await final_of(exchange))["result"]
        assert result["isError"] is True
        assert "'steps': Input should be a valid integer" in result["content"][0]["text"]
        assert 1 not in s.probe.started_cancelled  # the tool never ran


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_unknown_tool_is_invalid_params(
    era: str, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        if era == "modern":
            message = modern_call(9, "nope")
            exchange = await post_modern(s.client, message)
            assert exchange.status == 400
        else:
            session = await initialize(s.client)
            exchange = await s.client.post(legacy_headers(session), legacy_call(9, "nope"))
            assert exchange.status == 200
        error = error_of(exchange)
        assert error["code"] == INVALID_PARAMS
        assert exchange.json()["id"] == 9


# -- modern era: cancellation is the stream closing ------------------------------------


async def test_modern_stream_close_cancels_then_hard_cancels_and_writes_nothing(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, limits=ConnectionLimits(disconnect_grace_period=2.0)) as s:
        exchange = start_modern(s.client, modern_call(5, "stubborn", progress_token="p"))
        first = await exchange.next_message()
        assert first["method"] == "notifications/progress"
        await trio.sleep(2.5)
        assert progress_of(exchange) == [1, 2, 3]
        gone_at = trio.current_time()
        exchange.disconnect()
        await settle()
        # The flag is set at once, by token, with kind "disconnect".
        (tracked,) = s.registry.requests()
        assert tracked.cancelled
        assert tracked.cancellation is not None and tracked.cancellation.kind == "disconnect"
        (event,) = s.cancels()
        assert (event.request_id, event.kind) == (5, "disconnect")
        await exchange.done.wait()
        # The hard cancel comes disconnect_grace_period later, not the registry's 5 s.
        assert s.probe.at("stubborn 5 saw the flag") == gone_at + 0.5
        assert s.probe.at("stubborn 5 hard-cancelled") == gone_at + 2.0
        (hard,) = s.hard_cancels()
        assert (hard.request_id, hard.kind) == (5, "disconnect")
        # Nothing at all was written for the request once the stream closed:
        # not the progress the tool kept reporting, not a response, not an end.
        assert exchange.after_disconnect == []
        assert not exchange.complete


async def test_modern_stream_close_polite_tool_stops_at_its_next_checkpoint(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        exchange = start_modern(s.client, modern_call(1, "polite", progress_token=1))
        await exchange.next_message()
        await trio.sleep(0.5)
        gone_at = trio.current_time()
        exchange.disconnect()
        await exchange.done.wait()
        assert s.probe.at("polite 1 stopped (disconnect)") == gone_at + 0.5
        assert s.hard_cancels() == []
        assert exchange.after_disconnect == []


async def test_modern_stream_close_cancels_only_that_request(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        # Same id, same client address: the disconnect is keyed to the stream.
        one = start_modern(s.client, modern_call(1, "polite", {"steps": 5}))
        two = start_modern(s.client, modern_call(1, "polite", {"steps": 5}))
        await trio.sleep(1.5)
        one.disconnect()
        final = await final_of(two)
        assert final["result"]["content"][0]["text"] == "counted to 5"
        assert s.probe.texts().count("polite 1 finished") == 1
        assert s.probe.texts().count("polite 1 stopped (disconnect)") == 1
        assert [event.kind for event in s.cancels()] == ["disconnect"]


@pytest.mark.parametrize("with_meta", [True, False])
async def test_modern_cancelled_notification_is_202_and_ignored(
    with_meta: bool, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        exchange = start_modern(s.client, modern_call(3, "polite", {"steps": 5}))
        await trio.sleep(1.5)
        body = cancelled(3, "please stop")
        if with_meta:
            body["params"]["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        notified = await s.client.post(modern_headers("notifications/cancelled"), body)
        assert notified.status == 202
        assert notified.content == b""
        assert "mcp-session-id" not in notified.headers
        await settle()
        (tracked,) = s.registry.requests()
        assert not tracked.cancelled
        assert s.registry.row_count == 0
        final = await final_of(exchange)
        assert final["result"]["content"][0]["text"] == "counted to 5"
        assert s.cancels() == []
        # Modern requests live in a namespace no notification can name.
        assert s.registry.rows() == []


async def test_modern_json_response_disconnect_writes_nothing(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(
        mcp_registry, json_response=True, limits=ConnectionLimits(disconnect_grace_period=1.0)
    ) as s:
        exchange = start_modern(s.client, modern_call(1, "stubborn"))
        await trio.sleep(2.5)
        assert exchange.status is None  # a JSON answer has no early head
        exchange.disconnect()
        await exchange.done.wait()
        assert [event.kind for event in s.hard_cancels()] == ["disconnect"]
        assert exchange.after_disconnect == []


# -- legacy era ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "answered"),
    [
        (LEGACY, LEGACY),
        ("2025-06-18", "2025-06-18"),
        ("2024-11-05", "2024-11-05"),
        ("1999-01-01", LEGACY),
        (MODERN, LEGACY),
    ],
)
async def test_legacy_initialize_negotiates_and_creates_a_session(
    requested: str, answered: str, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await s.client.post(legacy_headers(version=None), initialize_message(requested))
        assert exchange.status == 200
        result = exchange.json()["result"]
        assert result["protocolVersion"] == answered
        assert result["serverInfo"] == {"name": "eras-test", "version": "1.2.3"}
        assert "tools" in result["capabilities"]
        session = exchange.headers["mcp-session-id"]
        assert len(session) >= 16
        assert s.app.sessions is not None and len(s.app.sessions) == 1
        listing = await s.client.post(legacy_headers(session), request(1, "tools/list"))
        assert listing.status == 200
        assert listing.headers["mcp-session-id"] == session


async def test_legacy_session_required_and_checked(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await s.client.post(legacy_headers(), request(1, "tools/list"))
        assert exchange.status == 400
        exchange = await s.client.post(legacy_headers("not-a-session"), request(1, "tools/list"))
        assert exchange.status == 404


async def test_legacy_cancelled_notification_cancels_and_the_stream_ends_without_response(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        exchange = s.client.start(
            "POST", legacy_headers(session), legacy_call(3, "polite", token="t")
        )
        await exchange.next_message()
        await trio.sleep(2.5)
        sent_at = trio.current_time()
        notified = await s.client.post(legacy_headers(session), cancelled(3, "user stop"))
        assert notified.status == 202
        await exchange.done.wait()
        assert exchange.complete  # the stream ended...
        assert all("id" not in m for m in exchange.messages())  # ...with no response
        assert all(item.at <= sent_at for item in exchange.items)
        assert s.probe.texts() == ["polite 3 stopped (client)"]
        (event,) = s.cancels()
        assert (event.request_id, event.kind, event.reason) == (3, "client", "user stop")
        assert exchange.after_disconnect == []


async def test_legacy_no_progress_after_cancel(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        exchange = s.client.start(
            "POST", legacy_headers(session), legacy_call(4, "stubborn", token="t")
        )
        await trio.sleep(3.5)
        assert progress_of(exchange) == [1, 2, 3, 4]
        sent_at = trio.current_time()
        await s.client.post(legacy_headers(session), cancelled(4))
        await exchange.done.wait()
        # The tool kept reporting progress for the whole grace period; none was sent.
        assert s.probe.at("stubborn 4 hard-cancelled") == sent_at + GRACE
        assert progress_of(exchange) == [1, 2, 3, 4]
        assert all(item.at <= sent_at for item in exchange.items)
        assert exchange.complete
        assert all("id" not in m for m in exchange.messages())
        assert [(e.request_id, e.kind) for e in s.hard_cancels()] == [(4, "client")]


async def test_legacy_cancel_from_another_session_does_nothing(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        mine = await initialize(s.client)
        theirs = await initialize(s.client)
        exchange = s.client.start(
            "POST", legacy_headers(mine), legacy_call(1, "polite", {"steps": 3})
        )
        await trio.sleep(0.5)
        notified = await s.client.post(legacy_headers(theirs), cancelled(1))
        assert notified.status == 202
        final = await final_of(exchange)
        assert final["result"]["content"][0]["text"] == "counted to 3"
        assert s.cancels() == []
        # Kept as an early cancel for the other session's request 1, which
        # never starts: the janitor drops it once early_cancel_ttl is over.
        assert s.registry.row_count == 1
        await trio.sleep(s.registry.config.cleanup_interval or 0)
        assert s.registry.row_count == 0


async def test_legacy_json_response_cancel_answers_32800(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, json_response=True) as s:
        session = await initialize(s.client)
        exchange = s.client.start("POST", legacy_headers(session), legacy_call(5, "polite"))
        await trio.sleep(1.5)
        assert exchange.status is None
        await s.client.post(legacy_headers(session), cancelled(5, "enough"))
        await exchange.done.wait()
        assert exchange.status == 200
        body = exchange.json()
        assert body["id"] == 5
        assert body["error"]["code"] == REQUEST_CANCELLED == -32800


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_max_request_time_answers_32800_with_reason(
    era: str, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry, limits=ConnectionLimits(max_request_time=10.0)) as s:
        if era == "legacy":
            session = await initialize(s.client)
            exchange = s.client.start("POST", legacy_headers(session), legacy_call(6, "polite"))
        else:
            exchange = start_modern(s.client, modern_call(6, "polite"))
        started_at = trio.current_time()
        final = await final_of(exchange)
        assert final["id"] == 6
        assert final["error"]["code"] == -32800
        assert final["error"]["data"] == {"reason": "request time limit reached"}
        assert s.probe.at("polite 6 stopped (server)") == started_at + 10.0
        (event,) = s.cancels()
        assert event.kind == "server"


async def test_max_request_time_hard_cancel_still_answers(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, limits=ConnectionLimits(max_request_time=10.0)) as s:
        session = await initialize(s.client)
        exchange = s.client.start("POST", legacy_headers(session), legacy_call(7, "stubborn"))
        started_at = trio.current_time()
        final = await final_of(exchange)
        assert final["error"]["code"] == -32800
        assert final["error"]["data"]["reason"] == "request time limit reached"
        assert s.probe.at("stubborn 7 hard-cancelled") == started_at + 10.0 + GRACE
        assert [e.kind for e in s.hard_cancels()] == ["server"]


async def test_delete_session_cancels_its_calls_with_32800(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        other = await initialize(s.client)
        exchange = s.client.start("POST", legacy_headers(session), legacy_call(8, "polite"))
        survivor = s.client.start(
            "POST", legacy_headers(other), legacy_call(8, "polite", {"steps": 4})
        )
        await trio.sleep(1.5)
        deleted = await s.client.request("DELETE", legacy_headers(session))
        assert deleted.status == 204
        final = await final_of(exchange)
        assert final["error"]["code"] == -32800
        assert final["error"]["data"] == {"reason": "session terminated"}
        assert [(e.request_id, e.kind) for e in s.cancels()] == [(8, "server")]
        again = await s.client.post(legacy_headers(session), request(9, "tools/list"))
        assert again.status == 404
        assert (await final_of(survivor))["result"]["content"][0]["text"] == "counted to 4"


async def test_legacy_disconnect_cancels_by_default(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        exchange = s.client.start("POST", legacy_headers(session), legacy_call(1, "polite"))
        await trio.sleep(1.5)
        exchange.disconnect()
        await exchange.done.wait()
        assert s.probe.texts() == ["polite 1 stopped (disconnect)"]
        assert [e.kind for e in s.cancels()] == ["disconnect"]
        assert exchange.after_disconnect == []


async def test_legacy_disconnect_does_not_cancel_when_disabled(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, legacy_disconnect_cancels=False) as s:
        session = await initialize(s.client)
        exchange = s.client.start(
            "POST", legacy_headers(session), legacy_call(1, "polite", {"steps": 100}, token=1)
        )
        await trio.sleep(1.5)
        exchange.disconnect()
        await trio.sleep(20)
        # Still running, uncancelled, long after its stream closed.
        (tracked,) = s.registry.requests()
        assert not tracked.cancelled
        assert s.cancels() == []
        # ...and still cancellable by notification.
        notified = await s.client.post(legacy_headers(session), cancelled(1, "now"))
        assert notified.status == 202
        await exchange.done.wait()
        assert s.probe.texts() == ["polite 1 stopped (client)"]
        assert [e.kind for e in s.cancels()] == ["client"]
        assert exchange.after_disconnect == []  # progress had nowhere to go


async def test_modern_disconnect_cancels_even_when_legacy_disconnects_do_not(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, legacy_disconnect_cancels=False) as s:
        exchange = start_modern(s.client, modern_call(1, "polite"))
        await trio.sleep(1.5)
        exchange.disconnect()
        await exchange.done.wait()
        assert [e.kind for e in s.cancels()] == ["disconnect"]


# -- early cancels (legacy) ----------------------------------------------------------


async def test_early_cancel_is_applied_when_the_request_starts(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        notified = await s.client.post(legacy_headers(session), cancelled(9, "changed my mind"))
        assert notified.status == 202
        assert s.registry.row_count == 1  # kept (CancelOutcome.PENDING)
        await trio.sleep(1)
        exchange = await s.client.post(
            legacy_headers(session), legacy_call(9, "polite", {"steps": 5}, token=9)
        )
        assert s.probe.started_cancelled[9] is True
        assert s.probe.texts() == ["polite 9 stopped (client)"]
        assert exchange.complete
        assert exchange.messages() == []  # no progress, no response
        (event,) = s.cancels()
        assert (event.request_id, event.reason) == (9, "changed my mind")
        assert s.registry.row_count == 0  # used up by the request it cancelled


async def test_early_cancel_expires(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        await s.client.post(legacy_headers(session), cancelled(9))
        await trio.sleep(5.5)  # past the default early_cancel_ttl
        exchange = await s.client.post(
            legacy_headers(session), legacy_call(9, "polite", {"steps": 2})
        )
        assert s.probe.started_cancelled[9] is False
        assert (await final_of(exchange))["result"]["content"][0]["text"] == "counted to 2"
        assert s.registry.row_count == 0


@pytest.mark.mcp_registry(grace_period=GRACE, early_cancel_ttl=None)
async def test_early_cancel_disabled_is_lost(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        await s.client.post(legacy_headers(session), cancelled(9))
        assert s.registry.row_count == 0
        exchange = await s.client.post(
            legacy_headers(session), legacy_call(9, "polite", {"steps": 2})
        )
        assert s.probe.started_cancelled[9] is False
        assert (await final_of(exchange))["result"]["content"][0]["text"] == "counted to 2"


async def test_early_cancel_not_kept_without_a_session(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    # sessions=False: the namespace is the client's address, shared by
    # strangers behind one NAT, so an early cancel is not kept there.
    async with serving(mcp_registry, sessions=False) as s:
        notified = await s.client.post(legacy_headers(), cancelled(9))
        assert notified.status == 202
        assert s.registry.row_count == 0
        exchange = await s.client.post(legacy_headers(), legacy_call(9, "polite", {"steps": 2}))
        assert s.probe.started_cancelled[9] is False
        assert (await final_of(exchange))["result"]["content"][0]["text"] == "counted to 2"


# -- keep-alive ------------------------------------------------------------------------


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_keepalive_comments_for_a_silent_tool_then_none_after_the_response(
    era: str, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        if era == "modern":
            exchange = start_modern(s.client, modern_call(1, "silent", {"seconds": 40}))
        else:
            session = await initialize(s.client)
            exchange = s.client.start(
                "POST", legacy_headers(session), legacy_call(1, "silent", {"seconds": 40})
            )
        t0 = trio.current_time()
        await exchange.wait_started()
        # The SSE head comes at once, before the tool says anything.
        assert exchange.started_at == t0
        assert exchange.status == 200 and exchange.is_sse
        assert exchange.headers["x-accel-buffering"] == "no"
        final = await final_of(exchange)
        assert final["result"]["content"][0]["text"] == "quiet"
        comments = exchange.comments()
        assert [c.at - t0 for c in comments] == [15.0, 30.0]
        assert all(c.data == "keep-alive" for c in comments)
        assert exchange.completed_at == t0 + 40
        assert exchange.items[-1].kind == "message"  # nothing after the response
        await trio.sleep(60)
        assert len(exchange.items) == 3


async def test_keepalive_interval_is_configurable_and_can_be_off(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, limits=ConnectionLimits(keepalive_interval=4.0)) as s:
        exchange = start_modern(s.client, modern_call(1, "silent", {"seconds": 10}))
        t0 = trio.current_time()
        await final_of(exchange)
        assert [c.at - t0 for c in exchange.comments()] == [4.0, 8.0]
    async with serving(mcp_registry, limits=ConnectionLimits(keepalive_interval=None)) as s:
        exchange = start_modern(s.client, modern_call(1, "silent", {"seconds": 40}))
        await final_of(exchange)
        assert exchange.comments() == []


async def test_keepalive_stops_when_the_stream_closes(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(
        mcp_registry, limits=ConnectionLimits(keepalive_interval=1.0, disconnect_grace_period=30.0)
    ) as s:
        exchange = start_modern(s.client, modern_call(1, "silent", {"seconds": 20}))
        await trio.sleep(2.5)
        assert len(exchange.comments()) == 2
        exchange.disconnect()
        await exchange.done.wait()
        assert exchange.after_disconnect == []


async def test_non_cancellable_tool_answers_json_without_keepalive(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await post_modern(s.client, modern_call(1, "instant"))
        assert exchange.headers["content-type"] == "application/json"
        assert exchange.comments() == []


# -- logging --------------------------------------------------------------------------


def logged(exchange: HttpExchange) -> list[str]:
    return [
        m["params"]["level"]
        for m in exchange.messages()
        if m.get("method") == "notifications/message"
    ]


async def test_modern_log_level_absent_sends_no_log_messages(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await post_modern(s.client, modern_call(1, "chatty"))
        final = await final_of(exchange)
        assert final["result"]["content"][0]["text"] == "logged"
        assert logged(exchange) == []


async def test_modern_log_level_filters_per_request(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await post_modern(s.client, modern_call(1, "chatty", log_level="warning"))
        await final_of(exchange)
        assert logged(exchange) == ["warning", "error"]
        exchange = await post_modern(s.client, modern_call(2, "chatty", log_level="debug"))
        await final_of(exchange)
        assert logged(exchange) == ["debug", "info", "warning", "error"]
        # Nothing is remembered: the next request without a level gets none.
        exchange = await post_modern(s.client, modern_call(3, "chatty"))
        await final_of(exchange)
        assert logged(exchange) == []


async def test_modern_invalid_log_level_is_400(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await post_modern(s.client, modern_call(1, "chatty", log_level="loud"))
        assert exchange.status == 400
        assert error_of(exchange)["code"] == INVALID_PARAMS


async def test_legacy_log_level_follows_set_level(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        exchange = await s.client.post(legacy_headers(session), legacy_call(1, "chatty"))
        await final_of(exchange)
        assert logged(exchange) == ["debug", "info", "warning", "error"]
        set_level = await s.client.post(
            legacy_headers(session), request(2, "logging/setLevel", {"level": "error"})
        )
        assert set_level.json() == {"jsonrpc": "2.0", "id": 2, "result": {}}
        exchange = await s.client.post(legacy_headers(session), legacy_call(3, "chatty"))
        await final_of(exchange)
        assert logged(exchange) == ["error"]
        # Per session: another session still gets everything.
        other = await initialize(s.client)
        exchange = await s.client.post(legacy_headers(other), legacy_call(4, "chatty"))
        await final_of(exchange)
        assert logged(exchange) == ["debug", "info", "warning", "error"]
        bad = await s.client.post(
            legacy_headers(session), request(5, "logging/setLevel", {"level": "loud"})
        )
        assert bad.status == 200
        assert error_of(bad)["code"] == INVALID_PARAMS


# -- odds and ends ------------------------------------------------------------------------


async def test_unknown_path_is_404(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        message = modern_request(1, "tools/list")
        exchange = await s.client.request("POST", headers_of(message), message, path="/other")
        assert exchange.status == 404


async def test_a_chunked_body_is_read_whole(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        message = modern_call(1, "echo", {"text": "z" * 100})
        exchange = s.client.start("POST", headers_of(message), message, chunk_size=7)
        final = await final_of(exchange)
        assert final["result"]["content"][0]["text"] == "z" * 100


async def test_client_gone_while_the_body_is_read(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        message = modern_call(1, "polite")
        exchange = s.client.start("POST", headers_of(message), message, chunk_size=5)
        exchange.disconnect()  # before the app read a byte
        await exchange.done.wait()
        assert exchange.status is None
        assert exchange.after_disconnect == []  # it gave up without answering
        assert s.probe.started_cancelled == {}


async def test_legacy_initialize_ignores_a_session_header_and_starts_a_new_one(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        first = await initialize(s.client)
        exchange = await s.client.post(legacy_headers(first, version=None), initialize_message())
        assert exchange.headers["mcp-session-id"] != first


async def test_notification_without_session_in_legacy_is_400(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        exchange = await s.client.post(legacy_headers(), notification("notifications/cancelled"))
        assert exchange.status == 400


async def test_max_request_time_holds_after_a_legacy_disconnect_that_does_not_cancel(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    # The client went away without cancelling: the call goes on, but no
    # longer than the server's time limit allows.
    async with serving(
        mcp_registry,
        legacy_disconnect_cancels=False,
        limits=ConnectionLimits(max_request_time=10.0),
    ) as s:
        session = await initialize(s.client)
        exchange = s.client.start("POST", legacy_headers(session), legacy_call(1, "polite"))
        started_at = trio.current_time()
        await trio.sleep(1.5)
        exchange.disconnect()
        await exchange.done.wait()
        assert s.probe.at("polite 1 stopped (server)") == started_at + 10.0
        assert [(e.kind, e.reason) for e in s.cancels()] == [
            ("server", "request time limit reached")
        ]
        assert exchange.after_disconnect == []


async def test_early_cancel_kept_in_a_principal_namespace(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    auth = bearer_auth({"secret-token": "alice"})
    async with serving(mcp_registry, sessions=False, auth=auth) as s:
        alice = legacy_headers(authorization="Bearer secret-token")
        assert (await s.client.post(legacy_headers(), cancelled(9))).status == 401
        notified = await s.client.post(alice, cancelled(9, "early"))
        assert notified.status == 202
        assert [row.namespace for row in s.registry.rows()] == ["principal:alice"]
        exchange = await s.client.post(alice, legacy_call(9, "polite", {"steps": 2}))
        assert s.probe.started_cancelled[9] is True
        assert exchange.complete and exchange.messages() == []
        assert [(e.namespace, e.kind) for e in s.cancels()] == [("principal:alice", "client")]


async def test_a_legacy_notification_cannot_cancel_a_modern_request(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, sessions=False) as s:
        exchange = start_modern(s.client, modern_call(1, "polite", {"steps": 5}))
        await trio.sleep(1.5)
        notified = await s.client.post(legacy_headers(version=None), cancelled(1, "stranger"))
        assert notified.status == 202
        final = await final_of(exchange)
        assert final["result"]["content"][0]["text"] == "counted to 5"
        assert s.cancels() == []
