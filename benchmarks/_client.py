"""Start the benchmark servers pinned to a core, and talk to them over raw sockets.

The client side of the latency and memory benchmarks is a hand-written
HTTP/1.1 client on Trio sockets: it does no more work than writing a request
and scanning the bytes that come back, so what is timed is the server.  The
throughput benchmark uses ``wrk`` instead (see :mod:`benchmarks._wrk`).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final

import trio

from . import _standard

ROOT = Path(__file__).resolve().parent.parent
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
_ids = itertools.count(1)


#: The CPUs this process may use, read once: :func:`pin_self` narrows them.
_CPUS: Final = sorted(os.sched_getaffinity(0))


def cores() -> tuple[str | None, str | None]:
    """``(server core, client core)`` for ``taskset``, or ``None`` where not pinned."""
    if shutil.which("taskset") is None or len(_CPUS) < 2:
        return None, None
    return str(_CPUS[0]), str(_CPUS[1])


def pin_self() -> None:
    """Run the benchmark process (the client) on the client core."""
    _, client = cores()
    if client is not None:
        os.sched_setaffinity(0, {int(client)})


def pinned(argv: list[str], core: str | None) -> list[str]:
    return argv if core is None else ["taskset", "-c", core, *argv]


class Server:
    """A benchmark server process (:mod:`benchmarks._servers`)."""

    def __init__(self, kind: str, process: trio.Process, port: int) -> None:
        self.kind = kind
        self.process = process
        self.port = port
        self.session: str | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss(self) -> int:
        """Resident set size in bytes (``VmRSS``)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")


@asynccontextmanager
async def server(
    kind: str, *, wrapper: Sequence[str] = (), ready_within: float = 60
) -> AsyncIterator[Server]:
    """Run a server of *kind* on the server core until the block ends.

    *wrapper* is a command the server runs under (e.g. valgrind, see
    :mod:`benchmarks._callgrind`), which may make it slow to start: it has
    *ready_within* seconds to say it is ready.
    """
    async with servers([kind], wrapper=wrapper, ready_within=ready_within) as started:
        yield started[kind]


@asynccontextmanager
async def servers(
    kinds: list[str], *, wrapper: Sequence[str] = (), ready_within: float = 60
) -> AsyncIterator[dict[str, Server]]:
    """Run one server of each kind (started and stopped concurrently) until the block ends."""
    started: dict[str, Server] = {}
    errors = {kind: tempfile.TemporaryFile() for kind in kinds}  # the SDK logs at shutdown
    launch = partial(_start, wrapper=wrapper, ready_within=ready_within)
    try:
        async with trio.open_nursery() as nursery:
            for kind in kinds:
                nursery.start_soon(launch, kind, errors[kind], started)
        yield started
    finally:
        async with trio.open_nursery() as nursery:
            for one in started.values():
                nursery.start_soon(_stop, one.process)
        for file in errors.values():
            file.close()


async def _start(
    kind: str,
    errors: Any,
    started: dict[str, Server],
    *,
    wrapper: Sequence[str],
    ready_within: float,
) -> None:
    core, _ = cores()
    code = f"from benchmarks._servers import main; main({kind!r})"
    argv = pinned([*wrapper, sys.executable, "-c", code], core)
    # uvloop and httptools are on the path of the uvicorn[standard] servers only.
    env = _standard.environment() if _standard.is_standard(kind) else None
    process = await trio.lowlevel.open_process(argv, cwd=ROOT, env=env, stdout=-1, stderr=errors)
    try:
        assert process.stdout is not None
        line = b""
        with trio.fail_after(ready_within):
            while b"\n" not in line:
                chunk = await process.stdout.receive_some()
                if not chunk:
                    errors.seek(0)
                    tail = errors.read()[-2000:].decode(errors="replace")
                    raise RuntimeError(f"benchmark server {kind!r} exited: {tail}")
                line += chunk
    except BaseException:
        await _stop(process)
        raise
    started[kind] = Server(kind, process, int(line.split(b"READY", 1)[1].split()[0]))


async def _stop(process: trio.Process) -> None:
    process.terminate()
    # Nothing to save: a server still waiting for its open calls is killed.
    with trio.move_on_after(2):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


def request_bytes(port: int, body: bytes, headers: dict[str, str]) -> bytes:
    head = [
        "POST /mcp HTTP/1.1",
        f"host: 127.0.0.1:{port}",
        f"content-length: {len(body)}",
        "content-type: application/json",
        f"accept: {ACCEPT}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


#: The body of the benchmarks' legacy ``initialize`` (a client declaring nothing).
INITIALIZE: Final = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        },
    }
).encode()


def call_body(tool: str, arguments: dict[str, Any], *, modern: bool, progress: bool) -> bytes:
    """A ``tools/call`` request (modern: with its ``_meta`` envelope)."""
    meta: dict[str, Any] = {}
    if progress:
        meta["progressToken"] = f"p{next(_ids)}"
    if modern:
        meta["io.modelcontextprotocol/protocolVersion"] = MODERN
        meta["io.modelcontextprotocol/clientCapabilities"] = {}
        meta["io.modelcontextprotocol/clientInfo"] = {"name": "bench", "version": "0"}
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    message = {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call", "params": params}
    return json.dumps(message, separators=(",", ":")).encode()


def call_headers(server: Server, tool: str, *, modern: bool) -> dict[str, str]:
    if modern:
        return {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": tool}
    if server.session is None:
        return {}
    return {"mcp-protocol-version": LEGACY, "mcp-session-id": server.session}


class Connection:
    """One keep-alive HTTP/1.1 connection; responses are read as raw bytes."""

    def __init__(self, stream: trio.SocketStream, port: int) -> None:
        self.stream = stream
        self.port = port
        self.buffer = b""

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(await trio.open_tcp_stream("127.0.0.1", port), port)

    async def send(self, body: bytes, headers: dict[str, str]) -> None:
        await self.stream.send_all(request_bytes(self.port, body, headers))

    async def read_until(self, marker: bytes) -> bytes:
        """Read until *marker* is in the buffer; return (and drop) the bytes up to it."""
        while marker not in self.buffer:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise EOFError(f"connection closed before {marker!r}")
            self.buffer += chunk
        index = self.buffer.index(marker) + len(marker)
        head, self.buffer = self.buffer[:index], self.buffer[index:]
        return head

    async def response(self) -> tuple[int, dict[str, str], bytes]:
        """One whole response (Content-Length or chunked)."""
        head = await self.read_until(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                key, value = line.split(":", 1)
                headers[key.strip().lower()] = value.strip()
        if "content-length" in headers:
            return status, headers, await self._take(int(headers["content-length"]))
        body = b""
        if headers.get("transfer-encoding") == "chunked":
            while True:
                size = int((await self.read_until(b"\r\n")).split(b";")[0].strip(), 16)
                if not size:
                    await self.read_until(b"\r\n")  # the end of the (empty) trailer
                    return status, headers, body
                body += (await self._take(size + 2))[:-2]
        return status, headers, body

    async def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise EOFError("connection closed in a body")
            self.buffer += chunk
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    async def aclose(self) -> None:
        await self.stream.aclose()


def final_message(headers: dict[str, str], body: bytes) -> Any:
    """The JSON-RPC response of a body: plain JSON, or the last SSE ``data:`` line."""
    if headers.get("content-type", "").startswith("text/event-stream"):
        data = [line for line in body.decode().splitlines() if line.startswith("data:")]
        return json.loads(data[-1][5:]) if data else None
    return json.loads(body)


async def initialize(server: Server) -> None:
    """Open a legacy session on *server* (``initialize`` + ``notifications/initialized``)."""
    conn = await Connection.open(server.port)
    try:
        await conn.send(INITIALIZE, {})
        status, headers, _ = await conn.response()
        if status != 200 or "mcp-session-id" not in headers:
            raise RuntimeError(f"{server.kind}: initialize answered {status}")
        server.session = headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await conn.send(json.dumps(note).encode(), call_headers(server, "", modern=False))
        await conn.response()
    finally:
        await conn.aclose()


async def call(
    server: Server, tool: str, arguments: dict[str, Any] | None = None, *, modern: bool = False
) -> Any:
    """One tool call on a fresh connection; its JSON-RPC response."""
    conn = await Connection.open(server.port)
    try:
        body = call_body(tool, arguments or {}, modern=modern, progress=False)
        await conn.send(body, call_headers(server, tool, modern=modern))
        _, headers, data = await conn.response()
        return final_message(headers, data)
    finally:
        await conn.aclose()


async def noop_calls(conn: Connection, n: int, headers: dict[str, str], *, modern: bool) -> None:
    """*n* sequential no-op ``tools/call`` on *conn* (one keep-alive connection), each
    checked: answered 200 with the no-op's ``"ok"``.  *headers*: see :func:`call_headers`."""
    body = call_body("noop", {}, modern=modern, progress=False)
    for _ in range(n):
        await conn.send(body, headers)
        status, _, data = await conn.response()
        if status != 200 or b'"ok"' not in data:
            raise RuntimeError(f"port {conn.port}: {status} {data[:200]!r}")


async def stats(server: Server, action: str = "", path: str = "") -> dict[str, Any]:
    """The server's ``stats`` tool (counters, profile switch).

    Asked up to three times: right after a wrk run the MCP SDK's servers
    (one legacy session, every wrk request with the same id) can answer a
    new stream with a wrk call's ``"ok"`` that was still in flight.
    """
    for _ in range(3):
        reply = await call(server, "stats", {"action": action, "path": path})
        try:
            result: dict[str, Any] = json.loads(reply["result"]["content"][0]["text"])
        except (KeyError, IndexError, TypeError, ValueError):
            await trio.sleep(0.2)
            continue
        return result
    raise RuntimeError(f"{server.kind}: stats answered {reply!r}")


async def cancel(conn: Connection, server: Server, request_id: object) -> None:
    """POST ``notifications/cancelled`` on *conn* and read its ``202``."""
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": request_id},
    }
    await conn.send(json.dumps(note).encode(), call_headers(server, "", modern=False))
    status, _, _ = await conn.response()
    if status not in (200, 202):
        raise RuntimeError(f"{server.kind}: cancel answered {status}")
