"""Benchmark 2: the per-request cost of ``tracked()``.

``async with tracked(i, namespace, registry=reg): pass`` is every request's fixed
overhead: filing the request, entering and leaving its own cancel scope,
publishing it in a context variable, and untracking it.  It is compared
with the one thing no server can skip, a bare ``with trio.CancelScope():
pass`` (target: within 3x), and, when the ``mcp`` package is installed,
with the official MCP Python SDK's own per-request cancellation
bookkeeping, run on the SDK's real classes (see :mod:`benchmarks._mcp_sdk`).
``mcp`` is never a dependency of this project: without it that row reads
"not available".
"""

from __future__ import annotations

import time
from statistics import median

import trio

from trio_mcp_cancel import open_registry, tracked

from . import _mcp_sdk
from ._common import Row, Timer, fmt_ratio, fmt_time, interleave, paired_ratio, verdict

NAME = "tracked"
TARGET = 3.0
SCOPE = "session:0123456789abcdef"


async def _bare_cancel_scope(n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        with trio.CancelScope():  # noqa: ASYNC100 - the empty namespace is what is measured
            pass
    return time.perf_counter() - start


async def run(quick: bool) -> list[Row]:
    n, repeats = (10_000, 3) if quick else (50_000, 11)
    sdk = _mcp_sdk.load()
    async with open_registry() as reg:

        async def tracked_loop(n: int) -> float:
            start = time.perf_counter()
            for i in range(n):
                async with tracked(i, SCOPE, registry=reg):
                    pass
            return time.perf_counter() - start

        variants: dict[str, Timer] = {"tracked": tracked_loop, "namespace": _bare_cancel_scope}
        if sdk is not None:
            variants["mcp"] = sdk.timer
        samples = await interleave(variants, n, repeats)
        assert reg.in_flight_count == 0 and reg.row_count == 0

    ratio = paired_ratio(samples["tracked"], samples["namespace"])
    rows = [
        Row(
            "2 tracked",
            "`async with tracked(i, namespace, registry=reg): pass`, per request",
            fmt_time(median(samples["tracked"])),
        ),
        Row(
            "2 tracked",
            "`with trio.CancelScope(): pass`, per request",
            fmt_time(median(samples["namespace"])),
        ),
        Row(
            "2 tracked",
            "ratio `tracked()` / bare `CancelScope`",
            fmt_ratio(ratio),
            f"<= {TARGET:g}x",
            verdict(ratio, TARGET),
        ),
    ]
    if sdk is None:
        rows.append(
            Row(
                "2 tracked",
                "MCP Python SDK per-request bookkeeping (`pip install mcp`)",
                "not available",
            )
        )
        return rows
    sdk_ratio = paired_ratio(samples["tracked"], samples["mcp"])
    rows += [
        Row("2 tracked", f"{sdk.label}, per request", fmt_time(median(samples["mcp"]))),
        Row("2 tracked", "ratio `tracked()` / MCP SDK bookkeeping", fmt_ratio(sdk_ratio), "info"),
    ]
    return rows
