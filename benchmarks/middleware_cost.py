"""What one middleware layer costs per call.

A no-op cancellable tool, called in process through the dispatcher (the
JSON-RPC path every transport shares), on two servers: no middleware (the
handler is called directly) and one no-op middleware (``return await
call_next()``), which builds the request's ``MiddlewareRequest`` and sets
its outcome.  Reported as times per call and their ratio; no target: it is
for information.
"""

from __future__ import annotations

import time
from statistics import median
from typing import Any

from trio_mcp_cancel import open_registry
from trio_mcp_cancel.lowlevel import Caller
from trio_mcp_cancel.middleware import CallNext, MiddlewareRequest
from trio_mcp_cancel.server import McpServer

from ._common import Row, Timer, fmt_ratio, fmt_time, interleave, paired_ratio

NAME = "middleware"
SCOPE = "session:0123456789abcdef"
BENCH = "middleware"


async def _noop(request: MiddlewareRequest, call_next: CallNext) -> Any:
    return await call_next()


def _server(layers: int) -> McpServer:
    server = McpServer("bench-middleware", telemetry=False, middleware=[_noop] * layers)

    @server.tool()
    async def noop() -> str:
        return "ok"

    return server


async def run(quick: bool) -> list[Row]:
    n, repeats = (1_000, 3) if quick else (10_000, 9)
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "noop", "arguments": {}},
    }
    async with open_registry() as registry:
        caller = Caller(SCOPE, registry)

        def through(layers: int) -> Timer:
            dispatcher = _server(layers).dispatcher

            async def timer(count: int) -> float:
                start = time.perf_counter()
                for _ in range(count):
                    reply = await dispatcher.handle(message, caller)
                assert reply is not None and "result" in reply, reply
                return time.perf_counter() - start

            return timer

        samples = await interleave({"0": through(0), "1": through(1)}, n, repeats)
    label = "no-op cancellable `tools/call`, in process"
    return [
        Row(BENCH, f"{label}: no middleware", fmt_time(median(samples["0"]))),
        Row(BENCH, f"{label}: one no-op middleware", fmt_time(median(samples["1"]))),
        Row(
            BENCH,
            "ratio one middleware / none",
            fmt_ratio(paired_ratio(samples["1"], samples["0"])),
            "info",
        ),
    ]
