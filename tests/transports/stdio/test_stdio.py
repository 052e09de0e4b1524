"""MCP over stdio: newline-delimited JSON-RPC on stdin/stdout.

Two kinds of test.  Most drive ``serve_mcp_stdio`` in-process over a Trio
in-memory stream pair, on ``autojump_clock``, so grace periods cost no real
time.  The rest launch a real server process (``examples/slow_server.py
--stdio``, or a small ``run_stdio`` script) because the behaviour lives
there: the official SDK's stdio client, real pipes, end of file, signals
and exit codes.  Those use the real clock and every one is bounded by
``trio.fail_after``.
"""

from __future__ import annotations

import json
import signal
import sys
import textwrap
import tracemalloc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from trio.testing import MockClock

from trio_mcp_cancel import HardCancelEvent, Registry, RequestCancelledEvent
from trio_mcp_cancel._wire.jsonrpc import INVALID_REQUEST, PARSE_ERROR
from trio_mcp_cancel.lowlevel import Caller
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import EventRecorder, assert_no_leaks

from _support.cancellation_tools import probe_server
from _support.repo_paths import ROOT
from _support.stdio import (
    ENVELOPE,
    SLOW_SERVER,
    TIMEOUT,
    Message,
    assert_json_lines,
    call,
    cancel_note,
    encode,
    launched,
    request,
)

SERVER = probe_server("stdio-test")

#: The registry of every test here (``mcp_registry``), unless a test's own marker differs.
pytestmark = pytest.mark.mcp_registry(grace_period=2)


# -- in-process, over an in-memory stream pair ----------------------------------


@attrs.define(eq=False)
class Peer:
    """The client's end of an in-process stdio session."""

    stream: trio.abc.HalfCloseableStream
    caller: Caller
    registry: Registry
    output: bytearray = attrs.field(factory=bytearray)
    messages: list[Message] = attrs.field(factory=list)
    done: trio.Event = attrs.field(factory=trio.Event)
    """Set when ``serve_mcp_stdio`` returned."""
    _arrived: trio.Event = attrs.field(factory=trio.Event)

    async def send(self, *messages: Message) -> None:
        await self.stream.send_all(encode(*messages))

    async def read(self) -> None:
        while data := await self.stream.receive_some():
            self.output += data
            *lines, rest = self.output.split(b"\n")
            for line in lines:
                self.messages.append(json.loads(line))
            self.output = bytearray(rest)
            self._arrived.set()
            self._arrived = trio.Event()

    def answer(self, request_id: object) -> Message | None:
        found = [m for m in self.messages if m.get("id") == request_id and "method" not in m]
        assert len(found) <= 1, found
        return found[0] if found else None

    async def wait_answer(self, request_id: object) -> Message:
        while (found := self.answer(request_id)) is None:
            await self._arrived.wait()
        return found


@asynccontextmanager
async def stdio_session(
    registry: Registry,
    server: McpServer = SERVER,
    pair: Callable[[], tuple[Any, Any]] = trio.testing.memory_stream_pair,
    **options: Any,
) -> AsyncIterator[Peer]:
    """Serve *server* over a stream pair on *registry*; yield the client's end.

    The block ends by closing the client's output (end of file) unless the
    test did, and waits for the server to return.
    """
    client_stream, server_stream = pair()
    async with trio.open_nursery() as nursery:
        done = trio.Event()

        async def serve(task_status: trio.TaskStatus[Caller]) -> None:
            try:
                await serve_mcp_stdio(
                    server,
                    registry,
                    stdin=server_stream,
                    stdout=server_stream,
                    task_status=task_status,
                    **options,
                )
            finally:
                done.set()

        caller = await nursery.start(serve)
        peer = Peer(client_stream, caller, registry, done=done)
        nursery.start_soon(peer.read)
        yield peer
        if not done.is_set():
            await client_stream.send_eof()
        await done.wait()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()  # the reader


async def test_modern_and_legacy_requests_on_one_process(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with stdio_session(mcp_registry) as peer:
        assert peer.caller.namespace.startswith("session:stdio-")
        await peer.send(call(1, "whoami"))
        modern = await peer.wait_answer(1)
        assert modern["result"]["structuredContent"] == {
            "namespace": peer.caller.namespace,
            "era": "modern",
        }
        assert modern["result"]["resultType"] == "complete"
        # initialize makes the process a legacy session ...
        assert peer.caller.channel is not None and peer.caller.channel.legacy is None
        await peer.send(request(2, "initialize", {"protocolVersion": "2025-06-18"}))
        assert (await peer.wait_answer(2))["result"]["protocolVersion"] == "2025-06-18"
        assert peer.caller.channel.legacy is not None
        await peer.send(request(3, "tools/call", {"name": "whoami"}), request(4, "ping"))
        assert (await peer.wait_answer(3))["result"]["structuredContent"]["era"] == "legacy"
        assert (await peer.wait_answer(4))["result"] == {}
        # ... while a request with the modern envelope is still served as modern.
        await peer.send(call(5, "whoami"))
        assert (await peer.wait_answer(5))["result"]["structuredContent"]["era"] == "modern"


async def test_each_session_has_its_own_namespace(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with stdio_session(mcp_registry) as first, stdio_session(mcp_registry) as second:
        assert first.caller.namespace != second.caller.namespace


@pytest.mark.mcp_registry(grace_period=5)
async def test_cancel_by_notification_stops_the_tool_and_nothing_more_is_written(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    async with stdio_session(mcp_registry) as peer:
        events = EventRecorder.attach(peer.registry)
        await peer.send(call(7, "count", {"delay": 1.0}, progressToken="p7"))
        await trio.sleep(2.5)
        assert [m["params"]["progress"] for m in peer.messages] == [1, 2]
        await peer.send(cancel_note(7, "user pressed stop"))
        start = trio.current_time()
        await peer.registry.wait_idle()
        assert trio.current_time() - start <= 1.0  # its next checkpoint, not the grace
        await trio.sleep(10)
        assert len(peer.messages) == 2  # no answer, no more progress
        [cancelled] = events.of_type(RequestCancelledEvent)
        assert (cancelled.request_id, cancelled.kind, cancelled.reason) == (
            7,
            "client",
            "user pressed stop",
        )
        assert cancelled.namespace == peer.caller.namespace
        assert events.of_type(HardCancelEvent) == []
        assert_no_leaks(peer.registry)


@pytest.mark.mcp_registry(grace_period=5)
async def test_listen_on_stdio_ends_with_notifications_cancelled(
    autojump_clock: MockClock, mcp_server: McpServer, mcp_registry: Registry
) -> None:
    """``subscriptions/listen`` is a cancellation path too: on stdio the client ends it by id."""
    async with stdio_session(mcp_registry, mcp_server) as peer:
        filters = {"notifications": {"toolsListChanged": True}, "_meta": ENVELOPE}
        await peer.send(request(9, "subscriptions/listen", filters))
        await trio.sleep(1)
        mcp_server.tools_changed()
        await trio.sleep(1)
        tag = {"io.modelcontextprotocol/subscriptionId": 9}
        assert [(m["method"], m["params"]["_meta"]) for m in peer.messages] == [
            ("notifications/subscriptions/acknowledged", tag),
            ("notifications/tools/list_changed", tag),
        ]
        await peer.send(cancel_note(9, "stop listening"))
        start = trio.current_time()
        await peer.registry.wait_idle()
        assert trio.current_time() == start  # at once: the flag wakes it, no poll, no grace
        mcp_server.tools_changed()
        await trio.sleep(5)
        assert len(peer.messages) == 2  # no answer, nothing more for the cancelled stream
        assert mcp_server.dispatcher.runtime.subscriptions.listeners == set()
        assert_no_leaks(peer.registry)


@pytest.mark.mcp_registry(grace_period=3)
async def test_end_of_file_cancels_everything_and_returns_within_the_grace_period(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    async with stdio_session(mcp_registry) as peer:
        events = EventRecorder.attach(peer.registry)
        await peer.send(call(1, "count"), call(2, "stubborn"), call(3, "echo", {"text": "hi"}))
        await peer.wait_answer(3)
        assert peer.registry.in_flight_count == 2
        start = trio.current_time()
        await peer.stream.send_eof()
        await peer.done.wait()
        assert trio.current_time() - start == pytest.approx(3)
        assert {(e.request_id, e.kind) for e in events.of_type(RequestCancelledEvent)} == {
            (1, "disconnect"),
            (2, "disconnect"),
        }
        [hard] = events.of_type(HardCancelEvent)
        assert (hard.request_id, hard.kind) == (2, "disconnect")
        assert [m["id"] for m in peer.messages] == [3]  # nothing written after EOF
        assert_no_leaks(peer.registry)


@pytest.mark.mcp_registry(grace_period=100)
async def test_the_stdio_grace_overrides_the_registry_for_end_of_file(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    async with stdio_session(
        mcp_registry, limits=ConnectionLimits(disconnect_grace_period=0.25)
    ) as peer:
        await peer.send(call(1, "stubborn"))
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        await peer.stream.send_eof()
        await peer.done.wait()
        assert trio.current_time() - start == pytest.approx(0.25)


async def test_blank_lines_crlf_and_bad_json_are_handled_line_by_line(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    async with stdio_session(mcp_registry) as peer:
        good = json.dumps(call(1, "echo", {"text": "crlf"})).encode()
        await peer.stream.send_all(b"\n  \n" + good + b"\r\n{oops\n[]\n")
        await peer.send(call(2, "echo", {"text": "after"}))
        await peer.wait_answer(2)
        assert peer.answer(1) is not None
        errors = [m["error"]["code"] for m in peer.messages if "error" in m]
        assert errors == [PARSE_ERROR, INVALID_REQUEST]


@pytest.mark.parametrize(
    "pair", [trio.testing.memory_stream_pair, trio.testing.lockstep_stream_pair]
)
async def test_an_over_long_line_is_refused_once_and_skipped(
    autojump_clock: MockClock, pair: Callable[[], tuple[Any, Any]], mcp_registry: Registry
) -> None:
    limit = 1000
    async with stdio_session(
        mcp_registry, pair=pair, limits=ConnectionLimits(max_message_size=limit)
    ) as peer:
        exact = json.dumps(call(1, "echo", {"text": ""})).encode()
        exact = json.dumps(call(1, "echo", {"text": "x" * (limit - len(exact))})).encode()
        assert len(exact) == limit
        await peer.stream.send_all(exact + b"\n")
        assert (await peer.wait_answer(1))["result"]["isError"] is False
        # A valid message, but too long: sent in small pieces across reads.
        too_long = json.dumps(call(2, "echo", {"text": "y" * 10 * limit})).encode() + b"\n"
        for i in range(0, len(too_long), 333):
            await peer.stream.send_all(too_long[i : i + 333])
        await peer.send(call(3, "echo", {"text": "next"}))
        assert (await peer.wait_answer(3))["result"]["content"][0]["text"] == "next"
        assert peer.answer(2) is None
        [refusal] = [m for m in peer.messages if "error" in m]
        assert refusal == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": INVALID_REQUEST,
                "message": "Invalid Request: message too large",
                "data": {"maxMessageSize": limit},
            },
        }


async def test_a_huge_line_is_never_held_in_memory(mcp_registry: Registry) -> None:
    """16 MiB without a newline through a lockstep pair (the sender waits for
    every read): the server must not buffer more than its limit."""
    limit = 64 * 1024
    chunk = b"z" * (64 * 1024)
    with trio.fail_after(TIMEOUT):
        async with stdio_session(
            mcp_registry,
            pair=trio.testing.lockstep_stream_pair,
            limits=ConnectionLimits(max_message_size=limit),
        ) as peer:
            tracemalloc.start()
            try:
                baseline = tracemalloc.get_traced_memory()[0]
                for _ in range(256):
                    await peer.stream.send_all(chunk)
                peak = tracemalloc.get_traced_memory()[1] - baseline
            finally:
                tracemalloc.stop()
            await peer.stream.send_all(b"\n" + encode(call(1, "echo", {"text": "alive"})))
            assert (await peer.wait_answer(1))["result"]["content"][0]["text"] == "alive"
            assert peak < 4 * limit + 2 * len(chunk), peak
            assert [m["error"]["code"] for m in peer.messages if "error" in m] == [INVALID_REQUEST]


async def test_a_slow_non_tool_request_does_not_block_the_read_loop(
    autojump_clock: MockClock,
    mcp_server: McpServer,
    mcp_registry: Registry,
) -> None:
    @mcp_server.tool(cancellable=False)
    async def slow_quiet(ctx: Context) -> str:
        await trio.sleep(100)
        return "slow"

    async with stdio_session(mcp_registry, mcp_server) as peer:
        await peer.send(call(1, "slow_quiet"), call(2, "echo", {"text": "fast"}))
        await peer.wait_answer(2)
        assert trio.current_time() < 1 and peer.answer(1) is None
        assert (await peer.wait_answer(1))["result"]["content"][0]["text"] == "slow"


@pytest.mark.mcp_registry(grace_period=1)
async def test_a_trailing_line_without_newline_is_read(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with stdio_session(mcp_registry) as peer:
        events = EventRecorder.attach(peer.registry)
        await peer.stream.send_all(json.dumps(call(1, "count")).encode())
        await peer.stream.send_eof()
        await peer.done.wait()
        # It was read (and then cancelled by the end of file).
        [cancelled] = events.of_type(RequestCancelledEvent)
        assert (cancelled.request_id, cancelled.kind) == (1, "disconnect")


async def test_max_message_size_must_be_positive(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    _, server = trio.testing.memory_stream_pair()
    with pytest.raises(ValueError, match="max_message_size"):
        await serve_mcp_stdio(
            SERVER,
            mcp_registry,
            stdin=server,
            stdout=server,
            limits=ConnectionLimits(max_message_size=0),
        )


# -- a real server process -------------------------------------------------------


def stdio_params() -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[str(SLOW_SERVER), "--stdio", "--grace-period", "0.5"],
        cwd=str(ROOT),
    )


@pytest.mark.subprocess
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_sdk_stdio_client_cancels_by_cancelling_the_caller(tmp_path: Path, mode: str) -> None:
    errlog_path = tmp_path / "server-stderr.log"

    async def wait_for(needle: str) -> str:
        while needle not in (text := errlog_path.read_text()):
            await trio.sleep(0.05)
        return text

    with trio.fail_after(TIMEOUT), errlog_path.open("w") as errlog:
        async with Client(stdio_client(stdio_params(), errlog=errlog), mode=mode) as client:
            assert client.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
            progress: list[float] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(value)

            done = await client.call_tool(
                "count", {"n": 2, "delay": 0.05}, progress_callback=on_progress
            )
            assert done.content[0].text == "counted to 2"  # type: ignore[union-attr]

            # count polls the flag: it stops at its next step, well before the grace.
            with trio.move_on_after(0.5) as scope:
                await client.call_tool("count", {"n": 1000, "delay": 0.05})
            assert scope.cancelled_caught
            text = await wait_for("cancelled by the client")
            assert "('caller cancelled'): stopped " in text
            await trio.sleep(0.75)  # longer than the grace period
            assert "hard-cancelled" not in errlog_path.read_text()

            # stubborn ignores it: hard-cancelled once the 0.5 s grace ran out.
            with trio.move_on_after(0.3):
                await client.call_tool("stubborn", {"seconds": 60})
            text = await wait_for("hard-cancelled")
            [hard] = [line for line in text.splitlines() if "hard-cancelled" in line]
            assert "cancelled by the client" in hard

            # The session is still usable after both cancels.
            again = await client.call_tool("count", {"n": 1, "delay": 0.01})
            assert again.content[0].text == "counted to 1"  # type: ignore[union-attr]
    assert "Traceback" not in errlog_path.read_text()


@pytest.mark.subprocess
async def test_closing_stdin_cancels_the_call_and_the_server_exits_0(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with launched(
            tmp_path, str(SLOW_SERVER), "--stdio", "--grace-period", "0.5"
        ) as server:
            await server.send(
                call(1, "count", {"n": 1000, "delay": 0.05}),
                call(2, "stubborn"),
                request(3, "server/discover", {"_meta": ENVELOPE}),
            )
            # Answered after both calls were registered (requests are read in order).
            assert (await server.next_message())["id"] == 3
            assert server.proc.stdin is not None
            await server.proc.stdin.aclose()
            with trio.fail_after(5):
                assert await server.proc.wait() == 0
            messages = assert_json_lines(await server.read_to_end())
            assert [m["id"] for m in messages] == [3]
            text = server.stderr()
            assert "request 1 in session:stdio-" in text
            # One line per request: count stops, stubborn is hard-cancelled.
            assert text.count("cancelled on disconnect ('connection closed')") == 2
            assert text.count("hard-cancelled") == 1
            assert "Traceback" not in text


@pytest.mark.subprocess
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_mid_call_exits_0_without_a_traceback(
    tmp_path: Path, signum: signal.Signals
) -> None:
    with trio.fail_after(TIMEOUT):
        async with launched(
            tmp_path, str(SLOW_SERVER), "--stdio", "--grace-period", "0.5"
        ) as server:
            await server.send(
                call(1, "stubborn"), request(2, "server/discover", {"_meta": ENVELOPE})
            )
            assert (await server.next_message())["id"] == 2
            server.proc.send_signal(signum)
            with trio.fail_after(5):
                assert await server.proc.wait() == 0
            assert_json_lines(await server.read_to_end())
            text = server.stderr()
            assert f"{signum.name}: shutting down" in text
            assert "cancelled by the server ('server shutting down')" in text
            assert "hard-cancelled" in text  # the grace period ran out
            assert "Traceback" not in text


@pytest.mark.subprocess
async def test_a_second_signal_stops_at_once(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with launched(
            tmp_path, str(SLOW_SERVER), "--stdio", "--grace-period", "60"
        ) as server:
            await server.send(
                call(1, "stubborn"), request(2, "server/discover", {"_meta": ENVELOPE})
            )
            assert (await server.next_message())["id"] == 2
            server.proc.send_signal(signal.SIGTERM)
            await server.wait_stderr("SIGTERM: shutting down")
            server.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(5):  # not the 60 s grace period
                assert await server.proc.wait() == 0
            text = server.stderr()
            assert "SIGTERM again: stopping now" in text
            assert "Traceback" not in text


RUN_STDIO_SCRIPT = """
import sys
import trio
from trio_mcp_cancel.server import McpServer, Context
from trio_mcp_cancel import RegistryConfig
from trio_mcp_cancel.stdio import run_stdio

server = McpServer("printer")

@server.tool()
async def shout(ctx: Context, text: str) -> str:
    print("NOT PROTOCOL:", text)  # a careless tool writing to stdout
    sys.stdout.flush()
    return text.upper()

@server.tool()
async def wait(ctx: Context) -> str:
    await trio.sleep(1000)
    return "never"

if __name__ == "__main__":
    run_stdio(server, registry_config=RegistryConfig(grace_period=0.2))
"""


@pytest.mark.subprocess
async def test_run_stdio_keeps_stray_prints_off_the_protocol_stream(tmp_path: Path) -> None:
    script = tmp_path / "printer.py"
    script.write_text(textwrap.dedent(RUN_STDIO_SCRIPT))
    with trio.fail_after(TIMEOUT):
        async with launched(tmp_path, str(script)) as server:
            await server.send(call(1, "shout", {"text": "hi"}), call(2, "wait"))
            answer = await server.next_message()
            assert answer["result"]["content"][0]["text"] == "HI"
            assert server.proc.stdin is not None
            await server.proc.stdin.aclose()
            with trio.fail_after(5):
                assert await server.proc.wait() == 0
            stdout = await server.read_to_end()
            assert [m["id"] for m in assert_json_lines(stdout)] == [1]
            text = server.stderr()
            assert "NOT PROTOCOL: hi" in text
            assert b"NOT PROTOCOL" not in stdout
            assert "Traceback" not in text


@pytest.mark.subprocess
async def test_run_stdio_exits_0_on_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "printer.py"
    script.write_text(textwrap.dedent(RUN_STDIO_SCRIPT))
    with trio.fail_after(TIMEOUT):
        async with launched(tmp_path, str(script)) as server:
            await server.send(call(1, "wait"), call(2, "shout", {"text": "x"}))
            assert (await server.next_message())["id"] == 2
            server.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(5):
                assert await server.proc.wait() == 0
            assert "Traceback" not in server.stderr()
