"""A legacy stream cut on one worker is resumed through another (two apps sharing a Redis).

The stream and its replay buffer live with the call, on the worker that
runs it; a ``GET`` with ``Last-Event-ID`` that reaches the other worker
asks on the backend's bus, and the owner relays the missed events, the
rest live, and the answer (:mod:`trio_mcp_cancel.transports.http.relay`).
Real clock (Redis I/O), seconds at most.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from trio_mcp_cancel import (
    Event,
    Registry,
    RequestCancelledEvent,
    checkpoint_cancelled,
)
from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import assert_no_leaks

from _support.asgi import AsgiClient, HttpExchange, initialize, legacy_call, legacy_headers
from _support.deploy import RedisServer
from _support.redis import prefix, redis

__all__ = ["prefix", "redis"]

TIMEOUT = 20


def make_server() -> McpServer:
    server = McpServer("resume-workers")

    @server.tool()
    async def steps(ctx: Context, n: int = 5, delay: float = 0.3) -> str:
        for i in range(1, n + 1):
            await checkpoint_cancelled()
            await trio.sleep(delay)
            await ctx.report_progress(i, total=n)
        return f"done {n}"

    return server


#: The registry of every test here (``mcp_registry``).
pytestmark = pytest.mark.mcp_registry(grace_period=0.5)


@asynccontextmanager
async def two_workers(
    registry: Registry, redis: RedisServer, prefix: str, **options: Any
) -> AsyncIterator[tuple[AsgiClient, AsgiClient, list[Event]]]:
    """Two apps on *registry* sharing Redis."""
    events: list[Event] = []
    async with trio.open_nursery() as nursery:
        registry.events.subscribe(events.append)
        apps = [
            McpHttpApp(
                make_server(),
                registry,
                backend=RedisBackend(redis.url, prefix=prefix, op_timeout=1.0),
                **options,
            )
            for _ in range(2)
        ]
        one, two = (AsgiClient(app, nursery) for app in apps)
        async with one.lifespan(), two.lifespan():
            yield one, two, events
            await one.wait_all_done()
            await two.wait_all_done()
        assert_no_leaks(registry)


def progress_of(messages: list[Any]) -> list[int]:
    return [
        m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"
    ]


async def until_progress(exchange: HttpExchange, progress: int) -> None:
    while (await exchange.next_message()).get("params", {}).get("progress") != progress:
        pass


async def test_a_stream_cut_on_one_worker_is_resumed_on_the_other_exactly_once(
    redis: RedisServer, prefix: str, mcp_registry: Registry
) -> None:
    with trio.fail_after(TIMEOUT):
        async with two_workers(mcp_registry, redis, prefix) as (one, two, events):
            session = await initialize(one)
            call = one.start("POST", legacy_headers(session), legacy_call(1, "steps", {}, "t"))
            await until_progress(call, 2)
            call.disconnect()
            await trio.sleep(0.5)  # progress 3 goes into the owner's replay buffer
            assert call.last_event_id is not None
            headers = {**legacy_headers(session), "last-event-id": call.last_event_id}
            resumed = two.start("GET", headers)
            await resumed.wait_complete()
            assert resumed.status == 200 and resumed.is_sse
            got = call.messages() + resumed.messages()
            assert progress_of(got) == [1, 2, 3, 4, 5]
            answers = [m for m in got if "id" in m]
            assert [a["result"]["content"][0]["text"] for a in answers] == ["done 5"]
            await call.done.wait()
            assert not [e for e in events if isinstance(e, RequestCancelledEvent)]


async def test_a_resume_through_the_other_worker_counts_as_a_resume_for_the_window(
    redis: RedisServer, prefix: str, mcp_registry: Registry
) -> None:
    # A 1 s window, a resume after 0.3 s that stays 2 s: not a disconnect.
    with trio.fail_after(TIMEOUT):
        async with two_workers(mcp_registry, redis, prefix, resume_window=1.0) as (
            one,
            two,
            events,
        ):
            session = await initialize(one)
            arguments = {"n": 10, "delay": 0.3}
            call = one.start(
                "POST", legacy_headers(session), legacy_call(1, "steps", arguments, "t")
            )
            await until_progress(call, 1)
            call.disconnect()
            await trio.sleep(0.3)
            assert call.last_event_id is not None
            headers = {**legacy_headers(session), "last-event-id": call.last_event_id}
            resumed = two.start("GET", headers)
            await resumed.wait_complete()
            assert progress_of(call.messages() + resumed.messages()) == list(range(1, 11))
            assert not [e for e in events if isinstance(e, RequestCancelledEvent)]


async def test_a_cut_stream_resumed_nowhere_is_a_disconnect_and_a_late_resume_is_409(
    redis: RedisServer, prefix: str, mcp_registry: Registry
) -> None:
    with trio.fail_after(TIMEOUT):
        async with two_workers(mcp_registry, redis, prefix, resume_window=0.5) as (
            one,
            two,
            events,
        ):
            session = await initialize(one)
            arguments = {"n": 100, "delay": 0.1}
            call = one.start(
                "POST", legacy_headers(session), legacy_call(1, "steps", arguments, "t")
            )
            await until_progress(call, 1)
            call.disconnect()
            await call.done.wait()
            cancels = [e for e in events if isinstance(e, RequestCancelledEvent)]
            assert [(e.request_id, e.kind) for e in cancels] == [(1, "disconnect")]
            assert call.last_event_id is not None
            headers = {**legacy_headers(session), "last-event-id": call.last_event_id}
            late = await two.request("GET", headers)
            assert late.status == 409


async def test_a_resource_updated_on_one_worker_reaches_a_get_stream_on_the_other(
    redis: RedisServer, prefix: str, mcp_registry: Registry
) -> None:
    servers = [make_server(), make_server()]
    for server in servers:

        @server.resource("test://doc", name="doc")
        async def doc(ctx: Context) -> str:
            return "doc"

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            apps = [
                McpHttpApp(server, mcp_registry, backend=RedisBackend(redis.url, prefix=prefix))
                for server in servers
            ]
            one, two = (AsgiClient(app, nursery) for app in apps)
            async with one.lifespan(), two.lifespan():
                session = await initialize(one)
                subscribe = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "resources/subscribe",
                    "params": {"uri": "test://doc"},
                }
                assert (await one.post(legacy_headers(session), subscribe)).status == 200
                get = one.start("GET", legacy_headers(session))
                await get.wait_started()
                servers[1].resource_updated("test://doc")  # a change made on the other worker
                servers[1].tools_changed()
                with trio.fail_after(5):
                    first, second = await get.next_message(), await get.next_message()
                assert first["method"] == "notifications/resources/updated"
                assert first["params"] == {"uri": "test://doc"}
                assert second["method"] == "notifications/tools/list_changed"
                servers[0].prompts_changed()  # a local one arrives once
                third = await get.next_message()
                assert third["method"] == "notifications/prompts/list_changed"
                await trio.sleep(0.3)
                assert len(get.messages()) == 3
                get.disconnect()
                await one.wait_all_done()
            assert_no_leaks(mcp_registry)
