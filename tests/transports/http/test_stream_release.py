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
from asgi_harness import AsgiClient, HttpExchange, initialize, legacy_call, legacy_headers, served

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import HttpLimits, McpHttpApp
from trio_mcp_cancel.server import McpServer, ToolContext

EVENT = 10 * 1024


def build_server() -> McpServer:
    server = McpServer("release-test")

    @server.tool()
    async def chatty(ctx: ToolContext, n: int = 26, size: int = EVENT) -> str:
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
