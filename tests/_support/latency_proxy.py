"""A TCP proxy on 127.0.0.1 that delays what it forwards: a slow network to Redis.

Every chunk read from either side is forwarded ``delay / 2`` seconds later,
in order, so one request and its reply take ``delay`` more seconds (the
round trip) while many may be on their way at once, as on a real link.
The delay can be changed while connections are open.  For the tests and
the "slow Redis" benchmark row (:mod:`benchmarks.hostile_redis_slow`).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import attrs
import trio

__all__ = ["LatencyProxy", "latency_proxy"]


@attrs.define(eq=False)
class LatencyProxy:
    """The proxy's port, and the round-trip delay it adds now (seconds)."""

    port: int
    delay: float

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


async def _pump(proxy: LatencyProxy, source: trio.SocketStream, sink: trio.SocketStream) -> None:
    """Forward *source* to *sink*, each chunk half a round trip late (order kept)."""
    send, receive = trio.open_memory_channel[tuple[float, bytes]](math.inf)

    async def deliver() -> None:
        async for due, data in receive:
            await trio.sleep_until(due)
            await sink.send_all(data)
        await sink.send_eof()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(deliver)
        async with send:
            while data := await source.receive_some(65536):
                send.send_nowait((trio.current_time() + proxy.delay / 2, data))


async def _relay(proxy: LatencyProxy, target: int, client: trio.SocketStream) -> None:
    try:
        async with client, await trio.open_tcp_stream("127.0.0.1", target) as upstream:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump, proxy, client, upstream)
                nursery.start_soon(_pump, proxy, upstream, client)
    except* (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # one side went away: the connection ends, as through a real proxy


@asynccontextmanager
async def latency_proxy(target: int, delay: float = 0.0) -> AsyncIterator[LatencyProxy]:
    """Proxy 127.0.0.1:*target* with *delay* seconds added to each round trip."""
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        proxy = LatencyProxy(listeners[0].socket.getsockname()[1], delay)
        nursery.start_soon(partial(trio.serve_listeners, partial(_relay, proxy, target), listeners))
        yield proxy
        nursery.cancel_scope.cancel()
