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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from trio_mcp_cancel._run import heartbeat
from trio_mcp_cancel._run.supervisor import describe_exit

from _support.runner import APP, LISTENING, SERVING, gone, run

_SILENT = re.compile(r"worker \d \(pid (\d+), instance [^)]+\) sent no heartbeat for 2\.0 s")


@pytest.mark.subprocess
@pytest.mark.timeout(90)
async def test_a_stopped_worker_is_killed_after_the_heartbeat_timeout_and_replaced(
    tmp_path: Path,
) -> None:
    args = [APP, "--transport", "http", "--port", "0", "--workers", "2",
            "--allow-unshared"]  # fmt: skip
    async with run(tmp_path, *args, env={"MCP_WORKER_HEARTBEAT_TIMEOUT": "2"}) as server:
        (port,) = await server.wait_log(LISTENING)
        server.port = int(port)
        await server.wait_log(SERVING, 2)
        victim, survivor = server.serving_pids()
        await trio.sleep(3)  # beating: nobody is killed while both answer
        assert "sent no heartbeat" not in server.log()
        os.kill(victim, signal.SIGSTOP)
        stopped = trio.current_time()
        (killed,) = await server.wait_log(_SILENT)
        assert int(killed) == victim
        assert trio.current_time() - stopped < 8  # 2 s of silence, then at once
        await server.wait_log(SERVING, 3)
        assert gone(victim) and not gone(survivor)
        assert describe_exit(-signal.SIGKILL) in server.log()
        server.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await server.process.wait()
    assert server.process.returncode == 0, server.log()[-3000:]
    assert "Traceback" not in server.log(), server.log()[-3000:]


@pytest.mark.parametrize("raw", ["abc", "-1", "0", "inf", "nan", "1e400"])
def test_a_heartbeat_timeout_that_is_not_a_positive_number_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match=heartbeat.ENV):
        heartbeat.timeout_from({heartbeat.ENV: raw})


def test_the_heartbeat_timeout_defaults_to_ten_seconds_and_none_turns_it_off() -> None:
    assert heartbeat.timeout_from({}) == heartbeat.DEFAULT_TIMEOUT == 10.0
    assert heartbeat.timeout_from({heartbeat.ENV: "none"}) is None
    assert heartbeat.timeout_from({heartbeat.ENV: "2.5"}) == 2.5
    assert heartbeat.interval_for(2.0) == 0.5 and heartbeat.interval_for(60) == 1.0


@asynccontextmanager
async def pipe() -> AsyncIterator[tuple[trio.lowlevel.FdStream, int]]:
    """A heartbeat pipe: the supervisor's read end, the worker's write end."""
    read, write = os.pipe()
    try:
        async with trio.lowlevel.FdStream(read) as stream:
            yield stream, write
    finally:
        os.close(write)


async def test_silence_is_noticed_only_after_the_timeout_while_beats_keep_it_quiet() -> None:
    # Real time (an FdStream waits on the kernel), in tenths of seconds.
    async with pipe() as (beats, write), trio.open_nursery() as nursery:
        beating = trio.CancelScope()

        async def beat_for_a_while() -> None:
            with beating:
                await heartbeat.beat(write, 0.02)

        nursery.start_soon(beat_for_a_while)
        with trio.move_on_after(1.0):  # beats every 20 ms: a 0.3 s silence never comes
            await heartbeat.silent(beats, 0.3)
            raise AssertionError("silence noticed while the worker beats")
        beating.cancel()  # the event loop is stuck: no more beats
        stopped = trio.current_time()
        with trio.fail_after(5):
            await heartbeat.silent(beats, 0.3)
        assert trio.current_time() - stopped >= 0.3
