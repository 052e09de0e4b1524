"""``trio-mcp-cancel dev``: serve, restart on a source change, start the MCP Inspector."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from trio_mcp_cancel._run.cmd_dev import INSPECTOR, inspector_command
from trio_mcp_cancel.client import open_http_client

from _support.cli import cli, cli_env, make_project, read, start_cli, wait_for_text

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(120)]

NEW_TOOL = """

@server.tool()
async def added_later(ctx: Context) -> str:
    return "fresh"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return make_project(tmp_path / "project")


def _fake_npx(directory: Path) -> Path:
    """An ``npx`` that records its arguments and waits to be stopped."""
    directory.mkdir()
    npx = directory / "npx"
    npx.write_text(f"#!{sys.executable}\nimport sys, time\n"
                   f"open({str(directory / 'args')!r}, 'w').write('\\n'.join(sys.argv[1:]))\n"
                   "time.sleep(60)\n")  # fmt: skip
    npx.chmod(npx.stat().st_mode | stat.S_IEXEC)
    return directory


async def _tools(url: str) -> list[str]:
    async with open_http_client(url, era="auto") as client:
        return [tool["name"] for tool in await client.list_tools()]


def _append(path: Path, text: str) -> None:
    with path.open("a") as file:
        file.write(text)


async def _stop(process: trio.Process) -> int:
    process.send_signal(signal.SIGINT)
    with trio.fail_after(20):
        return await process.wait()


async def test_dev_serves_restarts_on_an_edit_and_starts_the_inspector_on_its_url(
    project: Path, tmp_path: Path
) -> None:
    bin_dir = _fake_npx(tmp_path / "bin")
    env = cli_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out, err = tmp_path / "dev.out", tmp_path / "dev.err"
    process = await start_cli("dev", "cli_server:server", cwd=project, env=env, stdout=out,
                              stderr=err)  # fmt: skip
    try:
        url = (await wait_for_text(out, r"serving MCP on (http://127\.0\.0\.1:\d+/mcp)", process))[
            1
        ]
        assert "added_later" not in await _tools(url)
        with trio.fail_after(20):
            while not read(bin_dir / "args"):
                await trio.sleep(0.05)
        assert read(bin_dir / "args").splitlines() == inspector_command(url)[1:]
        _append(project / "cli_server.py", NEW_TOOL)
        with trio.fail_after(30):  # a poll, a graceful stop, a new worker importing the module
            while "added_later" not in await _tools(url):
                await trio.sleep(0.2)
        assert "cli_server.py changed: restarting" in read(err)
        # A change that breaks the module: reported, and the next fix serves again.
        _append(project / "cli_server.py", "\ndef broken(:\n")
        await wait_for_text(err, "the server exited", process)
        source = read(project / "cli_server.py").replace("\ndef broken(:\n", "")
        (project / "cli_server.py").write_text(source)
        with trio.fail_after(30):
            assert "added_later" in await _tools(url)  # waits in the backlog until it serves
        assert await _stop(process) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_without_npx_or_with_no_inspector_dev_prints_how_to_start_the_inspector(
    project: Path, tmp_path: Path
) -> None:
    for args, path in ((["--no-inspector"], os.environ["PATH"]), ([], str(tmp_path / "empty"))):
        out, err = tmp_path / "dev.out", tmp_path / "dev.err"
        env = cli_env(PATH=path)
        process = await start_cli("dev", "cli_server:server", *args, cwd=project, env=env,
                                  stdout=out, stderr=err)  # fmt: skip
        try:
            hint = rf"npx {INSPECTOR} --transport http --server-url (\S+)"
            found = await wait_for_text(out, hint, process)
            assert f"serving MCP on {found[1]}" in read(out)
            assert await _stop(process) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


def test_dev_refuses_a_target_it_cannot_find_and_a_taken_port(project: Path) -> None:
    done = cli("dev", "nosuch_module:server", cwd=project)
    assert done.returncode == 2 and "no module named 'nosuch_module'" in done.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("dev", "cli_server:server", "--port", str(port), cwd=project)
    assert done.returncode == 1 and f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert "Traceback" not in done.stderr


def _real_inspector_cached() -> bool:
    if shutil.which("npx") is None:
        return False
    try:
        done = subprocess.run(["npx", "--no-install", INSPECTOR, "--help"], capture_output=True,
                              timeout=60, env={**os.environ, "CI": "1"})  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and b"missing packages" not in done.stderr


@pytest.mark.node
@pytest.mark.skipif(
    not _real_inspector_cached(),
    reason="the real MCP Inspector needs npx and the package in npm's cache (no network here)",
)
async def test_the_real_inspector_starts_against_dev(project: Path, tmp_path: Path) -> None:
    out, err = tmp_path / "dev.out", tmp_path / "dev.err"
    process = await start_cli("dev", "cli_server:server", cwd=project, env=cli_env(),
                              stdout=out, stderr=err)  # fmt: skip
    try:
        await wait_for_text(out, "starting the MCP Inspector", process)
        await wait_for_text(out, r"MCP_PROXY_AUTH_TOKEN|localhost:\d+", process, within=60)
        assert await _stop(process) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
