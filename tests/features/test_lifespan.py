"""``McpServer(lifespan=...)``: entered once per process around serving, on every transport.

What it yields is ``ctx.lifespan`` (``ctx.lifespan_as(T)`` typed); it is
left after serving ended, its calls answered; a failure to enter is one
sentence and serving never starts; its exit is bounded and never raises
over serving's own outcome.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from trio_websocket import open_websocket_url

from trio_mcp_cancel import Registry
from trio_mcp_cancel._protocol.lifespan import LifespanFailed
from trio_mcp_cancel._run.runner import startup_problem
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import open_test_client
from trio_mcp_cancel.websocket import serve_mcp_websocket

from _support.asgi import AsgiClient, headers_of, modern_call, served

HERE = Path(__file__).parent


@attrs.define
class State:
    """What the lifespan yields: a stand-in for a pool or a client."""

    name: str
    log: list[str]


def make_server(log: list[str], **options: Any) -> McpServer:
    @asynccontextmanager
    async def lifespan(server: McpServer) -> AsyncIterator[State]:
        assert isinstance(server, McpServer)
        log.append("enter")
        await trio.sleep(1)  # a startup that takes time: serving waits for it
        try:
            yield State("pool", log)
        finally:
            log.append("exit")

    server = McpServer("life", lifespan=lifespan, **options)

    @server.tool
    async def use(ctx: Context) -> str:
        state = ctx.lifespan_as(State)
        await trio.sleep(2)
        log.append("answered")
        return state.name

    @server.tool
    async def untyped(ctx: Context) -> str:
        name: str = ctx.lifespan.name
        return name

    return server


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_the_test_client_enters_the_lifespan_first_and_leaves_it_after_the_calls(
    era: Any, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    log: list[str] = []
    async with open_test_client(make_server(log), registry=mcp_registry, era=era) as client:
        assert log == ["enter"]
        result = await client.call_tool("use")
        assert result["content"][0]["text"] == "pool"
        assert (await client.call_tool("untyped"))["content"][0]["text"] == "pool"
    assert log == ["enter", "answered", "exit"]


async def test_two_transports_of_one_process_share_one_lifespan(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    log: list[str] = []
    server = make_server(log)
    async with open_test_client(server, registry=mcp_registry) as first:
        async with open_test_client(server, registry=mcp_registry) as second:
            await first.call_tool("use")
            await second.call_tool("use")
        assert log == ["enter", "answered", "answered"]  # still entered for the first
    assert log == ["enter", "answered", "answered", "exit"]


async def test_stdio_serves_inside_the_lifespan(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    log: list[str] = []
    client, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        done = trio.Event()

        async def serve() -> None:
            await serve_mcp_stdio(
                make_server(log), mcp_registry, stdin=server_end, stdout=server_end
            )
            done.set()

        nursery.start_soon(serve)
        message = modern_call(1, "use")
        await client.send_all(json.dumps(message).encode() + b"\n")
        received = b""
        while not received.endswith(b"\n"):
            received += await client.receive_some()
        assert json.loads(received)["result"]["content"][0]["text"] == "pool"
        assert log == ["enter", "answered"]
        await client.send_eof()
        await done.wait()
    assert log == ["enter", "answered", "exit"]


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_http_enters_the_lifespan_in_the_asgi_lifespan(
    era: str, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    from _support.asgi import initialize, legacy_call, legacy_headers

    log: list[str] = []
    app = McpHttpApp(make_server(log), mcp_registry)
    async with served(app) as client:
        assert log == ["enter"]
        if era == "legacy":
            session = await initialize(client)
            exchange = await client.post(legacy_headers(session), legacy_call(1, "use"))
        else:
            message = modern_call(1, "use")
            exchange = await client.post(headers_of(message), message)
        final = exchange.messages()[-1] if exchange.is_sse else exchange.json()
        assert final["result"]["content"][0]["text"] == "pool"
    assert log == ["enter", "answered", "exit"]


async def test_http_reports_a_lifespan_that_fails_to_start_as_one_line(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    @asynccontextmanager
    async def broken(server: McpServer) -> AsyncIterator[None]:
        raise ConnectionRefusedError("database at db:5432 refused the connection")
        yield

    app = McpHttpApp(McpServer(lifespan=broken), mcp_registry)
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        to_app, app_receive = trio.open_memory_channel[Any](1)
        from_app, app_events = trio.open_memory_channel[Any](1)
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}}
        nursery.start_soon(client.app, scope, app_receive.receive, from_app.send)
        await to_app.send({"type": "lifespan.startup"})
        failed = await app_events.receive()
    assert failed == {
        "type": "lifespan.startup.failed",
        "message": "the server's lifespan failed to start: ConnectionRefusedError:"
        " database at db:5432 refused the connection",
    }


async def test_a_lifespan_that_fails_to_start_stops_serving_with_one_sentence(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    @asynccontextmanager
    async def broken(server: McpServer) -> AsyncIterator[None]:
        raise KeyError("DATABASE_URL")
        yield

    with pytest.raises(LifespanFailed) as raised:
        async with open_test_client(McpServer(lifespan=broken), registry=mcp_registry):
            pytest.fail("served without its lifespan")
    message = str(raised.value)
    assert message == "the server's lifespan failed to start: KeyError: 'DATABASE_URL'"
    # The runner turns it into its one line (StartupFailed), wrapped or not.
    wrapped = BaseExceptionGroup("serving", [BaseExceptionGroup("inner", [raised.value])])
    assert startup_problem(wrapped, "127.0.0.1", 8000, "port=") == message


async def test_a_lifespan_that_raises_on_exit_is_logged_and_serving_ends_cleanly(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    @asynccontextmanager
    async def raising(server: McpServer) -> AsyncIterator[int]:
        yield 1
        raise RuntimeError("could not close the pool")

    with caplog.at_level(logging.ERROR, "trio_mcp_cancel.server"):
        async with open_test_client(McpServer(lifespan=raising), registry=mcp_registry):
            pass
    assert "lifespan failed while exiting" in caplog.text
    assert "could not close the pool" in caplog.text


async def test_a_lifespan_that_hangs_on_exit_is_stopped_after_lifespan_timeout(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopped_after: list[float] = []

    @asynccontextmanager
    async def hanging(server: McpServer) -> AsyncIterator[int]:
        yield 1
        start = trio.current_time()
        try:
            await trio.sleep_forever()
        finally:
            stopped_after.append(trio.current_time() - start)

    server = McpServer(lifespan=hanging, lifespan_timeout=3)
    with caplog.at_level(logging.WARNING, "trio_mcp_cancel.server"):
        async with open_test_client(server, registry=mcp_registry):
            pass
    assert stopped_after == [3.0]
    assert "did not finish exiting within 3s" in caplog.text


async def test_ctx_lifespan_without_a_lifespan_says_how_to_get_one(
    mcp_registry: Registry,
) -> None:
    server = McpServer()

    @server.tool
    async def peek(ctx: Context) -> str:
        return str(ctx.lifespan)

    async with open_test_client(server, registry=mcp_registry) as client:
        result = await client.call_tool("peek")
    assert result["isError"] is True
    assert "McpServer(lifespan=...)" in result["content"][0]["text"]


async def test_lifespan_as_refuses_a_state_of_another_type(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = make_server([])

    @server.tool
    async def wrong(ctx: Context) -> str:
        return str(ctx.lifespan_as(int))

    async with open_test_client(server, registry=mcp_registry) as client:
        result = await client.call_tool("wrong")
    assert result["isError"] is True
    assert "not a int" in result["content"][0]["text"]


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_a_lifespan_timeout_that_is_not_positive_and_finite_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="lifespan_timeout"):
        McpServer(lifespan_timeout=bad)


def test_a_lifespan_that_is_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="lifespan must be a function"):
        McpServer(lifespan=object())  # type: ignore[arg-type]


async def test_websocket_serves_inside_the_lifespan(mcp_registry: Registry) -> None:
    log: list[str] = []
    shutdown = trio.Event()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            ws_server = await nursery.start(
                lambda task_status: serve_mcp_websocket(
                    make_server(log), mcp_registry, shutdown=shutdown, task_status=task_status
                )
            )
            assert log == ["enter"]
            url = f"ws://127.0.0.1:{ws_server.port}/mcp"
            async with open_websocket_url(url) as ws:
                await ws.send_message(json.dumps(modern_call(1, "untyped")))
                reply = json.loads(await ws.get_message())
            assert reply["result"]["content"][0]["text"] == "pool"
            shutdown.set()
    assert log == ["enter", "exit"]


def test_mypy_strict_accepts_a_typed_use_of_the_lifespan() -> None:
    module = HERE.parent / "_support" / "typed_lifespan_usage.py"
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(module)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE.parent.parent,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_runner_reports_a_stdio_lifespan_failure_as_startup_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trio_mcp_cancel._run.runner import StartupFailed, serve_found

    @asynccontextmanager
    async def broken(server: McpServer) -> AsyncIterator[None]:
        raise OSError("no database")
        yield

    monkeypatch.delenv("MCP_STATE_SECRET", raising=False)
    serving = serve_found(McpServer(lifespan=broken), "stdio")
    with pytest.raises(StartupFailed) as raised:
        serving()
    assert str(raised.value) == "the server's lifespan failed to start: OSError: no database"


def test_the_runner_reports_an_http_lifespan_failure_as_startup_failed() -> None:
    from trio_mcp_cancel._run.runner import StartupFailed, serve_found

    @asynccontextmanager
    async def broken(server: McpServer) -> AsyncIterator[None]:
        raise OSError("no database")
        yield

    serving = serve_found(McpServer(lifespan=broken), "http", port=0, grace_period=1.0)
    with pytest.raises(StartupFailed) as raised:
        serving()
    assert str(raised.value) == (
        "the app did not start: the server's lifespan failed to start: OSError: no database"
    )
