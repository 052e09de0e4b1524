"""One proxy hop: a call and a cancel through a gateway, beside the same without it.

An upstream (``noop`` answers at once; ``watched`` records when its flag
is set) is called:

* **direct**: this library's client straight to the upstream;
* **through the gateway**: the same client to a gateway that mounts the
  upstream (``McpServer.mount``), the tool as ``up_noop`` / ``up_watched``.

Over HTTP (both servers on hypercorn's Trio worker in this process, on
127.0.0.1) and in memory (the test client; the gateway's upstream
in process).  Rows: the time per sequential no-op call, the ratio
gateway/direct, and the cancel latency, the time from the caller
cancelling its scope to the upstream tool seeing its flag (p50, p99): the
gateway's flag is set on the caller's cancel and its client cancels the
upstream call at once, so the hop adds one message each way.

Client and servers share the event loop and the core: the numbers compare
the variants within one run, not absolute.

Run: ``python -m benchmarks --only gateway [--quick]``.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio
import trio.lowlevel
from hypercorn.config import Config

from trio_mcp_cancel import open_registry
from trio_mcp_cancel.client import open_http_client
from trio_mcp_cancel.http import McpHttpApp, serve
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import open_test_client

from ._common import Row, fmt_ratio, fmt_time

NAME = "gateway"
BENCH = "11 gateway"


class Upstream:
    """The upstream server: ``noop``, and ``watched``, which records its flag."""

    def __init__(self) -> None:
        self.server = McpServer("bench-upstream")
        self.started = trio.Event()
        self.flagged_at: float | None = None

        @self.server.tool()
        async def noop(ctx: Context) -> str:
            return "ok"

        @self.server.tool()
        async def watched(ctx: Context) -> str:
            self.started.set()
            await ctx.request.wait_cancelled()
            self.flagged_at = time.perf_counter()
            return "flagged"

    def reset(self) -> None:
        self.started = trio.Event()
        self.flagged_at = None


def _config() -> Config:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.accesslog = None
    config.graceful_timeout = 0.5
    config.keep_alive_max_requests = 1_000_000
    return config


@contextlib.asynccontextmanager
async def http_pair(upstream: Upstream) -> AsyncIterator[tuple[str, str]]:
    """The upstream and a gateway mounting it, both served over HTTP: their URLs."""
    async with open_registry(grace_period=0.5) as registry, trio.open_nursery() as nursery:
        binds = await nursery.start(serve, McpHttpApp(upstream.server, registry), _config())
        direct = f"{binds[0]}/mcp"
        gateway = McpServer("bench-gateway")
        gateway.mount(direct, namespace="up")
        binds = await nursery.start(serve, McpHttpApp(gateway, registry), _config())
        yield direct, f"{binds[0]}/mcp"
        nursery.cancel_scope.cancel()


async def sequential(client: Any, tool: str, calls: int) -> float:
    await client.call_tool(tool)  # not timed: the first connection
    start = time.perf_counter()
    for _ in range(calls):
        await client.call_tool(tool)
    return (time.perf_counter() - start) / calls


async def cancel_latencies(upstream: Upstream, client: Any, tool: str, samples: int) -> list[float]:
    out: list[float] = []
    for _ in range(samples):
        upstream.reset()
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def call(scope: trio.CancelScope = scope) -> None:
                with scope:
                    await client.call_tool(tool)

            nursery.start_soon(call)
            await upstream.started.wait()
            cancelled_at = time.perf_counter()
            scope.cancel()
            with trio.fail_after(10):
                while upstream.flagged_at is None:
                    await trio.lowlevel.checkpoint()
            out.append(upstream.flagged_at - cancelled_at)
    return out


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {fmt_time(statistics.median(ordered))}, p99 {fmt_time(p99)}"


Opener = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


async def measure(
    where: str, upstream: Upstream, direct: Opener, gateway: Opener, calls: int, samples: int
) -> list[Row]:
    variants = {"direct": (direct, ""), "through the gateway": (gateway, "up_")}
    per_call: dict[str, float] = {}
    latency: dict[str, str] = {}
    for name, (opener, prefix) in variants.items():
        print(f"  {where}: {name}", file=sys.stderr, flush=True)
        async with opener() as client:
            per_call[name] = await sequential(client, f"{prefix}noop", calls)
            values = await cancel_latencies(upstream, client, f"{prefix}watched", samples)
            latency[name] = percentiles(values)
    rows = [
        Row(BENCH, f"{where}, {calls:,} sequential no-op calls, {name}: per call", fmt_time(value))
        for name, value in per_call.items()
    ]
    ratio = per_call["through the gateway"] / per_call["direct"]
    rows.append(
        Row(BENCH, f"{where}: one hop, gateway / direct, per call", fmt_ratio(ratio), "info")
    )
    rows += [
        Row(BENCH, f"{where}, {name}: caller cancel -> upstream tool sees the flag", value, "info")
        for name, value in latency.items()
    ]
    return rows


async def run(quick: bool) -> list[Row]:
    calls = 30 if quick else 1000
    samples = 5 if quick else 200
    rows: list[Row] = []
    upstream = Upstream()
    async with http_pair(upstream) as (direct_url, gateway_url):
        rows += await measure(
            "HTTP",
            upstream,
            lambda: open_http_client(direct_url),
            lambda: open_http_client(gateway_url),
            calls,
            samples,
        )
    upstream = Upstream()
    gateway = McpServer("bench-gateway")
    gateway.mount(upstream.server, namespace="up")
    rows += await measure(
        "in memory",
        upstream,
        lambda: open_test_client(upstream.server),
        lambda: open_test_client(gateway),
        calls,
        samples,
    )
    return rows


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    for row in trio.run(run, quick):
        print(f"| {row.bench} | {row.measurement} | {row.value} | {row.target} | {row.status} |")
