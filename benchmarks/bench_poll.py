"""Benchmark 1: the polled flag, ``cancelled()``, against a bare dict lookup.

``cancelled()`` is meant to be called in a tool's tight loop, so it should
cost about what the cheapest "is this request cancelled?" test a server
could write costs: one lookup in a dict keyed like the registry's,
``d[(namespace, request_id)]``.  Both loops are unrolled ten times so the loop
itself is a small share of either measurement.

``checkpoint_cancelled()`` is also compared with the bare Trio checkpoint it
wraps (for information: it is a yield point, so it costs a scheduler pass).
"""

from __future__ import annotations

import time
from statistics import median

import trio

from trio_mcp_cancel import cancelled, checkpoint_cancelled, open_registry, tracked

from ._common import Row, Timer, fmt_ratio, fmt_time, interleave, paired_ratio, verdict

NAME = "poll"
TARGET = 3.0
SCOPE = "session:0123456789abcdef"
REQUEST_ID = 123_456


async def _poll(n: int) -> float:
    flag = False
    start = time.perf_counter()
    for _ in range(n // 10):
        flag = cancelled()
        flag = cancelled()
        flag = cancelled()
        flag = cancelled()
        flag = cancelled()
        flag = cancelled()
        flag = cancelled()
        flag = cancelled()
        flag = cancelled()
        flag = cancelled()
    elapsed = time.perf_counter() - start
    assert not flag
    return elapsed


async def _dict_lookup(n: int) -> float:
    # The shape of the registry's own index: (namespace, id) -> per-request object.
    d = {(f"session:{i:016x}", i): object() for i in range(REQUEST_ID - 500, REQUEST_ID + 500)}
    key = (SCOPE, REQUEST_ID)
    d[key] = object()
    value = None
    start = time.perf_counter()
    for _ in range(n // 10):
        value = d[key]
        value = d[key]
        value = d[key]
        value = d[key]
        value = d[key]
        value = d[key]
        value = d[key]
        value = d[key]
        value = d[key]
        value = d[key]
    elapsed = time.perf_counter() - start
    assert value is not None
    return elapsed


async def _checkpoint_cancelled(n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await checkpoint_cancelled()
    return time.perf_counter() - start


async def _bare_checkpoint(n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await trio.lowlevel.checkpoint()
    return time.perf_counter() - start


async def run(quick: bool) -> list[Row]:
    n, repeats = (200_000, 5) if quick else (1_000_000, 15)
    n_checkpoint, repeats_checkpoint = (20_000, 3) if quick else (100_000, 9)
    async with open_registry() as reg, tracked(REQUEST_ID, SCOPE, registry=reg):
        polls: dict[str, Timer] = {"cancelled": _poll, "dict": _dict_lookup}
        samples = await interleave(polls, n, repeats)
        checkpoints: dict[str, Timer] = {
            "checkpoint_cancelled": _checkpoint_cancelled,
            "checkpoint": _bare_checkpoint,
        }
        cp = await interleave(checkpoints, n_checkpoint, repeats_checkpoint)
    ratio = paired_ratio(samples["cancelled"], samples["dict"])
    cp_ratio = paired_ratio(cp["checkpoint_cancelled"], cp["checkpoint"])
    return [
        Row(
            "1 poll",
            "`cancelled()` in `tracked()`, per call",
            fmt_time(median(samples["cancelled"])),
        ),
        Row("1 poll", "`d[(namespace, id)]`, per lookup", fmt_time(median(samples["dict"]))),
        Row(
            "1 poll",
            "ratio `cancelled()` / `d[key]`",
            fmt_ratio(ratio),
            f"<= {TARGET:g}x",
            verdict(ratio, TARGET),
        ),
        Row(
            "1 poll",
            "`await checkpoint_cancelled()`, per call",
            fmt_time(median(cp["checkpoint_cancelled"])),
        ),
        Row(
            "1 poll",
            "ratio `checkpoint_cancelled()` / `trio.lowlevel.checkpoint()`",
            fmt_ratio(cp_ratio),
            "info",
        ),
    ]
