"""Subscribe bytes: what a flood of large-URI ``resources/subscribe`` leaves held (issue 36).

The count cap alone (1000 URIs per session) let 120 URIs of 900 KB add 107 MB
in half a second.  Legacy sessions over the in-memory transport (the
subscription path is the same on every transport) flood the server three
ways: the issue's 900 KB URIs, 4 KB URIs on one session until it is
refused, and the same on several sessions of one tenant.  What the server
holds afterwards is measured with tracemalloc (what the server decoded from
the clients' messages and its subscription sets, still live after a
collection) and set against the byte budget that applies
(``SubscriptionLimits``' defaults; quick mode gives the tenant a smaller
budget, so that its few sessions reach it).
"""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import attrs

from trio_mcp_cancel.lowlevel import SubscriptionLimits
from trio_mcp_cancel.server import McpServer, ServerLimits
from trio_mcp_cancel.testing import McpError, open_test_client

from ._common import Row

BENCH = "9 hostile"
LIMITS = SubscriptionLimits()
#: Besides the URIs, a session's set has a table: slack per session.
SLACK = 16 * 1024
#: What the server keeps of what clients sent (the messages it decoded) and the
#: sets that hold subscriptions; the test client decodes elsewhere.
_KEPT = [
    tracemalloc.Filter(True, "*trio_mcp_cancel/_protocol/jsonrpc.py"),
    tracemalloc.Filter(True, "*trio_mcp_cancel/_protocol/subscriptions.py"),
]


def _server(limits: SubscriptionLimits) -> McpServer:
    server = McpServer("bench-subscribe-bytes", limits=ServerLimits(subscriptions=limits))

    @server.resource_template("bench://big/{key}")
    async def big(key: str) -> str:
        return "content"

    return server


def _uri(index: int, size: int) -> str:
    prefix = f"bench://big/{index}-"
    return prefix + "k" * (size - len(prefix))


async def _flood(
    sessions: int, count: int, size: int, limits: SubscriptionLimits = LIMITS
) -> dict[str, Any]:
    """*sessions* legacy sessions of one tenant each subscribe *count* URIs of *size* bytes."""
    server = _server(limits)
    ledger = server.dispatcher.runtime.subscription_bytes
    outcomes: dict[str, int] = {}
    gc.collect()
    tracemalloc.start(1)
    try:
        before = tracemalloc.take_snapshot().filter_traces(_KEPT)
        clients = [
            open_test_client(server, era="legacy", principal="flooder") for _ in range(sessions)
        ]
        opened = [await client.__aenter__() for client in clients]
        try:
            for number, client in enumerate(opened):
                for index in range(count):
                    try:
                        await client.request(
                            "resources/subscribe", {"uri": _uri(number * count + index, size)}
                        )
                        key = "accepted"
                    except McpError as exc:
                        limit = exc.data.get("limit") if isinstance(exc.data, dict) else None
                        key = f"{exc.code} {limit}" if limit else str(exc.code)
                    outcomes[key] = outcomes.get(key, 0) + 1
            gc.collect()
            after = tracemalloc.take_snapshot().filter_traces(_KEPT)
            held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
            counted = ledger.held
        finally:
            for client in reversed(clients):
                await client.__aexit__(None, None, None)
    finally:
        tracemalloc.stop()
    return {"held": held, "counted": counted, "outcomes": outcomes, "left": ledger.held}


def _row(what: str, result: dict[str, Any], budget: int) -> Row:
    outcomes = ", ".join(f"{n} {key}" for key, n in sorted(result["outcomes"].items()))
    ok = result["held"] <= budget and result["left"] == 0
    return Row(
        BENCH,
        f"subscribe bytes: {what}; held (counted), outcomes",
        f"{result['held'] / 1024:,.0f} KiB ({result['counted'] / 1024:,.0f} KiB); {outcomes}",
        f"<= {budget / 1024:,.0f} KiB, all freed at the end",
        "PASS" if ok else "MISS",
    )


async def rows(quick: bool) -> list[Row]:
    huge = 20 if quick else 120
    many = 100 if quick else 1000
    sessions = 3 if quick else 24
    session_budget = LIMITS.max_bytes_per_session
    tenant = attrs.evolve(LIMITS, max_bytes_per_tenant=512 * 1024) if quick else LIMITS
    return [
        _row(
            f"{huge} URIs of 900 KB on one session (the issue's flood)",
            await _flood(1, huge, 900_000),
            session_budget + SLACK,
        ),
        _row(
            f"{many} URIs of 4 KB on one session",
            await _flood(1, many, 4000),
            session_budget + SLACK,
        ),
        _row(
            f"{sessions} sessions of one tenant, {many} URIs of 4 KB each"
            f" (tenant budget {tenant.max_bytes_per_tenant // 1024:,} KiB)",
            await _flood(sessions, many, 4000, tenant),
            tenant.max_bytes_per_tenant + sessions * SLACK,
        ),
    ]
