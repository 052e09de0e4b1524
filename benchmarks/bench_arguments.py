"""Benchmark 7: what validating a tool's arguments from its type hints costs per call.

A no-op tool with two ``int`` parameters (``cancellable=False``: only the
argument path is measured), registered twice: its schema and validator
derived from the type hints (pydantic, one validator built at
registration, the arguments checked in strict JSON mode), and with the
same schema hand-written (``input_schema=``: the top-level type checks the
library did before pydantic).  Each is timed through the whole in-process
``tools/call`` (JSON-RPC classification, the tool lookup, binding, the
context, the call, the result) and for the binding alone; and the typed
call against the same no-op without parameters (issue 27's target: at most
5% more).
"""

from __future__ import annotations

import time
from statistics import median
from typing import Any

from trio_mcp_cancel import open_registry
from trio_mcp_cancel.lowlevel import Caller
from trio_mcp_cancel.server import McpServer

from ._common import Row, Timer, fmt_ratio, fmt_time, interleave, paired_ratio

NAME = "arguments"
SCOPE = "session:0123456789abcdef"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def _server() -> McpServer:
    server = McpServer("bench-arguments")

    @server.tool(cancellable=False)
    async def typed(a: int, b: int) -> str:
        return "ok"

    @server.tool(cancellable=False, input_schema=SCHEMA)
    async def written(a: int, b: int) -> str:
        return "ok"

    @server.tool(cancellable=False)
    async def bare() -> str:
        return "ok"

    return server


async def run(quick: bool) -> list[Row]:
    n, repeats = (2_000, 3) if quick else (20_000, 9)
    server = _server()
    arguments = {"a": 1, "b": 2}
    async with open_registry() as registry:
        caller = Caller(SCOPE, registry)
        dispatcher = server.dispatcher

        def through(name: str) -> Timer:
            message = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments if name != "bare" else {}},
            }

            async def timer(count: int) -> float:
                start = time.perf_counter()
                for _ in range(count):
                    reply = await dispatcher.handle(message, caller)
                assert reply is not None and "result" in reply, reply
                return time.perf_counter() - start

            return timer

        def binding(name: str) -> Timer:
            bind = server.registration.tools[name].bind

            async def timer(count: int) -> float:
                start = time.perf_counter()
                for _ in range(count):
                    bind(arguments)
                return time.perf_counter() - start

            return timer

        variants = {
            "call typed": through("typed"),
            "call written": through("written"),
            "call bare": through("bare"),
            "bind typed": binding("typed"),
            "bind written": binding("written"),
        }
        samples = await interleave(variants, n, repeats)
    label = "no-op `tools/call`, two `int` arguments, in process"
    return [
        Row(
            "7 arguments",
            f"{label}: type hints (pydantic)",
            fmt_time(median(samples["call typed"])),
        ),
        Row(
            "7 arguments",
            f"{label}: hand-written `input_schema`",
            fmt_time(median(samples["call written"])),
        ),
        Row(
            "7 arguments",
            "no-op `tools/call` without arguments, in process",
            fmt_time(median(samples["call bare"])),
        ),
        Row(
            "7 arguments",
            "two typed `int` arguments / none, whole in-process call",
            fmt_ratio(paired_ratio(samples["call typed"], samples["call bare"])),
            "<= 1.05x",
            "PASS" if paired_ratio(samples["call typed"], samples["call bare"]) <= 1.05 else "MISS",
        ),
        Row(
            "7 arguments",
            "binding alone: type hints (pydantic), per call",
            fmt_time(median(samples["bind typed"])),
            "info",
        ),
        Row(
            "7 arguments",
            "binding alone: hand-written `input_schema`, per call",
            fmt_time(median(samples["bind written"])),
            "info",
        ),
    ]
