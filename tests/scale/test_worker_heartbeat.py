"""``--workers N``: a worker that stops answering without exiting is killed and replaced.

Subprocess test (the real command, as in ``test_runner``): a worker is
stopped with ``SIGSTOP`` (what a blocking loop in an ``async def`` or a
frozen process looks like from outside: alive, silent); its heartbeat
stops, and the supervisor kills it within ``MCP_WORKER_HEARTBEAT_TIMEOUT``
and starts a replacement, while the other worker keeps serving.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import trio
from test_runner import _LISTENING, _SERVING, gone, run

from trio_mcp_cancel._run.supervisor import describe_exit

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(90)]

_SILENT = re.compile(r"worker \d \(pid (\d+), instance [^)]+\) sent no heartbeat for 2\.0 s")


async def test_a_stopped_worker_is_killed_after_the_heartbeat_timeout_and_replaced(
    tmp_path: Path,
) -> None:
    args = ["runner_app:server", "--transport", "http", "--port", "0", "--workers", "2",
            "--allow-unshared"]  # fmt: skip
    async with run(tmp_path, *args, env={"MCP_WORKER_HEARTBEAT_TIMEOUT": "2"}) as server:
        (port,) = await server.wait_log(_LISTENING)
        server.port = int(port)
        await server.wait_log(_SERVING, 2)
        victim, survivor = server.serving_pids()
        await trio.sleep(3)  # beating: nobody is killed while both answer
        assert "sent no heartbeat" not in server.log()
        os.kill(victim, signal.SIGSTOP)
        stopped = trio.current_time()
        (killed,) = await server.wait_log(_SILENT)
        assert int(killed) == victim
        assert trio.current_time() - stopped < 8  # 2 s of silence, then at once
        await server.wait_log(_SERVING, 3)
        assert gone(victim) and not gone(survivor)
        assert describe_exit(-signal.SIGKILL) in server.log()
        server.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await server.process.wait()
    assert server.process.returncode == 0, server.log()[-3000:]
    assert "Traceback" not in server.log(), server.log()[-3000:]
