"""Benchmark 4: no-op ``tools/call`` throughput, driven by ``wrk``, as ratios.

Every server runs in a process of its own pinned to one core (``taskset``);
``wrk`` (one thread) runs pinned to the other, so neither the load generator
nor the benchmark's own Python counts against the server.  Variants, each at
1, 16 and 64 keep-alive connections:

* **floor**: hypercorn's Trio worker with a minimal ASGI app that parses
  the JSON-RPC body and answers a result (:func:`benchmarks._servers.floor_app`),
  as released (the target) and with the idle-timer patch that ours carries
  (``floor-patched``, proposed upstream: the like-for-like floor, information);
* **ours**, legacy session mode and modern stateless mode, the no-op tool
  registered cancellable (the default: tracked; a call still running when it
  first suspends is answered on an SSE stream and watched for a disconnect,
  the no-op, which never suspends, with one JSON body) and ``cancellable=False``;
  and the cancellable no-op with ``serve(http="httptools")``, the opt-in
  parser (``legacy-ht``, ``modern-ht``);
* **the MCP Python SDK** (``mcp`` 2.x ``MCPServer`` streamable HTTP) in
  three modes, each named in its row: sessions with JSON responses
  (``json_response=True``), stateless with JSON responses, and sessions
  with SSE responses (its default); on uvicorn[standard] (uvloop and
  httptools, which the benchmark installs for those servers only, see
  :mod:`benchmarks._standard`; JSON modes), on plain uvicorn (asyncio, h11)
  and on hypercorn's Trio worker (anyio on Trio), when ``mcp`` and
  ``uvicorn`` are installed.  The headline is ours against the SDK on
  uvicorn[standard], the install most deployments use, in the same mode
  (legacy session vs session JSON, modern stateless vs stateless JSON):
  target >= 1.0x at every concurrency; the other SDK rows are information.

The variants are interleaved round by round (the order reversed every other
round), and every ratio is the median of the ratios of the same round, so a
slow spell of the machine lands on both sides of it.  Each wrk run is
checked: no socket or HTTP errors, and the server's own count of tool calls
is at least the number of responses wrk counted (so every response was a
real call).  Targets (``RESULTS.md``): ours >= 100% of the floor (issue 35
raised it from 95%); cancellable within 5% of ``cancellable=False``; from 16
to 64 connections ours drops no more than the floor.

Another server is one more entry in :data:`VARIANTS` (a kind that
:func:`benchmarks._servers.main` serves); a floor is compared with ours once
its key is in :data:`FLOORS`, an SDK once it is in :data:`HEADLINES`.
"""

from __future__ import annotations

import importlib.util
import secrets
import statistics
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from . import _client, _standard, _wrk
from ._client import Server
from ._common import Row

NAME = "e2e"
BENCH = "4 e2e"
CONNECTIONS = (1, 16, 64)
FLOOR_TARGET = 1.0
LAYER_TARGET = 0.05
#: Interleaved rounds of a full run: at least five for every headline row, and
#: 16 variants x 3 concurrencies x 7 one-second runs, with wrk's start-up and the
#: checks, take about 7 minutes.
ROUNDS = 7


@dataclass(frozen=True)
class Variant:
    """One server configuration of the run (*kind*: what :func:`._servers.main` serves)."""

    key: str
    label: str
    kind: str
    tool: str
    modern: bool


_SESSION_JSON = "session, JSON (`json_response=True`)"
_STATELESS_JSON = "stateless, JSON (`json_response=True, stateless_http=True`)"
_SESSION_SSE = "session, SSE (the SDK's default)"
_UVICORN = "plain uvicorn (asyncio, h11)"
_STANDARD = "uvicorn[standard] (uvloop, httptools)"
_HYPERCORN = "hypercorn trio worker (anyio/trio)"


def _sdk(kind: str, server: str, mode: str) -> Variant:
    """The MCP SDK's no-op on *server* in *mode*; its key is its kind."""
    return Variant(kind, f"MCP SDK `MCPServer` on {server}, {mode}", kind, "noop", False)


#: Every server of the run, one entry each: a new server kind is one more line
#: (its key can then appear in :data:`FLOORS` or :data:`HEADLINES`).
VARIANTS = (
    Variant(
        "floor", "bare hypercorn (trio worker), minimal ASGI JSON-RPC app", "floor", "noop", False
    ),
    Variant(
        "floor-patched",
        "bare hypercorn with the idle-timer patch (`docs/upstream/hypercorn-idle-timeout.md`)",
        "floor-patched",
        "noop",
        False,
    ),
    Variant("legacy", "ours, legacy session, cancellable no-op", "ours", "noop", False),
    Variant(
        "legacy-nc", "ours, legacy session, `cancellable=False` no-op", "ours", "noop_fast", False
    ),
    Variant("modern", "ours, modern stateless, cancellable no-op", "ours", "noop", True),
    Variant(
        "modern-nc", "ours, modern stateless, `cancellable=False` no-op", "ours", "noop_fast", True
    ),
    Variant(
        "legacy-ht",
        'ours, legacy session, cancellable no-op, `http="httptools"`',
        "ours-httptools",
        "noop",
        False,
    ),
    Variant(
        "modern-ht",
        'ours, modern stateless, cancellable no-op, `http="httptools"`',
        "ours-httptools",
        "noop",
        True,
    ),
    _sdk("sdk-uvicorn-standard-json", _STANDARD, _SESSION_JSON),
    _sdk("sdk-uvicorn-standard-json-stateless", _STANDARD, _STATELESS_JSON),
    _sdk("sdk-uvicorn-json", _UVICORN, _SESSION_JSON),
    _sdk("sdk-uvicorn-json-stateless", _UVICORN, _STATELESS_JSON),
    _sdk("sdk-uvicorn", _UVICORN, _SESSION_SSE),
    _sdk("sdk-hypercorn-json", _HYPERCORN, _SESSION_JSON),
    _sdk("sdk-hypercorn-json-stateless", _HYPERCORN, _STATELESS_JSON),
    _sdk("sdk-hypercorn", _HYPERCORN, _SESSION_SSE),
)

#: The floors ours is a ratio of, and the variants of ours compared with them.
#: The target (>= :data:`FLOOR_TARGET`) is against bare hypercorn as released;
#: ``floor-patched`` is what that floor becomes with the idle-timer patch ours
#: carries (proposed upstream), the like-for-like floor: information.
FLOORS = ("floor", "floor-patched")
TARGET_FLOOR = "floor"
OURS = ("legacy", "modern")


@dataclass(frozen=True)
class Headline:
    """Ours against the SDK in the same mode; *target*: a ratio to reach, else information."""

    ours: str
    sdk: str
    mode: str
    target: bool


#: The targets are the SDK on uvicorn[standard] in JSON mode, the stack a user
#: deploying it would pick (``pip install "uvicorn[standard]"``); ours answers
#: a call that never suspends (the no-op) with one JSON body in both eras, so
#: the SSE rows compare with the SDK's default.  Ours with the opt-in httptools
#: parser against the same SDK (both parsing with httptools), plain uvicorn and
#: hypercorn are information: the target is ours as installed by default.
HEADLINES = (
    Headline("legacy", "sdk-uvicorn-standard-json", "session, JSON", True),
    Headline("modern", "sdk-uvicorn-standard-json-stateless", "stateless, JSON", True),
    Headline("legacy-ht", "sdk-uvicorn-standard-json", "session, JSON; both on httptools", False),
    Headline(
        "modern-ht",
        "sdk-uvicorn-standard-json-stateless",
        "stateless, JSON; both on httptools",
        False,
    ),
    Headline("legacy", "sdk-uvicorn-json", "session, JSON", False),
    Headline("modern", "sdk-uvicorn-json-stateless", "stateless, JSON", False),
    Headline("legacy", "sdk-uvicorn", "session, SSE", False),
    Headline("legacy", "sdk-hypercorn-json", "session, JSON", False),
    Headline("modern", "sdk-hypercorn-json-stateless", "stateless, JSON", False),
    Headline("legacy", "sdk-hypercorn", "session, SSE", False),
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
            if kind.startswith("floor"):
                # The floor has no sessions, but its requests carry the same
                # headers as ours (a session id of the same length and the
                # protocol version), so h11 parses as much for it.
                server.session = secrets.token_urlsafe(24)
            else:
                await _client.initialize(server)
        yield started


async def _check(server: Server, variant: Variant) -> None:
    """One call through our own client: the variant answers a real no-op result.

    A uvicorn[standard] server must also have uvloop's and httptools' native
    modules mapped (a uvicorn that fell back to asyncio and h11 would make
    its rows the plain ones under another name).
    """
    reply = await _client.call(server, variant.tool, modern=variant.modern)
    text = reply["result"]["content"][0]["text"] if reply and "result" in reply else None
    if text != "ok":
        raise RuntimeError(f"{variant.key}: unexpected reply {reply!r}")
    if _standard.is_standard(variant.kind):
        maps = await trio.Path(f"/proc/{server.pid}/maps").read_text()
        for package in _standard.PACKAGES:
            if f"/{package}/" not in maps:
                raise RuntimeError(f"{variant.key}: {package} is not loaded in the server")


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


Rates = dict[tuple[str, int], list[float]]


async def _available() -> tuple[list[Variant], list[Row]]:
    """The variants this machine can serve, and a row for each family it cannot."""
    rows = []
    variants = list(VARIANTS)
    if not sdk_installed():
        variants = [v for v in variants if not v.kind.startswith("sdk")]
        rows.append(Row(BENCH, "MCP SDK rows (`pip install mcp uvicorn`)", "not available"))
    if importlib.util.find_spec("httptools") is None:
        variants = [v for v in variants if v.kind != "ours-httptools"]
        rows.append(Row(BENCH, "ours on httptools rows (`pip install httptools`)", "not available"))
    if any(_standard.is_standard(v.kind) for v in variants):
        why = await _standard.ensure_installed()
        if why is not None:
            variants = [v for v in variants if not _standard.is_standard(v.kind)]
            rows.append(Row(BENCH, "MCP SDK on uvicorn[standard] rows", why, ">= 1.00x", "MISS"))
    return variants, rows


async def run(quick: bool) -> list[Row]:
    variants, missing = await _available()
    exe = _wrk.path() if quick else _wrk.ensure_installed()
    rounds, seconds = (1, 1) if quick else (ROUNDS, 1)
    connections = (16,) if quick else CONNECTIONS
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
        rates: Rates = {}
        for round_ in range(rounds):
            for conns in connections:
                order = variants if round_ % 2 == 0 else variants[::-1]
                for variant in order:
                    rate = await _measure(started[variant.kind], variant, conns, seconds)
                    rates.setdefault((variant.key, conns), []).append(rate)
    rows = _rate_rows(rates, variants, connections)
    rows += _floor_rows(rates, connections) + _layer_rows(rates, connections)
    rows += _scaling_rows(rates, connections) + _headline_rows(rates, connections)
    retried = f"{len(RETRIED)}: " + "; ".join(RETRIED[:3]) if RETRIED else "none"
    rows.append(Row(BENCH, "wrk runs that failed their check and were run again", retried, "info"))
    return rows + missing


def _ratios(rates: Rates, a: str, b: str, conns: int) -> list[float]:
    """The per-round ratios of *a*'s rate to *b*'s (empty when either was not measured)."""
    if (a, conns) not in rates or (b, conns) not in rates:
        return []
    return [x / y for x, y in zip(rates[(a, conns)], rates[(b, conns)], strict=True)]


def _rate_rows(rates: Rates, variants: list[Variant], connections: tuple[int, ...]) -> list[Row]:
    rows = []
    for variant in variants:
        cells = ", ".join(
            f"{c}: {statistics.median(rates[(variant.key, c)]):,.0f}" for c in connections
        )
        rows.append(Row(BENCH, f"{variant.label}: req/s at connections", cells))
    return rows


def _floor_rows(rates: Rates, connections: tuple[int, ...]) -> list[Row]:
    rows = []
    for floor in FLOORS:
        for key in OURS:
            for conns in connections:
                values = _ratios(rates, key, floor, conns)
                if not values:
                    continue
                ratio = statistics.median(values)
                target = floor == TARGET_FLOOR
                rows.append(
                    Row(
                        BENCH,
                        f"ours ({key}, cancellable) / {floor}, {conns} conn"
                        f" (round spread {_spread(values)})",
                        f"{ratio:.1%}",
                        f">= {FLOOR_TARGET:.0%}" if target else "info",
                        ("PASS" if ratio >= FLOOR_TARGET else "MISS") if target else "",
                    )
                )
    return rows


def _layer_rows(rates: Rates, connections: tuple[int, ...]) -> list[Row]:
    rows = []
    for key in OURS:
        for conns in connections:
            values = [r - 1 for r in _ratios(rates, f"{key}-nc", key, conns)]
            if not values:
                continue
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
    return rows


def _scaling_rows(rates: Rates, connections: tuple[int, ...]) -> list[Row]:
    if 16 not in connections or 64 not in connections or ("floor", 64) not in rates:
        return []
    floor_scale = statistics.median(_scale(rates, "floor"))
    rows = []
    for key in OURS:
        scale = statistics.median(_scale(rates, key))
        rows.append(
            Row(
                BENCH,
                f"ours ({key}) req/s at 64 / at 16 conn (floor's own: {floor_scale:.1%})",
                f"{scale:.1%}",
                f">= floor's {floor_scale:.1%}",
                "PASS" if scale >= floor_scale else "MISS",
            )
        )
    return rows


def _scale(rates: Rates, key: str) -> list[float]:
    return [a / b for a, b in zip(rates[(key, 64)], rates[(key, 16)], strict=True)]


def _headline_rows(rates: Rates, connections: tuple[int, ...]) -> list[Row]:
    rows = []
    for line in HEADLINES:
        for conns in connections:
            values = _ratios(rates, line.ours, line.sdk, conns)
            if not values:
                continue
            ratio = statistics.median(values)
            rows.append(
                Row(
                    BENCH,
                    f"ours ({line.ours}, cancellable) / {line.sdk} ({line.mode}), req/s,"
                    f" {conns} conn (round spread {_spread(values)})",
                    f"{ratio:.2f}x",
                    ">= 1.00x" if line.target else "info",
                    ("PASS" if ratio >= 1.0 else "MISS") if line.target else "",
                )
            )
    return rows
