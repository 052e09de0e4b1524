"""hypercorn's keep-alive idle timeout, as one watcher whose deadline moves (issue 35, must-have 2).

:mod:`trio_mcp_cancel.transports.http.hypercorn_idle` replaces hypercorn
0.18's per-request idle task; ``docs/upstream/hypercorn-idle-timeout.md``
proposes the same change upstream.  Each behaviour test runs three
``TCPServer`` classes (``tests/_support/hypercorn_variants.py``): hypercorn's
own (``plain``: the behaviour to keep), ours as carried (``carried``) and
hypercorn with the report's diff applied (``upstream``, so the diff is
tested, not only described).

Real sockets on 127.0.0.1 and a frozen clock (pytest-trio's ``mock_clock``,
rate 0): time moves only when a test jumps it, once every task is blocked,
so "before the timeout" and "after it" are exact, whatever the load of the
machine; no assertion is about wall-clock time.  Each test is bounded by
``pytest.mark.timeout`` (trio's own timeouts do not run on a frozen clock).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import h2.config
import h2.connection
import h2.events
import h11
import pytest
import trio
import trio.testing
import wsproto
import wsproto.events

from trio_mcp_cancel.transports.http import hypercorn_compat, hypercorn_idle

from _support import hypercorn_variants
from _support.hypercorn_variants import serving

#: keep_alive_timeout, in the frozen clock's seconds.
KEEP_ALIVE = 5.0
#: A little; what the clock moves past a deadline, or short of it.
EPSILON = 0.01

pytestmark = pytest.mark.timeout(30)


class Gate:
    """``/slow`` waits here until the test opens it: a request as long as the test wants."""

    def __init__(self) -> None:
        self.opened = trio.Event()
        self.waiting = 0


async def _app(gate: Gate, scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "websocket":  # an echo
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        while (message := await receive())["type"] == "websocket.receive":
            await send({"type": "websocket.send", "text": message["text"]})
        return
    if scope["path"] == "/slow":
        gate.waiting += 1
        await gate.opened.wait()
    body = b"ok"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-length", b"2"), (b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Client:
    """One HTTP/1.1 keep-alive connection (h11 on a real socket)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(cls, port: int) -> Client:
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def send(self, path: str = "/") -> None:
        request = h11.Request(method="GET", target=path, headers=[("Host", "127.0.0.1")])
        await self.stream.send_all(self.h11.send(request) + self.h11.send(h11.EndOfMessage()))

    async def response(self) -> tuple[int, bytes]:
        status, body = 0, b""
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(await self.stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                self.h11.start_next_cycle()
                return status, body
            else:
                raise AssertionError(f"unexpected {event!r}")

    async def request(self, path: str = "/") -> tuple[int, bytes]:
        await self.send(path)
        return await self.response()

    async def closed_by_server(self) -> bool:
        """Waits for the server's next move: True when it closed the connection."""
        try:
            return await self.stream.receive_some(65536) == b""
        except trio.BrokenResourceError:
            return True

    async def is_open(self) -> bool:
        """Whether the server has left the connection open (every task is blocked first)."""
        await trio.testing.wait_all_tasks_blocked()
        with trio.CancelScope() as scope:
            scope.cancel()  # a receive that would block is cancelled: nothing arrived
            await self.stream.receive_some(65536)
            return False  # data or EOF was waiting: the server closed it (or spoke unasked)
        return True


@asynccontextmanager
async def _serve(variant: str, **options: Any) -> AsyncIterator[tuple[int, Gate]]:
    gate = Gate()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await _app(gate, scope, receive, send)

    async with serving(app, variant, keep_alive_timeout=KEEP_ALIVE, **options) as port:
        yield port, gate


async def _jump(clock: trio.testing.MockClock, seconds: float) -> None:
    """Move the frozen clock once the server has done all it can (its timers set)."""
    await trio.testing.wait_all_tasks_blocked()
    clock.jump(seconds)


@pytest.fixture(params=hypercorn_variants.VARIANTS)
def variant(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_an_idle_keep_alive_connection_is_closed_after_the_timeout(
    variant: str, mock_clock: trio.testing.MockClock
) -> None:
    async with _serve(variant) as (port, _):
        client = await Client.open(port)
        assert await client.request() == (200, b"ok")
        await _jump(mock_clock, KEEP_ALIVE - EPSILON)
        assert await client.is_open()
        await _jump(mock_clock, 2 * EPSILON)
        assert await client.closed_by_server()


async def test_a_connection_that_never_sends_a_request_is_closed_after_the_timeout(
    variant: str, mock_clock: trio.testing.MockClock
) -> None:
    async with _serve(variant) as (port, _):
        client = await Client.open(port)
        await _jump(mock_clock, KEEP_ALIVE - EPSILON)
        assert await client.is_open()
        await _jump(mock_clock, 2 * EPSILON)
        assert await client.closed_by_server()


async def test_a_request_longer_than_the_timeout_is_not_cut(
    variant: str, mock_clock: trio.testing.MockClock
) -> None:
    async with _serve(variant) as (port, gate):
        client = await Client.open(port)
        await client.send("/slow")
        await _jump(mock_clock, 3 * KEEP_ALIVE)
        assert gate.waiting == 1 and await client.is_open()
        gate.opened.set()
        assert await client.response() == (200, b"ok")
        assert await client.request() == (200, b"ok")  # and the connection lives on


async def test_each_request_restarts_the_timer(
    variant: str, mock_clock: trio.testing.MockClock
) -> None:
    async with _serve(variant) as (port, _):
        client = await Client.open(port)
        for _ in range(6):  # 6 gaps of 0.6 x the timeout: idle 3.6 timeouts in all
            assert await client.request() == (200, b"ok")
            await _jump(mock_clock, 0.6 * KEEP_ALIVE)
        assert await client.request() == (200, b"ok")
        # The timer is live all along: a whole timeout after the last request closes it.
        await _jump(mock_clock, KEEP_ALIVE + EPSILON)
        assert await client.closed_by_server()


async def test_graceful_shutdown_closes_idle_connections_at_once_and_lets_busy_ones_finish(
    variant: str, mock_clock: trio.testing.MockClock
) -> None:
    shutdown = trio.Event()
    async with _serve(variant, shutdown=shutdown) as (port, gate):
        idle, busy = await Client.open(port), await Client.open(port)
        assert await idle.request() == (200, b"ok")
        await busy.send("/slow")
        await trio.testing.wait_all_tasks_blocked()
        assert gate.waiting == 1
        shutdown.set()  # the clock does not move from here on: "at once"
        assert await idle.closed_by_server()
        assert await busy.is_open()
        gate.opened.set()
        assert await busy.response() == (200, b"ok")
        assert await busy.closed_by_server()  # as soon as it went idle


class _Spawned(trio.abc.Instrument):
    def __init__(self) -> None:
        self.tasks = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.tasks += 1


async def _tasks_for(variant: str, requests: int) -> int:
    """Trio tasks spawned (server and client) while *requests* keep-alive requests are served."""
    async with _serve(variant) as (port, _):
        client = await Client.open(port)
        assert await client.request() == (200, b"ok")  # the connection's own tasks started
        await trio.testing.wait_all_tasks_blocked()
        spawned = _Spawned()
        trio.lowlevel.add_instrument(spawned)
        try:
            for _ in range(requests):
                assert await client.request() == (200, b"ok")
            await trio.testing.wait_all_tasks_blocked()
        finally:
            trio.lowlevel.remove_instrument(spawned)
        await client.stream.aclose()
        return spawned.tasks


async def test_a_keep_alive_request_spawns_one_task_fewer() -> None:
    requests = 20
    with trio.fail_after(20):
        plain = await _tasks_for("plain", requests)
        for variant in ("carried", "upstream"):
            assert plain - await _tasks_for(variant, requests) == requests, variant


async def test_the_connection_ends_when_its_client_closes_it_while_idle(
    variant: str, mock_clock: trio.testing.MockClock
) -> None:
    """Better than hypercorn's: a client that closes while idle frees the connection now.

    hypercorn's idle task keeps the connection's task group (and socket)
    open until the timeout; the watcher ends with the read loop.
    """
    async with _serve(variant) as (port, _):
        client = await Client.open(port)
        assert await client.request() == (200, b"ok")
        await trio.testing.wait_all_tasks_blocked()
        assert len(_connection_handlers()) == 1
        await client.stream.aclose()
        await trio.testing.wait_all_tasks_blocked()  # no clock jump: nothing times out
        if variant == "plain":  # hypercorn's: until the timeout
            assert len(_connection_handlers()) == 1
            await _jump(mock_clock, KEEP_ALIVE + EPSILON)
            await trio.testing.wait_all_tasks_blocked()
        assert _connection_handlers() == []


class H2Client:
    """One HTTP/2 connection, cleartext with prior knowledge (h2 on a real socket)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))

    @classmethod
    async def open(cls, port: int) -> H2Client:
        client = cls(await trio.open_tcp_stream("127.0.0.1", port))
        client.h2.initiate_connection()
        await client.flush()
        return client

    async def flush(self) -> None:
        await self.stream.send_all(self.h2.data_to_send())

    async def request(self, path: str = "/") -> tuple[int, bytes]:
        stream_id = self.h2.get_next_available_stream_id()
        headers = [(":method", "GET"), (":path", path), (":scheme", "http")]
        self.h2.send_headers(stream_id, [*headers, (":authority", "127.0.0.1")], end_stream=True)
        await self.flush()
        status, body = 0, b""
        while True:
            data = await self.stream.receive_some(65536)
            assert data, "the server closed the connection"
            for event in self.h2.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    self.h2.acknowledge_received_data(len(event.data), event.stream_id)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream_id:
                    await self.flush()
                    return status, body
            await self.flush()

    async def closed_by_server(self) -> bool:
        """Reads until the server closes the connection (a GOAWAY first or not)."""
        try:
            while await self.stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        return True


async def test_http2_each_request_restarts_the_timer_and_idle_closes(
    variant: str, mock_clock: trio.testing.MockClock
) -> None:
    async with _serve(variant) as (port, _):
        client = await H2Client.open(port)
        for _ in range(4):
            assert await client.request() == (200, b"ok")
            await _jump(mock_clock, 0.6 * KEEP_ALIVE)
        assert await client.request() == (200, b"ok")
        await _jump(mock_clock, KEEP_ALIVE + EPSILON)
        assert await client.closed_by_server()


async def test_an_open_websocket_is_not_closed_by_the_timer(
    variant: str, mock_clock: trio.testing.MockClock
) -> None:
    async with _serve(variant) as (port, _):
        client = await Client.open(port)  # only its socket and is_open(): wsproto speaks
        ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
        await client.stream.send_all(ws.send(wsproto.events.Request("127.0.0.1", "/ws")))

        async def next_event() -> wsproto.events.Event:
            while True:
                for event in ws.events():
                    return event
                ws.receive_data(await client.stream.receive_some(65536))

        assert isinstance(await next_event(), wsproto.events.AcceptConnection)
        await _jump(mock_clock, 3 * KEEP_ALIVE)
        assert await client.is_open()
        await client.stream.send_all(ws.send(wsproto.events.TextMessage("still here")))
        echo = await next_event()
        assert isinstance(echo, wsproto.events.TextMessage) and echo.data == "still here"


def _connection_handlers() -> list[trio.lowlevel.Task]:
    """The tasks serving a connection (trio's ``serve_listeners`` runs one per connection)."""
    found = []
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        assert task is not None
        if task.name.endswith("._run_handler"):
            found.append(task)
        todo.extend(t for n in task.child_nurseries for t in n.child_tasks)
    return found


# -- the guard: a TCPServer of another shape is left alone --------------------------------


class _OtherShape:
    """A TCPServer whose idle timeout is not hypercorn 0.18's ``TrioSingleTask``."""

    def __init__(self) -> None:
        self.idle_deadline = 0.0

    async def _read_data(self) -> None:
        pass

    async def _idle_timeout(self) -> None:
        pass

    async def _initiate_server_close(self) -> None:
        pass


def test_a_tcp_server_of_another_shape_is_left_alone() -> None:
    init, read = _OtherShape.__init__, _OtherShape._read_data
    why = hypercorn_idle.apply(_OtherShape)
    assert "another shape" in why
    assert _OtherShape.__init__ is init and _OtherShape._read_data is read
    assert not hypercorn_idle.applied(_OtherShape)


def test_apply_and_restore_round_trip_on_hypercorns_class() -> None:
    cls: Any = hypercorn_variants.fresh_tcp_server_class()
    init, read = cls.__init__, cls._read_data
    assert hypercorn_idle.apply(cls) == "" and hypercorn_idle.applied(cls)
    assert cls.__init__ is not init and cls._read_data is not read
    assert hypercorn_idle.apply(cls) == ""  # idempotent
    hypercorn_idle.restore(cls)
    assert cls.__init__ is init and cls._read_data is read
    assert not hypercorn_idle.applied(cls)


def test_install_applies_the_idle_timer_and_the_switch_leaves_it_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tcp_server = _hypercorns_tcp_server()
    hypercorn_compat.uninstall()
    try:
        assert not hypercorn_idle.applied(tcp_server) and not hypercorn_compat.status().idle
        monkeypatch.setenv(hypercorn_compat.FAST_PATHS_ENV, "off")
        status = hypercorn_compat.install()
        assert status.connections and not status.idle
        assert f"idle timer: {hypercorn_compat.FAST_PATHS_ENV} turned it off" in status.reason
        assert not hypercorn_idle.applied(tcp_server)
        hypercorn_compat.uninstall()
        monkeypatch.delenv(hypercorn_compat.FAST_PATHS_ENV)
        status = hypercorn_compat.install()
        assert status.idle and hypercorn_idle.applied(tcp_server) and status.reason == ""
        hypercorn_compat.uninstall()
        assert not hypercorn_idle.applied(tcp_server)
    finally:
        monkeypatch.delenv(hypercorn_compat.FAST_PATHS_ENV, raising=False)
        hypercorn_compat.uninstall()
        hypercorn_compat.install()


def test_the_idle_timer_applies_on_the_releases_it_was_checked_against() -> None:
    assert hypercorn_compat._why_no_idle("0.17.3") == ""
    assert hypercorn_compat._why_no_idle("0.18.0") == ""
    assert "not a release" in hypercorn_compat._why_no_idle("0.16.0")
    assert "not a release" in hypercorn_compat._why_no_idle("0.19.0")


def _hypercorns_tcp_server() -> type:
    from hypercorn.trio.tcp_server import TCPServer

    return TCPServer
