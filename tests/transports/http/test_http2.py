"""Disconnect is cancellation over HTTP/2 too: a reset stream cancels its call.

httpx never resets an HTTP/2 stream it stops reading (it just forgets it), so
this speaks HTTP/2 (cleartext, prior knowledge) with the ``h2`` state machine
over a real socket, to send exactly the frames a browser or proxy sends.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from trio_mcp_cancel import Registry, RequestCancelledEvent
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import ConnectionLimits
from trio_mcp_cancel.testing import EventRecorder, assert_no_leaks

from _support.http_server import call, server

TIMEOUT = 10


class H2Client:
    """Just enough of an HTTP/2 client: requests, streamed data, resets."""

    def __init__(self, stream: trio.SocketStream, authority: str) -> None:
        self.stream = stream
        self.authority = authority
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.events: dict[int, list[h2.events.Event]] = {}

    async def open(self) -> None:
        self.conn.initiate_connection()
        await self.flush()

    async def flush(self) -> None:
        await self.stream.send_all(self.conn.data_to_send())

    async def post(self, body: dict[str, Any], headers: dict[str, str]) -> int:
        data = json.dumps(body).encode()
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(
            stream_id,
            [
                (":method", "POST"),
                (":path", "/mcp"),
                (":scheme", "http"),
                (":authority", self.authority),
                ("accept", "application/json, text/event-stream"),
                ("content-type", "application/json"),
                ("content-length", str(len(data))),
                *headers.items(),
            ],
        )
        self.conn.send_data(stream_id, data, end_stream=True)
        self.events[stream_id] = []
        await self.flush()
        return stream_id

    async def until(self, stream_id: int, predicate: Any) -> list[h2.events.Event]:
        """Read frames until an event of *stream_id* satisfies *predicate*."""
        while True:
            for event in self.events[stream_id]:
                if predicate(event):
                    return self.events[stream_id]
            data = await self.stream.receive_some()
            assert data, "server closed the connection"
            for event in self.conn.receive_data(data):
                sid = getattr(event, "stream_id", None)
                if sid in self.events:
                    self.events[sid].append(event)
                if isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(event.flow_controlled_length, sid)
            await self.flush()

    async def reset(self, stream_id: int) -> None:
        self.conn.reset_stream(stream_id)
        await self.flush()


def _headers(events: list[h2.events.Event]) -> dict[bytes, bytes]:
    for event in events:
        if isinstance(event, h2.events.ResponseReceived):
            return dict(event.headers)
    raise AssertionError("no response headers")


#: The registry of every test here (``mcp_registry``).
pytestmark = pytest.mark.mcp_registry(grace_period=5)


@pytest.fixture
async def h2_server(
    nursery: trio.Nursery, mcp_registry: Registry
) -> AsyncIterator[tuple[int, Registry]]:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    # resume_window=0: a reset legacy stream is not waited for (see test_resumption.py).
    limits = ConnectionLimits(disconnect_grace_period=0.2)
    app = McpHttpApp(server, mcp_registry, limits=limits, resume_window=0)
    binds = await nursery.start(partial(serve, app, config))  # type: ignore[arg-type]
    yield int(binds[0].rsplit(":", 1)[1]), mcp_registry
    assert_no_leaks(mcp_registry)
    nursery.cancel_scope.cancel()


async def test_resetting_an_http2_stream_cancels_only_that_call(
    h2_server: tuple[int, Registry],
) -> None:
    port, registry = h2_server
    events = EventRecorder.attach(registry)
    with trio.fail_after(TIMEOUT):
        client = H2Client(await trio.open_tcp_stream("127.0.0.1", port), f"127.0.0.1:{port}")
        await client.open()
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
        sid = await client.post(init, {})
        got = await client.until(sid, lambda e: isinstance(e, h2.events.StreamEnded))
        session = {"mcp-session-id": _headers(got)[b"mcp-session-id"].decode()}

        def progressed(event: h2.events.Event) -> bool:
            return isinstance(event, h2.events.DataReceived) and b"progress" in event.data

        # Two calls multiplexed on one connection; reset only the first.
        doomed = await client.post(call(1, "count", {}, token="a"), session)
        survivor = await client.post(call(2, "count", {"n": 30}, token="b"), session)
        await client.until(doomed, progressed)
        await client.until(survivor, progressed)
        await client.reset(doomed)
        done = await client.until(survivor, lambda e: isinstance(e, h2.events.StreamEnded))
        body = b"".join(e.data for e in done if isinstance(e, h2.events.DataReceived))
        assert b"counted to 30" in body
        await registry.wait_idle()
        cancelled = events.of_type(RequestCancelledEvent)
        assert [(e.request_id, e.kind) for e in cancelled] == [(1, "disconnect")]
        await client.stream.aclose()
