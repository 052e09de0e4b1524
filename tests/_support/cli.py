"""Running ``trio-mcp-cancel`` as a subprocess, against a project with ``cli_server.py``.

Every command-line test runs the real command (``python -m trio_mcp_cancel``,
which is the console script: ``test_runner`` checks), in a temporary project
directory holding a copy of :mod:`cli_server` (the module a user would
write), with this checkout first on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from _support.repo_paths import ROOT

__all__ = [
    "Served", "cli", "cli_env", "make_project", "read", "serving", "start_cli", "wait_for_text",
]  # fmt: skip

SERVER_SOURCE = Path(__file__).with_name("cli_server.py")
_SERVING = re.compile(r"serving MCP on (\S+)")


def make_project(directory: Path) -> Path:
    """*directory* with the test server as ``cli_server.py``, as a user's project."""
    shutil.copy(SERVER_SOURCE, directory / "cli_server.py")
    return directory


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the command to its end; its status, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "trio_mcp_cancel", *args],
        cwd=cwd,
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


async def start_cli(
    *args: str, cwd: Path, env: dict[str, str], stdout: Path, stderr: Path
) -> trio.Process:
    """Start the command with its output in files (read while it runs)."""
    with stdout.open("wb") as out, stderr.open("wb") as err:
        return await trio.lowlevel.open_process(
            [sys.executable, "-m", "trio_mcp_cancel", *args],
            cwd=str(cwd),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )


async def wait_for_text(path: Path, pattern: str | re.Pattern[str], process: trio.Process,
                        within: float = 30) -> re.Match[str]:  # fmt: skip
    """The first match of *pattern* in the file *path*, once it is there."""
    compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
    with trio.fail_after(within):
        while not (found := compiled.search(read(path))):
            if process.returncode is not None or process.poll() is not None:
                raise AssertionError(f"it exited ({process.returncode}): {read(path)}")
            await trio.sleep(0.05)
    return found


def read(path: Path) -> str:
    """The file's text so far ("" before it exists)."""
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _count(directory: Path, pattern: str) -> int:
    return len(list(directory.glob(pattern)))


@attrs.define
class Served:
    url: str
    log: Path


@asynccontextmanager
async def serving(project: Path, *args: str, env: dict[str, str]) -> AsyncIterator[Served]:
    """``run cli_server:server ARGS`` (a network transport on a free port) until the block ends."""
    log = project / f"server-{_count(project, 'server-*')}.log"
    process = await start_cli(
        "run", "cli_server:server", *args, "--port", "0",
        cwd=project, env=env, stdout=project / "server.out", stderr=log,
    )  # fmt: skip
    try:
        found = await wait_for_text(log, _SERVING, process)
        yield Served(found[1], log)
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
