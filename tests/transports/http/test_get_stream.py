"""The legacy GET stream: list changes and resource updates, bounded like ``subscriptions/listen``.

In memory under MockClock.  A legacy session's ``GET`` opens its standalone
SSE stream; ``initialize`` promises ``listChanged`` and ``subscribe``
because it delivers them.
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
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.lowlevel.wire import LEGACY_TOO_MANY_REQUESTS
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer, ServerLimits

from _support.asgi import (
    AsgiClient,
    HttpExchange,
    headers_of,
    initialize,
    initialize_message,
    legacy_headers,
    modern_request,
    request,
    served,
)
from _support.cancellation_tools import probe_server


def build_server(**options: Any) -> McpServer:
    """The probe server with two resources to subscribe to and a prompt."""
    server = probe_server("get-stream-test", **options)

    @server.resource("test://a", name="a")
    async def a(ctx: Context) -> str:
        return "a"

    @server.resource("test://b", name="b")
    async def b(ctx: Context) -> str:
        return "b"

    @server.prompt()
    async def hello(ctx: Context) -> str:
        return "hello"

    return server


@attrs.define
class Served:
    client: AsgiClient
    registry: Registry
    server: McpServer
    app: McpHttpApp

    def listen_streams(self) -> int:
        return self.app.dispatcher.listen_streams


#: The registry of every test here (the ``mcp_registry`` fixture).
pytestmark = pytest.mark.mcp_registry(grace_period=1.0)


@asynccontextmanager
async def serving(
    registry: Registry, server_options: dict[str, Any] | None = None, **options: Any
) -> AsyncIterator[Served]:
    server = build_server(**(server_options or {}))
    app = McpHttpApp(server, registry, **options)
    async with served(app) as client:
        yield Served(client, registry, server, app)


async def open_get(s: Served, session: str) -> HttpExchange:
    get = s.client.start("GET", legacy_headers(session))
    await get.wait_started()
    await trio.testing.wait_all_tasks_blocked()
    return get


async def session_with_get(s: Served) -> tuple[str, HttpExchange]:
    """A new legacy session and its open GET stream."""
    session = await initialize(s.client)
    return session, await open_get(s, session)


async def close(get: HttpExchange) -> None:
    """Drop *get* from the client's side and wait until the app let it go."""
    get.disconnect()
    await get.done.wait()


def methods(exchange: HttpExchange) -> list[str]:
    return [m["method"] for m in exchange.messages()]


async def test_initialize_promises_list_changes_and_subscriptions_on_the_legacy_era(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        reply = await s.client.post(legacy_headers(version=None), initialize_message())
        capabilities = reply.answer()["result"]["capabilities"]
        assert capabilities["tools"] == {"listChanged": True}
        assert capabilities["prompts"] == {"listChanged": True}
        assert capabilities["resources"] == {"listChanged": True, "subscribe": True}


async def test_list_changes_reach_the_sessions_get_stream(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        _, get = await session_with_get(s)
        assert get.status == 200 and get.is_sse and get.primed and get.retry == 1000
        s.server.tools_changed()
        s.server.prompts_changed()
        s.server.resources_changed()
        await trio.testing.wait_all_tasks_blocked()
        assert methods(get) == [
            "notifications/tools/list_changed",
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed",
        ]
        assert all(item.id is not None for item in get.items if item.kind == "message")
        await close(get)
        assert s.listen_streams() == 0


async def test_resources_subscribe_delivers_updates_of_that_uri_until_unsubscribe(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session, get = await session_with_get(s)
        s.server.resource_updated("test://a")  # not subscribed yet
        subscribed = await s.client.post(
            legacy_headers(session), request(1, "resources/subscribe", {"uri": "test://a"})
        )
        assert subscribed.answer()["result"] == {}
        s.server.resource_updated("test://a")
        s.server.resource_updated("test://b")  # another URI
        await trio.testing.wait_all_tasks_blocked()
        assert get.messages() == [
            {
                "jsonrpc": "2.0",
                "method": "notifications/resources/updated",
                "params": {"uri": "test://a"},
            }
        ]
        await s.client.post(
            legacy_headers(session), request(2, "resources/unsubscribe", {"uri": "test://a"})
        )
        s.server.resource_updated("test://a")
        await trio.testing.wait_all_tasks_blocked()
        assert len(get.messages()) == 1
        unknown = await s.client.post(
            legacy_headers(session), request(3, "resources/subscribe", {"uri": "test://nope"})
        )
        assert unknown.answer()["error"]["code"] == -32602
        get.disconnect()


async def test_a_second_get_stream_of_the_same_session_is_409(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session, first = await session_with_get(s)
        second = await s.client.request("GET", legacy_headers(session))
        assert second.status == 409
        await close(first)
        third = await open_get(s, session)  # the first one is gone: a new one may open
        assert third.status == 200
        third.disconnect()


async def test_get_streams_count_against_the_listen_bounds(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(
        mcp_registry, {"limits": ServerLimits(max_listen_streams_per_tenant=1)}
    ) as s:
        one, two = await initialize(s.client), await initialize(s.client)
        first = await open_get(s, one)
        assert s.listen_streams() == 1
        refused = await s.client.request("GET", legacy_headers(two))
        assert refused.status == 429 and refused.headers["retry-after"] == "1"
        # The refusal of every listen bound: the legacy code, data naming the bound.
        assert refused.json()["error"] == {
            "code": LEGACY_TOO_MANY_REQUESTS,
            "message": "Too many notification streams",
            "data": {"limit": "listen_tenant", "max": 1},
        }
        await close(first)
        assert s.listen_streams() == 0
        second = await open_get(s, two)
        assert second.status == 200
        second.disconnect()


async def test_a_get_stream_that_stops_reading_is_dropped_and_frees_its_slot(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    limits = ConnectionLimits(max_buffered_bytes=4096, write_timeout=5.0)
    async with serving(mcp_registry, limits=limits) as s:
        session, get = await session_with_get(s)
        get.stop_reading()
        for _ in range(200):  # far more than 4 KiB
            s.server.tools_changed()
            await trio.sleep(0.01)
        with trio.fail_after(60):
            await get.done.wait()
        assert s.listen_streams() == 0
        # The session still works, and may open a new GET stream.
        again = await open_get(s, session)
        assert again.status == 200
        again.disconnect()


async def test_a_delete_ends_the_sessions_get_stream(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session, get = await session_with_get(s)
        deleted = await s.client.request("DELETE", legacy_headers(session))
        assert deleted.status == 204
        with trio.fail_after(10):
            await get.done.wait()
        assert s.listen_streams() == 0


async def test_a_get_stream_resumed_with_its_last_event_id_replays_what_was_missed(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        session, get = await session_with_get(s)
        s.server.tools_changed()
        await trio.testing.wait_all_tasks_blocked()
        assert get.last_event_id is not None
        last = get.last_event_id
        await close(get)
        resumed = s.client.start("GET", {**legacy_headers(session), "last-event-id": last})
        await resumed.wait_started()
        s.server.prompts_changed()
        await trio.testing.wait_all_tasks_blocked()
        assert methods(resumed) == ["notifications/prompts/list_changed"]
        resumed.disconnect()


async def test_get_needs_a_known_session_and_the_legacy_era(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        missing = await s.client.request("GET", legacy_headers())
        assert missing.status == 400
        unknown = await s.client.request("GET", legacy_headers("nope"))
        assert unknown.status == 404
        message = modern_request(1, "tools/list")
        modern = await s.client.request("GET", headers_of(message))
        assert modern.status == 405


async def test_a_dropped_get_stream_is_forgotten_after_the_resume_window(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, resume_window=5.0) as s:
        session, get = await session_with_get(s)
        s.server.tools_changed()
        await trio.testing.wait_all_tasks_blocked()
        last = get.last_event_id
        assert last is not None
        await close(get)
        await trio.sleep(6)
        late = await s.client.request("GET", {**legacy_headers(session), "last-event-id": last})
        assert late.status == 409
        assert not s.app.sessions or all(
            not session_.streams.streams for session_ in s.app.sessions._sessions.values()
        )
