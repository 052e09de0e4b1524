"""Early cancels: a legacy ``notifications/cancelled`` that overtakes its ``tools/call``.

Over legacy Streamable HTTP every message is its own POST, so a client that
sends a call and at once cancels it (a user pressing stop, a timeout of
zero) can have the cancel's POST dispatched first.  A registry that only
honours cancels of requests in flight loses that cancel: the tool runs to
the end, and the client, which gave up on it, still gets its result.

This drives ``calls`` concurrent legacy calls in memory through
:class:`McpHttpApp` (no sockets, a Trio ``MockClock`` so the tools' work
takes no wall time), each call's cancel POST answered ``202`` *before* its
``tools/call`` POST is sent, and counts the cancels lost:

* **before**: ``RegistryConfig(early_cancel_ttl=None)``, cancels of
  requests not in flight are ignored;
* **after**: the default, such cancels are kept for ``early_cancel_ttl``
  in the caller's session namespace and applied when the request starts.

A third variant, **after, one session**, sends every call from one legacy
session: a kept cancel is a cancellation row, and rows count against the
namespace's quota (``max_rows_per_namespace``, default 256), so past that
many cancels waiting at once the rest are refused (``LIMIT_REACHED``) and
lost.  That is the quota doing its job against a flood, and the bound on
what early cancels can save for one client.

A call's cancel is *lost* when its response carries the tool's result; it
is *applied* when the tool saw the flag set as it started and the stream
ended with no response (MCP: nothing is sent after a client cancel).

Run: ``python -m benchmarks.bench_early_cancel [--quick]``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import Counter
from collections.abc import MutableMapping
from typing import Any

import trio
import trio.testing

from trio_mcp_cancel import RegistryConfig, cancelled, checkpoint_cancelled, open_registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer

from ._common import Row

NAME = "early cancel"
SESSIONS = 10
TOOL_SECONDS = 1.0
HEADERS = [
    (b"accept", b"application/json, text/event-stream"),
    (b"content-type", b"application/json"),
]

Message = MutableMapping[str, Any]


async def _post(
    app: McpHttpApp, session: str | None, body: dict[str, Any]
) -> tuple[int, dict[str, str], bytes]:
    """One POST through the app, in memory: (status, headers, body)."""
    headers = list(HEADERS)
    if session is not None:
        headers.append((b"mcp-session-id", session.encode()))
        headers.append((b"mcp-protocol-version", b"2025-11-25"))
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
    }
    raw = json.dumps(body).encode()
    fed = False
    complete = trio.Event()
    status = 0
    response_headers: dict[str, str] = {}
    chunks: list[bytes] = []

    async def receive() -> Message:
        nonlocal fed
        if not fed:
            fed = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await complete.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            response_headers.update(
                {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
            )
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                complete.set()

    await app(scope, receive, send)
    return status, response_headers, b"".join(chunks)


def _sse_messages(body: bytes) -> list[dict[str, Any]]:
    out = []
    for block in body.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                out.append(json.loads(line[6:]))
    return out


async def _measure(calls: int, config: RegistryConfig, sessions_count: int) -> dict[str, Any]:
    server = McpServer("bench-early-cancel")
    saw_flag_at_start: dict[tuple[str, object], bool] = {}

    @server.tool()
    async def work(ctx: Context, seconds: float = TOOL_SECONDS) -> str:
        """Polls the flag every 100 ms for *seconds*."""
        saw_flag_at_start[(ctx.namespace, ctx.request_id)] = cancelled()
        deadline = trio.current_time() + seconds
        while trio.current_time() < deadline:
            await checkpoint_cancelled()
            await trio.sleep(0.1)
        return "worked"

    outcomes: Counter[str] = Counter()
    async with open_registry(config) as registry:
        app = McpHttpApp(server, registry, limits=ConnectionLimits(max_concurrent_calls=calls))
        sessions = []
        for _ in range(sessions_count):
            init = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
            }
            status, headers, _ = await _post(app, None, init)
            assert status == 200
            sessions.append(headers["mcp-session-id"])

        async def one(i: int) -> None:
            session = sessions[i % sessions_count]
            cancel = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": i, "reason": "stop"},
            }
            status, _, _ = await _post(app, session, cancel)
            assert status == 202
            call = {
                "jsonrpc": "2.0",
                "id": i,
                "method": "tools/call",
                "params": {"name": "work", "arguments": {}},
            }
            status, _, body = await _post(app, session, call)
            assert status == 200
            answers = [m for m in _sse_messages(body) if m.get("id") == i]
            if not answers:
                outcomes["applied"] += 1
            elif "result" in answers[0]:
                outcomes["lost"] += 1
            else:
                outcomes[f"error {answers[0]['error']['code']}"] += 1

        start = time.perf_counter()
        virtual_start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for i in range(calls):
                nursery.start_soon(one, i)
        wall = time.perf_counter() - start
        virtual = trio.current_time() - virtual_start
        rows_left = registry.row_count
        in_flight_left = registry.in_flight_count
    flagged = sum(saw_flag_at_start.values())
    return {
        "lost": outcomes["lost"],
        "applied": outcomes["applied"],
        "other": {k: v for k, v in outcomes.items() if k not in ("lost", "applied")},
        "tool_saw_flag_at_start": flagged,
        "rows_left": rows_left,
        "in_flight_left": in_flight_left,
        "virtual_seconds": round(virtual, 3),
        "wall_seconds": round(wall, 3),
    }


def run(quick: bool) -> dict[str, Any]:
    """Measure lost cancels before (no early cancels) and after (the default)."""
    calls = 200 if quick else 1000
    results: dict[str, Any] = {"calls": calls}
    variants = {
        "before": (RegistryConfig(early_cancel_ttl=None), SESSIONS),
        "after": (RegistryConfig(), SESSIONS),
        "after, one session": (RegistryConfig(), 1),
    }
    logger = logging.getLogger("trio_mcp_cancel")
    disabled, logger.disabled = logger.disabled, True  # the quota's warnings
    try:
        for name, (config, sessions) in variants.items():
            clock = trio.testing.MockClock(autojump_threshold=0)
            result = trio.run(_measure, calls, config, sessions, clock=clock)
            result["early_cancel_ttl"] = config.early_cancel_ttl
            result["sessions"] = sessions
            results[name] = result
    finally:
        logger.disabled = disabled
    return results


NAME = "early_cancel"


async def rows(quick: bool) -> list[Row]:
    """:func:`run` as rows of the results table (on a thread: it runs its own MockClock)."""
    out = await trio.to_thread.run_sync(run, quick)
    calls = out["calls"]
    table = []
    for name in ("before", "after", "after, one session"):
        r = out[name]
        lost = f"{r['lost']}/{calls} lost, {r['applied']} applied, {r['rows_left']} rows left"
        target, status = "", ""
        if name == "after":
            target, status = "0 lost", "PASS" if r["lost"] == 0 else "MISS"
        table.append(
            Row(
                "7 early",
                f"cancel POST before its call, {calls} calls, {r['sessions']} sessions, {name}",
                lost,
                target,
                status,
            )
        )
    return table


if __name__ == "__main__":
    out = run("--quick" in sys.argv[1:])
    print(json.dumps(out, indent=2))
    for name, r in out.items():
        if isinstance(r, dict):
            print(
                f"{name} (early_cancel_ttl={r['early_cancel_ttl']}, {r['sessions']} sessions): "
                f"{r['lost']}/{out['calls']} cancels lost, {r['applied']} applied"
            )
