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
    bench_cross_process,
    bench_e2e,
    bench_early_cancel,
    bench_flood,
    bench_hostile,
    bench_poll,
    bench_tracked,
)
from ._common import Row

BENCHMARKS: dict[str, Callable[[bool], Awaitable[list[Row]]]] = {
    bench_poll.NAME: bench_poll.run,
    bench_tracked.NAME: bench_tracked.run,
    bench_flood.NAME: bench_flood.run,
    bench_e2e.NAME: bench_e2e.run,
    bench_early_cancel.NAME: bench_early_cancel.rows,
    bench_hostile.NAME: bench_hostile.rows,
    bench_cross_process.NAME: bench_cross_process.rows,
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


def results_md(rows: list[Row], argv: list[str], elapsed: float) -> str:
    today = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"""# Benchmark results

Made by `{command(argv)}` on {today}, in {elapsed:.0f} s.
Regenerate with `python3 dev.py bench` (`--quick` for a smoke test, `--only NAME` for one of
{", ".join(f"`{name}`" for name in BENCHMARKS)}; neither rewrites this file).

- Python {platform.python_version()} ({platform.python_implementation()}),
  Trio {_version("trio")}, trio-mcp-cancel {_version("trio-mcp-cancel")},
  mcp {_version("mcp")} (optional: only for the MCP SDK comparison row; not a dependency
  of this project, `pip install mcp` into the venv by hand to get that row)
- {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs

Every comparison is measured in one run (the end-to-end server in a child
process of it), the variants interleaved round by round; values are medians
over the rounds, ratios are medians of the per-round ratios.  Absolute times
depend on the machine and are context only: the targets are ratios, a missed
one reads MISS and fails nothing.  Rows marked "asserted" are hard bounds the
benchmark checks.  The end-to-end overhead moves by several percent between
runs on a 2-core machine (here: from -3% to +6%): the tracked and untracked
rates are within noise of each other.  See `benchmarks/__init__.py` and each
module's docstring for what exactly is timed.

{table(rows)}
"""


async def main(names: list[str], quick: bool) -> list[Row]:
    rows: list[Row] = []
    for name in names:
        print(f"running {name}...", file=sys.stderr, flush=True)
        rows += await BENCHMARKS[name](quick)
    return rows


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument(
        "--only", choices=list(BENCHMARKS), action="append", help="run only this benchmark"
    )
    args = parser.parse_args(argv)
    names = args.only or list(BENCHMARKS)
    start = time.perf_counter()
    rows = trio.run(main, names, args.quick)
    elapsed = time.perf_counter() - start
    print(table(rows))
    print(f"\n{len(names)} benchmark(s) in {elapsed:.1f} s", file=sys.stderr)
    if args.quick or args.only:
        print("(not a full run: benchmarks/RESULTS.md left as it is)", file=sys.stderr)
    else:
        RESULTS.write_text(results_md(rows, argv, elapsed), encoding="utf-8")
        print(f"wrote {RESULTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
