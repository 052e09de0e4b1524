"""Speaking MCP over stdio from a test: messages as lines, and a launched server process.

Shared by ``tests/transports/stdio/test_stdio.py`` and the Tasks tests that run
over a real stdio server process (``tests/tasks/test_tasks_transports.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from _support.repo_paths import ROOT

__all__ = [
    "ENVELOPE",
    "SLOW_SERVER",
    "TIMEOUT",
    "Message",
    "Process",
    "assert_json_lines",
    "call",
    "cancel_note",
    "encode",
    "launched",
    "request",
]

Message = dict[str, Any]
SLOW_SERVER = ROOT / "examples" / "slow_server.py"
TIMEOUT = 20
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def request(request_id: object, method: str, params: Message | None = None) -> Message:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}


def call(request_id: object, name: str, arguments: Message | None = None, **meta: Any) -> Message:
    return request(
        request_id,
        "tools/call",
        {"name": name, "arguments": arguments or {}, "_meta": {**ENVELOPE, **meta}},
    )


def cancel_note(request_id: object, reason: str | None = None) -> Message:
    params: Message = {"requestId": request_id}
    if reason is not None:
        params["reason"] = reason
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


def encode(*messages: Message) -> bytes:
    return b"".join(json.dumps(m).encode() + b"\n" for m in messages)


@attrs.define(eq=False)
class Process:
    """A launched stdio server: its pipes, and its stderr in a file."""

    proc: trio.Process
    stderr_path: Path
    buffer: bytearray = attrs.field(factory=bytearray)
    stdout: bytearray = attrs.field(factory=bytearray)

    async def send(self, *messages: Message) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(encode(*messages))

    async def next_message(self) -> Message:
        assert self.proc.stdout is not None
        while b"\n" not in self.buffer:
            data = await self.proc.stdout.receive_some()
            assert data, "the server closed stdout"
            self.buffer += data
            self.stdout += data
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        message = json.loads(line)
        assert isinstance(message, dict)
        return message

    async def read_to_end(self) -> bytes:
        assert self.proc.stdout is not None
        while data := await self.proc.stdout.receive_some():
            self.stdout += data
        return bytes(self.stdout)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def wait_stderr(self, needle: str) -> str:
        while needle not in (text := self.stderr()):
            await trio.sleep(0.05)
        return text


@asynccontextmanager
async def launched(tmp_path: Path, *args: str) -> AsyncIterator[Process]:
    stderr_path = tmp_path / "stderr.log"
    with stderr_path.open("wb") as errlog:
        proc = await trio.lowlevel.open_process(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            cwd=ROOT,
        )
        try:
            yield Process(proc, stderr_path)
        finally:
            if proc.returncode is None:
                proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()
                for pipe in (proc.stdin, proc.stdout):
                    if pipe is not None:
                        await pipe.aclose()


def assert_json_lines(stdout: bytes) -> list[Message]:
    """Everything on stdout is one JSON-RPC message per line."""
    assert stdout.endswith(b"\n") or not stdout
    messages = [json.loads(line) for line in stdout.splitlines()]
    assert all(m.get("jsonrpc") == "2.0" for m in messages)
    return messages
