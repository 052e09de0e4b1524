"""Profile the no-op ``tools/call`` hot path under wrk, ours against the floor.

``python -m benchmarks.profile_hotpath`` (also part of a full ``python3
dev.py bench``, which puts its output in ``RESULTS.md``): each server is
driven by wrk at 16 connections while cProfile runs inside it (switched on
and off by the servers' ``stats`` tool, so start-up is not profiled), and
the profile is summarised per request: where the server's time goes (the
HTTP server and h11, Trio's scheduler, this library, the rest), and what
each request costs in the operations that dominate a no-op call: Trio
tasks spawned, cancel scopes entered, socket writes.  cProfile slows every
Python call down, so the shares, not the rates, are the information.
"""

from __future__ import annotations

import pstats
import sys
import tempfile
from pathlib import Path

import trio

from . import _client, _wrk
from .bench_e2e import VARIANTS, Variant

SECONDS = 3
GROUPS = (
    ("this library", ("trio_mcp_cancel",)),
    ("hypercorn + h11", ("hypercorn", "h11")),
    ("Trio", ("/trio/",)),
)
COUNTED = (
    ("Trio tasks spawned", "_run.py", "spawn_impl"),
    ("cancel scopes entered", "_run.py", "__enter__"),
    ("socket writes", "~", "<method 'send' of '_socket.socket' objects>"),
)


async def _profile(variant: Variant, out: Path, seconds: int = SECONDS) -> int:
    async with _client.server(variant.kind) as server:
        if variant.kind != "floor":
            await _client.initialize(server)
        lua = _wrk.script(server, variant.tool, modern=variant.modern)
        await _wrk.run(lua, server.port, 16, 1)
        before = (await _client.stats(server))["calls"].get(variant.tool, 0)
        await _client.stats(server, "profile-start")
        await _wrk.run(lua, server.port, 16, seconds)
        await _client.stats(server, "profile-stop", str(out))
        after = (await _client.stats(server))["calls"].get(variant.tool, 0)
    return after - before


def _summary(label: str, path: Path, calls: int) -> list[str]:
    stats = pstats.Stats(str(path))
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(tottime for (_, _, tottime, _, _) in raw.values()) or 1.0
    shares = dict.fromkeys([g for g, _ in GROUPS] + ["other (stdlib, json, attrs, ...)"], 0.0)
    for (filename, _, _), (_, _, tottime, _, _) in raw.items():
        for group, needles in GROUPS:
            if any(needle in filename for needle in needles):
                shares[group] += tottime
                break
        else:
            shares["other (stdlib, json, attrs, ...)"] += tottime
    counts = []
    for name, file_part, function in COUNTED:
        n = sum(
            nc
            for (filename, _, func), (_, nc, _, _, _) in raw.items()
            if func == function and file_part in filename
        )
        counts.append(f"{name} {n / max(calls, 1):.1f}")
    # Load-independent: Python function calls per call (all, and this library's).
    every = sum(nc for (_, nc, _, _, _) in raw.values())
    ours = sum(nc for (f, _, _), (_, nc, _, _, _) in raw.items() if "trio_mcp_cancel" in f)
    counts.append(
        f"Python calls {every / max(calls, 1):.0f} (this library {ours / max(calls, 1):.0f})"
    )
    split = ", ".join(f"{group} {t / total:.0%}" for group, t in shares.items())
    return [
        f"- **{label}** ({calls:,} calls profiled, {total / max(calls, 1) * 1e6:.0f} µs of "
        f"profiled CPU per call): {split}; per call: {', '.join(counts)}."
    ]


def _top(path: Path, n: int = 12) -> list[str]:
    stats = pstats.Stats(str(path))
    raw = stats.stats  # type: ignore[attr-defined]
    ranked = sorted(raw.items(), key=lambda item: item[1][2], reverse=True)[:n]
    lines = ["| tottime share | calls | function |", "|---|---|---|"]
    total = sum(v[2] for v in raw.values()) or 1.0
    for (filename, line, func), (_, nc, tottime, _, _) in ranked:
        where = filename.split("site-packages/")[-1].split("wt12/")[-1].split("/work/")[-1]
        lines.append(f"| {tottime / total:.1%} | {nc:,} | `{where}:{line}({func})` |")
    return lines


async def report(quick: bool = False) -> str:
    """The markdown section for RESULTS.md (*quick*: one short profile, for the smoke test)."""
    if _wrk.path() is None:
        return "wrk is not installed: no profile.\n"
    wanted = {v.key: v for v in VARIANTS}
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        profiles = {}
        keys = ("legacy",) if quick else ("floor", "legacy-nc", "legacy", "modern")
        for key in keys:
            path = Path(tmp) / f"{key}.prof"
            calls = await _profile(wanted[key], path, 1 if quick else SECONDS)
            profiles[key] = path
            lines += _summary(wanted[key].label, path, calls)
        lines += ["", "Top functions by own time, ours (legacy, cancellable):", ""]
        lines += _top(profiles["legacy"])
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    _client.pin_self()
    sys.stdout.write(trio.run(report))
