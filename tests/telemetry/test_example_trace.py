"""``examples/slow_server.py --trace`` prints the span of a cancelled call to stderr.

A real server process over stdio, with the OpenTelemetry SDK's console
exporter: what an operator sees for one cancelled call, parented on the
client's ``traceparent``; stdout stays the protocol's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from _support.stdio import SLOW_SERVER, TIMEOUT, call, cancel_note, launched

pytestmark = pytest.mark.subprocess

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_the_example_prints_the_cancelled_calls_span_with_its_flag_and_stop(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with launched(tmp_path, str(SLOW_SERVER), "--stdio", "--trace") as server:
            arguments = {"n": 100, "delay": 0.05}
            await server.send(call(1, "count", arguments, traceparent=TRACEPARENT))
            await trio.sleep(0.3)
            await server.send(cancel_note(1, "operator test"))
            text = await server.wait_stderr('"name": "tools/call count"')
            assert server.proc.stdin is not None
            await server.proc.stdin.aclose()
            stdout = await server.read_to_end()
            await server.proc.wait()
    # Nothing but protocol messages on stdout (the cancelled call gets no answer).
    assert all(json.loads(line) for line in stdout.splitlines())
    start = text.index("{", text.index('"name": "tools/call count"') - 20)
    span = json.JSONDecoder().raw_decode(text[start:])[0]
    assert span["kind"] == "SpanKind.SERVER"
    assert span["context"]["trace_id"] == "0x4bf92f3577b34da6a3ce929d0e0e4736"
    assert span["parent_id"] == "0x00f067aa0ba902b7"
    assert span["attributes"]["mcp_cancel.cancel.kind"] == "client"
    assert span["attributes"]["mcp_cancel.cancel.reason"] == "operator test"
    assert [e["name"] for e in span["events"]] == ["mcp_cancel.flag", "mcp_cancel.stop"]
