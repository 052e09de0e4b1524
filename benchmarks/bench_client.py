"""The MCP client over HTTP: the old h11 client against the httpx2 one (issue 26).

Sequential no-op ``tools/call``\\ s to one server over HTTP and HTTPS (a
local CA from ``trustme``), with:

* **before**: the former transport (:mod:`benchmarks._h11_client`): a new
  TCP connection, and for HTTPS a new TLS handshake, per POST;
* **after**: :func:`trio_mcp_cancel.client.open_http_client` on one pooled
  ``httpx2.AsyncClient`` (HTTP/1.1, and HTTP/2 over TLS).

Each variant reports the time per call, the ratio after/before and the
connections the server saw (counted from the client address of every
request's ASGI scope).  Then the cancel latency: a caller cancels a call
(its cancel scope) and the server's tool waits for its flag; the time from
the cancel to the tool seeing it, p50 and p99, for each HTTP client and
for the in-memory test client (the same engine, no sockets).

The server runs in this process (hypercorn's Trio worker), so client and
server share the event loop and the core: the numbers are for comparing
the variants in one run, not absolute.  Rounds interleave the variants.

Run: ``python -m benchmarks --only client [--quick]``.
"""

from __future__ import annotations

import contextlib
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import trio
import trio.lowlevel
import trustme
from hypercorn.config import Config

from trio_mcp_cancel import Registry, open_registry
from trio_mcp_cancel.client import McpClient, McpError, open_http_client
from trio_mcp_cancel.http import McpHttpApp, serve
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import open_test_client

from . import _h11_client
from ._common import Row, fmt_ratio, fmt_time

NAME = "client"
BENCH = "10 client"


class Served:
    """The benchmark server: ``noop`` answers at once; ``watched`` records its flag."""

    def __init__(self) -> None:
        self.server = McpServer("bench-client")
        self.connections: set[Any] = set()
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


@contextlib.asynccontextmanager
async def serving(served: Served, certfile: str | None) -> AsyncIterator[tuple[str, Registry]]:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.accesslog = None
    config.graceful_timeout = 0.5
    # hypercorn ends a connection after 1,000 requests by default (its GOAWAY
    # then fails an HTTP/2 request in flight): the rows count the client's
    # connections, not that policy.
    config.keep_alive_max_requests = 1_000_000
    if certfile is not None:
        config.certfile = config.keyfile = certfile
    async with open_registry(grace_period=0.5) as registry, trio.open_nursery() as nursery:
        app = McpHttpApp(served.server, registry)

        async def counting(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                served.connections.add(tuple(scope.get("client") or ()))
            await app(scope, receive, send)

        binds = await nursery.start(serve, counting, config)
        yield f"{binds[0]}/mcp", registry
        nursery.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def old_client(url: str, context: ssl.SSLContext | None) -> AsyncIterator[McpClient]:
    """An MCP client on the former h11 transport (one connection per POST)."""
    client = McpClient("modern", {}, keep_history=False)
    async with trio.open_nursery() as nursery:
        client.transport = _h11_client.HttpTransport(
            url, nursery, {}, 10.0, 16 * 1024 * 1024, context, receiver=client.inbound
        )
        try:
            yield client
        finally:
            client.transport = None
            nursery.cancel_scope.cancel()


def openers(url: str, context: ssl.SSLContext | None) -> dict[str, Callable[[], Any]]:
    found: dict[str, Callable[[], Any]] = {
        "before (h11, a connection per call)": lambda: old_client(url, context),
        "after (httpx2, HTTP/1.1 pool)": lambda: open_http_client(
            url, verify=context or True, max_connections=4
        ),
    }
    if context is not None:
        found["after (httpx2, HTTP/2)"] = lambda: open_http_client(
            url, verify=context, http2=True, max_connections=4
        )
    return found


async def sequential(served: Served, opener: Callable[[], Any], calls: int) -> tuple[float, int]:
    """Seconds per call and connections opened, for *calls* sequential no-op calls."""
    served.connections.clear()
    async with opener() as client:
        await client.call_tool("noop")  # not timed: the first connection
        served.connections.clear()
        start = time.perf_counter()
        for _ in range(calls):
            await client.call_tool("noop")
        elapsed = time.perf_counter() - start
    return elapsed / calls, len(served.connections)


async def cancel_latencies(served: Served, opener: Callable[[], Any], samples: int) -> list[float]:
    """Caller cancels -> the server's tool sees its flag, *samples* times."""
    out: list[float] = []
    async with opener() as client:
        for _ in range(samples):
            served.reset()
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def call(scope: trio.CancelScope = scope) -> None:
                    with scope:
                        await client.call_tool("watched")

                nursery.start_soon(call)
                await served.started.wait()
                cancelled_at = time.perf_counter()
                scope.cancel()
                with trio.fail_after(10):
                    while served.flagged_at is None:
                        await trio.lowlevel.checkpoint()
                out.append(served.flagged_at - cancelled_at)
    return out


def _leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {fmt_time(statistics.median(ordered))}, p99 {fmt_time(p99)}"


async def run(quick: bool) -> list[Row]:
    calls = 50 if quick else 1000
    rounds = 1 if quick else 3
    samples = 10 if quick else 200
    rows: list[Row] = []
    ca = trustme.CA()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with tempfile.TemporaryDirectory() as tmp:
        certfile = str(Path(tmp) / "server.pem")
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(certfile)
        for scheme, cert, ctx in (("HTTP", None, None), ("HTTPS", certfile, context)):
            served = Served()
            async with serving(served, cert) as (url, _):
                variants = openers(url, ctx)
                per_call: dict[str, list[float]] = {name: [] for name in variants}
                conns: dict[str, int] = {}
                for round_ in range(rounds):
                    order = list(variants) if round_ % 2 == 0 else list(reversed(variants))
                    for name in order:
                        seconds, opened = await sequential(served, variants[name], calls)
                        per_call[name].append(seconds)
                        conns[name] = opened
                before = statistics.median(next(iter(per_call.values())))
                for name, values in per_call.items():
                    median = statistics.median(values)
                    after = not name.startswith("before")
                    rows.append(
                        Row(
                            BENCH,
                            f"{calls:,} sequential no-op calls over {scheme}, {name}: per call;"
                            f" connections opened",
                            f"{fmt_time(median)}; {conns[name]:,} connections",
                            "<= 4 connections" if after else "",
                            ("PASS" if conns[name] <= 4 else "MISS") if after else "",
                        )
                    )
                    if after:
                        rows.append(
                            Row(
                                BENCH,
                                f"{scheme}: ratio {name} / before, per call",
                                fmt_ratio(median / before),
                                "info",
                            )
                        )
                for name, opener in variants.items():
                    print(f"  cancel latency: {scheme}, {name}", file=sys.stderr, flush=True)
                    try:
                        value = percentiles(await cancel_latencies(served, opener, samples))
                    except* McpError as group:  # recorded, not hidden: the old client's HTTPS
                        value = f"failed: {_leaf(group)}"[:200]
                    rows.append(
                        Row(
                            BENCH,
                            f"{scheme}, {name}: caller cancel -> downstream tool sees the flag",
                            value,
                            "info",
                        )
                    )
        served = Served()
        async with open_test_client(served.server) as memory:

            @contextlib.asynccontextmanager
            async def same() -> AsyncIterator[Any]:
                yield memory

            latencies = await cancel_latencies(served, same, samples)
        rows.append(
            Row(
                BENCH,
                "in process (the in-memory test client): caller cancel -> tool sees the flag",
                percentiles(latencies),
                "info",
            )
        )
    return rows


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    for row in trio.run(run, quick):
        print(f"| {row.bench} | {row.measurement} | {row.value} | {row.target} | {row.status} |")
