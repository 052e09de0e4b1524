"""A real multi-process deployment: hypercorn processes sharing one real redis-server.

Two server processes (``examples.slow_server:app`` under the hypercorn CLI,
one of them with two workers) configured only by ``MCP_REDIS_URL``.  Work
started through one is cancelled through the other; a legacy session is
used from both; Redis is killed mid-run and restarted.  Every wait is
bounded; nothing here asserts how fast anything is.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio

from _support.asgi import (
    cancelled,
    initialize_message,
    legacy_call,
    legacy_headers,
    notification,
)
from _support.deploy import (
    WITH_TASKS,
    Hypercorn,
    RedisServer,
    answer,
    modern,
    redis_server,
    run_hypercorn,
    task_request,
)

pytestmark = [pytest.mark.redis, pytest.mark.subprocess]

# Long enough that only the polled flag (never the hard cancel) can end a
# cancelled call within the test's bounded waits.
GRACE = "60"
LONG = {"n": 100_000, "delay": 0.01}


@asynccontextmanager
async def deployment(redis: RedisServer) -> AsyncIterator[tuple[Hypercorn, Hypercorn]]:
    env = {"MCP_REDIS_URL": redis.url, "MCP_GRACE_PERIOD": GRACE}
    async with run_hypercorn(2, env) as first, run_hypercorn(1, env) as second:
        assert first.port != second.port
        yield first, second
    for process in (first, second):
        log = process.log.decode()
        assert process.process.returncode == 0, log[-3000:]
        assert "Traceback" not in log, log[-3000:]


async def wait_status(client: httpx.AsyncClient, url: str, task_id: str, want: str) -> None:
    with trio.fail_after(20):
        while True:
            reply = await task_request(client, url, "tasks/get", task_id)
            if reply.get("result", {}).get("status") == want:
                return
            await trio.sleep(0.05)


async def start_task(client: httpx.AsyncClient, url: str) -> str:
    params = {"name": "count", "arguments": LONG}
    reply = await modern(client, url, "tools/call", params, capabilities=WITH_TASKS)
    assert reply["result"]["resultType"] == "task", reply
    task_id: str = reply["result"]["taskId"]
    return task_id


async def test_a_task_started_on_one_process_is_cancelled_through_the_other() -> None:
    with redis_server() as redis:
        async with deployment(redis) as (a, b), httpx.AsyncClient(timeout=10) as client:
            task_id = await start_task(client, a.url)
            for url in (a.url, b.url):
                reply = await task_request(client, url, "tasks/get", task_id)
                assert reply["result"]["status"] == "working", reply
            ack = await task_request(client, b.url, "tasks/cancel", task_id)
            assert ack["result"]["resultType"] == "complete"
            await wait_status(client, a.url, task_id, "cancelled")
            await wait_status(client, b.url, task_id, "cancelled")
            # Finished, idempotent; and a stranger's id is unknown everywhere.
            ack = await task_request(client, a.url, "tasks/cancel", task_id)
            assert ack["result"] == {"resultType": "complete", **_meta(ack)}
            unknown = await task_request(client, b.url, "tasks/get", "no-such-task")
            assert unknown["error"]["code"] == -32602


def _meta(reply: dict[str, Any]) -> dict[str, Any]:
    return {"_meta": reply["result"]["_meta"]} if "_meta" in reply["result"] else {}


async def stream_call(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    message: dict[str, Any],
    running: trio.Event,
    answers: list[Any],
) -> None:
    """POST a call, set *running* at its first progress, collect every answer it gets."""
    async with client.stream("POST", url, headers=headers, json=message) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            item = json.loads(line[6:])
            if item.get("method") == "notifications/progress":
                running.set()
            else:
                answers.append(item)


async def test_a_legacy_session_works_from_every_process() -> None:
    with redis_server() as redis:
        async with deployment(redis) as (a, b), httpx.AsyncClient(timeout=30) as client:
            init = await client.post(
                a.url, headers=legacy_headers(version=None), json=initialize_message()
            )
            assert init.status_code == 200, init.text
            session = legacy_headers(init.headers["mcp-session-id"])
            done = await client.post(
                b.url, headers=session, json=notification("notifications/initialized")
            )
            assert done.status_code == 202
            reply = await client.post(
                b.url, headers=session, json=legacy_call(1, "count", {"n": 2, "delay": 0.01})
            )
            assert answer(reply)["result"]["content"][0]["text"] == "counted to 2"

            # notifications/cancelled through b stops the call running on a.
            running, answers = trio.Event(), []
            # The stream ends by itself once the call stopped, well before its grace.
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    call = legacy_call(2, "count", LONG, token="p2")
                    nursery.start_soon(stream_call, client, a.url, session, call, running, answers)
                    await running.wait()
                    posted = await client.post(b.url, headers=session, json=cancelled(2, "stop"))
                    assert posted.status_code == 202
            assert answers == []  # a client-cancelled call gets no response (MCP)

            # DELETE through b ends the session on a, and cancels its call there.
            running, answers = trio.Event(), []
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    call = legacy_call(3, "count", LONG, token="p3")
                    nursery.start_soon(stream_call, client, a.url, session, call, running, answers)
                    await running.wait()
                    deleted = await client.delete(b.url, headers=session)
                    assert deleted.status_code == 204
            assert [m["error"]["code"] for m in answers] == [-32800]
            assert answers[0]["error"]["data"] == {"reason": "session terminated"}
            for url in (a.url, b.url):
                gone = await client.post(url, headers=session, json=legacy_call(4, "count"))
                assert gone.status_code == 404


async def test_redis_killed_mid_run_and_restarted() -> None:
    with redis_server() as redis:
        async with deployment(redis) as (a, b), httpx.AsyncClient(timeout=10) as client:
            task_id = await start_task(client, a.url)
            redis.kill()
            # Requests that need no Redis keep working on every process...
            for url in (a.url, b.url):
                params = {"name": "count", "arguments": {"n": 2, "delay": 0.01}}
                reply = await modern(client, url, "tools/call", params)
                assert reply["result"]["content"][0]["text"] == "counted to 2"
            # ... those that do fail with a clear error, and the task runs on.
            failed = await task_request(client, b.url, "tasks/get", task_id)
            assert failed["error"]["code"] == -32603
            assert "unavailable" in failed["error"]["message"]
            # The worker running it cancels it without Redis; the other one of
            # that process cannot know it and says so.
            ack = await task_request(client, a.url, "tasks/cancel", task_id)
            if "result" not in ack:
                assert ack["error"]["code"] == -32603
            # A task-capable tool is called the ordinary way while the store is down.
            params = {"name": "count", "arguments": {"n": 2, "delay": 0.01}}
            reply = await modern(client, b.url, "tools/call", params, capabilities=WITH_TASKS)
            assert reply["result"]["resultType"] == "complete"
            redis.start()  # same port, empty
            with trio.fail_after(20):
                for url in (a.url, b.url):
                    while True:
                        probe = await task_request(client, url, "tasks/get", "probe")
                        if probe["error"]["code"] == -32602:  # the store answers again
                            break
                        await trio.sleep(0.1)
            fresh = await start_task(client, a.url)
            # Reconnected, subscription included: a cross-process cancel works again.
            with trio.fail_after(20):
                while True:
                    ack = await task_request(client, b.url, "tasks/cancel", fresh)
                    if "result" in ack:
                        break
                    await trio.sleep(0.1)
            await wait_status(client, b.url, fresh, "cancelled")
