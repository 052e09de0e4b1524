"""A ``ctx.elicit`` answered through another worker: the response is forwarded over Redis.

Two apps (two "workers") share one real redis-server.  A legacy session's
tool runs on the first and asks the client; the client's response POST
lands on the second, which no tool there waits for, so it is published on
the backend's bus and wakes the waiter on the first.  An answer sent with
another session's id matches nothing, and a cancel posted to the second worker
cancels the question pending on the first.
"""

from __future__ import annotations

from typing import Any

import trio

from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import Context, McpServer

from _support.asgi import AsgiClient, cancelled, initialize, legacy_call, legacy_headers
from _support.deploy import RedisServer
from _support.redis import prefix, redis

__all__ = ["prefix", "redis"]  # fixtures

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def make_server() -> McpServer:
    server = McpServer("elicit-redis")

    @server.tool()
    async def greet(ctx: Context) -> str:
        answer = await ctx.elicit("Your name?", SCHEMA)
        assert answer.content is not None
        return f"Hello {answer.content['name']}"

    return server


def response(request_id: Any, name: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"action": "accept", "content": {"name": name}},
    }


async def test_an_answer_posted_to_another_worker_reaches_the_waiting_tool(
    redis: RedisServer, prefix: str
) -> None:
    apps = [
        McpHttpApp(make_server(), backend=RedisBackend(redis.url, prefix=prefix)) for _ in range(2)
    ]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            one, two = (AsgiClient(app, nursery) for app in apps)
            async with one.lifespan(), two.lifespan():
                session = await initialize(one, capabilities={"elicitation": {}})
                other = await initialize(two, capabilities={"elicitation": {}})
                call = one.start("POST", legacy_headers(session), legacy_call(1, "greet"))
                asked = await call.next_message()
                assert asked["method"] == "elicitation/create"
                # Another session's answer with the right id matches nothing.
                stranger = await two.post(legacy_headers(other), response(asked["id"], "Eve"))
                assert stranger.status == 202
                # The real answer, through the other worker.
                answered = await two.post(legacy_headers(session), response(asked["id"], "Ada"))
                assert answered.status == 202
                reply = await call.next_message()
                await call.wait_complete()
    assert reply["id"] == 1
    assert reply["result"]["content"][0]["text"] == "Hello Ada"


async def test_a_cancel_posted_to_another_worker_cancels_the_pending_question(
    redis: RedisServer, prefix: str
) -> None:
    apps = [
        McpHttpApp(make_server(), backend=RedisBackend(redis.url, prefix=prefix)) for _ in range(2)
    ]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            one, two = (AsgiClient(app, nursery) for app in apps)
            async with one.lifespan(), two.lifespan():
                session = await initialize(one, capabilities={"elicitation": {}})
                call = one.start("POST", legacy_headers(session), legacy_call(1, "greet"))
                asked = await call.next_message()
                note = cancelled(1, "changed my mind")
                assert (await two.post(legacy_headers(session), note)).status == 202
                told = await call.next_message()
                await call.wait_complete()
                late = await two.post(legacy_headers(session), response(asked["id"], "late"))
                assert late.status == 202
    assert told["method"] == "notifications/cancelled"
    assert told["params"] == {"requestId": asked["id"], "reason": "changed my mind"}
    assert call.messages() == [asked, told]
