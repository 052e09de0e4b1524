"""A client that stops reading must never pin its tool (message-stream transports).

The connection writes through a bounded outbox with a write deadline (see
``trio_mcp_cancel.transports._connection``): a tool's progress and a
request's reply are queued, never written inline, so a peer that keeps its
connection open but does not read (a zero receive window, a paused
process) cannot block a tool.  When one write outlives ``write_timeout``,
or the outbox would hold more than ``max_buffered_bytes`` behind the
message being written, the peer is *stalled*: its requests are cancelled
(kind ``"disconnect"``), hard-cancelled after the grace period, reading
stops and serving returns.

The in-memory and stdio tests run on ``autojump_clock``, so their timings
are exact; the WebSocket test uses a real socket on 127.0.0.1 whose client
never reads, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from trio.testing import MockClock
from trio_websocket import open_websocket_url

from trio_mcp_cancel import (
    Event,
    HardCancelEvent,
    Registry,
    RequestCancelled,
    RequestCancelledEvent,
    checkpoint_cancelled,
    open_registry,
)
from trio_mcp_cancel._wire import jsonrpc
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import assert_no_leaks
from trio_mcp_cancel.transports._connection import MessageConnection, connection_caller
from trio_mcp_cancel.transports.memory import memory_transport_pair, serve_mcp_memory
from trio_mcp_cancel.websocket import serve_mcp_websocket

Message = dict[str, Any]
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
STALL_REASON = "client stopped reading"


def call(request_id: object, name: str, arguments: Message | None = None, **meta: Any) -> Message:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments or {}, "_meta": {**ENVELOPE, **meta}},
    }


def progress_note(token: str, progress: float, message: str) -> Message:
    """What ``ctx.report_progress(progress, message=message)`` sends."""
    return {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": token, "progress": progress, "message": message},
    }


@attrs.define
class Probe:
    """What the tools saw, with virtual (or real) timestamps."""

    reports: list[tuple[float, float]] = attrs.field(factory=list)
    """(before, after) of every ``report_progress`` of the spamming tools."""
    sent: list[tuple[str, int]] = attrs.field(factory=list)
    """(token, progress) in the order the tools queued them."""
    ended: list[tuple[str, str | None, str | None, float]] = attrs.field(factory=list)
    """(how, kind, reason, when) a spamming tool stopped."""


def make_server(probe: Probe) -> McpServer:
    server = McpServer("slow-readers", "1.0")

    @server.tool()
    async def stubborn_spam(ctx: Context, size: int = 100, delay: float = 1.0) -> str:
        """Reports progress forever and never polls its flag: only the hard cancel stops it."""
        i = 0
        try:
            while True:
                i += 1
                before = trio.current_time()
                await ctx.report_progress(i, message="x" * size)
                probe.reports.append((before, trio.current_time()))
                await trio.sleep(delay)
        except trio.Cancelled:
            cancellation = ctx.request.cancellation
            assert cancellation is not None
            probe.ended.append(
                ("hard", cancellation.kind, cancellation.reason, trio.current_time())
            )
            raise

    @server.tool()
    async def polite_spam(ctx: Context, size: int = 100, delay: float = 1.0) -> str:
        """Reports progress until its flag is set."""
        i = 0
        try:
            while True:
                i += 1
                before = trio.current_time()
                await ctx.report_progress(i, message="x" * size)
                probe.reports.append((before, trio.current_time()))
                await checkpoint_cancelled()
                await trio.sleep(delay)
        except RequestCancelled as exc:
            probe.ended.append(("flag", exc.kind, exc.reason, trio.current_time()))
            raise

    @server.tool()
    async def steps(ctx: Context, n: int = 10, result_size: int = 10) -> str:
        """*n* progress reports back to back, then a result of *result_size* characters."""
        assert isinstance(ctx.progress_token, str)
        for i in range(1, n + 1):
            probe.sent.append((ctx.progress_token, i))  # no checkpoint until queued
            await ctx.report_progress(i, total=n)
        return "y" * result_size

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    @server.tool()
    async def tenant(ctx: Context) -> str:
        return str(ctx.caller.tenant)

    return server


@attrs.define
class Timeline:
    """Registry events with the (virtual) time they happened at."""

    events: list[tuple[float, Event]] = attrs.field(factory=list)

    @classmethod
    def attach(cls, registry: Registry) -> Timeline:
        timeline = cls()
        registry.events.subscribe(
            lambda event: timeline.events.append((trio.current_time(), event))
        )
        return timeline

    def of_type(self, event_type: type[Any]) -> list[tuple[float, Any]]:
        return [(at, event) for at, event in self.events if isinstance(event, event_type)]


# -- a writer that never completes: the tool goes on, the peer is cut off --------


async def test_a_peer_that_never_drains_does_not_block_the_tool_and_is_disconnected(
    autojump_clock: MockClock,
) -> None:
    write_timeout, grace = 10.0, 3.0
    probe = Probe()
    attempted: list[str] = []

    async def never_drains(text: str) -> None:
        attempted.append(text)
        await trio.sleep_forever()

    async with open_registry(grace_period=grace) as registry:
        timeline = Timeline.attach(registry)
        connection = MessageConnection(
            make_server(probe),
            connection_caller("test", registry),
            never_drains,
            limits=ConnectionLimits(write_timeout=write_timeout),
        )
        to_server, incoming = trio.open_memory_channel[str](math.inf)
        start = trio.current_time()
        served: list[float] = []
        async with trio.open_nursery() as nursery:

            async def serve() -> None:
                await connection.serve(incoming)
                served.append(trio.current_time() - start)

            nursery.start_soon(serve)
            # The client sends its call and keeps the connection open (its
            # side is never closed), but reads nothing.
            to_server.send_nowait(json.dumps(call(1, "stubborn_spam", progressToken="p")))
            with trio.fail_after(1000):
                while not served:
                    await trio.sleep(1)

        # serve() returned by itself: the stall, then the hard cancel.
        assert served == [write_timeout + grace]
        assert connection.stalled and connection.closed
        assert connection.buffered_bytes == 0
        # The tool was never held up: each report returned at once, and it
        # went on reporting every second while the first write hung.
        assert all(after == before for before, after in probe.reports)
        assert len(probe.reports) >= write_timeout + grace - 1
        # Only the first message ever reached the (hung) write: the rest queued.
        assert len(attempted) == 1
        assert json.loads(attempted[0])["params"]["progress"] == 1
        [(flagged_at, flagged)] = timeline.of_type(RequestCancelledEvent)
        assert flagged_at - start == write_timeout
        assert (flagged.request_id, flagged.kind, flagged.reason) == (1, "disconnect", STALL_REASON)
        [(hard_at, hard)] = timeline.of_type(HardCancelEvent)
        assert hard_at - start == write_timeout + grace
        assert hard.kind == "disconnect"
        assert [(how, kind, reason) for how, kind, reason, _ in probe.ended] == [
            ("hard", "disconnect", STALL_REASON)
        ]
        assert_no_leaks(registry)
        # Reading stopped: a message the client sends now is never read.
        to_server.send_nowait(json.dumps(call(2, "echo", {"text": "late"})))
        assert incoming.statistics().current_buffer_used == 1


@pytest.mark.mcp_registry(grace_period=5)
async def test_cancelling_serve_ends_it_at_once_even_while_a_write_hangs(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    """Server shutdown does not wait for a peer that does not read."""
    probe = Probe()

    async def never_drains(text: str) -> None:
        await trio.sleep_forever()

    connection = MessageConnection(
        make_server(probe), connection_caller("test", mcp_registry), never_drains
    )
    to_server, incoming = trio.open_memory_channel[str](math.inf)
    to_server.send_nowait(json.dumps(call(1, "stubborn_spam", progressToken="p")))
    with trio.move_on_after(2.5) as shutdown:
        await connection.serve(incoming)
    assert shutdown.cancelled_caught
    assert trio.current_time() == 2.5  # no write timeout, no grace period waited for
    assert len(probe.reports) == 3
    assert_no_leaks(mcp_registry)


# -- the outbox bound -------------------------------------------------------------


@pytest.mark.mcp_registry(grace_period=100)
async def test_a_full_outbox_disconnects_the_peer_without_any_write_timeout(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    probe = Probe()
    size = 200
    note = len(jsonrpc.encode(progress_note("p", 1, "x" * size)))
    # Three notes may wait behind the one being written; the fourth is one too many.
    limit = 3 * note + note // 2
    client_end, server_end = memory_transport_pair(0)  # a send waits for a receive
    timeline = Timeline.attach(mcp_registry)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(
                serve_mcp_memory,
                make_server(probe),
                server_end,
                mcp_registry,
                limits=ConnectionLimits(write_timeout=None, max_buffered_bytes=limit),
            )
        )
        await client_end.send.send(
            json.dumps(call(1, "polite_spam", {"size": size}, progressToken="p"))
        )
        # The client never receives; serve_mcp_memory returns by itself.
    assert trio.current_time() - start == 4  # reports at 0, 1, 2, 3 fit; the 5th (4) not
    assert [report[0] - start for report in probe.reports] == [0, 1, 2, 3, 4]
    [(flagged_at, flagged)] = timeline.of_type(RequestCancelledEvent)
    assert flagged_at - start == 4
    assert (flagged.kind, flagged.reason) == ("disconnect", STALL_REASON)
    assert [(how, kind) for how, kind, _, _ in probe.ended] == [("flag", "disconnect")]
    assert timeline.of_type(HardCancelEvent) == []
    assert_no_leaks(mcp_registry)
    # Nothing was delivered (the first write was cut short), and the
    # server closed its end.
    with pytest.raises(trio.EndOfChannel):
        await client_end.receive.receive()


@pytest.mark.mcp_registry(grace_period=1)
async def test_replies_are_never_refused_but_a_backlog_stops_reading(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    """A client that sends requests without reading the replies: each reply is
    queued (replies never stall the peer), but once more than the bound waits
    no further request is read, so the outbox stops growing; the write
    deadline then ends the session."""
    probe = Probe()
    # Each reply carries the 1100-character text: more than half the bound,
    # less than all of it.
    limit, text = 2000, "z" * 1100
    client_end, server_end = memory_transport_pair(0)
    accepted = 0
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        caller = await nursery.start(
            partial(
                serve_mcp_memory,
                make_server(probe),
                server_end,
                mcp_registry,
                limits=ConnectionLimits(write_timeout=50.0, max_buffered_bytes=limit),
            )
        )
        with trio.move_on_after(10):
            for i in range(100):
                await client_end.send.send(json.dumps(call(i, "echo", {"text": text})))
                accepted += 1
        # The server read a few requests, then stopped reading.
        # Reply 0 is being written (never counted), reply 1 waits (within
        # the bound), so request 2 is read; replies 1 and 2 exceed it, so
        # request 3 never is.
        assert accepted == 3
        assert mcp_registry.in_flight_count == 0
    # 50 s after the first write began, the write deadline ended it all.
    assert trio.current_time() - start == 50
    assert caller.channel is not None and caller.channel.exchanges == set()
    assert_no_leaks(mcp_registry)


def test_the_bounds_are_validated() -> None:
    registry = Registry()
    caller = connection_caller("test", registry)

    async def write(text: str) -> None:
        pass

    with pytest.raises(ValueError, match="write_timeout"):
        MessageConnection(McpServer(), caller, write, limits=ConnectionLimits(write_timeout=0))
    with pytest.raises(ValueError, match="max_buffered_bytes"):
        MessageConnection(
            McpServer(), caller, write, limits=ConnectionLimits(max_buffered_bytes=-1)
        )


# -- a peer that reads: order kept, a large result delivered ----------------------


@pytest.mark.mcp_registry(grace_period=1)
async def test_a_reading_peer_gets_everything_in_order_and_a_result_larger_than_the_limit(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    probe = Probe()
    limit = 16 * 1024  # well above all the notes, which may queue up together
    big = 10 * limit
    # A one-message channel: every write waits for the client to take the last.
    client_end, server_end = memory_transport_pair(1)
    received: list[Message] = []
    timeline = Timeline.attach(mcp_registry)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(
                serve_mcp_memory,
                make_server(probe),
                server_end,
                mcp_registry,
                limits=ConnectionLimits(write_timeout=1.0, max_buffered_bytes=limit),
            )
        )

        async def read() -> None:
            async for text in client_end.receive:
                received.append(json.loads(text))

        nursery.start_soon(read)
        for request_id, n in ((1, 40), (2, 25)):
            arguments = {"n": n, "result_size": big}
            await client_end.send.send(
                json.dumps(call(request_id, "steps", arguments, progressToken=f"t{request_id}"))
            )
        while len(received) < 40 + 25 + 2:
            await trio.sleep(0.1)
        await client_end.send.aclose()  # end the session
    notes = [m for m in received if m.get("method") == "notifications/progress"]
    # Exactly the order in which the tools queued their notes, across both calls.
    assert [(m["params"]["progressToken"], m["params"]["progress"]) for m in notes] == probe.sent
    for request_id, n in ((1, 40), (2, 25)):
        token = f"t{request_id}"
        positions = [
            i for i, m in enumerate(received) if m.get("params", {}).get("progressToken") == token
        ]
        [answer] = [i for i, m in enumerate(received) if m.get("id") == request_id]
        assert len(positions) == n
        assert answer > max(positions)  # the result comes after its last note
        assert received[answer]["result"]["content"][0]["text"] == "y" * big
    assert len(json.dumps(received[answer])) > limit
    assert timeline.of_type(RequestCancelledEvent) == []
    assert_no_leaks(mcp_registry)


# -- stdio: a host that stops reading stdout -----------------------------------


async def test_stdio_host_that_stops_reading_stdout_ends_the_session(
    autojump_clock: MockClock,
) -> None:
    probe = Probe()
    write_timeout, grace = 5.0, 2.0
    # Lockstep: the server's write of stdout waits until the host reads it.
    host, server_stream = trio.testing.lockstep_stream_pair()
    async with open_registry(grace_period=grace) as registry:
        timeline = Timeline.attach(registry)
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(
                    serve_mcp_stdio,
                    make_server(probe),
                    registry,
                    stdin=server_stream,
                    stdout=server_stream,
                    limits=ConnectionLimits(write_timeout=write_timeout),
                )
            )
            line = json.dumps(call(1, "stubborn_spam", progressToken="p")).encode() + b"\n"
            await host.send_all(line)
            # The host keeps stdin open and never reads stdout; serving ends by itself.
        assert trio.current_time() - start == write_timeout + grace
        assert all(after == before for before, after in probe.reports)
        [(flagged_at, flagged)] = timeline.of_type(RequestCancelledEvent)
        assert flagged_at - start == write_timeout
        assert (flagged.kind, flagged.reason) == ("disconnect", STALL_REASON)
        [(hard_at, _)] = timeline.of_type(HardCancelEvent)
        assert hard_at - start == write_timeout + grace
        assert_no_leaks(registry)


# -- WebSocket: a real socket whose client never reads -------------------------


def _masked_text_frame(text: str) -> bytes:
    payload = text.encode()
    mask = os.urandom(4)
    if len(payload) < 126:
        head = bytes([0x81, 0x80 | len(payload)])
    else:
        head = bytes([0x81, 0x80 | 126]) + len(payload).to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def _connect_a_client_that_never_reads(port: int) -> trio.SocketStream:
    """Handshake by hand on a socket with a tiny receive buffer; then never read."""
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", port))
    stream = trio.SocketStream(sock)
    await stream.send_all(
        b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += await stream.receive_some(1)  # not a byte past the response head
    assert head.startswith(b"HTTP/1.1 101")
    return stream


def _tasks_running(name: str) -> int:
    """How many tasks in this run are running a coroutine function called *name*."""
    count = 0
    tasks = [trio.lowlevel.current_root_task()]
    while tasks:
        task = tasks.pop()
        code = getattr(task.coro, "cr_code", None)
        if code is not None and code.co_name == name:
            count += 1
        for nursery in task.child_nurseries:
            tasks.extend(nursery.child_tasks)
    return count


async def _until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await trio.sleep(0.01)


@pytest.mark.mcp_registry(grace_period=5)
async def test_websocket_client_that_stops_reading_is_disconnected_and_others_are_served(
    caplog: pytest.LogCaptureFixture,
    mcp_registry: Registry,
) -> None:
    caplog.set_level(logging.INFO, logger="trio_mcp_cancel.connection")
    probe = Probe()
    size = 32 * 1024
    with trio.fail_after(10):
        async with (
            trio.open_nursery() as nursery,
        ):
            ws_server = await nursery.start(
                partial(
                    serve_mcp_websocket,
                    make_server(probe),
                    mcp_registry,
                    "127.0.0.1",
                    0,
                    limits=ConnectionLimits(
                        disconnect_grace_period=0.3, write_timeout=0.5, max_buffered_bytes=256 << 20
                    ),
                )
            )
            url = f"ws://127.0.0.1:{ws_server.port}/mcp"
            async with open_websocket_url(url) as good:
                serving_others: list[float] = []

                async def echo(text: str) -> Message:
                    await good.send_message(json.dumps(call(text, "echo", {"text": text})))
                    reply: Message = json.loads(await good.get_message())
                    assert reply["result"]["content"][0]["text"] == text
                    return reply

                await echo("before")
                # The peer's address is the connection's tenant.
                await good.send_message(json.dumps(call("t", "tenant")))
                answer = json.loads(await good.get_message())
                assert answer["result"]["content"][0]["text"] == "ip:127.0.0.1"
                assert _tasks_running("_run_handler") == 1
                stalled = await _connect_a_client_that_never_reads(ws_server.port)
                await stalled.send_all(
                    _masked_text_frame(
                        json.dumps(
                            call(1, "polite_spam", {"size": size, "delay": 0.001}, progressToken=1)
                        )
                    )
                )
                # The other client is served while the tool floods the stalled one.
                while not probe.ended:
                    await echo(f"meanwhile-{len(serving_others)}")
                    serving_others.append(trio.current_time())
                    await trio.sleep(0.02)
                [(how, kind, reason, _)] = probe.ended
                assert (how, kind, reason) == ("flag", "disconnect", STALL_REASON)
                assert serving_others  # answered while the stalled client's tool ran
                assert any(
                    "no write completed within 0.5s" in r.getMessage() for r in caplog.records
                )
                # The stalled connection's handler ends promptly: its socket is
                # closed under it (no waiting for a close handshake).
                await _until(lambda: _tasks_running("_run_handler") == 1)
                await echo("after")
            await _until(lambda: _tasks_running("_run_handler") == 0)
            await mcp_registry.wait_idle()
            assert_no_leaks(mcp_registry)
            # The socket really filled: the tool reported more than ever reached
            # the client, which now reads what the kernel buffered, then the end.
            received = bytearray()
            try:
                while data := await stalled.receive_some(1 << 20):
                    received += data
            except trio.BrokenResourceError:
                pass  # a reset is as good as an end here
            await stalled.aclose()
            delivered = received.count(b'"notifications/progress"')
            assert 0 < delivered < len(probe.reports)
            assert b'"id":1' not in received  # no answer after a disconnect
            nursery.cancel_scope.cancel()
