"""The benchmark of ``docs/upstream/hypercorn-idle-timeout.md``: bare hypercorn, with and without
the idle-timer patch.

``python -m benchmarks.upstream_idle [--quick] [--rounds N] [--seconds S]``

Both sides serve the floor app (:func:`benchmarks._servers.floor_app`: parse
a JSON-RPC ``tools/call``, answer a no-op result) on hypercorn's Trio
worker and nothing of ours; the patched side has only
``trio_mcp_cancel/transports/http/hypercorn_idle.py`` applied to
``TCPServer`` (the same mechanism as the proposed diff, whose behaviour and
task count ``tests/transports/http/test_hypercorn_idle_timer.py`` checks
against it).  Three measures:

* **counts** (load-independent): one keep-alive connection in this
  process, a Trio instrument counting, per request, the tasks spawned and
  the task steps (each a resumption after a scheduling point), and cProfile
  the Python function calls, server and client together (the client's share
  is the same on both sides);
* **instructions per call** (load-independent): each server process under
  ``valgrind --tool=callgrind``, counters dumped after a warm-up and after
  sequential keep-alive calls;
* **calls per second** (noisy on a shared machine): the two servers in
  processes of their own on one core, ``wrk`` on the other, at 1, 16 and
  64 connections, interleaved round by round (order reversed every other
  round); the ratio is the median of the per-round ratios patched/unpatched.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import secrets
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import trio

from . import _callgrind, _client, _wrk
from ._client import Server
from ._common import Row
from ._servers import floor_app

NAME = "upstream-idle"
BENCH = "hypercorn idle timer"
KINDS = ("floor", "floor-patched")
CONNECTIONS = (1, 16, 64)
REQUESTS = 1_000
#: hypercorn's ``keep_alive_max_requests`` (the servers' default config): callgrind's calls,
#: warm-up included, stay on one connection, whose setup would otherwise be counted.
KEEP_ALIVE_MAX = 1_000
WARM_UP = 100


class _Counts(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0
        self.steps = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


@contextmanager
def _idle_timer(patched: bool) -> Iterator[None]:
    """hypercorn's ``TCPServer`` with the patch applied for the block (or as it is)."""
    from hypercorn.trio.tcp_server import TCPServer

    from trio_mcp_cancel.transports.http import hypercorn_idle

    was = hypercorn_idle.applied(TCPServer)
    if patched:
        assert hypercorn_idle.apply(TCPServer) == "", "hypercorn's TCPServer has another shape"
    else:
        hypercorn_idle.restore(TCPServer)
    try:
        yield
    finally:
        if was:
            hypercorn_idle.apply(TCPServer)
        else:
            hypercorn_idle.restore(TCPServer)


async def _count(requests: int) -> tuple[float, float, float]:
    """Tasks spawned, task steps and Python calls per keep-alive request, in this process."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.keep_alive_max_requests = 10 * requests  # 1,000 by default: one connection throughout
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, floor_app, config))
        connection = await _client.Connection.open(int(binds[0].rsplit(":", 1)[1]))
        await _client.noop_calls(
            connection, 50, {}, modern=False
        )  # warm up: the connection, the app, the caches
        counts = _Counts()
        profile = cProfile.Profile()
        trio.lowlevel.add_instrument(counts)
        profile.enable()
        try:
            await _client.noop_calls(connection, requests, {}, modern=False)
        finally:
            profile.disable()
            trio.lowlevel.remove_instrument(counts)
        await connection.aclose()
        nursery.cancel_scope.cancel()
    calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    return counts.spawned / requests, counts.steps / requests, calls / requests


async def counts(requests: int = REQUESTS) -> dict[str, tuple[float, float, float]]:
    """``{side: (tasks spawned, task steps, Python calls) per request}``, one after the other."""
    found = {}
    for kind in KINDS:
        with _idle_timer(kind == "floor-patched"):
            found[kind] = await _count(requests)
    return found


async def _rate(server: Server, connections: int, seconds: int) -> float:
    script = _wrk.script(server, "noop", modern=False)
    result = await _wrk.run(script, server.port, connections, seconds)
    if result.errors or not result.requests:
        raise RuntimeError(f"{server.kind} x{connections}: {result.errors} errors")
    return result.rate


async def rates(
    rounds: int, seconds: int, connections: tuple[int, ...]
) -> dict[tuple[str, int], list[float]]:
    """wrk's calls per second, per side and connection count, one value per round."""
    found: dict[tuple[str, int], list[float]] = {}
    async with _client.servers(list(KINDS)) as started:
        for server in started.values():
            server.session = secrets.token_urlsafe(24)  # the same headers as bench_e2e's floor
            await _rate(server, 16, 1)  # warm up
        for round_ in range(rounds):
            for conns in connections:
                order = KINDS if round_ % 2 == 0 else KINDS[::-1]
                for kind in order:
                    rate = await _rate(started[kind], conns, seconds)
                    found.setdefault((kind, conns), []).append(rate)
    return found


async def run(quick: bool, rounds: int = 9, seconds: int = 1) -> list[Row]:
    """The rows: counts per request, then calls/s and the patched/unpatched ratio."""
    per_request = await counts(200 if quick else REQUESTS)
    plain, patched = per_request["floor"], per_request["floor-patched"]
    rows = [
        Row(
            BENCH,
            "tasks spawned / task steps / Python function calls per keep-alive request, "
            "server and client in one process (hypercorn -> patched)",
            f"{plain[0]:.2f} -> {patched[0]:.2f} / {plain[1]:.2f} -> {patched[1]:.2f} / "
            f"{plain[2]:,.0f} -> {patched[2]:,.0f}",
            "one task fewer",
            "PASS" if round(plain[0] - patched[0], 2) == 1 else "MISS",
        )
    ]
    if _callgrind.available():
        n = 200 if quick else KEEP_ALIVE_MAX - 2 * WARM_UP
        plain_ir, patched_ir = [
            await _callgrind.instructions_per_call(kind, n, warm_up=WARM_UP) for kind in KINDS
        ]
        rows.append(
            Row(
                BENCH,
                f"instructions per keep-alive call, server process (callgrind, {n:,} calls)",
                f"{plain_ir:,.0f} -> {patched_ir:,.0f}: {patched_ir / plain_ir:.3f}x",
                "fewer",
                "PASS" if patched_ir < plain_ir else "MISS",
            )
        )
    if _wrk.path() is None:
        return [*rows, Row(BENCH, "calls/s", "wrk not installed: not measured", "", "MISS")]
    connections = (16,) if quick else CONNECTIONS
    found = await rates(1 if quick else rounds, seconds, connections)
    for conns in connections:
        before, after = found[("floor", conns)], found[("floor-patched", conns)]
        ratio = statistics.median(a / b for a, b in zip(after, before, strict=True))
        rows.append(
            Row(
                BENCH,
                f"floor calls/s at {conns} connection(s), hypercorn -> patched "
                f"(median of {len(before)} interleaved rounds)",
                f"{statistics.median(before):,.0f} -> {statistics.median(after):,.0f}: "
                f"{ratio:.3f}x",
                ">= 1.0x",
                "PASS" if ratio >= 1.0 else "MISS",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one short round at 16 connections")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=int, default=1)
    args: Any = parser.parse_args(argv)
    _client.pin_self()
    rows = trio.run(partial(run, args.quick, args.rounds, args.seconds))
    print("| Measurement | Result | Target | Status |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row.measurement} | {row.value} | {row.target} | {row.status} |")


if __name__ == "__main__":
    main()
