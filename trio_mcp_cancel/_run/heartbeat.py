"""Worker heartbeats: how the supervisor tells a worker that stopped answering from a busy one.

A worker whose event loop is stuck (a blocking loop in an ``async def``,
``SIGSTOP``, a CPU-throttled container) has not exited, so a supervisor
that only waits for exits never notices it; meanwhile it holds connections
it never answers, and once its Redis liveness key lapses (15 s) its tasks
are settled ``failed`` elsewhere although it may still finish them later.

So each worker writes a byte to a pipe every :data:`INTERVAL` seconds from
a task of its event loop (:func:`beat`): a stuck loop stops beating.  The
supervisor (:func:`silent`) kills a worker that has served and then sent
nothing for ``MCP_WORKER_HEARTBEAT_TIMEOUT`` seconds (default
:data:`DEFAULT_TIMEOUT`, below the liveness so the worker is gone before
anyone else gives its tasks up; ``none`` turns the check off).  Killed, it
is replaced like any dead worker, and its tasks are settled ``failed`` at
once: a worker that cannot be trusted to answer must not finish work the
client was told failed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

import trio

from ..transports.http.deploy import seconds_setting

__all__ = ["DEFAULT_TIMEOUT", "ENV", "INTERVAL", "beat", "interval_for", "silent", "timeout_from"]

#: Seconds between two beats of a worker (shorter when the timeout is short).
INTERVAL: Final = 1.0
#: Seconds of silence after which the supervisor kills a serving worker.
DEFAULT_TIMEOUT: Final = 10.0
ENV: Final = "MCP_WORKER_HEARTBEAT_TIMEOUT"


def timeout_from(environ: Mapping[str, str]) -> float | None:
    """The heartbeat timeout *environ* sets (``None``: no check); ``ValueError`` when invalid."""
    timeout = seconds_setting(environ, ENV, DEFAULT_TIMEOUT)
    if timeout is not None and timeout <= 0:
        raise ValueError(f"{ENV} must be a positive number of seconds or 'none'")
    return timeout


def interval_for(timeout: float) -> float:
    """How often a worker beats for *timeout*: several beats fit in it, whatever it is."""
    return min(INTERVAL, timeout / 4)


async def beat(fd: int, interval: float) -> None:
    """Write a byte to *fd* every *interval* seconds, for as long as the event loop runs.

    Never blocks: a beat the pipe has no room for is dropped (the supervisor
    is behind, and a full pipe is proof of life already).  Returns when the
    supervisor is gone (the worker's lifeline handles that case).  *fd*
    stays open: the process's exit closes it, which is how the supervisor
    tells an exit (end of file) from silence.
    """
    os.set_blocking(fd, False)
    while True:
        try:
            os.write(fd, b".")
        except BlockingIOError:
            pass
        except BrokenPipeError:
            return
        await trio.sleep(interval)


async def silent(beats: trio.lowlevel.FdStream, quiet_for: float) -> None:
    """Return once *beats* stayed silent for *quiet_for* seconds.

    End of file (the worker exited) never returns: the caller sees the exit.
    A supervisor that was itself paused finds every deadline passed at once:
    a beat already in the pipe then still counts (one more short read).
    """
    while True:
        with trio.move_on_after(quiet_for) as waiting:
            data = await beats.receive_some(4096)
        if waiting.cancelled_caught:
            with trio.move_on_after(min(0.1, quiet_for)):
                data = await beats.receive_some(4096)
                if data:
                    continue
            return
        if not data:
            await trio.sleep_forever()
