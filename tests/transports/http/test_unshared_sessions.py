"""A legacy session id that reaches a worker that did not issue it (no shared backend).

Two apps stand for two worker processes of ``trio-mcp-cancel run --workers 2
--allow-unshared``: each issues ids tagged with its own store's tag, so the
other can answer "issued by another server process; without a shared
backend sessions are per worker" instead of a bare "Session not found",
while an id it does not recognise still gets the bare 404.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from trio_mcp_cancel import open_registry
from trio_mcp_cancel._protocol.exchange import Channel
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.transports.http.sessions import NOT_FOUND, NOT_OURS, SessionStore

from _support.asgi import AsgiClient, initialize, legacy_headers, request

SERVER = McpServer("two-workers")


@asynccontextmanager
async def worker() -> AsyncIterator[AsgiClient]:
    async with open_registry() as registry, trio.open_nursery() as nursery:
        client = AsgiClient(McpHttpApp(SERVER, registry), nursery)
        async with client.lifespan():
            yield client
            with trio.fail_after(60):
                await client.wait_all_done()
        client.check()


async def ping(client: AsgiClient, session_id: str) -> tuple[int, str]:
    exchange = await client.post(legacy_headers(session_id), request(7, "ping"))
    if exchange.status != 404:
        return exchange.status, ""
    message: str = exchange.json()["error"]["message"]
    return exchange.status, message


def test_session_ids_carry_their_stores_tag() -> None:
    store = SessionStore()
    ids = [store.create(None, None, 0.0, channel=Channel())[0].id for _ in range(3)]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{32}\." + store.tag, i) for i in ids)
    assert len(set(ids)) == 3 and SessionStore().tag != store.tag


async def test_another_workers_session_is_refused_with_the_reason() -> None:
    async with worker() as first, worker() as second:
        session_id = await initialize(first)
        assert await ping(first, session_id) == (200, "")
        status, message = await ping(second, session_id)
        assert status == 404 and message == NOT_OURS
        assert "another server process" in message and "MCP_REDIS_URL" in message


async def test_an_unknown_or_ended_id_still_gets_the_bare_404() -> None:
    async with worker() as first:
        assert await ping(first, "made-up") == (404, NOT_FOUND)
        # Well formed, with this worker's own tag: simply unknown here (ended).
        session_id = await initialize(first)
        ended = await first.request("DELETE", legacy_headers(session_id))
        assert ended.status in (200, 204)
        assert await ping(first, session_id) == (404, NOT_FOUND)


def test_with_a_shared_backend_the_message_stays_bare() -> None:
    store, other = SessionStore(), SessionStore()
    foreign = other.create(None, None, 0.0, channel=Channel())[0].id
    assert store.not_found(foreign, shared=False) == NOT_OURS
    assert store.not_found(foreign, shared=True) == NOT_FOUND
