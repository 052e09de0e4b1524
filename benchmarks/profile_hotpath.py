"""Profile the no-op ``tools/call`` hot path under wrk, ours against the floor.

``python -m benchmarks.profile_hotpath`` (also part of a full ``python3
dev.py bench``, which puts its output in RESULTS.md's "Where the time
goes"): the floor (as released and with the idle-timer patch) and ours
(legacy session and modern stateless, and the legacy ``cancellable=False``
no-op at 16) are each driven by wrk at 1, 16 and 64 connections while
cProfile runs inside the server (switched on and off by the servers'
``stats`` tool, so start-up is not profiled), and each
profile is summarised per request, one table row each: where the server's
time goes (this library, hypercorn and h11, Trio's scheduler, the rest),
the share of hypercorn's per-request idle timer (issue 35 names it), and
what each request costs in the operations that dominate a no-op call:
Trio tasks spawned, cancel scopes entered, socket writes, Python calls.
cProfile slows every Python call down, so the shares and counts, not the
rates, are the information.
"""

from __future__ import annotations

import pstats
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import trio

from . import _client, _wrk
from .bench_e2e import VARIANTS, Variant

SECONDS = 2
CONNECTIONS = (1, 16, 64)
#: Profiled at every concurrency: the floor and ours in both eras; ``legacy-nc``
#: (``cancellable=False``) at 16 connections only, beside the cancellable row.
KEYS = ("floor", "floor-patched", "legacy", "modern")
GROUPS = (
    ("this library", ("trio_mcp_cancel",)),
    ("hypercorn + h11", ("hypercorn", "h11")),
    ("Trio", ("/trio/",)),
)
OTHER = "other (stdlib, json, attrs, ...)"
COUNTED = (
    ("Trio tasks spawned", "_run.py", "spawn_impl"),
    ("cancel scopes entered", "_run.py", "__enter__"),
    ("socket writes", "~", "<method 'send' of '_socket.socket' objects>"),
)
#: hypercorn's per-connection idle timer, restarted on every request (issue 35):
#: ``TrioSingleTask.restart``/``stop`` and the task they start (``_cancel_wrapper``'s
#: ``wrapper`` around ``TCPServer._idle_timeout``), by (file suffix, function name).
IDLE_TIMER = (
    ("trio/worker_context.py", "restart"),
    ("trio/worker_context.py", "stop"),
    ("trio/worker_context.py", "wrapper"),
    # What ours and floor-patched do instead: move one watcher's deadline.
    ("http/hypercorn_idle.py", "restart"),
    ("http/hypercorn_idle.py", "stop"),
)


async def _profile_running(
    server: _client.Server, variant: Variant, out: Path, connections: int, seconds: int
) -> int:
    lua = _wrk.script(server, variant.tool, modern=variant.modern)
    await _wrk.run(lua, server.port, connections, 1)
    before = (await _client.stats(server))["calls"].get(variant.tool, 0)
    await _client.stats(server, "profile-start")
    await _wrk.run(lua, server.port, connections, seconds)
    await _client.stats(server, "profile-stop", str(out))
    after = (await _client.stats(server))["calls"].get(variant.tool, 0)
    return int(after - before)


@dataclass(frozen=True)
class Summary:
    """One profile, per call: CPU shares by group, the idle timer's share, counts."""

    label: str
    connections: int
    calls: int
    us_per_call: float
    shares: dict[str, float]
    idle_timer: float
    counts: dict[str, float]
    python_calls: float
    library_calls: float


def summarise(label: str, connections: int, path: Path, calls: int) -> Summary:
    raw = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    total = sum(tottime for (_, _, tottime, _, _) in raw.values()) or 1.0
    shares = dict.fromkeys([g for g, _ in GROUPS] + [OTHER], 0.0)
    for (filename, _, _), (_, _, tottime, _, _) in raw.items():
        group = next((g for g, needles in GROUPS if any(n in filename for n in needles)), OTHER)
        shares[group] += tottime / total
    per = max(calls, 1)
    counts = {
        name: sum(
            nc
            for (filename, _, func), (_, nc, _, _, _) in raw.items()
            if func == function and file_part in filename
        )
        / per
        for name, file_part, function in COUNTED
    }
    idle = sum(
        cumtime
        for (filename, _, func), (_, _, _, cumtime, _) in raw.items()
        if any(filename.endswith(f) and func == name for f, name in IDLE_TIMER)
    )
    every = sum(nc for (_, nc, _, _, _) in raw.values())
    ours = sum(nc for (f, _, _), (_, nc, _, _, _) in raw.items() if "trio_mcp_cancel" in f)
    return Summary(
        label, connections, calls, total / per * 1e6, shares, idle / total, counts,
        every / per, ours / per,
    )  # fmt: skip


def table(summaries: list[Summary]) -> list[str]:
    """The profiles as one markdown table, a row per server and concurrency."""
    head = ["server", "conn", "calls profiled", "profiled µs/call"]
    head += [*(g for g, _ in GROUPS), OTHER, "idle timer (cum.)"]
    head += [name for name, _, _ in COUNTED] + ["Python calls (this library)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        cells = [s.label, str(s.connections), f"{s.calls:,}", f"{s.us_per_call:.0f}"]
        cells += [f"{share:.0%}" for share in s.shares.values()] + [f"{s.idle_timer:.1%}"]
        cells += [f"{n:.1f}" for n in s.counts.values()]
        cells.append(f"{s.python_calls:.0f} ({s.library_calls:.0f})")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _top(path: Path, n: int = 12) -> list[str]:
    stats = pstats.Stats(str(path))
    raw = stats.stats  # type: ignore[attr-defined]
    ranked = sorted(raw.items(), key=lambda item: item[1][2], reverse=True)[:n]
    lines = ["| tottime share | calls | function |", "|---|---|---|"]
    total = sum(v[2] for v in raw.values()) or 1.0
    for (filename, line, func), (_, nc, tottime, _, _) in ranked:
        where = filename.split("site-packages/")[-1].split("/work/")[-1]
        lines.append(f"| {tottime / total:.1%} | {nc:,} | `{where}:{line}({func})` |")
    return lines


_README = """\
Columns: the share of the server's profiled CPU time (each function's own
time) in this library, in hypercorn and h11, in Trio and in the rest; the
idle timer's cumulative share, hypercorn's per-connection keep-alive timer
that it cancels and starts again, as a new Trio task, on every request
(`TrioSingleTask.restart`/`stop` and the task's own steps; a lower bound:
the scheduler's work for that task is in the Trio column); and per call:
Trio tasks spawned, cancel scopes entered, socket writes, Python function
calls (this library's in brackets)."""


async def report(quick: bool = False) -> str:
    """The markdown section for RESULTS.md (*quick*: one short profile, for the smoke test)."""
    if _wrk.path() is None:
        return "wrk is not installed: no profile.\n"
    wanted = {v.key: v for v in VARIANTS}
    plan = [("legacy", 16)] if quick else [(k, c) for k in KEYS for c in CONNECTIONS]
    if not quick:
        plan.insert(plan.index(("legacy", 16)), ("legacy-nc", 16))
    seconds = 1 if quick else SECONDS
    summaries = []
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp) / "legacy-16.prof"
        for key in dict.fromkeys(k for k, _ in plan):
            variant = wanted[key]
            async with _client.server(variant.kind) as server:
                if not variant.kind.startswith("floor"):
                    await _client.initialize(server)
                for conns in (c for k, c in plan if k == key):
                    path = Path(tmp) / f"{key}-{conns}.prof"
                    calls = await _profile_running(server, variant, path, conns, seconds)
                    summaries.append(summarise(variant.label, conns, path, calls))
        lines = [_README, "", *table(summaries)]
        lines += ["", "Top functions by own time, ours (legacy, cancellable), 16 connections:", ""]
        lines += _top(top)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    _client.pin_self()
    sys.stdout.write(trio.run(report))
