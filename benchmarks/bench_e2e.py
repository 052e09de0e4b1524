"""Benchmark 4: no-op ``tools/call`` throughput, driven by ``wrk``, as ratios.

Every server runs in a process of its own pinned to one core (``taskset``);
``wrk`` (one thread) runs pinned to the other, so neither the load generator
nor the benchmark's own Python counts against the server.  Variants, each at
1, 16 and 64 keep-alive connections:

* **floor**: hypercorn's Trio worker with a minimal ASGI app that parses
  the JSON-RPC body and answers a result (:func:`benchmarks._servers.floor_app`);
* **ours**, legacy session mode and modern stateless mode, the no-op tool
  registered cancellable (the default: tracked; a call still running when it
  first suspends is answered on an SSE stream and watched for a disconnect,
  the no-op, which never suspends, with one JSON body) and ``cancellable=False``;
* **the MCP Python SDK** (``mcp`` 2.x ``MCPServer`` streamable HTTP) in
  three modes, each named in its row: sessions with JSON responses
  (``json_response=True``), stateless with JSON responses, and sessions
  with SSE responses (its default); on uvicorn (asyncio) and on
  hypercorn's Trio worker (anyio on Trio), when ``mcp`` and ``uvicorn`` are
  installed.  The headline is ours against the SDK on uvicorn in the same
  mode (legacy session vs session JSON, modern stateless vs stateless JSON):
  target >= 1.0x at every concurrency.

The variants are interleaved round by round (the order reversed every other
round), and every ratio is the median of the ratios of the same round, so a
slow spell of the machine lands on both sides of it.  Each wrk run is
checked: no socket or HTTP errors, and the server's own count of tool calls
is at least the number of responses wrk counted (so every response was a
real call).  Targets (``RESULTS.md``): ours >= 95% of the floor;
cancellable within 5% of ``cancellable=False``; from 16 to 64 connections
ours drops no more than the floor.
"""

from __future__ import annotations

import secrets
import statistics
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from . import _client, _wrk
from ._client import Server
from ._common import Row

NAME = "e2e"
BENCH = "4 e2e"
CONNECTIONS = (1, 16, 64)
FLOOR_TARGET = 0.95
LAYER_TARGET = 0.05


@dataclass(frozen=True)
class Variant:
    key: str
    label: str
    kind: str
    tool: str
    modern: bool


VARIANTS = (
    Variant(
        "floor", "bare hypercorn (trio worker), minimal ASGI JSON-RPC app", "floor", "noop", False
    ),
    Variant("legacy", "ours, legacy session, cancellable no-op", "ours", "noop", False),
    Variant(
        "legacy-nc", "ours, legacy session, `cancellable=False` no-op", "ours", "noop_fast", False
    ),
    Variant("modern", "ours, modern stateless, cancellable no-op", "ours", "noop", True),
    Variant(
        "modern-nc", "ours, modern stateless, `cancellable=False` no-op", "ours", "noop_fast", True
    ),
    *(
        Variant(
            f"sdk-{host}{suffix}",
            f"MCP SDK `MCPServer` on {label}, {mode}",
            f"sdk-{host}{suffix}",
            "noop",
            False,
        )
        for host, label in (
            ("uvicorn", "uvicorn (asyncio)"),
            ("hypercorn", "hypercorn trio worker (anyio/trio)"),
        )
        for suffix, mode in (
            ("-json", "session, JSON (`json_response=True`)"),
            ("-json-stateless", "stateless, JSON (`json_response=True, stateless_http=True`)"),
            ("", "session, SSE (the SDK's default)"),
        )
    ),
)


#: Ours against the SDK in the same mode: (our variant, the SDK's, the mode).
#: The headline is the SDK on uvicorn in JSON mode, the stack a user would
#: pick it on; ours answers a call that never suspends (the no-op) with one
#: JSON body in both eras, so the SSE rows compare with the SDK's default.
HEADLINES = (
    ("legacy", "sdk-uvicorn-json", "session, JSON"),
    ("modern", "sdk-uvicorn-json-stateless", "stateless, JSON"),
    ("legacy", "sdk-uvicorn", "session, SSE"),
    ("legacy", "sdk-hypercorn-json", "session, JSON"),
    ("modern", "sdk-hypercorn-json-stateless", "stateless, JSON"),
    ("legacy", "sdk-hypercorn", "session, SSE"),
)


def sdk_installed() -> bool:
    try:
        import mcp  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return False
    return True


@asynccontextmanager
async def servers(kinds: set[str]) -> AsyncIterator[dict[str, Server]]:
    """Start every server kind at once (their start-up is slow), sessions opened."""
    async with _client.servers(sorted(kinds)) as started:
        for kind, server in started.items():
            if kind.endswith("-stateless"):
                continue  # no initialize, no session: every request stands alone
            if kind == "floor":
                # The floor has no sessions, but its requests carry the same
                # headers as ours (a session id of the same length and the
                # protocol version), so h11 parses as much for it.
                server.session = secrets.token_urlsafe(24)
            else:
                await _client.initialize(server)
        yield started


async def _check(server: Server, variant: Variant) -> None:
    """One call through our own client: the variant answers a real no-op result."""
    reply = await _client.call(server, variant.tool, modern=variant.modern)
    text = reply["result"]["content"][0]["text"] if reply and "result" in reply else None
    if text != "ok":
        raise RuntimeError(f"{variant.key}: unexpected reply {reply!r}")


#: Runs that failed their check and were measured again (reported in the table).
RETRIED: list[str] = []


async def _measure(server: Server, variant: Variant, connections: int, seconds: int) -> float:
    """One checked wrk run; one that fails its check is run once more, and counted."""
    try:
        return await _measure_once(server, variant, connections, seconds)
    except RuntimeError as exc:
        RETRIED.append(str(exc))
        return await _measure_once(server, variant, connections, seconds)


async def _measure_once(server: Server, variant: Variant, connections: int, seconds: int) -> float:
    lua = _wrk.script(server, variant.tool, modern=variant.modern)
    before = (await _client.stats(server))["calls"].get(variant.tool, 0)
    result = await _wrk.run(lua, server.port, connections, seconds)
    after = (await _client.stats(server))["calls"].get(variant.tool, 0)
    if result.errors or after - before < result.requests or not result.requests:
        raise RuntimeError(
            f"{variant.key} x{connections}: {result.errors} errors, {result.requests} "
            f"responses, {after - before} calls counted by the server"
        )
    return result.rate


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


async def run(quick: bool) -> list[Row]:
    variants = [v for v in VARIANTS if sdk_installed() or not v.kind.startswith("sdk")]
    exe = _wrk.path() if quick else _wrk.ensure_installed()
    rounds, seconds = (1, 1) if quick else (9, 1)
    connections = (16,) if quick else CONNECTIONS
    rows: list[Row] = []
    async with servers({v.kind for v in variants}) as started:
        for variant in variants:
            await _check(started[variant.kind], variant)
        if exe is None:
            return [Row(BENCH, "throughput rows", "wrk not installed: not measured", "", "MISS")]
        if quick:  # the smoke test: the two ends of the main ratio, one short run each
            variants = variants[:2]
        else:
            for variant in variants:  # warm up every server and code path once
                await _measure(started[variant.kind], variant, 16, 1)
        rates: dict[tuple[str, int], list[float]] = {}
        for round_ in range(rounds):
            for conns in connections:
                order = variants if round_ % 2 == 0 else variants[::-1]
                for variant in order:
                    rate = await _measure(started[variant.kind], variant, conns, seconds)
                    rates.setdefault((variant.key, conns), []).append(rate)
    keys = [v.key for v in variants]

    def ratios(a: str, b: str, conns: int) -> list[float]:
        return [x / y for x, y in zip(rates[(a, conns)], rates[(b, conns)], strict=True)]

    for variant in variants:
        cells = ", ".join(
            f"{c}: {statistics.median(rates[(variant.key, c)]):,.0f}" for c in connections
        )
        rows.append(Row(BENCH, f"{variant.label}: req/s at connections", cells))
    for key, era in (("legacy", "legacy"), ("modern", "modern")):
        for conns in connections:
            if key not in keys:
                continue
            values = ratios(key, "floor", conns)
            ratio = statistics.median(values)
            rows.append(
                Row(
                    BENCH,
                    f"ours ({era}, cancellable) / floor, {conns} conn"
                    f" (round spread {_spread(values)})",
                    f"{ratio:.1%}",
                    f">= {FLOOR_TARGET:.0%}",
                    "PASS" if ratio >= FLOOR_TARGET else "MISS",
                )
            )
    for key in ("legacy", "modern"):
        if f"{key}-nc" not in keys:
            continue
        for conns in connections:
            values = [r - 1 for r in ratios(f"{key}-nc", key, conns)]
            cost = statistics.median(values)
            rows.append(
                Row(
                    BENCH,
                    f"cancellation layer ({key}): time per call, cancellable / `cancellable=False`"
                    f" - 1, {conns} conn (round spread {min(values):+.1%}..{max(values):+.1%})",
                    f"{cost:+.1%}",
                    f"<= {LAYER_TARGET:.0%}",
                    "PASS" if cost <= LAYER_TARGET else "MISS",
                )
            )
    if 16 in connections and 64 in connections:
        floor_scale = statistics.median(
            [a / b for a, b in zip(rates[("floor", 64)], rates[("floor", 16)], strict=True)]
        )
        for key in ("legacy", "modern"):
            scale = statistics.median(
                [a / b for a, b in zip(rates[(key, 64)], rates[(key, 16)], strict=True)]
            )
            rows.append(
                Row(
                    BENCH,
                    f"ours ({key}) req/s at 64 / at 16 conn (floor's own: {floor_scale:.1%})",
                    f"{scale:.1%}",
                    f">= floor's {floor_scale:.1%}",
                    "PASS" if scale >= floor_scale else "MISS",
                )
            )
    for ours, sdk, mode in HEADLINES:
        if sdk not in keys:
            continue
        for conns in connections:
            values = ratios(ours, sdk, conns)
            ratio = statistics.median(values)
            rows.append(
                Row(
                    BENCH,
                    f"ours ({ours}, cancellable) / {sdk} ({mode}), req/s, {conns} conn"
                    f" (round spread {_spread(values)})",
                    f"{ratio:.2f}x",
                    ">= 1.00x" if sdk.startswith("sdk-uvicorn-json") else "info",
                    ("PASS" if ratio >= 1.0 else "MISS")
                    if sdk.startswith("sdk-uvicorn-json")
                    else "",
                )
            )
    if not sdk_installed():
        rows.append(Row(BENCH, "MCP SDK rows (`pip install mcp uvicorn`)", "not available"))
    retried = f"{len(RETRIED)}: " + "; ".join(RETRIED[:3]) if RETRIED else "none"
    rows.append(Row(BENCH, "wrk runs that failed their check and were run again", retried, "info"))
    return rows
