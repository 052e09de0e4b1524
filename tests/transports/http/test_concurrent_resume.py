"""Two resumes of one stream at once: one carries it, the other is refused cleanly.

In memory under MockClock.  A client (or a retrying proxy) may send the
same ``GET`` with ``Last-Event-ID`` twice; the stream has one connection at
a time, so the second is answered ``409`` (or, when the first was already
replaced, ends cleanly), never a ``500``, and the refusal is logged.
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry, checkpoint_cancelled
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import Context, McpServer

from _support.asgi import initialize, legacy_call, legacy_headers, served

pytestmark = pytest.mark.mcp_registry(grace_period=1.0)


def build_server() -> McpServer:
    server = McpServer("concurrent-resume")

    @server.tool()
    async def steps(ctx: Context, n: int = 5) -> str:
        """Reports progress n times, a step a second."""
        for i in range(1, n + 1):
            await checkpoint_cancelled()
            await trio.sleep(1.0)
            await ctx.report_progress(i, total=n)
        return f"done {n}"

    return server


async def test_two_concurrent_resumes_of_one_stream_get_the_replay_once_and_a_409(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="trio_mcp_cancel")
    app = McpHttpApp(build_server(), mcp_registry)
    async with served(app) as client:
        session = await initialize(client)
        call = client.start("POST", legacy_headers(session), legacy_call(1, "steps", {}, "t"))
        while not any(m.get("method") for m in call.messages()):
            await trio.sleep(0.1)
        call.disconnect()
        await trio.sleep(1.5)
        assert call.last_event_id is not None
        headers = {**legacy_headers(session), "last-event-id": call.last_event_id}
        first = client.start("GET", headers)
        second = client.start("GET", headers)
        await first.done.wait()
        await second.done.wait()
        # An app that returns without a response head is a 500 from hypercorn.
        assert first.status is not None and second.status is not None
        statuses = sorted([first.status, second.status])
        assert statuses == [200, 409], statuses
        carried = first if first.status == 200 else second
        refused = second if carried is first else first
        assert carried.answer()["result"]["content"][0]["text"] == "done 5"
        assert refused.complete and not refused.messages()
        assert refused.json()["error"]["message"].startswith("Conflict: another connection")
        assert any("a second resume" in record.getMessage() for record in caplog.records)
