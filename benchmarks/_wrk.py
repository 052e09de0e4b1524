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
from typing import Any

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
{check}
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {{"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d,"p50_us":%d,"p99_us":%d,"unexpected":%d}}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), unexpected_total()))
end
"""

#: No check of the responses: wrk reads them without handing them to Lua.
_NO_CHECK = "unexpected_total = function() return 0 end"

#: Each response handed to Lua and checked (status and a substring of the body),
#: mismatches counted per thread and summed in ``done``.  Costs wrk some CPU.
_CHECK = """
unexpected = 0
local threads = {{}}
setup = function(thread) table.insert(threads, thread) end
response = function(status, headers, body)
  if status ~= {status} or not string.find(body, [[{needle}]], 1, true) then
    unexpected = unexpected + 1
  end
end
unexpected_total = function()
  local n = 0
  for _, thread in ipairs(threads) do n = n + thread:get("unexpected") end
  return n
end
"""


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    errors: int
    p50_us: int
    p99_us: int
    unexpected: int = 0
    """Responses that failed the script's check (see :func:`lua`)."""

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

    message = json.loads(call_body(tool, {}, modern=modern, progress=False))
    return lua(message, call_headers(server, tool, modern=modern))


def lua(
    message: dict[str, Any],
    headers: dict[str, str],
    *,
    status: int | None = None,
    needle: str = "",
) -> str:
    """A script POSTing *message* (its ``id``, if any, counted up) with *headers*.

    With *status*, every response is checked: that status, and *needle* in its
    body; the mismatches are :attr:`WrkResult.unexpected`.
    """
    message = dict(message)
    if "id" in message:
        message["id"] = 0
    # The id is the one thing that changes: a %d in the JSON, counted in Lua.
    template = json.dumps(message, separators=(",", ":"))
    template = template.replace('"id":0', '"id":%d').replace('"requestId":0', '"requestId":%d')
    assert "]]" not in template + needle and template.count("%") == 1, template
    lines = "\n".join(f'wrk.headers["{key}"] = "{value}"' for key, value in headers.items())
    check = _NO_CHECK if status is None else _CHECK.format(status=status, needle=needle)
    return _LUA.format(headers=lines, body=template, check=check)


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
        data["requests"],
        data["duration_us"] / 1e6,
        errors,
        data["p50_us"],
        data["p99_us"],
        data["unexpected"],
    )
