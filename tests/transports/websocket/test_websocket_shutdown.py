"""WebSocket shutdown answers what is in flight, as stdio and HTTP do (issue 36, item 8).

``serve_mcp_websocket(shutdown=event)`` (or ``handle_signals=True`` and a
SIGTERM) flags every call in flight (kind ``"server"``, reason ``"server
shutting down"``), answers each ``-32800`` with the reason, logs it, closes
the connections with code 1001, and returns within ``graceful_timeout``.
The behaviour lives in trio-websocket's socket layer (close frames, a peer
that does not read), so these run on 127.0.0.1 with the real clock, each
bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    WebSocketServer,
    open_websocket_url,
)

from trio_mcp_cancel import HardCancelEvent, Registry, RequestCancelled, checkpoint_cancelled
from trio_mcp_cancel.lowlevel.wire import REQUEST_CANCELLED
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.testing import EventRecorder, assert_no_leaks
from trio_mcp_cancel.websocket import serve_mcp_websocket

REASON = "server shutting down"
TIMEOUT = 10


@attrs.define
class Seen:
    running: int = 0
    stops: list[tuple[str, str | None]] = attrs.field(factory=list)


def build_server(seen: Seen) -> McpServer:
    server = McpServer("ws-shutdown", "1.0")

    @server.tool()
    async def polite(ctx: Context) -> str:
        """Polls the flag: stops by itself."""
        seen.running += 1
        try:
            while True:
                await checkpoint_cancelled()
                await trio.sleep(0.005)
        except RequestCancelled as exc:
            seen.stops.append((exc.kind, exc.reason))
            raise

    @server.tool()
    async def stubborn(ctx: Context) -> str:
        """Ignores the flag: only the hard cancel stops it."""
        seen.running += 1
        await trio.sleep_forever()
        return "unreachable"

    @server.tool()
    async def big(ctx: Context) -> str:
        """An answer larger than the socket buffers: a client that does not read holds it."""
        return "x" * (8 << 20)

    return server


@attrs.define
class Served:
    server: WebSocketServer
    shutdown: trio.Event
    returned: trio.Event = attrs.field(factory=trio.Event)
    returned_at: float | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.server.port}/mcp"


async def serve_until_shutdown(
    nursery: trio.Nursery, server: McpServer, registry: Registry, **options: Any
) -> Served:
    shutdown = trio.Event()
    served: Served | None = None

    async def run(*, task_status: trio.TaskStatus[WebSocketServer]) -> None:
        await serve_mcp_websocket(
            server, registry, "127.0.0.1", 0, shutdown=shutdown, task_status=task_status, **options
        )
        assert served is not None
        served.returned_at = trio.current_time()
        served.returned.set()

    served = Served(await nursery.start(run), shutdown)
    return served


def call(request_id: int, name: str) -> str:
    params = {"name": name, "arguments": {}}
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    )


def cancelled_for_shutdown(request_id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "code": REQUEST_CANCELLED,
            "message": "Request cancelled",
            "data": {"reason": REASON},
        },
    }


async def wait_until_running(seen: Seen, count: int) -> None:
    while seen.running < count:
        await trio.sleep(0.005)


async def test_a_shutdown_answers_each_call_in_flight_minus_32800_logs_it_and_closes_1001(
    mcp_registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    seen = Seen()
    graceful = 2.0
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            s = await serve_until_shutdown(
                nursery, build_server(seen), mcp_registry, graceful_timeout=graceful
            )
            async with open_websocket_url(s.url) as one, open_websocket_url(s.url) as two:
                await one.send_message(call(1, "polite"))
                await one.send_message(call(2, "polite"))
                await two.send_message(call(1, "polite"))
                await wait_until_running(seen, 3)
                began = trio.current_time()
                s.shutdown.set()
                answers = [json.loads(await one.get_message()) for _ in range(2)]
                assert sorted(answers, key=lambda a: a["id"]) == [
                    cancelled_for_shutdown(1),
                    cancelled_for_shutdown(2),
                ]
                assert json.loads(await two.get_message()) == cancelled_for_shutdown(1)
                for ws in (one, two):
                    with pytest.raises(ConnectionClosed) as closed:
                        await ws.get_message()
                    assert closed.value.reason.code == 1001
                    assert closed.value.reason.reason == "going away"
            await s.returned.wait()
    assert s.returned_at is not None and s.returned_at - began < graceful
    assert seen.stops == [("server", REASON)] * 3
    stopped = [r for r in caplog.records if f"by the server ('{REASON}')" in r.getMessage()]
    assert len(stopped) == 3, caplog.text
    assert "shutting down: 3 call(s) and 0 task(s) in flight cancelled (kind server)" in caplog.text
    assert_no_leaks(mcp_registry)


@pytest.mark.parametrize(
    ("grace", "graceful", "hard_after"),
    [(0.3, 3.0, 0.3), (None, 1.0, 0.5)],
    ids=["at-the-grace-period", "at-the-shutdowns-bound"],
)
@pytest.mark.mcp_registry(grace_period=None)
async def test_a_call_that_ignores_the_flag_is_hard_cancelled_answered_and_the_server_returns(
    mcp_registry: Registry, grace: float | None, graceful: float, hard_after: float
) -> None:
    # The hard cancel comes at the transport's grace period, or, when that is
    # longer (here: never), at the shutdown's bound less the answer time.
    seen = Seen()
    limits = ConnectionLimits(disconnect_grace_period=grace)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            s = await serve_until_shutdown(
                nursery, build_server(seen), mcp_registry, limits=limits, graceful_timeout=graceful
            )
            events = EventRecorder.attach(mcp_registry)
            async with open_websocket_url(s.url) as ws:
                await ws.send_message(call(7, "stubborn"))
                await wait_until_running(seen, 1)
                began = trio.current_time()
                s.shutdown.set()
                # During the shutdown a new connection is refused, not served.
                with pytest.raises(ConnectionRejected) as rejected:
                    async with open_websocket_url(s.url):
                        pass
                assert rejected.value.status_code == 503
                assert json.loads(await ws.get_message()) == cancelled_for_shutdown(7)
                answered = trio.current_time() - began
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.get_message()
                assert closed.value.reason.code == 1001
            await s.returned.wait()
    assert hard_after <= answered < hard_after + 0.5
    assert s.returned_at is not None and s.returned_at - began < graceful
    [hard] = events.of_type(HardCancelEvent)
    assert (hard.request_id, hard.kind) == (7, "server")
    assert_no_leaks(mcp_registry)


def _masked_text_frame(text: str) -> bytes:
    payload = text.encode()
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    assert len(payload) < 126
    return bytes([0x81, 0x80 | len(payload)]) + mask + masked


async def open_raw_client(url: str) -> trio.SocketStream:
    """A client that completes the handshake and then never reads again."""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16))
    await stream.send_all(
        b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: " + key + b"\r\n\r\n"
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += await stream.receive_some()
    assert head.startswith(b"HTTP/1.1 101")
    return stream


@pytest.mark.mcp_registry(grace_period=None)
async def test_a_client_that_does_not_read_does_not_hold_the_shutdown_past_its_bound(
    mcp_registry: Registry,
) -> None:
    # No write timeout and no grace period: only the shutdown's own bound
    # can end a connection whose 8 MB answer the client never takes.
    seen = Seen()
    graceful = 2.0
    limits = ConnectionLimits(
        disconnect_grace_period=None, write_timeout=None, keepalive_interval=None
    )
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            s = await serve_until_shutdown(
                nursery, build_server(seen), mcp_registry, limits=limits, graceful_timeout=graceful
            )
            stream = await open_raw_client(s.url)
            await stream.send_all(_masked_text_frame(call(1, "big")))
            await stream.send_all(_masked_text_frame(call(2, "polite")))
            await wait_until_running(seen, 1)
            await trio.sleep(0.2)  # the big answer fills the socket buffers
            began = trio.current_time()
            s.shutdown.set()
            await s.returned.wait()
            await stream.aclose()
    assert s.returned_at is not None and s.returned_at - began < graceful
    assert seen.stops == [("server", REASON)]
    assert_no_leaks(mcp_registry)


@pytest.fixture
async def _sigterm_safety_net() -> AsyncIterator[None]:
    """A receiver underneath, so a server that installed none fails the test
    instead of terminating the test run."""
    with trio.open_signal_receiver(signal.SIGTERM):
        yield


@pytest.mark.usefixtures("_sigterm_safety_net")
async def test_sigterm_with_handle_signals_shuts_down_the_same_way(mcp_registry: Registry) -> None:
    seen = Seen()
    graceful = 2.0
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            returned = trio.Event()

            async def run(*, task_status: trio.TaskStatus[WebSocketServer]) -> None:
                await serve_mcp_websocket(
                    build_server(seen),
                    mcp_registry,
                    "127.0.0.1",
                    0,
                    handle_signals=True,
                    graceful_timeout=graceful,
                    task_status=task_status,
                )
                returned.set()

            ws_server = await nursery.start(run)
            async with open_websocket_url(f"ws://127.0.0.1:{ws_server.port}/mcp") as ws:
                await ws.send_message(call(1, "polite"))
                await wait_until_running(seen, 1)
                began = trio.current_time()
                os.kill(os.getpid(), signal.SIGTERM)
                assert json.loads(await ws.get_message()) == cancelled_for_shutdown(1)
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.get_message()
                assert closed.value.reason.code == 1001
            await returned.wait()
            assert trio.current_time() - began < graceful
    assert seen.stops == [("server", REASON)]


async def test_a_graceful_timeout_that_is_not_a_positive_number_is_refused(
    mcp_registry: Registry,
) -> None:
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="graceful_timeout must be a positive number"):
            await serve_mcp_websocket(
                McpServer("x"), mcp_registry, shutdown=trio.Event(), graceful_timeout=bad
            )
