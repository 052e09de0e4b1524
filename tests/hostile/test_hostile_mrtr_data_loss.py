"""A used MRTR ``requestState`` after Redis lost its data (``FLUSHALL``, a restart
without persistence, a failover to an empty replica).

Each worker keeps its own used-set, authoritative for every state it saw
until the state expires; and a worker's start marks when Redis's shared set
began, so a set that lost its data says so, and a state sealed before the
loss is refused on every worker that never saw it.  No used state runs a
tool twice, on any worker.  Two workers are two apps in this process
sharing one real redis-server on 127.0.0.1.
"""

from __future__ import annotations

import secrets
import time
from contextlib import AsyncExitStack
from typing import Any

import trio

from trio_mcp_cancel import open_registry
from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import McpHttpApp, app_from_env
from trio_mcp_cancel.server import Context, InputRequired, McpServer

from _support.asgi import AsgiClient, modern_headers, modern_request
from _support.deploy import RedisServer
from _support.redis import prefix, redis

__all__ = ["prefix", "redis"]  # pytest fixtures

CAPS = {"elicitation": {}}
ADDRESS = ("192.0.2.1", 1000)


def build() -> tuple[McpServer, list[str]]:
    server = McpServer("mrtr-data-loss")
    ran: list[str] = []

    @server.tool()
    async def confirm(ctx: Context, item: str) -> str | InputRequired:
        """Deletes *item* once the user confirmed."""
        answer = (ctx.input_responses or {}).get("ok")
        if answer is None or ctx.request_state is None:
            schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
            return InputRequired(
                {"ok": InputRequired.elicit(f"Delete {item}?", schema)}, state={"item": item}
            )
        ran.append(item)
        return f"deleted {item}"

    return server, ran


async def call(client: AsgiClient, request_id: int, params: dict[str, Any]) -> dict[str, Any]:
    message = modern_request(request_id, "tools/call", params, capabilities=CAPS)
    headers = modern_headers("tools/call", "confirm")
    exchange = client.start("POST", headers, message, client=ADDRESS)
    with trio.fail_after(30):
        await exchange.done.wait()
    if exchange.is_sse:
        return next(m for m in exchange.messages() if "id" in m)
    body: dict[str, Any] = exchange.json()
    return body


def retry(state: str) -> dict[str, Any]:
    return {
        "name": "confirm",
        "arguments": {"item": "file.txt"},
        "inputResponses": {"ok": {"action": "accept", "content": {"ok": True}}},
        "requestState": state,
    }


async def test_after_redis_lost_its_data_no_worker_runs_a_used_request_state_again(
    redis: RedisServer, prefix: str
) -> None:
    shared = {"MCP_STATE_SECRET": secrets.token_urlsafe(32)}
    backends = [
        RedisBackend(redis.url, prefix=prefix, op_timeout=1.0, reconnect_delay=0.2)
        for _ in range(2)
    ]
    async with AsyncExitStack() as stack:
        nursery = await stack.enter_async_context(trio.open_nursery())
        clients, ran = [], []
        for backend in backends:
            server, runs = build()
            registry = await stack.enter_async_context(open_registry(grace_period=1))
            app = McpHttpApp(server, registry, backend=backend)
            app_from_env(server, shared)
            client = AsgiClient(app, nursery)
            await stack.enter_async_context(client.lifespan())
            clients.append(client)
            ran.append(runs)
        first, second = clients
        asked = await call(first, 1, {"name": "confirm", "arguments": {"item": "file.txt"}})
        state = asked["result"]["requestState"]
        assert "result" in await call(first, 2, retry(state))
        assert ran == [["file.txt"], []]
        # Epochs are whole seconds (a state's expiry is): lose the data in a later second
        # than the sealing (within one second, a loss goes unseen; documented).
        await trio.sleep(1.05 - time.time() % 1)
        await backends[0].client.flushall()  # Redis loses the shared used-set
        for request_id in (3, 4):
            refused = await call(first, request_id, retry(state))
            assert "used already" in refused["error"]["message"]
        assert ran == [["file.txt"], []]  # never run again where it was used
        # Nor on a worker that never saw it: Redis cannot vouch for it any more.
        lost = await call(second, 8, retry(state))
        assert "cannot be confirmed unused" in lost["error"]["message"]
        assert "start the request over" in lost["error"]["message"]
        assert ran == [["file.txt"], []]
        # States sealed after the loss work across workers as before.
        fresh = (await call(second, 5, {"name": "confirm", "arguments": {"item": "file.txt"}}))[
            "result"
        ]["requestState"]
        assert "result" in await call(second, 6, retry(fresh))
        assert "used already" in (await call(first, 7, retry(fresh)))["error"]["message"]


async def test_a_fresh_redis_is_marked_at_startup_so_the_first_retry_a_second_later_succeeds(
    redis: RedisServer, prefix: str
) -> None:
    shared = {"MCP_STATE_SECRET": secrets.token_urlsafe(32)}
    backends = [
        RedisBackend(redis.url, prefix=prefix, op_timeout=1.0, reconnect_delay=0.2)
        for _ in range(2)
    ]
    async with AsyncExitStack() as stack:
        nursery = await stack.enter_async_context(trio.open_nursery())
        clients = []
        for backend in backends:
            server, _ = build()
            registry = await stack.enter_async_context(open_registry(grace_period=1))
            app = McpHttpApp(server, registry, backend=backend)
            app_from_env(server, shared)
            client = AsgiClient(app, nursery)
            await stack.enter_async_context(client.lifespan())
            clients.append(client)
        # The workers marked the set's start: a state sealed now and first used in a
        # later second is not mistaken for one sealed before a loss.
        assert await backends[0].client.get(f"{{{prefix}}}:state-epoch") is not None
        asked = await call(clients[0], 1, {"name": "confirm", "arguments": {"item": "file.txt"}})
        await trio.sleep(1.05 - time.time() % 1)
        assert "result" in await call(clients[1], 2, retry(asked["result"]["requestState"]))
