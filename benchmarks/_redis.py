"""A throwaway ``redis-server`` on a free 127.0.0.1 port, for the benchmarks that share state.

Used by the cross-process and ``--workers 2`` benchmarks (each needs one for
its own run, nothing persisted).
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

__all__ = ["free_port", "redis_server"]


def free_port() -> int:
    """A port nothing listens on right now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def redis_server(core: str | None = None) -> AsyncIterator[int]:
    """Start ``redis-server`` (no persistence; pinned to *core* if given), wait until it
    accepts, yield its port."""
    port = free_port()
    pin = [] if core is None else ["taskset", "-c", core]
    process = await trio.lowlevel.open_process(
        [*pin, "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with trio.fail_after(10):
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        break
                except OSError:
                    await trio.sleep(0.05)
        yield port
    finally:
        process.kill()
        await process.wait()
