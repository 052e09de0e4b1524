"""End to end with the official MCP Python SDK client against a real hypercorn server.

Each test serves ``McpHttpApp`` on 127.0.0.1 (a random port) inside
``open_registry`` and drives it with ``mcp.Client``, in both eras: the modern
2026-07-28 wire (where the SDK cancels by closing the request's stream) and
the legacy one (``initialize`` + ``Mcp-Session-Id``, where it POSTs
``notifications/cancelled``).  Real clock, small grace periods, and
``trio.fail_after`` everywhere, so a hang fails fast.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import httpx2
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from trio_mcp_cancel import (
    Event,
    HardCancelEvent,
    Registry,
    RequestCancelled,
    RequestCancelledEvent,
    checkpoint_cancelled,
)
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.lowlevel.wire import LEGACY_TOO_MANY_REQUESTS, TOO_MANY_REQUESTS
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer, ServerLimits
from trio_mcp_cancel.testing import assert_no_leaks

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
GRACE = 0.3
TIMEOUT = 10

#: (Client mode, the version it must end on, the kind of cancel its cancel makes).
ERAS = [
    pytest.param(MODERN, MODERN, "disconnect", id="modern"),
    pytest.param("legacy", LEGACY, "client", id="legacy"),
]


@attrs.define
class Fixture:
    """One running server: its URL, registry, events and what its tools saw."""

    url: str
    registry: Registry
    events: list[Event] = attrs.field(factory=list)
    seen: list[str] = attrs.field(factory=list)
    started: trio.Event = attrs.field(factory=trio.Event)
    app_errors: list[BaseException] = attrs.field(factory=list)

    def of_type(self, kind: type[Any]) -> list[Any]:
        return [event for event in self.events if isinstance(event, kind)]

    async def wait_for(self, entry: str) -> None:
        while entry not in self.seen:
            await trio.sleep(0.01)

    async def settle(self) -> None:
        """Wait until no request is in flight, then insist nothing leaked."""
        await self.registry.wait_idle()
        assert_no_leaks(self.registry)
        assert not self.app_errors, self.app_errors


def make_server(fx: Fixture, **options: Any) -> McpServer:
    server = McpServer("sdk-test", **options)

    @server.tool()
    async def count(ctx: Context, n: int = 10, delay: float = 0.02) -> str:
        """Counts politely: polls the flag every step and reports progress."""
        fx.started.set()
        try:
            for i in range(1, n + 1):
                await checkpoint_cancelled()
                await trio.sleep(delay)
                await ctx.report_progress(i, total=n, message=f"step {i}")
        except RequestCancelled:
            fx.seen.append("count: RequestCancelled")
            raise
        fx.seen.append("count: finished")
        return f"counted to {n}"

    @server.tool()
    async def stubborn(ctx: Context, seconds: float = 30.0) -> str:
        """Ignores the flag; only the hard cancel stops it."""
        fx.started.set()
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            fx.seen.append("stubborn: trio.Cancelled")
            raise
        fx.seen.append("stubborn: finished")
        return "finished anyway"

    @server.tool()
    async def silent(ctx: Context, seconds: float = 3.0) -> str:
        """Sends nothing at all for *seconds*, then answers."""
        fx.started.set()
        await trio.sleep(seconds)
        fx.seen.append("silent: finished")
        return f"slept {seconds}"

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    return server


#: The registry of every test here (``mcp_registry``).
pytestmark = pytest.mark.mcp_registry(grace_period=GRACE)


@asynccontextmanager
async def running(
    registry: Registry, server_options: dict[str, Any] | None = None, **options: Any
) -> AsyncIterator[Fixture]:
    """Serve ``McpHttpApp(server, registry, **options)`` on 127.0.0.1:0."""
    async with trio.open_nursery() as nursery:
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.errorlog = None
        config.accesslog = None
        config.graceful_timeout = 0.5
        fx = Fixture("", registry)
        registry.events.subscribe(fx.events.append)
        mcp_app = McpHttpApp(make_server(fx, **(server_options or {})), registry, **options)

        async def app(scope: Any, receive: Any, send: Any) -> None:
            # hypercorn (errorlog=None) would swallow what the app raises.
            try:
                await mcp_app(scope, receive, send)
            except Exception as exc:
                fx.app_errors.append(exc)
                raise

        binds = await nursery.start(partial(serve, app, config))
        fx.url = f"{binds[0]}/mcp"
        try:
            yield fx
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def client(
    url: str, mode: str, *, read_timeout: float | None = None
) -> AsyncIterator[Client]:
    """An SDK client in *mode*; with *read_timeout*, on an HTTP client with that read timeout."""
    if read_timeout is None:
        async with Client(url, mode=mode) as c:
            yield c
        return
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=read_timeout))
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as c:
        yield c


def text_of(result: Any) -> str:
    assert not result.is_error, result
    return str(result.content[0].text)


Progress = list[tuple[float, float | None, str | None]]


def recorder(into: Progress) -> Any:
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        into.append((progress, total, message))

    return on_progress


@pytest.fixture(autouse=True)
def no_server_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fail a test in which the server logged an error (a tool or dispatch bug)."""
    yield
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("trio_mcp_cancel") and r.levelno >= logging.ERROR
    ]
    assert not errors, errors


# -- 1. connecting and calling -------------------------------------------------


async def test_auto_mode_negotiates_modern_and_calls_tools(mcp_registry: Registry) -> None:
    with trio.fail_after(TIMEOUT):
        async with running(mcp_registry) as fx, Client(fx.url) as c:
            assert c.protocol_version == MODERN
            assert c.session.discover_result is not None
            assert c.session.initialize_result is None
            listed = await c.list_tools()
            assert {tool.name for tool in listed.tools} == {"count", "stubborn", "silent", "echo"}
            assert text_of(await c.call_tool("echo", {"text": "hi"})) == "hi"
            assert text_of(await c.call_tool("count", {"n": 2})) == "counted to 2"
            await fx.settle()
        assert not fx.of_type(RequestCancelledEvent)


@pytest.mark.parametrize("mode", [MODERN, "legacy"])
async def test_pinned_modes_call_tools(mode: str, mcp_registry: Registry) -> None:
    with trio.fail_after(TIMEOUT):
        async with running(mcp_registry) as fx, client(fx.url, mode) as c:
            assert c.protocol_version == (MODERN if mode == MODERN else LEGACY)
            if mode == "legacy":
                assert c.session.initialize_result is not None
                assert c.server_info is not None and c.server_info.name == "sdk-test"
            listed = await c.list_tools()
            assert "count" in {tool.name for tool in listed.tools}
            assert text_of(await c.call_tool("echo", {"text": "héllo"})) == "héllo"
            assert text_of(await c.call_tool("count", {"n": 2})) == "counted to 2"
            await fx.settle()
        assert not fx.of_type(RequestCancelledEvent)


# -- 2. progress -----------------------------------------------------------------


@pytest.mark.parametrize(("mode", "version", "kind"), ERAS)
async def test_progress_reaches_the_callback(
    mode: str, version: str, kind: str, mcp_registry: Registry
) -> None:
    progress: Progress = []
    with trio.fail_after(TIMEOUT):
        async with running(mcp_registry) as fx, client(fx.url, mode) as c:
            assert c.protocol_version == version
            result = await c.call_tool("count", {"n": 3}, progress_callback=recorder(progress))
            assert text_of(result) == "counted to 3"
            # Progress callbacks run as tasks of their own; let them finish.
            while len(progress) < 3:
                await trio.sleep(0.01)
            await fx.settle()
    assert progress == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]


# -- 3. cancelling from the caller's scope ------------------------------------------


@pytest.mark.parametrize(("mode", "version", "kind"), ERAS)
async def test_cancelling_the_callers_scope_stops_the_tool(
    mode: str, version: str, kind: str, mcp_registry: Registry
) -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            running(mcp_registry) as fx,
            client(fx.url, mode) as c,
            trio.open_nursery() as nursery,
        ):
            assert c.protocol_version == version
            scope = trio.CancelScope()

            async def caller() -> None:
                with scope:
                    await c.call_tool("count", {"n": 1000, "delay": 0.01})
                    pytest.fail("call_tool returned although it was cancelled")

            nursery.start_soon(caller)
            await fx.started.wait()
            scope.cancel()
            await fx.wait_for("count: RequestCancelled")
            await fx.settle()
            assert scope.cancelled_caught
    cancels = fx.of_type(RequestCancelledEvent)
    assert [event.kind for event in cancels] == [kind]
    assert not fx.of_type(HardCancelEvent)  # it polled the flag and stopped in time
    assert "count: finished" not in fx.seen


# -- 4. hard cancel after the grace period ---------------------------------------------


@pytest.mark.parametrize(("mode", "version", "kind"), ERAS)
async def test_a_tool_ignoring_the_flag_is_hard_cancelled(
    mode: str, version: str, kind: str, mcp_registry: Registry
) -> None:
    with trio.fail_after(TIMEOUT):
        async with running(mcp_registry) as fx, client(fx.url, mode) as c:
            with trio.move_on_after(10) as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(c.call_tool, "stubborn", {"seconds": 30})
                    await fx.started.wait()
                    cancelled_at = trio.current_time()
                    scope.cancel()
            await fx.wait_for("stubborn: trio.Cancelled")
            hard_cancelled_after = trio.current_time() - cancelled_at
            await fx.settle()
    assert [event.kind for event in fx.of_type(RequestCancelledEvent)] == [kind]
    assert [event.kind for event in fx.of_type(HardCancelEvent)] == [kind]
    assert "stubborn: finished" not in fx.seen
    # Not before the grace period (a little slack for the clocks' resolution),
    # and not long after it.
    assert GRACE - 0.05 <= hard_cancelled_after < GRACE + 2


# -- 5. keep-alives defeat a client's read timeout -----------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "version", "kind"), ERAS)
async def test_keepalives_keep_a_silent_call_alive(
    mode: str, version: str, kind: str, mcp_registry: Registry
) -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            running(mcp_registry, limits=ConnectionLimits(keepalive_interval=0.3)) as fx,
            client(fx.url, mode, read_timeout=1.0) as c,
        ):
            assert c.protocol_version == version
            result = await c.call_tool("silent", {"seconds": 3})
            assert text_of(result) == "slept 3.0"  # a float parameter gets a float
            await fx.settle()
    assert not fx.of_type(RequestCancelledEvent)
    assert fx.seen == ["silent: finished"]


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "version", "kind"), ERAS)
async def test_without_keepalives_the_read_timeout_cuts_the_call(
    mode: str, version: str, kind: str, mcp_registry: Registry
) -> None:
    """The control for the test above: the same call, no keep-alives, is cut."""
    with trio.fail_after(TIMEOUT):
        async with (
            # resume_window=None: no resumption, else the legacy SDK client resumes
            # the cut stream with Last-Event-ID and gets the answer (see
            # test_sdk_resumption.py).
            running(
                mcp_registry, limits=ConnectionLimits(keepalive_interval=None), resume_window=None
            ) as fx,
            client(fx.url, mode, read_timeout=1.0) as c,
        ):
            assert c.protocol_version == version
            started = trio.current_time()
            # The response head came at once, so the timeout hits a committed
            # SSE stream: the SDK ends just this call, and the session lives.
            with pytest.raises(MCPError) as caught:
                await c.call_tool("silent", {"seconds": 3})
            assert caught.value.code == CONNECTION_CLOSED
            assert 1.0 <= trio.current_time() - started < 2.5
            assert text_of(await c.call_tool("echo", {"text": "alive"})) == "alive"
            await fx.settle()
    # The server saw the client go and cancelled the call (a dropped stream;
    # the SDK sends no notifications/cancelled after a read timeout).
    assert [event.kind for event in fx.of_type(RequestCancelledEvent)] == ["disconnect"]
    assert "silent: finished" not in fx.seen


# -- 6. the client stays usable after a cancel -----------------------------------------


@pytest.mark.parametrize(("mode", "version", "kind"), ERAS)
async def test_client_is_usable_after_a_cancel(
    mode: str, version: str, kind: str, caplog: pytest.LogCaptureFixture, mcp_registry: Registry
) -> None:
    caplog.set_level(logging.DEBUG, logger="mcp")
    first: Progress = []
    second: Progress = []
    with trio.fail_after(TIMEOUT):
        async with running(mcp_registry) as fx, client(fx.url, mode) as c:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(
                        partial(
                            c.call_tool,
                            "count",
                            {"n": 1000, "delay": 0.01},
                            progress_callback=recorder(first),
                        )
                    )
                    while not first:  # the stream is carrying progress
                        await trio.sleep(0.01)
                    scope.cancel()
            await fx.wait_for("count: RequestCancelled")
            progress_when_stopped = len(first)
            # Anything late for the first call would arrive now.
            result = await c.call_tool("count", {"n": 3}, progress_callback=recorder(second))
            assert text_of(result) == "counted to 3"
            assert text_of(await c.call_tool("echo", {"text": "still here"})) == "still here"
            while len(second) < 3:
                await trio.sleep(0.01)
            await trio.sleep(0.1)
            await fx.settle()
    assert [p for p, _, _ in second] == [1.0, 2.0, 3.0]
    # No progress of the cancelled call reached its callback after the tool stopped.
    assert len(first) == progress_when_stopped
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not problems, [r.getMessage() for r in problems]
    assert [event.kind for event in fx.of_type(RequestCancelledEvent)] == [kind]


# -- 7. a refusal over a limit is not the client's own timeout -------------------------


@pytest.mark.parametrize(("mode", "version", "kind"), ERAS)
async def test_a_call_over_the_servers_cap_is_a_refusal_the_sdk_does_not_take_for_a_timeout(
    mode: str, version: str, kind: str, mcp_registry: Registry
) -> None:
    """The SDK's own timeout is ``REQUEST_TIMEOUT`` (-32001), surfaced as the
    same ``MCPError`` as a server's answer: the modern refusal must not reuse
    it.  The legacy era keeps its documented -32001 (see docs/deployment.md)."""
    with trio.fail_after(TIMEOUT):
        async with (
            running(mcp_registry, {"limits": ServerLimits(max_calls=1)}) as fx,
            client(fx.url, mode) as c,
            trio.open_nursery() as nursery,
        ):
            assert c.protocol_version == version
            nursery.start_soon(partial(c.call_tool, "stubborn", {"seconds": 30}))
            await fx.started.wait()
            with pytest.raises(MCPError) as caught:
                await c.call_tool("echo", {"text": "one too many"})
            assert caught.value.error.data == {"limit": "server", "max": 1}
            if mode == MODERN:
                assert caught.value.code == TOO_MANY_REQUESTS != REQUEST_TIMEOUT
                assert not -32768 <= caught.value.code <= -32000  # outside every reserved range
            else:
                assert caught.value.code == LEGACY_TOO_MANY_REQUESTS
            nursery.cancel_scope.cancel()
