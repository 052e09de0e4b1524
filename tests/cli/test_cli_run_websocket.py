"""``trio-mcp-cancel run --transport websocket``: the WebSocket transport from the command line."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest
import trio

from trio_mcp_cancel.client import open_websocket_client

from _support.cli import cli, cli_env, make_project, read, start_cli, wait_for_text

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(90)]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return make_project(tmp_path / "project")


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_run_serves_websocket_on_both_eras_and_stops_gracefully_on_sigterm(
    project: Path, tmp_path: Path, era: str
) -> None:
    err = tmp_path / "run.err"
    process = await start_cli("run", "cli_server:server", "--transport", "websocket", "--port",
                              "0", "--grace-period", "2", cwd=project, env=cli_env(),
                              stdout=tmp_path / "run.out", stderr=err)  # fmt: skip
    try:
        found = await wait_for_text(err, r"serving MCP on (ws://127\.0\.0\.1:\d+/mcp)", process)
        async with open_websocket_client(found[1], era=era) as client:  # type: ignore[arg-type]
            result = await client.call_tool("add", {"a": 20, "b": 22})
            assert result["content"][0]["text"] == "42"
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            assert await process.wait() == 0, read(err)
        assert "shutting down gracefully" in read(err)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_run_websocket_on_a_taken_port_is_one_line_and_exit_1(project: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("run", "cli_server:server", "--transport", "websocket", "--port", str(port),
                   cwd=project)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "2"], "--workers is for --transport http"),
        (["--max-request-time", "soon"], "--max-request-time"),
    ],
)
def test_run_websocket_refuses_what_it_cannot_do(
    project: Path, args: list[str], message: str
) -> None:
    done = cli("run", "cli_server:server", "--transport", "websocket", *args, cwd=project)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_run_websocket_names_a_target_it_cannot_serve(project: Path) -> None:
    done = cli("run", "cli_server:add", "--transport", "websocket", "--port", "0", cwd=project)
    assert done.returncode == 2 and "expected an McpServer" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
