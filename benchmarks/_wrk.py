"""``wrk``, the native load generator of the end-to-end benchmark.

Each run gets a Lua script that POSTs one ``tools/call`` per request, with
a fresh JSON-RPC id each time (two calls in flight with the same id in one
session would be a client error), and prints wrk's summary as one JSON line.
wrk runs on the client core (``taskset``), one thread; the server on the
other core.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import trio

from ._client import Server, call_headers, cores, pinned

_LUA = """
local counter = 0
wrk.method = "POST"
wrk.path = "/mcp"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
{headers}
request = function()
  counter = counter + 1
  return wrk.format(nil, nil, nil, string.format([[{body}]], counter))
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {{"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d,"p50_us":%d,"p99_us":%d}}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    errors: int
    p50_us: int
    p99_us: int

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


def path() -> str | None:
    return shutil.which("wrk")


def version() -> str:
    exe = path()
    if exe is None:
        return "not installed"
    done = subprocess.run([exe, "-v"], capture_output=True, text=True, check=False)
    return (done.stdout + done.stderr).strip().splitlines()[0] if done.stdout + done.stderr else "?"


def ensure_installed() -> str | None:
    """wrk's path, installing the Debian package when it is missing and we may."""
    if path() is None and shutil.which("apt-get") and os.geteuid() == 0:
        print("installing wrk (apt-get install wrk)...", file=sys.stderr, flush=True)
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "check": False}
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if subprocess.run(["apt-get", "install", "-y", "wrk"], env=env, **quiet).returncode:
            subprocess.run(["apt-get", "update"], env=env, **quiet)
            subprocess.run(["apt-get", "install", "-y", "wrk"], env=env, **quiet)
    return path()


def script(server: Server, tool: str, *, modern: bool) -> str:
    """The Lua script for calls of *tool* on *server* (legacy session or modern)."""
    from ._client import call_body

    body = call_body(tool, {}, modern=modern, progress=False).decode()
    message = json.loads(body)
    message["id"] = 0
    # The id is the one thing that changes: a %d in the JSON, counted in Lua.
    template = json.dumps(message, separators=(",", ":")).replace('"id":0', '"id":%d')
    assert "]]" not in template and template.count("%") == 1
    headers = "\n".join(
        f'wrk.headers["{key}"] = "{value}"'
        for key, value in call_headers(server, tool, modern=modern).items()
    )
    return _LUA.format(headers=headers, body=template)


async def run(lua: str, port: int, connections: int, seconds: int) -> WrkResult:
    exe = path()
    assert exe is not None
    _, core = cores()
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(lua)
    try:
        argv = pinned(
            [
                exe,
                "-t1",
                f"-c{connections}",
                f"-d{seconds}s",
                "--timeout",
                "10s",
                "-s",
                f.name,
                f"http://127.0.0.1:{port}/mcp",
            ],
            core,
        )
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    finally:
        os.unlink(f.name)
    out = done.stdout.decode()
    lines = [line for line in out.splitlines() if line.startswith("WRKJSON ")]
    if done.returncode or not lines:
        raise RuntimeError(f"wrk failed ({done.returncode}): {out[-500:]} {done.stderr[-500:]!r}")
    data = json.loads(lines[-1][8:])
    errors = sum(data[k] for k in ("connect", "read", "write", "status", "timeout"))
    return WrkResult(
        data["requests"], data["duration_us"] / 1e6, errors, data["p50_us"], data["p99_us"]
    )
