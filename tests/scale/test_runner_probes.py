"""``trio-mcp-cancel run --workers 2``: every worker answers the probes for itself.

The real command on 127.0.0.1, port 0, with a redis-server of its own: the
probes answer on fresh connections (whichever worker accepts them), and
when Redis goes away each worker's readiness turns ``503`` by its own check
while liveness stays ``200``.  Every wait is bounded; the process is killed
on the way out.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from _support.deploy import redis_server
from _support.repo_paths import ROOT, TESTS

pytestmark = [pytest.mark.subprocess, pytest.mark.slow, pytest.mark.timeout(90)]

_LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
_SERVING = re.compile(r"worker (\d+) \(pid (\d+)\) serving")


def text(log: Path) -> str:
    return log.read_text(errors="replace")


async def wait_log(
    log: Path, process: trio.Process, pattern: re.Pattern[str], count: int
) -> list[str]:
    with trio.fail_after(30):
        while len(found := pattern.findall(text(log))) < count:
            assert process.returncode is None, text(log)[-3000:]
            await trio.sleep(0.05)
    return found


async def probe(url: str) -> int:
    """One probe on a connection of its own, so any worker may take it."""
    async with httpx.AsyncClient(timeout=5) as fresh:
        return (await fresh.get(url)).status_code


async def test_each_worker_answers_the_probes_and_turns_unready_when_redis_goes(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_", "RUNNER_APP_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT)])
    log = tmp_path / "run.log"
    with redis_server() as redis:
        env.update(MCP_REDIS_URL=redis.url, MCP_REDIS_PREFIX="probes", MCP_REDIS_HOT_TIMEOUT="0.5")
        args = [
            "_support.runner_app:server",
            "--transport",
            "http",
            "--port",
            "0",
            "--workers",
            "2",
        ]
        with log.open("wb") as stderr:
            process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "trio_mcp_cancel", "run", *args],
                cwd=str(ROOT),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        try:
            (port,) = await wait_log(log, process, _LISTENING, 1)
            await wait_log(log, process, _SERVING, 2)
            base = f"http://127.0.0.1:{port}"
            ready = [await probe(f"{base}/readyz") for _ in range(6)]
            redis.kill()
            with trio.fail_after(20):
                while True:  # until no worker is ready any more
                    unready = [await probe(f"{base}/readyz") for _ in range(6)]
                    if set(unready) == {503}:
                        break
                    await trio.sleep(0.3)
            alive = [await probe(f"{base}/healthz") for _ in range(6)]
        finally:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    assert ready == [200] * 6
    assert alive == [200] * 6
