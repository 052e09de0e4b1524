"""``server_config()`` / ``serve()`` and the example server's shutdown.

The in-process tests run ``serve()`` on 127.0.0.1 with small ASGI apps, to
check what the defaults promise (slow headers are cut, long silent responses
are not, errors are logged).  The rest launch ``examples/slow_server.py`` as a
real process, because signals, exit status and tracebacks only exist there.
Everything uses the real clock and is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import httpx
import pytest
import trio
from hypercorn.config import Config
from trio_websocket import open_websocket_url

from trio_mcp_cancel.http import serve, server_config

from _support.repo_paths import ROOT

SLOW_SERVER = ROOT / "examples" / "slow_server.py"
TIMEOUT = 20
GRACEFUL = 5.0  # server_config()'s graceful_timeout, which the example uses
GRACE = 2.0  # the example's default --grace-period

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("slow_server_under_test", SLOW_SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- server_config() -------------------------------------------------------------


def test_server_config_defaults() -> None:
    config = server_config()
    assert config.bind == ["127.0.0.1:8000"]
    assert config.graceful_timeout == 5.0
    assert config.keep_alive_timeout == 5.0
    # Never set: it would cut every long, silent SSE tool call off.
    assert config.read_timeout is None
    assert config.ssl_handshake_timeout == 10.0
    assert config.h11_max_incomplete_size == 16 * 1024
    assert config.h2_max_header_list_size == 16 * 1024
    assert config.h2_max_concurrent_streams == 64
    assert config.backlog == 128
    assert config.errorlog == "-"
    assert config.accesslog is None


def test_server_config_host_port_and_overrides() -> None:
    assert server_config(host="0.0.0.0", port=0).bind == ["0.0.0.0:0"]
    assert server_config(host="::1", port=9).bind == ["[::1]:9"]
    config = server_config(graceful_timeout=1.5, keep_alive_timeout=2, bind=["127.0.0.1:1234"])
    assert config.graceful_timeout == 1.5
    assert config.keep_alive_timeout == 2
    assert config.bind == ["127.0.0.1:1234"]
    assert config.backlog == 128  # the other defaults stay
    logger = logging.getLogger("test-serving")
    assert server_config(errorlog=logger).errorlog is logger


@pytest.mark.parametrize(
    "name",
    [
        "graceful_timout",  # a typo must not leave the default silently in place
        "_log",  # private
        "log",  # a read-only property
        "from_toml",  # a method, not a setting
        "response_headers",
    ],
)
def test_server_config_rejects_unknown_settings(name: str) -> None:
    with pytest.raises(TypeError, match=name):
        server_config(**{name: 1})


async def test_serve_refuses_host_or_port_with_a_config() -> None:
    with trio.fail_after(TIMEOUT):  # not serving forever instead
        with pytest.raises(TypeError):
            await serve(ok_app, server_config(port=0), port=0)
        with pytest.raises(TypeError):
            await serve(ok_app, server_config(port=0), host="127.0.0.1")


# -- serve() in-process ----------------------------------------------------------


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        await send({"type": message["type"] + ".complete"})
        if message["type"] == "lifespan.shutdown":
            return


async def ok_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def slow_stream_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Stream 6 chunks over 1.5 s while the client sends nothing, like an SSE call.

    Like ``McpHttpApp``, it stops when hypercorn reports ``http.disconnect``.
    """
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    async with trio.open_nursery() as nursery:

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch_disconnect)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(6):
            await trio.sleep(0.25)
            await send({"type": "http.response.body", "body": b"%d" % i, "more_body": True})
        await send({"type": "http.response.body", "body": b"done"})
        nursery.cancel_scope.cancel()


async def failing_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    raise RuntimeError("boom-in-the-app")


async def start(nursery: trio.Nursery, app: Any, config: Config) -> str:
    binds: list[str] = await nursery.start(partial(serve, app, config))
    return binds[0]


async def test_serve_reports_the_bound_url_and_serves(nursery: trio.Nursery) -> None:
    url = await start(nursery, ok_app, server_config(port=0))
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url) and not url.endswith(":0")
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            response = await client.get(url)
    assert response.status_code == 200 and response.text == "ok"
    nursery.cancel_scope.cancel()


async def test_keep_alive_timeout_cuts_slow_request_headers(nursery: trio.Nursery) -> None:
    url = await start(nursery, ok_app, server_config(port=0, keep_alive_timeout=0.5))
    host, port = url.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    started = trio.current_time()
    with trio.fail_after(TIMEOUT):
        await stream.send_all(b"POST / HTTP/1.1\r\nHost: x\r\n")
        try:
            # One header byte every 0.1 s: never a complete request head.
            while True:
                with trio.move_on_after(0.1):
                    if await stream.receive_some() == b"":
                        break
                await stream.send_all(b"x")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    elapsed = trio.current_time() - started
    await stream.aclose()
    assert elapsed < 2.0, f"a slowloris client held the connection for {elapsed:.1f}s"
    nursery.cancel_scope.cancel()


@pytest.mark.slow
async def test_long_silent_responses_are_not_cut(nursery: trio.Nursery) -> None:
    # A response lasting 1.5 s, with the client silent, survives a keep-alive
    # timeout of 0.3 s: no read timeout applies while a request is handled.
    url = await start(nursery, slow_stream_app, server_config(port=0, keep_alive_timeout=0.3))
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            response = await client.get(url)
    assert response.text == "012345done"
    nursery.cancel_scope.cancel()


@pytest.mark.parametrize("which", ["server_config", "example"])
async def test_server_errors_are_logged(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture, which: str
) -> None:
    caplog.set_level(logging.INFO)
    config = server_config(port=0) if which == "server_config" else load_example().demo_config()
    assert config.errorlog is not None
    url = await start(nursery, failing_app, config)
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            response = await client.get(url)
    assert response.status_code == 500
    assert "boom-in-the-app" in caplog.text
    assert "Running on http://127.0.0.1:" in caplog.text
    nursery.cancel_scope.cancel()


# -- the example server, as a process -------------------------------------------

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "test-serving", "version": "1"},
}
HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": "tools/call",
    "mcp-name": "count",
}


def count_call(n: int, delay: float) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "count",
            "arguments": {"n": n, "delay": delay},
            "_meta": {**META, "progressToken": "t"},
        },
    }


@attrs.define(eq=False)
class Example:
    proc: trio.Process
    stderr_path: Path
    http_url: str
    ws_url: str

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def stop_time(self, signum: int) -> float:
        """Send *signum* and return how long the process took to exit."""
        self.proc.send_signal(signum)
        started = trio.current_time()
        with trio.fail_after(TIMEOUT):
            await self.proc.wait()
        return trio.current_time() - started

    def assert_clean_exit(self) -> None:
        text = self.stderr()
        assert self.proc.returncode == 0, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
        assert "KeyboardInterrupt" not in text, text[-3000:]
        # The errors log is on (hypercorn's startup line reaches stderr) and
        # the stop went through the graceful shutdown, not a fallback.
        assert "Running on http://127.0.0.1:" in text
        assert "received: shutting down gracefully" in text


@asynccontextmanager
async def example(tmp_path: Path) -> AsyncIterator[Example]:
    stderr_path = tmp_path / "stderr.log"
    with stderr_path.open("wb") as errlog:
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(SLOW_SERVER), "--port", "0", "--ws-port", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errlog,
            cwd=ROOT,
        )
        try:
            assert proc.stdout is not None
            out = b""
            with trio.fail_after(TIMEOUT):
                while out.count(b"\n") < 2:
                    data = await proc.stdout.receive_some()
                    assert data, stderr_path.read_text(errors="replace")
                    out += data
            http_url = re.search(r"http://127\.0\.0\.1:\d+/mcp", out.decode())
            ws_url = re.search(r"ws://127\.0\.0\.1:\d+/mcp", out.decode())
            assert http_url and ws_url, out
            yield Example(proc, stderr_path, http_url.group(), ws_url.group())
        finally:
            if proc.returncode is None:
                proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()
                assert proc.stdout is not None
                await proc.stdout.aclose()


@pytest.mark.subprocess
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_example_stops_cleanly_on_a_signal(tmp_path: Path, signum: int) -> None:
    async with example(tmp_path) as server:
        # Keep the client's keep-alive connection open across the signal:
        # idle connections must not hold the shutdown for graceful_timeout.
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            with trio.fail_after(TIMEOUT):
                response = await client.post(
                    server.http_url, json=count_call(1, 0.0), headers=HEADERS
                )
            assert response.status_code == 200, response.text
            assert "counted to 1" in response.text
            elapsed = await server.stop_time(signum)
        server.assert_clean_exit()
        assert elapsed < GRACEFUL - 1, f"stopped in {elapsed:.1f}s"


@pytest.mark.subprocess
async def test_example_stops_with_a_websocket_connection_open(tmp_path: Path) -> None:
    async with example(tmp_path) as server, open_websocket_url(server.ws_url) as ws:
        await ws.send_message(
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": META}})
        )
        with trio.fail_after(TIMEOUT):
            assert json.loads(await ws.get_message())["id"] == 1
        elapsed = await server.stop_time(signal.SIGINT)
        server.assert_clean_exit()
        assert elapsed < GRACEFUL - 1, f"stopped in {elapsed:.1f}s"


async def stream_count_then_signal(
    server: Example, *signals: int, between: int = 1
) -> tuple[int, float, Any]:
    """Run a long ``count`` over SSE and send *signals* as it streams.

    The first signal goes at progress 2, each next one *between* progress
    notifications later.  Returns the number of progress notifications seen
    after the first signal, the time from it to the process's exit, and the
    call's answer (``None`` if none came).
    """
    answer = None
    progress = 0
    pending = list(signals)
    next_at = 2
    first: float | None = None
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        with trio.fail_after(TIMEOUT):
            try:
                async with client.stream(
                    "POST", server.http_url, json=count_call(1000, 0.5), headers=HEADERS
                ) as response:
                    assert response.status_code == 200
                    async for line in response.aiter_lines():
                        assert '"result"' not in line, line  # 1000 steps never finish
                        if line.startswith("data: ") and '"id"' in line:
                            answer = json.loads(line[6:])
                        if "notifications/progress" not in line:
                            continue
                        progress += 1
                        if pending and progress == next_at:
                            server.proc.send_signal(pending.pop(0))
                            first = trio.current_time() if first is None else first
                            next_at += between
            except (httpx.RemoteProtocolError, httpx.ReadError):
                pass  # the call was cut at the end of the shutdown
            await server.proc.wait()
    assert first is not None and not pending
    return progress - 2, trio.current_time() - first, answer


@pytest.mark.subprocess
async def test_example_answers_a_call_in_flight_minus_32800_then_stops(tmp_path: Path) -> None:
    async with example(tmp_path) as server:
        after, elapsed, answer = await stream_count_then_signal(server, signal.SIGINT)
        server.assert_clean_exit()
    # Graceful: the call was flagged at Ctrl-C (kind server), stopped at its
    # next poll, and its client was told why before the connection closed.
    assert answer is not None, "no answer: the call was cut off"
    assert answer["error"]["code"] == -32800, answer
    assert answer["error"]["data"] == {"reason": "server shutting down"}, answer
    assert after <= 1, f"{after} progress notifications after the signal"
    assert elapsed < GRACEFUL, f"stopped in {elapsed:.1f}s"
    assert "cancelled by the server ('server shutting down')" in server.stderr()


@pytest.mark.subprocess
async def test_a_second_signal_stops_at_once(tmp_path: Path) -> None:
    # ``stubborn`` ignores the flag: only the hard cancel, GRACEFUL - 1 s after
    # the first signal, would end it; the second signal ends everything now.
    call = count_call(1, 0.0)
    call["params"] = {"name": "stubborn", "arguments": {}, "_meta": META}
    async with example(tmp_path) as server, httpx.AsyncClient(timeout=TIMEOUT) as client:
        with trio.fail_after(TIMEOUT):
            try:
                async with client.stream(
                    "POST", server.http_url, json=call, headers={**HEADERS, "mcp-name": "stubborn"}
                ) as response:
                    assert response.status_code == 200  # the call runs (its SSE head came)
                    server.proc.send_signal(signal.SIGINT)
                    await trio.sleep(0.3)
                    elapsed = await server.stop_time(signal.SIGTERM)
                    await response.aread()
            except (httpx.RemoteProtocolError, httpx.ReadError):
                pass  # cut by the stop
        server.assert_clean_exit()
        assert "received again: stopping now" in server.stderr()
    assert elapsed < GRACEFUL - 2, f"stopped in {elapsed:.1f}s"
