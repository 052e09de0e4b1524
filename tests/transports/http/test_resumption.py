"""Resumable legacy SSE streams (SEP-1699) and the disconnect grace, in memory under MockClock.

A legacy session's SSE stream starts with a priming event (an id, ``retry``,
no data), numbers every event with an id naming the stream, and keeps its
recent events: a client whose connection drops comes back with ``GET`` and
``Last-Event-ID`` and gets what it missed, then the rest live.  A dropped
stream cancels its call (kind ``"disconnect"``) only once ``resume_window``
passed without a resume.  The modern era has no resumption.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from trio_mcp_cancel import (
    Registry,
    RequestCancelledEvent,
    checkpoint_cancelled,
)
from trio_mcp_cancel.http import HttpLimits, McpHttpApp, app_from_env
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import EventRecorder
from trio_mcp_cancel.transports.http.resume import parse_event_id

from _support.asgi import (
    AsgiClient,
    HttpExchange,
    cancelled,
    headers_of,
    initialize,
    legacy_call,
    legacy_headers,
    modern_call,
    served,
)

WINDOW = 5.0


def build_server() -> McpServer:
    server = McpServer("resume-test")

    @server.tool()
    async def steps(ctx: Context, n: int = 5, delay: float = 1.0, size: int = 0) -> str:
        """Reports progress n times, a step every *delay* seconds."""
        for i in range(1, n + 1):
            await checkpoint_cancelled()
            await trio.sleep(delay)
            await ctx.report_progress(i, total=n, message="x" * size)
        return f"done {n}"

    return server


@attrs.define
class Served:
    client: AsgiClient
    registry: Registry
    events: EventRecorder
    app: McpHttpApp

    def cancels(self) -> list[tuple[Any, str, str]]:
        return [
            (e.request_id, e.kind, e.reason) for e in self.events.of_type(RequestCancelledEvent)
        ]


#: The registry of every test here (the ``mcp_registry`` fixture).
pytestmark = pytest.mark.mcp_registry(grace_period=1.0)


@asynccontextmanager
async def serving(registry: Registry, **app_options: Any) -> AsyncIterator[Served]:
    events = EventRecorder.attach(registry)
    app = McpHttpApp(build_server(), registry, **app_options)
    async with served(app) as client:
        yield Served(client, registry, events, app)


async def start_steps(s: Served, **arguments: Any) -> tuple[str, HttpExchange]:
    """A new legacy session and its call 1 of ``steps`` (progress token ``t``), started."""
    session = await initialize(s.client)
    call = s.client.start("POST", legacy_headers(session), legacy_call(1, "steps", arguments, "t"))
    return session, call


def progress_of(messages: list[Any]) -> list[int]:
    return [
        m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"
    ]


def results_of(messages: list[Any]) -> list[Any]:
    return [m for m in messages if "id" in m]


async def read_until_progress(exchange: HttpExchange, progress: int) -> None:
    while True:
        message = await exchange.next_message()
        if message.get("params", {}).get("progress") == progress:
            return


def resume_headers(session: str, last_event_id: str) -> dict[str, str]:
    return {**legacy_headers(session), "last-event-id": last_event_id}


def resume(served: Served, session: str, last_event_id: str) -> HttpExchange:
    """Start a resume of the stream *last_event_id* names."""
    return served.client.start("GET", resume_headers(session, last_event_id))


async def test_a_legacy_stream_starts_primed_and_numbers_every_event_with_its_stream(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        call = await s.client.post(legacy_headers(session), legacy_call(1, "steps", {"n": 3}, "t"))
        assert call.is_sse and call.primed and call.retry == 1000
        assert progress_of(call.messages()) == [1, 2, 3]
        assert call.answer()["result"]["content"][0]["text"] == "done 3"
        ids = [item.id for item in call.items if item.kind == "message"]
        assert all(i is not None for i in ids) and len(set(ids)) == len(ids) == 4
        streams = {i.rpartition(".")[0] for i in ids if i is not None}
        assert len(streams) == 1  # every id names the one stream it belongs to


async def test_a_cut_stream_resumed_with_last_event_id_gets_every_progress_and_the_result_once(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session, call = await start_steps(s)
        await read_until_progress(call, 2)
        call.disconnect()
        await trio.sleep(2.5)  # progress 3 and 4 go on into the replay buffer
        assert call.last_event_id is not None
        resumed = resume(s, session, call.last_event_id)
        await resumed.wait_complete()
        assert resumed.status == 200 and resumed.is_sse
        got = call.messages() + resumed.messages()
        assert progress_of(got) == [1, 2, 3, 4, 5]
        assert [m["result"]["content"][0]["text"] for m in results_of(got)] == ["done 5"]
        await call.done.wait()
        assert s.cancels() == []


async def test_a_stream_can_be_resumed_again_after_its_resume_drops_too(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session, call = await start_steps(s)
        await read_until_progress(call, 1)
        call.disconnect()
        assert call.last_event_id is not None
        first = resume(s, session, call.last_event_id)
        await read_until_progress(first, 3)
        first.disconnect()
        await trio.sleep(1.5)
        assert first.last_event_id is not None
        second = resume(s, session, first.last_event_id)
        await second.wait_complete()
        got = call.messages() + first.messages() + second.messages()
        assert progress_of(got) == [1, 2, 3, 4, 5]
        assert len(results_of(got)) == 1
        assert s.cancels() == []


async def test_a_cut_stream_not_resumed_within_the_window_cancels_its_call_as_a_disconnect(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, resume_window=WINDOW) as s:
        session, call = await start_steps(s, n=100)
        await read_until_progress(call, 1)
        call.disconnect()
        cut_at = trio.current_time()
        await trio.sleep(WINDOW - 0.5)
        assert s.cancels() == []  # still waiting for a resume
        await s.registry.wait_idle()
        [event] = s.events.of_type(RequestCancelledEvent)
        assert (event.request_id, event.kind, event.reason) == (
            1,
            "disconnect",
            "client disconnected",
        )
        assert trio.current_time() - cut_at >= WINDOW
        # The stream is gone with its call: a late resume is refused.
        assert call.last_event_id is not None
        late = await s.client.request("GET", resume_headers(session, call.last_event_id))
        assert late.status == 409


async def test_a_call_that_finishes_while_cut_keeps_its_answer_for_a_resume(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session, call = await start_steps(s, n=2, delay=1.0)
        await read_until_progress(call, 1)
        call.disconnect()
        await trio.sleep(3)  # the call finished meanwhile
        assert call.last_event_id is not None
        resumed = resume(s, session, call.last_event_id)
        await resumed.wait_complete()
        assert progress_of(resumed.messages()) == [2]
        assert results_of(resumed.messages())[0]["result"]["content"][0]["text"] == "done 2"
        assert s.cancels() == []


async def test_a_resume_the_session_cannot_serve_is_409_with_the_reason(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        for bad in ["nonsense", "abc.def", "0123456789ab.3"]:
            refused = await s.client.request("GET", resume_headers(session, bad))
            assert refused.status == 409
            assert b"Last-Event-ID" in refused.content
        # Another session's stream is not this session's to resume.
        other = await initialize(s.client)
        call = s.client.start("POST", legacy_headers(other), legacy_call(1, "steps", {}, "t"))
        await read_until_progress(call, 1)
        assert call.last_event_id is not None
        stolen = await s.client.request("GET", resume_headers(session, call.last_event_id))
        assert stolen.status == 409
        s.client.start("POST", legacy_headers(other), cancelled(1))
        await call.done.wait()


async def test_a_replay_buffer_overflow_while_cut_cancels_the_call_at_once(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    # 2 KB of replay: a few 500-byte progress messages overflow it, and an
    # event dropped before any connection took it makes a whole resume impossible.
    limits = HttpLimits(replay_buffer_size=2000)
    async with serving(mcp_registry, http_limits=limits) as s:
        session, call = await start_steps(s, n=100, delay=0.1, size=500)
        await read_until_progress(call, 1)
        call.disconnect()
        cut_at = trio.current_time()
        await s.registry.wait_idle()
        assert s.cancels() == [
            (1, "disconnect", "client disconnected (its stream's replay buffer overflowed)")
        ]
        assert trio.current_time() - cut_at < 2  # not the 5 s window
        assert call.last_event_id is not None
        refused = await s.client.request("GET", resume_headers(session, call.last_event_id))
        assert refused.status == 409


async def test_a_resume_older_than_the_buffer_holds_is_refused(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    limits = HttpLimits(replay_buffer_size=2000)
    async with serving(mcp_registry, http_limits=limits) as s:
        session, call = await start_steps(s, n=20, delay=0.1, size=500)
        await read_until_progress(call, 1)
        first_id = call.last_event_id
        await read_until_progress(call, 10)  # delivered, and dropped from the buffer since
        assert first_id is not None
        old = await s.client.request("GET", resume_headers(session, first_id))
        assert old.status == 409 and b"no longer held" in old.content
        await call.wait_complete()


async def test_without_resumption_a_cut_stream_cancels_at_once_and_carries_no_ids(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, resume_window=None) as s:
        _, call = await start_steps(s)
        await read_until_progress(call, 1)
        assert not call.primed and call.last_event_id is None
        call.disconnect()
        cut_at = trio.current_time()
        await s.registry.wait_idle()
        assert s.cancels() == [(1, "disconnect", "client disconnected")]
        assert trio.current_time() - cut_at < 1.5


async def test_with_legacy_disconnect_cancels_off_a_cut_call_runs_on_and_stays_resumable(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, legacy_disconnect_cancels=False) as s:
        session, call = await start_steps(s, n=10)
        await read_until_progress(call, 1)
        call.disconnect()
        await trio.sleep(WINDOW + 2)  # past the window: still running
        assert s.cancels() == []
        assert call.last_event_id is not None
        resumed = resume(s, session, call.last_event_id)
        await resumed.wait_complete()
        assert progress_of(call.messages() + resumed.messages()) == list(range(1, 11))
        assert len(results_of(resumed.messages())) == 1


async def test_the_modern_era_numbers_nothing_and_a_closed_stream_cancels_at_once(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        message = modern_call(1, "steps", {"n": 100}, progress_token="t")
        call = s.client.start("POST", headers_of(message), message)
        await read_until_progress(call, 1)
        assert not call.primed and call.last_event_id is None
        call.disconnect()
        cut_at = trio.current_time()
        await s.registry.wait_idle()
        assert [(c[0], c[1]) for c in s.cancels()] == [(1, "disconnect")]
        assert trio.current_time() - cut_at < 1.5


def test_resume_window_comes_from_mcp_resume_window() -> None:
    server = build_server()
    assert app_from_env(server, {})._responder.resume_window == 5.0
    assert app_from_env(server, {"MCP_RESUME_WINDOW": "12"})._responder.resume_window == 12.0
    assert app_from_env(server, {"MCP_RESUME_WINDOW": "none"})._responder.resume_window is None
    with pytest.raises(ValueError, match="MCP_RESUME_WINDOW"):
        app_from_env(server, {"MCP_RESUME_WINDOW": "soon"})
    with pytest.raises(ValueError, match="resume_window"):
        McpHttpApp(server, resume_window=-1)


async def test_a_tool_may_close_its_stream_and_the_client_polls_for_the_rest(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        closed: list[bool] = []

        @s.app.server.tool()
        async def polling(ctx: Context) -> str:
            await ctx.report_progress(1)
            closed.append(ctx.close_stream())
            await trio.sleep(2)
            await ctx.report_progress(2)
            return "polled"

        session = await initialize(s.client)
        call = s.client.start("POST", legacy_headers(session), legacy_call(1, "polling", {}, "t"))
        await call.wait_complete()
        # The response ended cleanly after the priming event and progress 1, without an answer.
        assert call.complete and call.primed and call.retry == 1000
        assert progress_of(call.messages()) == [1] and results_of(call.messages()) == []
        assert closed == [True]
        assert call.last_event_id is not None
        resumed = resume(s, session, call.last_event_id)
        await resumed.wait_complete()
        assert progress_of(resumed.messages()) == [2]
        assert results_of(resumed.messages())[0]["result"]["content"][0]["text"] == "polled"
        assert s.cancels() == []
        # The modern era cannot: a closed stream is its cancel.
        message = modern_call(2, "polling", {}, progress_token="m")
        modern = await s.client.post(headers_of(message), message)
        assert closed == [True, False]
        assert modern.answer()["result"]["content"][0]["text"] == "polled"


def test_only_event_ids_of_the_servers_own_form_are_read() -> None:
    assert parse_event_id("0123456789ab.7") == ("0123456789ab", 7)
    for bad in ["", ".", "7", "0123456789ab", "0123456789ab.", "0123456789AB.1", "x" * 12 + ".1"]:
        assert parse_event_id(bad) is None, bad
    assert parse_event_id("0123456789ab." + "9" * 19) is None
    assert parse_event_id("0123456789ab.\u0661") is None  # a non-ASCII digit
