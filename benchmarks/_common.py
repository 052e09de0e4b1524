"""Shared measurement helpers: interleaved rounds, medians, ratios, table rows."""

from __future__ import annotations

import gc
import statistics
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = [
    "Row",
    "Timer",
    "fmt_ratio",
    "fmt_time",
    "gc_paused",
    "interleave",
    "paired_ratio",
    "verdict",
]

#: A timed batch: run *n* operations, return the seconds they took, measured
#: with ``time.perf_counter`` around the operations only (not the set-up).
Timer = Callable[[int], Awaitable[float]]


@dataclass(frozen=True)
class Row:
    """One line of the results table."""

    bench: str
    measurement: str
    value: str
    target: str = ""
    status: str = ""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Keep the cyclic GC out of a timed batch (reference counting still frees)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


async def interleave(
    variants: Mapping[str, Timer],
    n: int | Mapping[str, int],
    repeats: int,
    *,
    warmup: int = 1,
    collect: bool = True,
) -> dict[str, list[float]]:
    """Time every variant once per round, *repeats* rounds after *warmup*.

    *n* is the number of operations per batch, for every variant or per
    variant.  Returns the per-operation seconds of each round, per variant.
    The order of the variants alternates between rounds, so a slow spell of
    a noisy machine does not always land on the same variant.  With
    *collect*, a full GC runs before each batch (skip it when the heap is
    large and a collection would cost more than the batch).
    """
    counts = {name: n if isinstance(n, int) else n[name] for name in variants}
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for round_ in range(warmup + repeats):
        order = names if round_ % 2 == 0 else names[::-1]
        for name in order:
            if collect:
                gc.collect()
            with gc_paused():
                elapsed = await variants[name](counts[name])
            if round_ >= warmup:
                samples[name].append(elapsed / counts[name])
    return samples


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over rounds of ``numerator[i] / denominator[i]``.

    Pairing the two variants of one round cancels most of the drift of a
    noisy machine, which a ratio of two overall medians would not.
    """
    return statistics.median(a / b for a, b in zip(numerator, denominator, strict=True))


def fmt_time(seconds: float) -> str:
    """Per-operation time, in ns or µs."""
    ns = seconds * 1e9
    if ns < 10_000:
        return f"{ns:,.0f} ns"
    return f"{ns / 1000:,.1f} µs"


def fmt_ratio(ratio: float) -> str:
    return f"{ratio:.2f}x"


def verdict(ratio: float, limit: float) -> str:
    return "PASS" if ratio <= limit else "MISS"


def post_scope(headers: list[tuple[bytes, bytes]]) -> dict[str, object]:
    """The ASGI scope of a ``POST /mcp`` over HTTP/1.1 from 127.0.0.1 carrying *headers*,
    for benchmarks that drive an app in process (no socket, no server)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }
