"""Issue 35's httptools evaluation: hypercorn's h11 protocol against an httptools one.

``python -m benchmarks.eval_httptools [--rounds N] [--seconds S] [--calls N] [--skip-wrk]
[--skip-callgrind]`` uses the httptools installed (the ``dev`` extra), else
installs it into ``benchmarks/.httptools-deps`` (ignored by git; the venv is
left alone) for the servers only, then serves the floor app
and ours (legacy session, modern stateless; cancellable no-op) over
hypercorn's Trio worker twice: with its ``H11Protocol`` and with the
library's :class:`~trio_mcp_cancel.transports.http.hypercorn_httptools.HttptoolsProtocol`
(``serve(http="httptools")``) in its place.  Two measures, each h11 against httptools:

* **callgrind**: instructions the server process executes per request
  (``valgrind --tool=callgrind``; counters dumped after a warm-up and after
  *calls* sequential keep-alive requests), which does not depend on what else
  the machine runs;
* **wrk**: requests per second, in interleaved rounds (h11 and httptools
  alternate, first one then the other), reported as the median of the
  per-round ratios and their spread; noisy on a shared machine.

For ours over httptools the library's hypercorn shortcuts see the
protocol as it is served: ``tcp_server_of`` accepts it, ``send_whole``
(h11's connection only) declines, and the protocol holds a
``Content-Length`` head until its body, so each response is one socket
write on both sides.

Run without arguments for the numbers the report quotes.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from . import _callgrind, _client, _wrk

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEPS = HERE / ".httptools-deps"
PROTOCOLS = ("h11", "httptools")
#: (label, server kind, modern)
CASES = (
    ("floor", "floor", False),
    ("ours legacy", "ours", False),
    ("ours modern", "ours", True),
)


def ensure_httptools() -> None:
    """httptools importable by the servers: the installed one (the ``dev`` extra has it),
    else from :data:`DEPS`, installed there on first use and put on their ``PYTHONPATH``."""
    if importlib.util.find_spec("httptools") is not None:
        return
    if not glob.glob(str(DEPS / "httptools" / "parser" / "parser*.so")):
        print(f"installing httptools into {DEPS}...", file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--target", str(DEPS), "httptools"],
            check=True,
        )
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(DEPS), os.environ.get("PYTHONPATH", "")])
    )


def kind_on(kind: str, protocol: str) -> str:
    """The :mod:`benchmarks._servers` kind serving *kind* over *protocol*."""
    return kind if protocol == "h11" else f"{kind}-{protocol}"


async def callgrind(kind: str, protocol: str, modern: bool, n: int) -> float:
    """Instructions the server executes per no-op call (after a warm-up of 200)."""
    return await _callgrind.instructions_per_call(
        kind_on(kind, protocol),
        n,
        warm_up=200,
        modern=modern,
        session=kind == "ours" and not modern,
    )


# -- wrk ---------------------------------------------------------------------------------


async def wrk_rounds(
    kind: str, modern: bool, conns: list[int], rounds: int, seconds: int
) -> dict[int, dict[str, list[float]]]:
    """req/s per protocol per round, the two protocols' servers up together, runs alternating."""
    rates: dict[int, dict[str, list[float]]] = {c: {p: [] for p in PROTOCOLS} for c in conns}
    kinds = {p: kind_on(kind, p) for p in PROTOCOLS}
    async with _client.servers(list(kinds.values())) as started:
        servers = {p: started[k] for p, k in kinds.items()}
        lua = {}
        for p, server in servers.items():
            if kind == "ours" and not modern:
                await _client.initialize(server)
            headers = _client.call_headers(server, "noop", modern=modern)
            conn = await _client.Connection.open(server.port)
            try:
                await _client.noop_calls(conn, 200, headers, modern=modern)
            finally:
                await conn.aclose()
            lua[p] = _wrk.script(server, "noop", modern=modern)
        for r in range(rounds):
            for c in conns:
                order = PROTOCOLS if r % 2 == 0 else PROTOCOLS[::-1]
                for p in order:
                    result = await _wrk.run(lua[p], servers[p].port, c, seconds)
                    if result.errors:
                        raise RuntimeError(f"{kind} {p}: {result.errors} wrk errors")
                    rates[c][p].append(result.rate)
    return rates


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f})"


async def main(args: argparse.Namespace) -> dict[str, Any]:
    ensure_httptools()
    _client.pin_self()
    report: dict[str, Any] = {}
    for label, kind, modern in CASES:
        entry: dict[str, Any] = report.setdefault(label, {})
        if not args.skip_callgrind:
            ir = {p: await callgrind(kind, p, modern, args.calls) for p in PROTOCOLS}
            entry["instructions_per_call"] = ir
            entry["instructions_ratio"] = ir["httptools"] / ir["h11"]
            print(
                f"{label}: callgrind instructions/call h11 {ir['h11']:,.0f}, "
                f"httptools {ir['httptools']:,.0f} ({ir['httptools'] / ir['h11'] - 1:+.1%})",
                flush=True,
            )
        if not args.skip_wrk:
            rates = await wrk_rounds(kind, modern, args.conns, args.rounds, args.seconds)
            entry["wrk"] = {}
            for c, by in rates.items():
                ratios = [t / h for t, h in zip(by["httptools"], by["h11"], strict=True)]
                entry["wrk"][c] = {"rates": by, "ratios": ratios}
                print(
                    f"{label}: wrk {c} conn, req/s h11 median {statistics.median(by['h11']):,.0f}, "
                    f"httptools {statistics.median(by['httptools']):,.0f}; "
                    f"httptools/h11 {_spread(ratios)}, {len(ratios)} rounds",
                    flush=True,
                )
    return report


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--conns", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--skip-wrk", action="store_true")
    parser.add_argument("--skip-callgrind", action="store_true")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    report = trio.run(main, args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    cli()
