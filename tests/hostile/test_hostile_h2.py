"""No HTTP/2 request can end a worker (issue 20, must-have 1).

A POST whose head the app refuses (401, 403, 406, 413, 415), followed by
its ``DATA`` frame once the refusal went out, used to raise ``KeyError``
inside hypercorn 0.18's ``H2Protocol`` and end the whole server.  These
tests speak HTTP/2 (cleartext, prior knowledge) with the ``h2`` state
machine over real sockets on 127.0.0.1, because the failure lives in the
server's frame handling, and check each time that the server still serves
a normal request on a new connection.  They also pin the guards of
:mod:`trio_mcp_cancel.transports.http.hypercorn_compat`: a test here fails
if a guard stops applying or the hypercorn code it guards changes shape.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import pytest
import trio
import trio.lowlevel
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.trio.tcp_server import TCPServer

from trio_mcp_cancel.http import HttpLimits, McpHttpApp, bearer_auth, serve, server_config
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.transports.http import hypercorn_compat

TIMEOUT = 10
TOKEN = "tok-alice"
ACCEPT = "application/json, text/event-stream"
#: How long the attacker waits between a request's head and its body.
BODY_DELAY = 0.5
#: Connections of the rapid-reset flood, 900 reset streams each.
RAPID_RESET_CONNECTIONS = 3

mcp = McpServer("hostile-h2")


@mcp.tool()
async def echo(text: str) -> str:
    return text


AsgiApp = Callable[[Any, Any, Any], Awaitable[None]]


async def start_server(nursery: trio.Nursery, app: AsgiApp) -> int:
    config = server_config(port=0, errorlog=None)
    binds = await nursery.start(partial(serve, app, config))
    return int(binds[0].rsplit(":", 1)[1])


@pytest.fixture
async def port(nursery: trio.Nursery) -> AsyncIterator[int]:
    """Our app behind ``serve()``: bearer auth, localhost origins only."""
    app = McpHttpApp(
        mcp, auth=bearer_auth({TOKEN: "alice"}), http_limits=HttpLimits(body_timeout=5)
    )
    yield await start_server(nursery, app)
    nursery.cancel_scope.cancel()


class H2Conn:
    """One client connection: frames out, events per stream in."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.events: dict[int, list[h2.events.Event]] = {}
        self.closed = False
        self._sending = trio.Lock()
        self.changed = trio.Event()

    @classmethod
    async def open(cls, port: int) -> H2Conn:
        client = cls(await trio.open_tcp_stream("127.0.0.1", port))
        client.conn.initiate_connection()
        await client.flush()
        return client

    async def flush(self) -> None:
        async with self._sending:
            data = self.conn.data_to_send()
            if data:
                await self.stream.send_all(data)

    def head(self, headers: dict[str, str], *, end_stream: bool = False) -> int:
        stream_id: int = self.conn.get_next_available_stream_id()
        self.conn.send_headers(
            stream_id,
            [
                (":method", "POST"),
                (":path", "/mcp"),
                (":scheme", "http"),
                (":authority", "127.0.0.1"),
                *headers.items(),
            ],
            end_stream=end_stream,
        )
        self.events[stream_id] = []
        return stream_id

    async def receive(self) -> None:
        """Read once and sort the events by stream."""
        data = await self.stream.receive_some()
        if not data:
            self.closed = True
            raise EOFError("the server closed the connection")
        for event in self.conn.receive_data(data):
            stream_id = getattr(event, "stream_id", 0)
            if stream_id:
                self.events.setdefault(stream_id, []).append(event)
            if isinstance(event, h2.events.DataReceived):
                self.conn.acknowledge_received_data(event.flow_controlled_length, stream_id)
        await self.flush()
        self.changed.set()
        self.changed = trio.Event()

    async def read_forever(self) -> None:
        """Keep reading (settings, window updates, resets) while another task sends."""
        while True:
            await self.receive()

    def ended(self, stream_id: int) -> bool:
        return any(
            isinstance(e, h2.events.StreamEnded | h2.events.StreamReset)
            for e in self.events[stream_id]
        )

    async def until_ended(self, stream_id: int) -> list[h2.events.Event]:
        while not self.ended(stream_id):
            await self.receive()
        return self.events[stream_id]

    async def aclose(self) -> None:
        await self.stream.aclose()


def status_of(events: list[h2.events.Event]) -> int | None:
    for event in events:
        if isinstance(event, h2.events.ResponseReceived):
            return int(dict(event.headers)[b":status"])
    return None


def body_of(events: list[h2.events.Event]) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))


def initialize_body() -> bytes:
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    message = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    return json.dumps(message).encode()


GOOD = {
    "accept": ACCEPT,
    "content-type": "application/json",
    "authorization": f"Bearer {TOKEN}",
}


async def assert_still_serving(port: int) -> None:
    """A normal request on a new connection gets its normal answer."""
    client = await H2Conn.open(port)
    body = initialize_body()
    stream_id = client.head({**GOOD, "content-length": str(len(body))})
    client.conn.send_data(stream_id, body, end_stream=True)
    await client.flush()
    events = await client.until_ended(stream_id)
    assert status_of(events) == 200, body_of(events)
    assert json.loads(body_of(events))["result"]["serverInfo"]["name"] == "hostile-h2"
    await client.aclose()


async def refused_then_data(port: int, headers: dict[str, str]) -> list[h2.events.Event]:
    """The attack: a refused head, its DATA ``BODY_DELAY`` later (or once answered)."""
    client = await H2Conn.open(port)
    body = initialize_body()
    stream_id = client.head(headers)
    await client.flush()
    with trio.move_on_after(BODY_DELAY):
        await client.until_ended(stream_id)  # 413 is answered before the body
    # A head declaring a longer body gets the first part of it (ending the
    # stream short of its declared length would be a protocol error).
    try:
        client.conn.send_data(stream_id, body, end_stream="content-length" not in headers)
    except h2.exceptions.StreamClosedError:
        pass  # answered and reset already: the frame would not be sent at all
    else:
        await client.flush()
    events = await client.until_ended(stream_id)
    # The connection itself still serves: a second request on it is answered.
    again = client.head({**GOOD, "content-length": str(len(body))})
    client.conn.send_data(again, body, end_stream=True)
    await client.flush()
    assert status_of(await client.until_ended(again)) == 200
    await client.aclose()
    return events


REFUSALS = {
    401: {"accept": ACCEPT, "content-type": "application/json"},
    403: {**GOOD, "origin": "https://evil.example"},
    406: {**GOOD, "accept": "text/html"},
    413: {**GOOD, "content-length": str(50 << 20)},
    415: {**GOOD, "content-type": "text/plain"},
}


@pytest.mark.parametrize("status", sorted(REFUSALS))
async def test_a_refused_http2_head_followed_by_its_data_leaves_the_server_serving(
    port: int, status: int
) -> None:
    with trio.fail_after(TIMEOUT):
        events = await refused_then_data(port, REFUSALS[status])
        assert status_of(events) == status
        assert json.loads(body_of(events))["error"]["code"] == -32600
        await assert_still_serving(port)


async def test_a_bounded_rapid_reset_flood_leaves_the_server_serving(port: int) -> None:
    """Thousands of HEADERS (+ some DATA) + RST_STREAM, then normal requests.

    Spread over connections: hypercorn ends a connection with ``GOAWAY``
    after 1,000 requests (``keep_alive_max_requests``).
    """
    body = initialize_body()
    with trio.fail_after(TIMEOUT):
        for _ in range(RAPID_RESET_CONNECTIONS):
            client = await H2Conn.open(port)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.read_forever)
                for _ in range(9):
                    for n in range(100):
                        stream_id = client.head({**GOOD, "content-length": "100"})
                        if n % 2:
                            client.conn.send_data(stream_id, b"{")
                        client.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                    await client.flush()
                    await trio.lowlevel.checkpoint()
                # The flooding connection itself still serves.
                again = client.head({**GOOD, "content-length": str(len(body))})
                client.conn.send_data(again, body, end_stream=True)
                await client.flush()
                while not client.ended(again):
                    await client.changed.wait()
                assert status_of(client.events[again]) == 200
                nursery.cancel_scope.cancel()
            await client.aclose()
        await assert_still_serving(port)


@pytest.mark.subprocess
async def test_the_hypercorn_cli_worker_survives_the_refused_then_data_sequence() -> None:
    """``hypercorn --worker-class trio module:app`` imports our app, and with it the guards."""
    from _support.deploy import run_hypercorn

    no_auth = {"accept": ACCEPT, "content-type": "application/json"}
    async with run_hypercorn(1) as server:
        with trio.fail_after(TIMEOUT):
            for headers in (
                {**no_auth, "content-type": "text/plain"},  # 415: body read first
                {**no_auth, "content-length": str(50 << 20)},  # 413: the stream guard
            ):
                client = await H2Conn.open(server.port)
                stream_id = client.head(headers)
                await client.flush()
                with trio.move_on_after(BODY_DELAY):
                    await client.until_ended(stream_id)
                client.conn.send_data(stream_id, b"{}", end_stream="content-length" not in headers)
                await client.flush()
                assert status_of(await client.until_ended(stream_id)) in (413, 415)
                await client.aclose()
            # A new connection is served by the same, still running, worker.
            client = await H2Conn.open(server.port)
            body = initialize_body()
            stream_id = client.head({**no_auth, "content-length": str(len(body))})
            client.conn.send_data(stream_id, body, end_stream=True)
            await client.flush()
            assert status_of(await client.until_ended(stream_id)) == 200
            await client.aclose()
        assert server.process.poll() is None, server.log.decode()[-3000:]
    assert "Traceback" not in server.log.decode(), server.log.decode()[-3000:]


# -- the guards themselves ----------------------------------------------------


async def early_answer(scope: Any, receive: Any, send: Any) -> None:
    """A plain ASGI app that answers before reading any body (as many apps may)."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"early"})


async def test_data_for_a_stream_hypercorn_forgot_is_dropped_and_the_stream_reset(
    nursery: trio.Nursery,
) -> None:
    """The stream guard: the connection lives on, the client is asked to stop (NO_ERROR)."""
    port = await start_server(nursery, early_answer)
    with trio.fail_after(TIMEOUT):
        client = await H2Conn.open(port)
        first = client.head({"content-length": "10"})
        await client.flush()
        assert body_of(await client.until_ended(first)) == b"early"
        client.conn.send_data(first, b"0123456789"[:5])
        await client.flush()
        while not any(isinstance(e, h2.events.StreamReset) for e in client.events[first]):
            await client.receive()
        reset = next(e for e in client.events[first] if isinstance(e, h2.events.StreamReset))
        assert reset.error_code == h2.errors.ErrorCodes.NO_ERROR
        second = client.head({}, end_stream=True)
        await client.flush()
        assert body_of(await client.until_ended(second)) == b"early"
        await client.aclose()
    nursery.cancel_scope.cancel()


async def test_a_protocol_error_ends_only_its_connection_and_is_logged_once(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The containment, with the stream guard taken away to get hypercorn's KeyError."""
    monkeypatch.setattr(H2Protocol, "__init__", hypercorn_compat._originals["H2Protocol.__init__"])
    port = await start_server(nursery, early_answer)
    caplog.set_level(logging.ERROR, logger="trio_mcp_cancel.http")
    with trio.fail_after(TIMEOUT):
        bystander = await H2Conn.open(port)
        client = await H2Conn.open(port)
        first = client.head({"content-length": "10"})
        await client.flush()
        await client.until_ended(first)
        client.conn.send_data(first, b"01234")
        await client.flush()
        with pytest.raises(EOFError):
            while True:
                await client.receive()  # until hypercorn closes this connection
        # Another connection, opened before, is still served.
        other = bystander.head({}, end_stream=True)
        await bystander.flush()
        assert body_of(await bystander.until_ended(other)) == b"early"
    records = [r for r in caplog.records if "protocol handling" in r.getMessage()]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert "KeyError" in records[0].getMessage()
    nursery.cancel_scope.cancel()


def test_the_guards_are_ours_once_the_http_app_is_imported() -> None:
    status = hypercorn_compat.status()
    assert status.streams and status.connections, status.reason
    assert H2Protocol.__init__ is hypercorn_compat._guarded_init
    assert TCPServer.run is hypercorn_compat._contained_run


def test_hypercorns_data_branch_still_lacks_the_guard_it_needs() -> None:
    """Fails once hypercorn guards ``DataReceived`` itself: then set ``FIXED_IN``."""
    source = inspect.getsource(H2Protocol._handle_events)
    branch = source.split("h2.events.DataReceived", 1)[1].split("elif", 1)[0]
    assert "self.streams[event.stream_id].handle(" in branch, (
        "hypercorn changed its DataReceived branch: check whether it guards a forgotten "
        "stream now, and update hypercorn_compat.FIXED_IN and the upstream report"
    )
    # The guard relies on these: the stream table is built in __init__, looked up with [].
    init = inspect.getsource(hypercorn_compat._originals["H2Protocol.__init__"])
    assert "self.streams" in init and "self.connection" in init


async def test_the_guards_can_be_turned_off_and_on_again() -> None:
    hypercorn_compat.uninstall()
    try:
        assert H2Protocol.__init__ is not hypercorn_compat._guarded_init
        assert not hypercorn_compat.status().connections
    finally:
        status = hypercorn_compat.install()
    assert status.streams and status.connections
    assert TCPServer.run is hypercorn_compat._contained_run


def test_the_environment_switch_leaves_hypercorn_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    hypercorn_compat.uninstall()
    try:
        monkeypatch.setenv(hypercorn_compat.GUARD_ENV, "off")
        status = hypercorn_compat.install()
        assert not status.streams and not status.connections
        assert hypercorn_compat.GUARD_ENV in status.reason
        assert TCPServer.run is not hypercorn_compat._contained_run
    finally:
        monkeypatch.delenv(hypercorn_compat.GUARD_ENV)
        hypercorn_compat.install()
    assert TCPServer.run is hypercorn_compat._contained_run
