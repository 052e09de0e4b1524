"""The cancellation scenarios' two fixture tools on the official MCP Python SDK (``mcp`` 2.x).

The same contract as ``examples/conformance_server.py``'s
``test_cancellable_work`` and ``test_cancellation_status`` (see
``conformance/scenarios/cancellation.ts``), written the SDK's way, served by
its streamable HTTP app (sessions, SSE) on uvicorn:
``python -m benchmarks._sdk_cancel_fixtures`` prints ``READY <port>``.
Used by :mod:`benchmarks.bench_conformance_cancel`.
"""

from __future__ import annotations

import socket
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer

PROBES: dict[str, str] = {}
PROBE_LIMIT = 256
PROBE_NAME_MAX = 64


def _record(probe: str, outcome: str) -> None:
    PROBES.pop(probe, None)
    PROBES[probe] = outcome
    while len(PROBES) > PROBE_LIMIT:
        del PROBES[next(iter(PROBES))]


def app() -> Any:
    mcp: Any = MCPServer("sdk-cancellation-fixtures", log_level="WARNING")

    @mcp.tool()
    async def test_cancellable_work(probe: str, ctx: Context, seconds: float = 30.0) -> str:  # type: ignore[type-arg]
        """Works for *seconds*, reporting progress every 0.1 s, and records how it ended."""
        if not 0 < len(probe) <= PROBE_NAME_MAX:
            raise ValueError(f"probe must be 1 to {PROBE_NAME_MAX} characters")
        _record(probe, "running")
        outcome = "cancelled"
        try:
            deadline = anyio.current_time() + max(0.0, min(seconds, 600.0))
            step = 0
            while anyio.current_time() < deadline:
                step += 1
                await ctx.report_progress(step, None, f"working on {probe}")
                await anyio.sleep(min(0.1, max(0.0, deadline - anyio.current_time())))
            outcome = "completed"
        finally:
            _record(probe, outcome)
        return f"completed {probe}"

    @mcp.tool()
    async def test_cancellation_status(probe: str) -> str:
        """How test_cancellable_work with *probe* ended: running, cancelled, completed, unknown."""
        return PROBES.get(probe[:PROBE_NAME_MAX], "unknown")

    return mcp.streamable_http_app(max_sessions=None, session_idle_timeout=None)


def main() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(app(), log_level="warning", access_log=False, lifespan="on")
    print("READY", sock.getsockname()[1], flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
