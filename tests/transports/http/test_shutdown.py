"""HTTP shutdown answers what is in flight, as stdio does on a signal (issue 36, item 8).

In memory under MockClock first: ``McpHttpApp.begin_shutdown`` (what
``serve()`` calls on SIGINT/SIGTERM) flags every call in flight, kind
``"server"``, and each client gets ``-32800`` with the reason on the
response it is waiting on (SSE or JSON, both eras), before its connection
closes.  Then ``serve(handle_signals=True)`` itself, on 127.0.0.1 with a
real SIGTERM to this process: the calls are answered and the whole
shutdown ends within the graceful timeout it states, however long the
app's lifespan would take.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry, RequestCancelled, cancelled, checkpoint_cancelled
from trio_mcp_cancel.http import McpHttpApp, serve, server_config
from trio_mcp_cancel.server import Context, McpServer, Tasks

from _support.asgi import (
    AsgiClient,
    HttpExchange,
    headers_of,
    initialize,
    legacy_call,
    legacy_headers,
    modern_call,
    modern_request,
    served,
)
from _support.cancellation_tools import probe_server

REASON = "server shutting down"

#: The registry of the in-memory tests (the ``mcp_registry`` fixture): a grace
#: period longer than the shutdown's, so the shutdown's deadline is what counts.
pytestmark = pytest.mark.mcp_registry(grace_period=30.0)


@attrs.define
class Seen:
    """What the ``watch`` tool saw when it stopped: (kind, reason) per call."""

    stops: list[tuple[str, str | None]] = attrs.field(factory=list)
    running: int = 0


def build_server(seen: Seen) -> McpServer:
    server = probe_server("shutdown-test", extensions=[Tasks()])

    @server.tool()
    async def watch(ctx: Context) -> str:
        """Poll the flag; say what stopped it."""
        seen.running += 1
        while True:
            try:
                await checkpoint_cancelled()
            except RequestCancelled as exc:
                seen.stops.append((exc.kind, exc.reason))
                raise
            await trio.sleep(0.1)

    @server.tool(task="optional")
    async def watch_task(ctx: Context) -> str:
        """``watch``, as a task when the client declares the extension."""
        while True:
            try:
                await checkpoint_cancelled()
            except RequestCancelled as exc:
                seen.stops.append((exc.kind, exc.reason))
                raise
            await trio.sleep(0.1)

    @server.tool()
    async def flood_when_cancelled(ctx: Context) -> str:
        """Wait for the flag, then answer 8 MB anyway (for a client that does not read)."""
        seen.running += 1
        while not cancelled():
            await trio.sleep(0.05)
        return "x" * (8 << 20)

    @server.tool()
    async def finish(ctx: Context, seconds: float = 1.0) -> str:
        """Ignore the flag, and finish before the hard cancel."""
        await trio.sleep(seconds)
        return "finished"

    return server


@attrs.define
class Served:
    client: AsgiClient
    app: McpHttpApp


@asynccontextmanager
async def serving(registry: Registry, seen: Seen, **options: Any) -> AsyncIterator[Served]:
    app = McpHttpApp(build_server(seen), registry, **options)
    async with served(app) as client:
        yield Served(client, app)


async def start_call(
    s: Served, era: str, name: str, arguments: dict[str, Any] | None = None
) -> HttpExchange:
    """Start a ``tools/call`` of *name* on *era* (legacy: in a new session); it runs."""
    if era == "modern":
        message = modern_call(1, name, arguments)
        exchange = s.client.start("POST", headers_of(message), message)
    else:
        session = await initialize(s.client)
        exchange = s.client.start("POST", legacy_headers(session), legacy_call(1, name, arguments))
    await trio.testing.wait_all_tasks_blocked()
    return exchange


def assert_cancelled_for_shutdown(exchange: HttpExchange) -> None:
    answer = exchange.answer()
    assert answer is not None, exchange.content
    assert answer["error"]["code"] == -32800, answer
    assert answer["error"]["data"] == {"reason": REASON}, answer


@pytest.mark.parametrize("era", ["modern", "legacy"])
@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
async def test_a_shutdown_flags_every_call_in_flight_and_answers_it_minus_32800_with_the_reason(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
    caplog: pytest.LogCaptureFixture,
    era: str,
    json_response: bool,
) -> None:
    caplog.set_level(logging.INFO)
    seen = Seen()
    async with serving(mcp_registry, seen, json_response=json_response) as s:
        calls = [await start_call(s, era, "watch") for _ in range(3)]
        assert seen.running == 3 and not any(call.complete for call in calls)
        flagged_at = trio.current_time()
        assert s.app.begin_shutdown(within=4.0) == 3
        for call in calls:
            await call.done.wait()
            # Cooperative: stopped at its next poll, answered on its own response.
            assert call.completed_at is not None and call.completed_at - flagged_at < 0.5
            assert call.is_sse != json_response
            assert_cancelled_for_shutdown(call)
    assert seen.stops == [("server", REASON)] * 3
    stopped = [r.getMessage() for r in caplog.records if f"by the server ('{REASON}')" in r.message]
    assert len(stopped) == 3, caplog.text
    assert "shutting down: 3 call(s) and 0 task(s) in flight cancelled (kind server)" in caplog.text


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_call_that_ignores_the_flag_is_hard_cancelled_within_the_shutdowns_bound(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry, era: str
) -> None:
    async with serving(mcp_registry, Seen()) as s:
        call = await start_call(s, era, "stubborn")
        flagged_at = trio.current_time()
        s.app.begin_shutdown(within=4.0)  # sooner than the registry's 30 s grace period
        await call.done.wait()
        assert call.completed_at is not None
        assert call.completed_at - flagged_at == pytest.approx(4.0, abs=0.01)
        assert_cancelled_for_shutdown(call)


async def test_a_call_that_finishes_anyway_answers_its_result(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry, Seen()) as s:
        call = await start_call(s, "modern", "finish", {"seconds": 1.0})
        s.app.begin_shutdown(within=4.0)
        await call.done.wait()
        assert call.answer()["result"]["content"][0]["text"] == "finished"


async def test_a_call_that_starts_during_the_shutdown_is_flagged_with_the_same_deadline(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    seen = Seen()
    async with serving(mcp_registry, seen) as s:
        began = trio.current_time()
        s.app.begin_shutdown(within=4.0)
        await trio.sleep(1.0)
        watch = await start_call(s, "modern", "watch")
        stubborn = await start_call(s, "legacy", "stubborn")
        await watch.done.wait()
        assert_cancelled_for_shutdown(watch)
        assert seen.stops == [("server", REASON)]
        await stubborn.done.wait()
        assert_cancelled_for_shutdown(stubborn)
        # Hard-cancelled at the shutdown's one deadline, not 4 s after it started.
        assert stubborn.completed_at == pytest.approx(began + 4.0, abs=0.01)


async def test_a_shutdown_cancels_the_running_tasks_which_settle_failed_with_the_reason(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    seen = Seen()
    with_tasks = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    async with serving(mcp_registry, seen) as s:
        message = modern_call(1, "watch_task", capabilities=with_tasks)
        created = await s.client.post(headers_of(message), message)
        task_id = created.answer()["result"]["taskId"]
        await trio.sleep(1.0)
        s.app.begin_shutdown(within=4.0)
        await s.app.dispatcher.extension(Tasks).manager.wait_idle()
        assert seen.stops == [("server", REASON)]
        get = modern_request(2, "tasks/get", {"taskId": task_id}, capabilities=with_tasks)
        polled = (await s.client.post(headers_of(get), get)).json()["result"]
        assert polled["status"] == "failed" and polled["statusMessage"] == REASON, polled


async def test_a_shutdown_ends_the_open_get_streams(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry, Seen()) as s:
        session = await initialize(s.client)
        get = s.client.start("GET", legacy_headers(session))
        await get.wait_started()
        await trio.testing.wait_all_tasks_blocked()
        assert not get.complete
        s.app.begin_shutdown(within=4.0)
        with trio.fail_after(0.1):
            await get.done.wait()
        assert get.complete and get.is_sse  # the response finished: not cut off


# -- serve(handle_signals=True), on a real socket, with a real SIGTERM --------------------

GRACEFUL = 2.0  # the graceful timeout of these tests: the stated bound of the shutdown


def sigterm_to_serve() -> None:
    """SIGTERM to this process, which the ``serve()`` under test receives.

    The autouse fixture below holds a receiver of its own underneath, so a
    ``serve()`` that did not install one fails the test instead of
    terminating the test run.
    """
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture(autouse=True)
async def _sigterm_safety_net() -> AsyncIterator[None]:
    with trio.open_signal_receiver(signal.SIGTERM):
        yield


async def stream_answer(response: httpx.Response) -> Any:
    """The JSON-RPC answer at the end of an SSE response."""
    data = None
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            data = json.loads(line[6:])
    return data


@pytest.mark.timeout(30)
async def test_sigterm_to_serve_answers_the_calls_in_flight_and_returns_within_its_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    seen = Seen()
    app = McpHttpApp(build_server(seen))  # its lifespan opens its registry
    config = server_config(port=0, graceful_timeout=GRACEFUL)
    answers: dict[str, Any] = {}
    async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=20) as client:
        stopped = trio.Event()

        async def serving(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await serve(app, config, handle_signals=True, task_status=task_status)
            stopped.set()

        (bound,) = await nursery.start(serving)
        url = f"{bound}/mcp"
        session_reply = await client.post(
            url,
            headers=legacy_headers(version=None),
            json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}},
        )  # fmt: skip
        session = session_reply.headers["mcp-session-id"]
        await client.post(
            url,
            headers=legacy_headers(session),
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        )
        calls = {
            "modern watch": (headers_of(m := modern_call(1, "watch")), m),
            "modern stubborn": (headers_of(m := modern_call(2, "stubborn")), m),
            "legacy watch": (legacy_headers(session), legacy_call(3, "watch")),
        }

        async def call(name: str) -> None:
            headers, message = calls[name]
            async with client.stream("POST", url, headers=headers, json=message) as response:
                answers[name] = await stream_answer(response)

        for name in calls:
            nursery.start_soon(call, name)
        with trio.fail_after(10):
            while seen.running < 2 or app.registry.in_flight_count < 3:
                await trio.sleep(0.01)
        signalled = trio.current_time()
        sigterm_to_serve()
        with trio.fail_after(10):
            await stopped.wait()
        elapsed = trio.current_time() - signalled
    for name in calls:
        answer = answers.get(name)
        assert answer is not None and answer["error"]["code"] == -32800, (name, answer)
        assert answer["error"]["data"] == {"reason": REASON}, (name, answer)
    assert seen.stops == [("server", REASON)] * 2
    # The stubborn call was hard-cancelled at GRACEFUL - 1 s, in time to be answered.
    assert elapsed < GRACEFUL, f"stopped {elapsed:.2f}s after the signal"
    assert f"shutting down gracefully (up to {GRACEFUL}s" in caplog.text
    assert caplog.text.count(f"by the server ('{REASON}')") == 3, caplog.text


Scope = MutableMapping[str, Any]


async def hanging_lifespan_app(scope: Scope, receive: Any, send: Any) -> None:
    """An app whose lifespan never finishes its shutdown (a backend that hangs)."""
    if scope["type"] != "lifespan":
        return
    await receive()
    await send({"type": "lifespan.startup.complete"})
    await receive()
    await trio.sleep_forever()


@pytest.mark.timeout(30)
async def test_sigterm_to_serve_returns_within_its_bound_even_when_the_lifespan_hangs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    config = server_config(port=0, graceful_timeout=1.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve, hanging_lifespan_app, config, handle_signals=True))
        signalled = trio.current_time()
        sigterm_to_serve()
        with trio.fail_after(10):  # hypercorn's own lifespan wait would be 60 s
            while nursery.child_tasks:
                await trio.sleep(0.01)
    elapsed = trio.current_time() - signalled
    assert 0.9 < elapsed < 1.5, f"stopped {elapsed:.2f}s after the signal"
    assert "still running 1.0s after the signal; stopped" in caplog.text


@pytest.mark.timeout(30)
async def test_a_client_that_does_not_read_its_answer_does_not_hold_the_shutdown_past_its_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Hostile: the answer (8 MB) fills the socket and waits for a reader that never comes."""
    seen = Seen()
    app = McpHttpApp(build_server(seen))
    config = server_config(port=0, graceful_timeout=GRACEFUL)
    async with trio.open_nursery() as nursery:
        (bound,) = await nursery.start(partial(serve, app, config, handle_signals=True))
        port = int(bound.rsplit(":", 1)[1])
        message = modern_call(1, "flood_when_cancelled")
        body = json.dumps(message).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in headers_of(message).items())
        request = (
            f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}content-length: {len(body)}\r\n\r\n"
        ).encode() + body
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request)  # and never read a byte
            with trio.fail_after(10):
                while seen.running < 1:
                    await trio.sleep(0.01)
            signalled = trio.current_time()
            sigterm_to_serve()
            with trio.fail_after(10):
                while nursery.child_tasks:
                    await trio.sleep(0.01)
            elapsed = trio.current_time() - signalled
    assert elapsed < GRACEFUL + 0.2, f"stopped {elapsed:.2f}s after the signal"
