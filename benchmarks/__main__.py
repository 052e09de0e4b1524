"""Run the benchmarks: ``python3 dev.py bench [--quick] [--only NAME]``.

Prints a markdown table.  A full run (neither ``--quick`` nor ``--only``)
also rewrites ``benchmarks/RESULTS.md`` with the table, the date, the
versions and the command that made it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from . import (
    _client,
    _standard,
    _wrk,
    bench_arguments,
    bench_client,
    bench_conformance_cancel,
    bench_cross_process,
    bench_e2e,
    bench_early_cancel,
    bench_flood,
    bench_hostile,
    bench_latency,
    bench_memory,
    bench_poll,
    bench_telemetry,
    bench_tracked,
    bench_workers,
    gateway,
    middleware_cost,
    percall,
    profile_hotpath,
)
from ._common import Row
from ._notes import analysis, conditions, shapes

BENCHMARKS: dict[str, Callable[[bool], Awaitable[list[Row]]]] = {
    bench_poll.NAME: bench_poll.run,
    bench_tracked.NAME: bench_tracked.run,
    bench_flood.NAME: bench_flood.run,
    bench_e2e.NAME: bench_e2e.run,
    bench_latency.NAME: bench_latency.run,
    bench_memory.NAME: bench_memory.run,
    bench_early_cancel.NAME: bench_early_cancel.rows,
    bench_hostile.NAME: bench_hostile.rows,
    bench_cross_process.NAME: bench_cross_process.rows,
    bench_arguments.NAME: bench_arguments.run,
    bench_telemetry.NAME: bench_telemetry.run,
    bench_client.NAME: bench_client.run,
    bench_workers.NAME: bench_workers.run,
    bench_conformance_cancel.NAME: bench_conformance_cancel.run,
    gateway.NAME: gateway.run,
    middleware_cost.NAME: middleware_cost.run,
}

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "RESULTS.md"
HEADER = ("Benchmark", "Measurement", "Result", "Target", "Status")


def table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    for row in rows:
        cells = (row.bench, row.measurement, row.value, row.target, row.status)
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def command(argv: list[str]) -> str:
    """The command that ran us, as a developer would type it."""
    args = "".join(f" {arg}" for arg in argv)
    if Path(sys.prefix).resolve() == (ROOT / ".venv").resolve():
        return f"python3 dev.py bench{args}"
    return f"{sys.executable} -m benchmarks{args}"


_PER_CALL = """
Per-call counts that do not depend on the machine's load (`python -m
benchmarks.percall`: the benchmark server's app driven through ASGI in
process, no socket; Python function calls per call, all and this
library's; Trio scheduling points; the bytes a call allocates at its peak;
and, for context only, wall-clock µs, the min of five batches).  The
harness delivers a body as hypercorn's HTTP/1.1 does (two messages) and
answers the hypercorn sink's `can_write_now` as an idle hypercorn socket would, so a whole
response is written in the request's task as under hypercorn; the one
socket write of `hypercorn_compat.send_whole` needs hypercorn's own
objects, so here it is two `send()` calls.

"""


def results_md(
    rows: list[Row], argv: list[str], elapsed: float, before: str, after: str, profile: str
) -> str:
    today = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    server_core, client_core = _client.cores()
    pinning = (
        f"servers on CPU {server_core}, wrk and the benchmark process (clients, micro-benchmarks)"
        f" on CPU {client_core} (`taskset`)"
        if server_core is not None
        else "not pinned (fewer than two CPUs, or no `taskset`)"
    )
    versions = ", ".join(
        f"{name} {_version(name)}"
        for name in ("trio", "hypercorn", "h11", "httpx2", "mcp", "anyio", "uvicorn", "starlette")
    )
    return f"""# Benchmark results

Made by `{command(argv)}` on {today}, in {elapsed:.0f} s.
Regenerate with `python3 dev.py bench` (it installs `wrk` with apt-get when missing;
`--quick` for a smoke test, `--only NAME` for one of
{", ".join(f"`{name}`" for name in BENCHMARKS)}; neither rewrites this file).

- Python {platform.python_version()} ({platform.python_implementation()}),
  trio-mcp-cancel {_version("trio-mcp-cancel")}; {versions};
  {_wrk.version()}
- {platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} CPUs;
  core pinning: {pinning}
- Event loops: ours and the floor on hypercorn's Trio worker; the MCP SDK on plain
  uvicorn (asyncio, h11), on uvicorn[standard] (uvloop, httptools, installed by the
  benchmark into `.tools/bench-py/` for those servers only; {_asyncio_flavour()}) and on
  hypercorn's Trio worker (anyio on Trio).

## Measuring conditions

{conditions(before, after)}

## How to read it

Every comparison is measured in one run, each server in a process of its own
pinned to one core, the load generator (`wrk`, native, one thread) or the
raw-socket client on the other; the variants are interleaved round by round
(the order reversed every other round); values are medians over the rounds,
ratios are medians of the per-round ratios, and the spread of the per-round
ratios is given as the noise.  Absolute rates depend on the machine and are
context only: the targets are ratios, and a missed one reads MISS and fails
nothing.  Rows marked "asserted" are hard bounds the benchmark checks.  Each
wrk run is checked against the server's own count of tool calls, so every
response counted was a real call.  See each module's docstring in
`benchmarks/` for what exactly is timed.

{table(rows)}

## Where the time goes (profile of the no-op `tools/call`)

`python -m benchmarks.profile_hotpath`: cProfile inside each server while wrk
drives it at 16 connections.  cProfile slows every Python call, so shares and
counts are the information, not the rates.

{profile}
## Targets missed, and why

{analysis(rows)}
## Measured costs behind the code's shapes

{shapes()}"""


def _asyncio_flavour() -> str:
    """What the uvicorn[standard] rows ran on (:mod:`benchmarks._standard`'s folder)."""
    found = _standard.versions()
    if not found:
        return "uvicorn[standard]: uvloop and httptools not installed"
    return "uvicorn[standard]: " + ", ".join(f"{name} {found[name]}" for name in sorted(found))


async def main(names: list[str], quick: bool) -> list[Row]:
    rows: list[Row] = []
    for name in names:
        print(f"running {name}...", file=sys.stderr, flush=True)
        rows += await BENCHMARKS[name](quick)
    return rows


def snapshot() -> str:
    """``uptime`` and the busiest processes, to record what else loaded the machine."""
    import subprocess

    out = []
    for argv in (["uptime"], ["top", "-bcn2", "-d1", "-w", "200"]):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        lines = done.stdout.splitlines()
        if argv[0] == "top":
            # The second frame: top's first one averages since boot.
            frames = [i for i, line in enumerate(lines) if line.startswith("top -")]
            lines = lines[frames[-1] : frames[-1] + 20] if frames else lines[:20]
        out += lines
    out.append(f"(this benchmark's own process: PID {os.getpid()})")
    return "\n".join(out)


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument(
        "--only", choices=list(BENCHMARKS), action="append", help="run only this benchmark"
    )
    args = parser.parse_args(argv)
    names = args.only or list(BENCHMARKS)
    full = not (args.quick or args.only)
    if full:
        _wrk.ensure_installed()
    _client.pin_self()
    # What else loaded the machine, for RESULTS.md only: `top` takes a second per frame.
    before = snapshot() if full else ""
    start = time.perf_counter()
    rows = trio.run(main, names, args.quick)
    profile = trio.run(profile_hotpath.report, args.quick) if full or args.quick else ""
    if full or args.quick:
        profile += _PER_CALL + percall.report(args.quick)
    elapsed = time.perf_counter() - start
    after = snapshot() if full else ""
    print(table(rows))
    if args.quick:
        print(f"\n{profile}")
    print(f"\n{len(names)} benchmark(s) in {elapsed:.1f} s", file=sys.stderr)
    if args.quick or args.only:
        print("(not a full run: benchmarks/RESULTS.md left as it is)", file=sys.stderr)
    else:
        text = results_md(rows, argv, elapsed, before, after, profile)
        RESULTS.write_text(text, encoding="utf-8")
        print(f"wrote {RESULTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
