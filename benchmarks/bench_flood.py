"""Benchmark 3: cancellation floods, the rows they leave, and cost growth.

Floods (default bounds: 256 rows per namespace, 10,000 rows in all):

* 100k ``notify_cancelled`` with random ids, from one namespace and from 1k
  namespaces, with nothing in flight and with requests in flight (about half
  of the ids hit one);
* 100k ``reg._cancel`` (white-box: the row table, a row for every id) with
  random ids from one namespace and from 1k namespaces
  (``CancellationLimitReached`` caught).

Each flood runs on a fresh registry; the rows it leaves are asserted to be
within the per-namespace quota and the global cap, and printed.  The library's
logger stays at its default level with a handler that only counts records,
so the cost of the warnings a flood provokes is part of the measurement
(and their number is reported: it is the flood's log amplification).

Growth: the per-operation cost of ``_cancel()`` (a new row), ``clear()``
(removing one) and ``_cancel()`` at the global cap (amortised batch
eviction) with 1k, 10k and 100k rows in the table, ten rows per namespace.  The
table is ``O(log n)`` per operation by design.  A control does the same
with a plain ``dict`` (set and delete the same keys), interleaved with them:
part of any growth is only the memory hierarchy meeting larger structures,
and a plain dict's own cost grows about 3x from 1k to 100k entries here.
So the target is the library's growth *relative to the dict's* (the
per-round ratio of the two growth ratios): at most ``log(100k) / log(1k)``
= 1.67x, the most an ``O(log n)`` structure may add on top of what the
memory hierarchy costs a dict (linear growth would be about 35x).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass
from statistics import median

import trio
import trio.testing

from trio_mcp_cancel import (
    CancellationLimitReached,
    Registry,
    RegistryConfig,
    open_registry,
    tracked,
)
from trio_mcp_cancel.lowlevel import CancelOutcome

from ._common import Row, Timer, fmt_ratio, fmt_time, interleave, paired_ratio, verdict

NAME = "flood"
SEED = 20240604
FLOOD_CONFIG = RegistryConfig(grace_period=3600.0, cleanup_interval=None)
LOGGER = logging.getLogger("trio_mcp_cancel")

#: ``Registry._cancel`` as the benchmarks call it: plain ints and strs as ids.
_Cancel = Callable[..., None]


class _CountingHandler(logging.Handler):
    """Counts records without formatting them."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


@contextmanager
def _counted_logs() -> Iterator[_CountingHandler]:
    handler = _CountingHandler()
    propagate = LOGGER.propagate
    LOGGER.addHandler(handler)
    LOGGER.propagate = False
    try:
        yield handler
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.propagate = propagate


@contextmanager
def _quiet_logger() -> Iterator[None]:
    level = LOGGER.level
    LOGGER.setLevel(logging.ERROR)
    try:
        yield
    finally:
        LOGGER.setLevel(level)


@dataclass(frozen=True)
class Flood:
    label: str
    op: str  # "notify" or "cancel"
    namespaces: int
    in_flight_per_scope: int = 0
    quiet_log: bool = False


@dataclass
class FloodResult:
    rows_held: int = 0
    max_scope_rows: int = 0
    in_flight: int = 0
    refused: int = 0
    log_records: int = 0
    outcomes: Counter[str] | None = None


async def _park(reg: Registry, request_id: int, namespace: str) -> None:
    async with tracked(request_id, namespace, registry=reg):
        await trio.sleep_forever()


def _flood_ops(flood: Flood, n: int, rng: random.Random) -> list[tuple[str, int]]:
    namespaces = [f"tenant:{s}" for s in range(flood.namespaces)]
    # Half the ids hit an in-flight request when there are some; otherwise
    # they are random 31-bit ids, as an attacker's would be.
    id_space = 2 * flood.in_flight_per_scope or 2**31
    return [
        (namespaces[rng.randrange(flood.namespaces)], rng.randrange(id_space)) for _ in range(n)
    ]


def _flood_timer(
    flood: Flood, ops: list[tuple[str, int]], handler: _CountingHandler, result: FloodResult
) -> Timer:
    async def timer(n: int) -> float:
        assert n == len(ops)
        async with open_registry(FLOOD_CONFIG) as reg, trio.open_nursery() as nursery:
            for s in range(flood.namespaces):
                for request_id in range(flood.in_flight_per_scope):
                    nursery.start_soon(_park, reg, request_id, f"tenant:{s}")
            await trio.testing.wait_all_tasks_blocked()
            in_flight = reg.in_flight_count
            assert in_flight == flood.namespaces * flood.in_flight_per_scope
            logs_before = handler.count
            refused = 0
            outcomes: list[CancelOutcome] = []
            if flood.op == "notify":
                notify = reg.notify_cancelled
                record = outcomes.append
                start = time.perf_counter()
                for namespace, request_id in ops:
                    record(notify(namespace, request_id, "flood"))
                elapsed = time.perf_counter() - start
            else:
                # White-box: the strict, private ``_cancel`` records a row for
                # every id, so the table's quota and cap take the whole flood.
                cancel: _Cancel = reg._cancel
                with _quiet_logger() if flood.quiet_log else nullcontext():
                    start = time.perf_counter()
                    for namespace, request_id in ops:
                        try:
                            cancel(request_id, "flood", namespace)
                        except CancellationLimitReached:
                            refused += 1
                    elapsed = time.perf_counter() - start
            # The bounds hold whatever the flood did.
            quota = FLOOD_CONFIG.max_rows_per_namespace
            cap = FLOOD_CONFIG.max_rows
            assert quota is not None and cap is not None
            namespace_rows = max(
                reg.namespace_row_count(f"tenant:{s}") for s in range(flood.namespaces)
            )
            assert reg.row_count <= cap, (flood.label, reg.row_count)
            assert namespace_rows <= quota, (flood.label, namespace_rows)
            if flood.op == "notify":
                # Notifications only ever record rows for requests in flight.
                assert reg.row_count <= in_flight, (flood.label, reg.row_count)
            result.rows_held = max(result.rows_held, reg.row_count)
            result.max_scope_rows = max(result.max_scope_rows, namespace_rows)
            result.in_flight = in_flight
            result.refused = refused
            result.log_records = handler.count - logs_before
            result.outcomes = Counter(o.value for o in outcomes)
            nursery.cancel_scope.cancel()
        return elapsed

    return timer


def _describe(flood: Flood, result: FloodResult, n: int) -> str:
    if flood.op == "notify":
        assert result.outcomes is not None
        parts = [f"{count:,} {outcome}" for outcome, count in sorted(result.outcomes.items())]
        done = ", ".join(parts)
    else:
        done = f"{n - result.refused:,} accepted, {result.refused:,} refused by the quota"
    return (
        f"{done}; rows held {result.rows_held:,} (largest namespace {result.max_scope_rows:,});"
        f" {result.log_records:,} log records"
    )


async def _floods(quick: bool) -> list[Row]:
    n = 10_000 if quick else 100_000
    many = 100 if quick else 1_000
    repeats = 1 if quick else 3
    floods = {
        "notify-1-idle": Flood("`notify_cancelled`, 1 namespace, nothing in flight", "notify", 1),
        "notify-many-idle": Flood(
            f"`notify_cancelled`, {many:,} namespaces, nothing in flight", "notify", many
        ),
        "notify-1-busy": Flood(
            "`notify_cancelled`, 1 namespace, 1,000 in flight",
            "notify",
            1,
            in_flight_per_scope=1000,
        ),
        "notify-many-busy": Flood(
            f"`notify_cancelled`, {many:,} namespaces, 10 in flight each",
            "notify",
            many,
            in_flight_per_scope=10,
        ),
        "cancel-1": Flood("`reg._cancel`, 1 namespace", "cancel", 1),
        "cancel-1-quiet": Flood(
            "`reg._cancel`, 1 namespace, library logger at ERROR", "cancel", 1, quiet_log=True
        ),
        "cancel-many": Flood(f"`reg._cancel`, {many:,} namespaces", "cancel", many),
    }
    rng = random.Random(SEED)
    results = {key: FloodResult() for key in floods}
    with _counted_logs() as handler:
        timers = {
            key: _flood_timer(flood, _flood_ops(flood, n, rng), handler, results[key])
            for key, flood in floods.items()
        }
        samples = await interleave(timers, n, repeats, warmup=0)
    cap = FLOOD_CONFIG.max_rows
    quota = FLOOD_CONFIG.max_rows_per_namespace
    rows = []
    for key, flood in floods.items():
        rows.append(
            Row(
                "3 flood",
                f"{n:,} x {flood.label}: per op",
                fmt_time(median(samples[key])),
            )
        )
        rows.append(
            Row(
                "3 flood",
                f"{n:,} x {flood.label}: outcome",
                _describe(flood, results[key], n),
                f"rows <= {cap:,}, namespace <= {quota}",
                "PASS (asserted)",
            )
        )
    return rows


@asynccontextmanager
async def _filled(size: int, capped: bool) -> AsyncIterator[tuple[Registry, list[str]]]:
    async with open_registry(
        grace_period=3600.0,
        cleanup_interval=None,
        max_rows_per_namespace=None,
        max_rows=size if capped else None,
    ) as reg:
        namespaces = [f"tenant:{s}" for s in range(max(1, size // 10))]
        for i in range(size):
            # The kernel's row table itself, white-box: ``_cancel`` records a
            # row whether or not the request runs (the public
            # ``notify_cancelled`` keeps one only for a request in flight, or
            # early in a session).
            fill: _Cancel = reg._cancel
            fill(i, None, namespaces[i % len(namespaces)])
        assert reg.row_count == size
        yield reg, namespaces


def _growth_timers(
    reg: Registry, capped: Registry, namespaces: list[str], size: int, rng: random.Random
) -> tuple[Timer, Timer, Timer, Timer]:
    ids = iter(range(10**9, 10**12))
    batch = 500
    # Control: a plain dict of the same size and keys, no library code.  Its
    # growth is what the memory hierarchy alone costs at these sizes.
    plain: dict[tuple[str, int], object] = {
        (namespaces[i % len(namespaces)], i): None for i in range(size)
    }

    async def insert(n: int) -> float:
        elapsed = 0.0
        cancel: _Cancel = reg._cancel
        clear = reg.clear
        for _ in range(n // batch):
            keys = [(next(ids), namespaces[rng.randrange(len(namespaces))]) for _ in range(batch)]
            start = time.perf_counter()
            for request_id, namespace in keys:
                cancel(request_id, None, namespace)
            elapsed += time.perf_counter() - start
            for request_id, namespace in keys:
                clear(request_id, namespace)
        assert reg.row_count == size
        return elapsed

    async def remove(n: int) -> float:
        elapsed = 0.0
        cancel: _Cancel = reg._cancel
        clear = reg.clear
        for _ in range(n // batch):
            keys = [(next(ids), namespaces[rng.randrange(len(namespaces))]) for _ in range(batch)]
            for request_id, namespace in keys:
                cancel(request_id, None, namespace)
            start = time.perf_counter()
            for request_id, namespace in keys:
                clear(request_id, namespace)
            elapsed += time.perf_counter() - start
        assert reg.row_count == size
        return elapsed

    async def evict(n: int) -> float:
        cancel: _Cancel = capped._cancel
        keys = [(next(ids), namespaces[rng.randrange(len(namespaces))]) for _ in range(n)]
        start = time.perf_counter()
        for request_id, namespace in keys:
            cancel(request_id, None, namespace)
        elapsed = time.perf_counter() - start
        assert capped.row_count <= size
        return elapsed

    async def control(n: int) -> float:
        elapsed = 0.0
        for _ in range(n // batch):
            keys = [(namespaces[rng.randrange(len(namespaces))], next(ids)) for _ in range(batch)]
            start = time.perf_counter()
            for key in keys:
                plain[key] = None
            for key in keys:
                del plain[key]
            elapsed += time.perf_counter() - start
        assert len(plain) == size
        return elapsed

    return insert, remove, evict, control


async def _growth(quick: bool) -> list[Row]:
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    repeats = 3 if quick else 15
    ops = 2_000 if quick else 5_000
    rng = random.Random(SEED)
    timers: dict[str, Timer] = {}
    counts: dict[str, int] = {}
    with _counted_logs():
        async with AsyncExitStack() as stack:
            for size in sizes:
                reg, namespaces = await stack.enter_async_context(_filled(size, capped=False))
                capped, _ = await stack.enter_async_context(_filled(size, capped=True))
                insert, remove, evict, control = _growth_timers(reg, capped, namespaces, size, rng)
                timers[f"insert@{size}"] = insert
                timers[f"clear@{size}"] = remove
                timers[f"evict@{size}"] = evict
                timers[f"control@{size}"] = control
                # Whole eviction batches (max_rows // 20), at least two of them.
                eviction_batch = max(1, size // 20)
                counts[f"insert@{size}"] = counts[f"clear@{size}"] = ops
                counts[f"control@{size}"] = ops
                counts[f"evict@{size}"] = eviction_batch * max(2, math.ceil(ops / eviction_batch))
            samples = await interleave(timers, counts, repeats, collect=False)

    rows = []
    small, large = sizes[0], sizes[-1]
    for op, label in (
        ("insert", "`cancel()` of a new key (no cap)"),
        ("clear", "`clear()` of a row (no cap)"),
        ("evict", "`cancel()` at the global cap, batch eviction amortised"),
        ("control", "control, no library: plain `dict` set + del of the same keys"),
    ):
        costs = ", ".join(
            f"{size // 1000}k: {fmt_time(median(samples[f'{op}@{size}']))}" for size in sizes
        )
        rows.append(Row("3 growth", f"{label}: per op at table size", costs))
        ratio = paired_ratio(samples[f"{op}@{large}"], samples[f"{op}@{small}"])
        rows.append(
            Row(
                "3 growth",
                f"{label}: ratio cost@{large // 1000}k / cost@{small // 1000}k",
                fmt_ratio(ratio),
                "info",
            )
        )
        if op == "control":
            continue
        relative = median(
            (lib_large / lib_small) / (dict_large / dict_small)
            for lib_large, lib_small, dict_large, dict_small in zip(
                samples[f"{op}@{large}"],
                samples[f"{op}@{small}"],
                samples[f"control@{large}"],
                samples[f"control@{small}"],
                strict=True,
            )
        )
        limit = math.log(large) / math.log(small)
        rows.append(
            Row(
                "3 growth",
                f"{label}: its growth / a plain dict's growth, same rounds",
                fmt_ratio(relative),
                f"<= {limit:.2f}x (log {large // 1000}k / log {small // 1000}k)",
                verdict(relative, limit),
            )
        )
    return rows


async def run(quick: bool) -> list[Row]:
    return await _floods(quick) + await _growth(quick)
