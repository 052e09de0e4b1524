"""A delivered legacy SSE stream is released at once; unread ones are bounded server-wide.

hypercorn reports ``http.disconnect`` while the ``send()`` of a response's
last body is still running (the harness's ``disconnect_first``); that
disconnect after the answer was queued is its delivery, not a dropped
connection to keep a replay buffer for.  Under MockClock, in memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import HttpLimits, McpHttpApp
from trio_mcp_cancel.server import Context, McpServer

from _support.asgi import AsgiClient, HttpExchange, initialize, legacy_call, legacy_headers, served

EVENT = 10 * 1024


def build_server() -> McpServer:
    server = McpServer("release-test")

    @server.tool()
    async def chatty(ctx: Context, n: int = 26, size: int = EVENT) -> str:
        """Reports progress n times with a large message, then answers."""
        for i in range(1, n + 1):
            await trio.sleep(0.01)
            await ctx.report_progress(i, total=n, message="x" * size)
        return f"done {n}"

    return server


pytestmark = pytest.mark.mcp_registry(grace_period=1.0)


@attrs.define
class Served:
    client: AsgiClient
    app: McpHttpApp

    def streams_of(self, session: str) -> int:
        found = self.app.sessions.get(session, None, trio.current_time())  # type: ignore[union-attr]
        assert found is not None
        return len(found.streams.streams)


@asynccontextmanager
async def serving(registry: Registry, **app_options: Any) -> AsyncIterator[Served]:
    app = McpHttpApp(build_server(), registry, **app_options)
    async with served(app) as client:
        client.disconnect_first = True
        yield Served(client, app)


async def call_chatty(s: Served, session: str, call_id: int, **arguments: Any) -> HttpExchange:
    return s.client.start(
        "POST", legacy_headers(session), legacy_call(call_id, "chatty", arguments, "t")
    )


async def test_a_chatty_stream_read_to_its_end_holds_nothing_and_is_not_answered_again(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as s:
        session = await initialize(s.client)
        call = await call_chatty(s, session, 1)
        await call.wait_complete()
        assert call.answer()["result"]["content"][0]["text"] == "done 26"
        await trio.sleep(0.1)  # far inside resume_window
        assert s.streams_of(session) == 0
        assert s.app.retained_stream_bytes == 0
        assert call.last_event_id is not None
        again = await s.client.request(
            "GET", {**legacy_headers(session), "last-event-id": call.last_event_id}
        )
        assert again.status == 409 and not again.messages()


def held_by_sessions(app: McpHttpApp) -> int:
    """Bytes every session's resumable streams hold (buffered events and answers)."""
    total = 0
    for session in app.sessions._sessions.values():  # type: ignore[union-attr]
        for stream in session.streams.streams.values():
            total += stream.size + (0 if stream.final is None else len(stream.final[1]))
    return total


BUDGET = 1 << 20


async def test_unread_finished_streams_hold_at_most_the_server_wide_budget(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    limits = HttpLimits(max_retained_stream_bytes=BUDGET)
    async with serving(mcp_registry, http_limits=limits) as s:
        sessions = [await initialize(s.client) for _ in range(4)]
        calls, peak = [], 0
        for i in range(16):
            call = await call_chatty(s, sessions[i % 4], 10 + i)
            while not call.primed:  # it learns where to resume from, then stops reading
                await trio.sleep(0.001)
            call.stop_reading()
            calls.append(call)
            for _ in range(6):  # it finishes (in 0.26 s) before the next starts
                await trio.sleep(0.05)
                peak = max(peak, held_by_sessions(s.app))
        # All finished within 5 s, far inside write_timeout (30 s) plus the window.
        # 16 unread answers of ~256 KiB of history each would be 4 MiB.
        assert 0 < peak <= BUDGET
        assert s.app.retained_stream_bytes == held_by_sessions(s.app)
        # The evicted ones were closed at once, not after write_timeout.
        assert sum(call.done.is_set() for call in calls) >= 16 - BUDGET // (256 * 1024)
        # A resume of an evicted stream is a clean 409, as for any stream not held.
        index, evicted = next((i, call) for i, call in enumerate(calls) if call.done.is_set())
        assert evicted.last_event_id is not None and not evicted.complete
        late = await s.client.request(
            "GET",
            {**legacy_headers(sessions[index % 4]), "last-event-id": evicted.last_event_id},
        )
        assert late.status == 409 and not late.messages()


async def test_readers_get_every_event_when_running_streams_exceed_the_budget(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    # Less than one stream's history: every stream sheds what it already sent.
    limits = HttpLimits(max_retained_stream_bytes=64 * 1024)
    async with serving(mcp_registry, http_limits=limits) as s:
        session = await initialize(s.client)
        calls = [await call_chatty(s, session, i) for i in range(1, 5)]
        peak = 0
        with trio.fail_after(5):
            while not all(call.complete for call in calls):
                await trio.sleep(0.005)
                peak = max(peak, s.app.retained_stream_bytes)
        for call in calls:
            progress = [m for m in call.messages() if m.get("method")]
            assert len(progress) == 26
            assert call.answer()["result"]["content"][0]["text"] == "done 26"
        assert peak <= 64 * 1024 + 2 * EVENT
        await trio.sleep(0.1)
        assert s.app.retained_stream_bytes == 0
