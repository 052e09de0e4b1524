"""The README's demo command works: the example server and client, end to end."""

from __future__ import annotations

import subprocess
import sys

import pytest

from _support.repo_paths import ROOT

pytestmark = pytest.mark.subprocess


def test_client_demo_cancels_every_way_and_leaves_nothing() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "client_demo.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:]
    # 0.: modern HTTP, cancelled by closing the stream; no session minted.
    assert "no session: mcp-session-id=None" in out
    # 1. and 3.: cancelled by notification; no response follows (MCP).
    assert "reason='user pressed stop', kind='client'" in out
    assert "reason='changed my mind', kind='client'" in out
    assert "final message" not in out and "unexpected message" not in out
    assert "the stream ended with no response" in out
    assert "no response followed the cancel" in out
    # 0., 2. and 4.: cancelled by disconnect, on HTTP (both eras) and on WebSocket.
    # (6. below closes a modern stream too: the third.)
    assert out.count("reason='client disconnected', kind='disconnect'") == 3
    assert "reason='connection closed', kind='disconnect'" in out
    assert out.count("nothing is left in flight") == 4  # 0., 2., 4. and 7.
    # 5.: the stubborn tool was hard-cancelled, and its stream ended unanswered.
    assert "request.hard_cancelled: request_id=4" in out
    assert "the stream ended, with no response" in out
    # 6.: a child process, stopped by a cancel through the library's client.
    assert "[client] progress: child started" in out
    assert "running: 1 mcp-demo-child process" in out
    assert "no mcp-demo-child process is left" in out
    # 7.: the Tasks extension: created at once, polled working, cancelled by tasks/cancel.
    task = out[out.index("== 7.") : out.index("== 8.")]
    assert "answered at once: resultType='task' taskId=" in task
    assert task.count("-> status='working'") >= 2  # polled twice before the cancel
    assert "tasks/cancel (Mcp-Name: " in task and "-> the empty ack: " in task
    assert "namespace='task:" in task and "reason='task cancelled', kind='client'" in task
    assert "server recorded: kind=client reason='task cancelled' for task" in task
    assert task.rstrip().endswith(
        "-> status='cancelled' statusMessage='cancelled by the client'\n"
        "[client] the task has stopped; nothing is left in flight"
    )
    # 8.: stdio: the server as a child process, cancelled by notification.
    stdio = out[out.index("== 8.") :]
    assert "[client] <- initialized: slow-demo 2025-11-25" in stdio
    assert "[client] <- progress 2/600" in stdio
    # The server's one log line for the cancel: who, why, and how it stopped.
    assert "[stdio server] request 2 in session:stdio-" in stdio
    assert "cancelled by the client ('stop counting'): stopped " in stdio
    assert "on disconnect" not in stdio  # the notification's cancel came first, not EOF's
    assert "ping answered" in stdio
    assert "stdout closed, and no response followed the cancel" in stdio
    assert "the stdio server exited with status 0" in stdio
    assert out.rstrip().endswith("done: 0 requests in flight, 0 rows left")


def test_conformance_server_starts_serves_and_stops_on_sigterm() -> None:
    """The example the conformance suite runs: --port 0, its URL printed, SIGTERM exits 0."""
    import json
    import signal
    import urllib.request

    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "conformance_server.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("conformance server: http://127.0.0.1:"), line
        url = line.split(": ", 1)[1].strip()
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}
        request = urllib.request.Request(
            url,
            json.dumps(body).encode(),
            {
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "mcp-protocol-version": "2026-07-28",
                "mcp-method": "server/discover",
            },
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            capabilities = json.loads(response.read())["result"]["capabilities"]
        assert {"tools", "resources", "prompts", "completions", "logging"} <= set(capabilities)
        assert capabilities["tools"] == {"listChanged": True}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
