"""Running the real ``trio-mcp-cancel run`` command from a test, and reading its log.

Shared by the runner's subprocess tests (``tests/scale/test_runner.py``,
``test_worker_heartbeat.py``): :func:`run` starts ``python -m trio_mcp_cancel
run ARGS`` with ``tests/`` on ``PYTHONPATH`` (so :data:`APP` is found) and
kills it if the test did not stop it; :class:`Run` waits for lines of its log.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from _support.repo_paths import ROOT, TESTS

__all__ = ["APP", "LISTENING", "SERVING", "Run", "environment", "gone", "run"]

#: The test server (tests/_support/runner_app.py), found through PYTHONPATH=tests.
APP = "_support.runner_app:server"
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
SERVING = re.compile(r"worker (\d+) \(pid (\d+)\) serving")


@attrs.define(eq=False)
class Run:
    """One ``trio-mcp-cancel run`` process and its log (stderr, in a file)."""

    process: trio.Process
    log_path: Path
    port: int = 0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_log(self, pattern: re.Pattern[str], count: int = 1) -> list[Any]:
        """The first *count* matches of *pattern* in the log, once there are that many."""
        with trio.fail_after(30):
            while len(found := pattern.findall(self.log())) < count:
                if self.process.returncode is not None:
                    raise AssertionError(f"it exited: {self.log()[-3000:]}")
                await trio.sleep(0.05)
        return found[:count]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def serving_pids(self) -> list[int]:
        return [int(pid) for _, pid in SERVING.findall(self.log())]


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_", "RUNNER_APP_"))}
    return {**env, "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT)]), **extra}


@asynccontextmanager
async def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> AsyncIterator[Run]:
    """Start ``python -m trio_mcp_cancel run ARGS``; kill it if the test did not stop it."""
    log_path = tmp_path / "run.log"
    with log_path.open("wb") as log:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "trio_mcp_cancel", "run", *args],
            cwd=str(ROOT),
            env=environment(**(env or {})),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    try:
        yield Run(process, log_path)
    finally:
        if process.returncode is None:
            process.kill()  # the workers notice (their lifeline) and stop by themselves
        with trio.CancelScope(shield=True):
            await process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    await pipe.aclose()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
