"""Small whole responses are written in the request's task when the socket has room.

The writer task (see ``transports/http/app.py``) exists so that no request
waits on hypercorn's shielded write to a client that stopped reading.  The
hypercorn sink (``transports/http/hypercorn_compat.py``) skips it when the
write cannot block: HTTP/1.1 on hypercorn, a plain TCP socket whose send
buffer has room for the whole response.  Real hypercorn on 127.0.0.1 (the
behaviour lives in the socket layer); which path a response took is seen by
counting writer tasks.  That a client which stops reading still gets the
writer task, and the server survives it, is ``test_hostile_sockets.py``'s
pipelined test; here, that the check says no once the client's buffers are
full.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.transports.http import hypercorn_compat

from _support.asgi import (
    AsgiClient,
    bare_app,
    headers_of,
    modern_call,
    modern_headers,
    notification,
)

TIMEOUT = 15


class _Writers(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("Writer.run"):
            self.spawned += 1


def build() -> McpServer:
    server = McpServer("inline")

    @server.tool()
    async def instant(ctx: Context) -> str:
        return "done"

    @server.tool(cancellable=False)
    async def plain(ctx: Context) -> str:
        return "plain"

    @server.tool()
    async def waits(ctx: Context) -> str:
        await trio.sleep(0.05)
        return "slept"

    return server


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.graceful_timeout = 0.5
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, app, config)
        yield binds[0]
        nursery.cancel_scope.cancel()


@pytest.mark.mcp_registry(grace_period=0.2)
async def test_whole_responses_skip_the_writer_task_and_streams_keep_it(
    mcp_registry: Registry,
) -> None:
    writers = _Writers()
    trio.lowlevel.add_instrument(writers)
    try:
        with trio.fail_after(TIMEOUT):
            app = McpHttpApp(build(), mcp_registry)
            async with serving(app) as base, httpx.AsyncClient(timeout=5) as client:
                for request_id, name, text in [(1, "instant", "done"), (2, "plain", "plain")]:
                    message = modern_call(request_id, name)
                    reply = await client.post(
                        f"{base}/mcp", headers=headers_of(message), json=message
                    )
                    assert reply.headers["content-type"] == "application/json"
                    assert reply.json()["result"]["content"][0]["text"] == text
                note = notification("notifications/x")
                ack = await client.post(f"{base}/mcp", headers=modern_headers(None), json=note)
                assert ack.status_code == 202
                assert writers.spawned == 0  # three whole responses, all inline
                # A call still running streams SSE through writer tasks (on demand:
                # one while there is something to write, see writer.py).
                message = modern_call(3, "waits")
                reply = await client.post(f"{base}/mcp", headers=headers_of(message), json=message)
                assert reply.headers["content-type"] == "text/event-stream"
                assert "slept" in reply.text
                assert writers.spawned >= 1
    finally:
        trio.lowlevel.remove_instrument(writers)


async def test_the_check_says_no_once_the_socket_is_full_and_off_hypercorn(
    mcp_registry: Registry,
) -> None:
    # Not hypercorn's HTTP/1.1 send (the in-memory harness, any callable): never inline.
    async def send(message: Any) -> None:
        pass

    assert not hypercorn_compat.can_write_now(send, 10)
    async with trio.open_nursery() as nursery:
        harness = AsgiClient(McpHttpApp(build(), mcp_registry), nursery)
        exchange = harness.start("POST", modern_headers(None), notification("n"))
        await exchange.wait_complete()
        assert not hypercorn_compat.can_write_now(exchange.send, 10)
    # hypercorn's send on a connection whose client pipelines requests and never
    # reads: yes while the socket has room, then no (and the app writes only on yes,
    # so nothing here blocks before the client's buffers are full).
    answers: list[bool] = []
    body = b"x" * 6_000  # with its head, well under 16 KiB, Trio's TCP_NOTSENT_LOWAT

    async def probe(send: Any) -> None:
        room = hypercorn_compat.can_write_now(send, len(body) + 1024)
        answers.append(room)
        if room:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})

    with trio.fail_after(TIMEOUT):
        async with serving(bare_app(probe)) as base:
            port = int(base.rsplit(":", 1)[1])
            sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            await sock.connect(("127.0.0.1", port))
            async with trio.SocketStream(sock) as stuck, trio.open_nursery() as pipelining:
                request = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"

                async def pipeline() -> None:
                    with contextlib.suppress(trio.BrokenResourceError):
                        await stuck.send_all(request * 2000)

                pipelining.start_soon(pipeline)
                while False not in answers and len(answers) < 400:
                    await trio.sleep(0.01)
                pipelining.cancel_scope.cancel()
    assert answers[0] is True, answers[:5]  # an idle socket: inline
