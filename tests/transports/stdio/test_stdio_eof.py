"""End of file on stdin ends the client's requests, not its reading.

MCP's stdio shutdown is: the client closes the server's stdin, then waits
for the server to exit, and may read stdout until it does.  So a request
read just before the end of file is still answered; only the tool calls
still running are cancelled (kind ``"disconnect"``, silently), and the
process exits once everything has ended.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from trio_mcp_cancel import Registry, RequestCancelledEvent
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import EventRecorder, assert_no_leaks

from _support.cancellation_tools import probe_server
from _support.stdio import TIMEOUT, assert_json_lines, call, encode, launched, request

INITIALIZE = request(
    1,
    "initialize",
    {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "eof-test", "version": "1"},
    },
)
TOOLS_LIST = request(2, "tools/list")

SERVER = probe_server("stdio-test")


class EndAlreadyKnown(trio.abc.ReceiveStream):
    """Stdin holding *data* and then end of file, both already there.

    The end of file is returned without a schedule point: the reader learns
    it before a request it just spawned has run, which is the order that
    loses that request's reply when end of file closes the session.  (Over
    a real pipe Trio may pick either order; this pins the losing one.)
    """

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data, self.data = self.data, b""
        if data:
            await trio.lowlevel.checkpoint()
        return data

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


#: The registry of every test here (``mcp_registry``).
pytestmark = pytest.mark.mcp_registry(grace_period=2)


async def serve_one_write(registry: Registry, *messages: dict[str, Any]) -> list[dict[str, Any]]:
    """Serve the messages, then end of file; what the server wrote once it returned."""
    stdout = trio.testing.MemorySendStream()
    await serve_mcp_stdio(SERVER, registry, stdin=EndAlreadyKnown(encode(*messages)), stdout=stdout)
    assert_no_leaks(registry)
    return assert_json_lines(stdout.get_data_nowait())


async def test_initialize_and_tools_list_then_end_of_file_in_one_write_get_both_replies(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    written = await serve_one_write(mcp_registry, INITIALIZE, TOOLS_LIST)
    assert [m["id"] for m in written] == [1, 2]
    assert written[0]["result"]["protocolVersion"] == "2025-06-18"
    assert "echo" in {tool["name"] for tool in written[1]["result"]["tools"]}


async def test_a_tool_call_running_at_end_of_file_is_cancelled_silently_the_rest_answered(
    autojump_clock: MockClock, mcp_registry: Registry, mcp_events: EventRecorder
) -> None:
    """The end of the requests still cancels the calls in flight, as before."""
    start = trio.current_time()
    written = await serve_one_write(mcp_registry, INITIALIZE, call(3, "stubborn"), TOOLS_LIST)
    assert [m["id"] for m in written] == [1, 2]  # no answer for the cancelled call
    [cancelled] = mcp_events.of_type(RequestCancelledEvent)
    assert (cancelled.request_id, cancelled.kind) == (3, "disconnect")
    assert trio.current_time() - start <= 2  # bounded by the grace period


RUN_STDIO_SCRIPT = """
import trio
from trio_mcp_cancel import RegistryConfig
from trio_mcp_cancel.server import McpServer, Context
from trio_mcp_cancel.stdio import run_stdio

server = McpServer("eof")

@server.tool()
async def wait(ctx: Context) -> str:
    await trio.sleep(1000)
    return "never"

if __name__ == "__main__":
    run_stdio(server, registry_config=RegistryConfig(grace_period=0.2))
"""


@pytest.mark.subprocess
async def test_a_real_process_answers_both_requests_piped_with_stdin_closed(
    tmp_path: Path,
) -> None:
    """One write of initialize and tools/list, stdin closed at once: both
    replies come before the process exits 0."""
    script = tmp_path / "eof_server.py"
    script.write_text(textwrap.dedent(RUN_STDIO_SCRIPT))
    with trio.fail_after(TIMEOUT):
        async with launched(tmp_path, str(script)) as server:
            assert server.proc.stdin is not None
            await server.proc.stdin.send_all(encode(INITIALIZE, TOOLS_LIST))
            await server.proc.stdin.aclose()
            messages = assert_json_lines(await server.read_to_end())
            assert await server.proc.wait() == 0
            assert [m["id"] for m in messages] == [1, 2]
            assert [tool["name"] for tool in messages[1]["result"]["tools"]] == ["wait"]
            assert "Traceback" not in server.stderr()
