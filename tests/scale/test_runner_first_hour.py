"""``trio-mcp-cancel run`` as a new user first meets it: mistakes are one line, stdio stays clean.

Subprocess tests of the real command, run from a user's project folder
(``tmp_path``, holding the user's module) as a user would; each wait is
bounded and every process is killed on the way out.  The in-process tests
at the end are ``server.run(...)``'s and ``serve_found``'s.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

import trio_mcp_cancel
from trio_mcp_cancel._run import cli
from trio_mcp_cancel._run.runner import StartupFailed, serve_found, startup_problem
from trio_mcp_cancel.server import McpServer, Tasks
from trio_mcp_cancel.transports.http.deploy import limits_from_env

from _support.repo_paths import ROOT

LEGACY = "2025-11-25"
_SERVING = re.compile(r"serving MCP on (http://127\.0\.0\.1:\d+\S*)")

USER_MODULE = """
import trio

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.transports.http.deploy import limits_from_env

print("importing the user's module")  # a module-level print, as new users write

server = McpServer("first-hour")


@server.tool()
async def echo(text: str) -> str:
    \"\"\"Say it back.\"\"\"
    return text


@server.tool()
async def hang() -> str:
    \"\"\"Never finish by itself.\"\"\"
    await trio.sleep(60)
    return "woke"


def make_server():
    return server


app_with_registry = McpHttpApp(server, registry=Registry())
"""

INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}  # fmt: skip
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@attrs.define(eq=False)
class Command:
    process: trio.Process
    log_path: Path
    received: bytes = b""

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def send(self, *messages: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(
            b"".join(json.dumps(m).encode() + b"\n" for m in messages)
        )

    async def next_line(self) -> bytes:
        assert self.process.stdout is not None
        while b"\n" not in self.received:
            chunk = await self.process.stdout.receive_some()
            assert chunk, f"stdout closed: {self.log()[-2000:]}"
            self.received += chunk
        line, _, self.received = self.received.partition(b"\n")
        return line

    async def exit_status(self) -> int:
        with trio.fail_after(20):
            await self.process.wait()
        status = self.process.returncode
        assert status is not None
        return status


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


@asynccontextmanager
async def command(tmp_path: Path, *args: str, **env: str) -> AsyncIterator[Command]:
    """``python -m trio_mcp_cancel ARGS`` in a project holding ``user_module.py``."""
    (tmp_path / "user_module.py").write_text(USER_MODULE)
    log_path = tmp_path / "stderr.log"
    with log_path.open("wb") as log:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "trio_mcp_cancel", *args],
            cwd=str(tmp_path),
            env=environment(**env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    try:
        yield Command(process, log_path)
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    await pipe.aclose()


@contextmanager
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 another socket listens on for the duration."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def error_lines(log: str) -> list[str]:
    """The log without the user's own import-time print."""
    return [line for line in log.splitlines() if line != "importing the user's module"]


@pytest.mark.subprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["http", "streamable-http"])
async def test_a_taken_port_is_one_line_and_exit_status_1(tmp_path: Path, transport: str) -> None:
    with taken_port() as port:
        args = ("run", "user_module:server", "--transport", transport, "--port", str(port))
        async with command(tmp_path, *args) as run:
            status = await run.exit_status()
    assert status == 1
    (line,) = [line for line in error_lines(run.log()) if "trio-mcp-cancel" in line]
    assert line == (
        f"trio-mcp-cancel: error: port {port} on 127.0.0.1 is already in use;"
        " pick another with --port (0: any free port)"
    )
    assert "Traceback" not in run.log() and "ExceptionGroup" not in run.log(), run.log()


@pytest.mark.subprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize(
    ("attr", "message"),
    [
        ("make_server", "not the function make_server (serve what it returns"),
        ("echo", "not the async function echo, which does not take (scope, receive, send)"),
        ("McpServer", "not the class McpServer (serve an instance of it)"),
    ],
)
async def test_a_function_or_class_target_is_named_in_one_line_on_both_transports(
    tmp_path: Path, transport: str, attr: str, message: str
) -> None:
    args = ["run", f"user_module:{attr}", "--transport", transport]
    if transport == "http":
        args += ["--port", "0"]
    async with command(tmp_path, *args) as run:
        assert await run.exit_status() == 2
    (line,) = error_lines(run.log())
    assert line.startswith("trio-mcp-cancel: error: expected an McpServer") and message in line


@pytest.mark.subprocess
@pytest.mark.timeout(60)
async def test_an_app_given_a_registry_that_cannot_run_is_one_line(tmp_path: Path) -> None:
    args = ("run", "user_module:app_with_registry", "--transport", "http", "--port", "0")
    async with command(tmp_path, *args) as run:
        assert await run.exit_status() == 2
    (line,) = error_lines(run.log())
    assert "was given a registry=, which is not running" in line
    assert "without registry=" in line


@pytest.mark.subprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", [None, "/tools/mcp"])
async def test_the_startup_line_is_the_url_clients_use_path_included(
    tmp_path: Path, path: str | None
) -> None:
    env = {} if path is None else {"MCP_PATH": path}
    args = ("run", "user_module:server", "--transport", "http", "--port", "0")
    async with command(tmp_path, *args, **env) as run:
        with trio.fail_after(20):
            while (found := _SERVING.search(run.log())) is None:
                assert run.process.returncode is None, run.log()
                await trio.sleep(0.05)
        url = found[1]
        assert url.endswith(path or "/mcp")
        accept = {"accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(timeout=10) as client:
            reply = await client.post(url, json=INITIALIZE, headers=accept)
        assert reply.status_code == 200, reply.text  # the logged URL is the endpoint
        run.process.send_signal(signal.SIGTERM)
        assert await run.exit_status() == 0


@pytest.mark.subprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", [None, "/tools/mcp"])
async def test_the_supervisors_startup_line_is_the_url_clients_use_path_included(
    tmp_path: Path, path: str | None
) -> None:
    # --workers N: the supervisor never imports the target; the path it logs
    # is the one its workers report serving.
    env = {} if path is None else {"MCP_PATH": path}
    args = ("run", "user_module:server", "--transport", "http", "--port", "0",
            "--workers", "2", "--allow-unshared")  # fmt: skip
    async with command(tmp_path, *args, **env) as run:
        with trio.fail_after(30):
            while (found := _SERVING.search(run.log())) is None:
                assert run.process.returncode is None, run.log()
                await trio.sleep(0.05)
        url = found[1]
        assert url.endswith(path or "/mcp"), run.log()
        assert re.search(re.escape(f"serving MCP on {url} (2 workers)"), run.log())
        accept = {"accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(timeout=10) as client:
            reply = await client.post(url, json=INITIALIZE, headers=accept)
        assert reply.status_code == 200, reply.text  # the logged URL is the endpoint
        run.process.send_signal(signal.SIGTERM)
        assert await run.exit_status() == 0
    assert len(_SERVING.findall(run.log())) == 1, run.log()  # said once, not per worker


@pytest.mark.subprocess
@pytest.mark.timeout(60)
async def test_version_prints_the_package_version(tmp_path: Path) -> None:
    async with command(tmp_path, "--version") as run:
        assert run.process.stdout is not None
        with trio.fail_after(20):
            out = await run.process.stdout.receive_some()
        assert await run.exit_status() == 0
    assert out.decode().strip() == f"trio-mcp-cancel {trio_mcp_cancel.__version__}"


@pytest.mark.subprocess
@pytest.mark.timeout(60)
async def test_a_module_level_print_goes_to_stderr_and_stdio_answers_initialize(
    tmp_path: Path,
) -> None:
    # PYTHONUNBUFFERED as hosts often set it: the print reaches the fd at once.
    async with command(tmp_path, "run", "user_module:server", PYTHONUNBUFFERED="1") as run:
        await run.send(INITIALIZE, INITIALIZED)
        with trio.fail_after(20):
            first = json.loads(await run.next_line())  # the very first line of stdout
        assert first["id"] == 1 and first["result"]["protocolVersion"] == LEGACY
        assert run.process.stdin is not None
        await run.process.stdin.aclose()
        assert await run.exit_status() == 0
    assert "importing the user's module" in run.log()


@pytest.mark.subprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["flag", "environment"])
async def test_max_request_time_cancels_a_stdio_call_as_over_http(tmp_path: Path, how: str) -> None:
    args = ["run", "user_module:server"]
    env = {"MCP_GRACE_PERIOD": "0.1"}  # the tool ignores the flag: the hard cancel stops it
    if how == "flag":
        args += ["--max-request-time", "0.5"]
    else:
        env["MCP_MAX_REQUEST_TIME"] = "0.5"
    async with command(tmp_path, *args, **env) as run:
        await run.send(INITIALIZE, INITIALIZED)
        await run.send(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "hang", "arguments": {}}},
        )  # fmt: skip
        with trio.fail_after(20):  # the tool sleeps 60 s: only the limit answers sooner
            answers = [json.loads(await run.next_line()) for _ in range(2)]
        answer = answers[1]
        assert answer["id"] == 2 and answer["error"]["code"] == -32800, answer
        assert "request time limit" in json.dumps(answer), answer


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e400", "soon"])
def test_a_bad_max_request_time_is_refused_with_the_flag_named(
    value: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MCP_MAX_REQUEST_TIME", raising=False)
    with pytest.raises(SystemExit) as raised:
        cli.main(["run", "user_module:server", "--max-request-time", value])
    assert raised.value.code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert line.startswith("trio-mcp-cancel: error: --max-request-time must be")
    assert "MCP_MAX_REQUEST_TIME" not in os.environ  # nothing half-applied


@pytest.mark.parametrize("value", ["0", "-5", "nan", "later"])
def test_a_bad_mcp_max_request_time_names_the_variable(value: str) -> None:
    with pytest.raises(ValueError, match="MCP_MAX_REQUEST_TIME must be"):
        limits_from_env({"MCP_MAX_REQUEST_TIME": value})


# -- in process: server.run() and serve_found --------------------------------------------


def test_server_run_on_a_taken_port_raises_system_exit_with_one_line() -> None:
    server = McpServer("first-hour")
    with taken_port() as port, pytest.raises(SystemExit) as raised:
        server.run("http", port=port, log_level="warning")
    message = raised.value.code
    assert isinstance(message, str) and "\n" not in message
    assert message == (
        f"trio-mcp-cancel: error: port {port} on 127.0.0.1 is already in use;"
        " pick another with port= (0: any free port)"
    )
    assert isinstance(raised.value.__cause__, StartupFailed)


def test_streamable_http_is_accepted_by_server_run() -> None:
    with taken_port() as port, pytest.raises(SystemExit, match="already in use"):
        McpServer("first-hour").run("streamable-http", port=port, log_level="warning")


def test_an_app_that_refuses_to_start_is_one_sentence() -> None:
    async def refusing_app(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no database"})

    serving = serve_found(refusing_app, "http", port=0)
    with pytest.raises(StartupFailed) as raised:
        serving()
    assert str(raised.value) == "the app did not start: no database"


def test_only_startup_failures_become_a_sentence_a_real_bug_keeps_its_traceback() -> None:
    taken = OSError(errno.EADDRINUSE, "Address already in use")
    wrapped = ExceptionGroup("nursery", [ExceptionGroup("inner", [taken])])
    assert startup_problem(wrapped, "::1", 9, "--port") == (
        "port 9 on ::1 is already in use; pick another with --port (0: any free port)"
    )
    refused = OSError(errno.EACCES, "Permission denied")
    assert "ports below 1024 need privileges" in str(startup_problem(refused, "h", 80, "--port"))
    bug = ExceptionGroup("nursery", [taken, ZeroDivisionError("a bug")])
    assert startup_problem(bug, "h", 9, "--port") is None
    later = ExceptionGroup("nursery", [OSError(errno.EMFILE, "Too many open files")])
    assert startup_problem(later, "h", 9, "--port", listening=True) is None  # not a startup


def test_stdio_takes_the_servers_settings_from_the_environment_as_http_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trio_mcp_cancel._protocol.mrtr import secret_from_text

    secret = "A" * 43  # base64 of 32 bytes
    monkeypatch.setenv("MCP_TASK_TTL", "60")
    monkeypatch.setenv("MCP_STATE_SECRET", secret)
    server = McpServer("stdio-settings", extensions=[Tasks()])
    serve_found(server, "stdio")  # configured now, served only when called
    assert server.dispatcher.extension(Tasks).manager.ttl_ms == 60_000
    assert server.registration.state_signer.secret == secret_from_text(secret)
    monkeypatch.setenv("MCP_STATE_SECRET", "too short")
    with pytest.raises(ValueError, match="MCP_STATE_SECRET"):
        serve_found(McpServer("bad-secret"), "stdio")


def test_server_run_serves_http_over_httptools_when_asked() -> None:
    pytest.importorskip("httptools")
    from trio_mcp_cancel.transports.http import hypercorn_httptools

    chosen: list[bool] = []
    real = hypercorn_httptools.choose

    def spy(config: Any, http: str) -> Any:
        made = real(config, http)
        chosen.append(made is not config)  # a marked copy: httptools selected
        return made

    with taken_port() as port, pytest.raises(SystemExit, match="already in use"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(hypercorn_httptools, "choose", spy)
            McpServer("first-hour").run("http", port=port, log_level="warning", http="httptools")
    assert chosen[0] is True  # serve() then keeps the marked config (its own default: h11)


def test_server_run_refuses_an_http_protocol_it_cannot_use_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trio_mcp_cancel.transports.http import hypercorn_httptools

    with pytest.raises(ValueError, match="http must be one of h11, httptools, not 'h2'"):
        McpServer("first-hour").run("http", port=0, http="h2")
    with pytest.raises(ValueError, match="applies to transport='http', not to stdio"):
        McpServer("first-hour").run(http="httptools")
    monkeypatch.setattr(hypercorn_httptools, "httptools", None)  # the extra not installed
    with pytest.raises(SystemExit) as raised:
        McpServer("first-hour").run("http", port=0, http="httptools")
    assert raised.value.code == (
        "trio-mcp-cancel: error: http='httptools' needs httptools:"
        " pip install 'trio-mcp-cancel[httptools]'"
    )
    assert isinstance(raised.value.__cause__, ImportError)
