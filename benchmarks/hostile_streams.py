"""Resumable legacy SSE streams: what finished calls leave held (issue 36, item 1).

**Read fully.**  Six clients, each with its own legacy session, call a chatty
tool (26 progress events of 10 KB, then the answer) one call after another
over hypercorn on 127.0.0.1, reading every answer to its end; hypercorn
reports ``http.disconnect`` while the last body is still being written,
which used to detach each delivered stream and keep it (and its replay
buffer) for ``resume_window``.  Measured: the bytes the app's resumable
streams still hold, per finished call, right after the load (``~0``: a
delivered stream is released at once).

**Unread.**  Calls whose clients never read their response (driven in
process through ASGI: a ``send()`` that blocks until the connection closes,
as hypercorn's does for such a client), all finished and waiting for
``write_timeout``: the bytes held at the peak against the server-wide
budget (``HttpLimits.max_retained_stream_bytes``), with the default budget
and a small one that evictions must keep.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

import httpx
import trio

from trio_mcp_cancel.http import HttpLimits, McpHttpApp
from trio_mcp_cancel.server import Context, McpServer

from ._client import ACCEPT, INITIALIZE, LEGACY
from ._common import Row, post_scope
from ._hostile_serve import serving, until

BENCH = "9 hostile"
EVENTS, EVENT_SIZE = 26, 10 * 1024
CLIENTS = 6
JSON_HEADERS = {"accept": ACCEPT, "content-type": "application/json"}
MB = 1 << 20


def _server() -> McpServer:
    server = McpServer("bench-streams")

    @server.tool()
    async def chatty(ctx: Context, n: int = EVENTS) -> str:
        """Reports progress n times with a 10 KB message, then answers."""
        for i in range(1, n + 1):
            await trio.sleep(0.002)
            await ctx.report_progress(i, total=n, message="x" * EVENT_SIZE)
        return "done"

    return server


def _call(request_id: int) -> bytes:
    params = {"name": "chatty", "arguments": {}, "_meta": {"progressToken": request_id}}
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    ).encode()


def _streams_held(app: McpHttpApp) -> int:
    """Resumable streams every session of *app* still holds."""
    store = app.sessions
    assert store is not None
    return sum(len(session.streams.streams) for session in store._sessions.values())


async def _read_fully(calls_each: int) -> dict[str, Any]:
    app = McpHttpApp(_server())
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with (
        serving(app, keep_alive=2.0) as port,
        httpx.AsyncClient(limits=limits, timeout=30) as client,
    ):
        url = f"http://127.0.0.1:{port}/mcp"
        wrong = 0

        async def one_client() -> None:
            nonlocal wrong
            reply = await client.post(url, headers=JSON_HEADERS, content=INITIALIZE)
            headers = {
                **JSON_HEADERS,
                "mcp-session-id": reply.headers["mcp-session-id"],
                "mcp-protocol-version": LEGACY,
            }
            for n in range(1, calls_each + 1):
                answer = await client.post(url, headers=headers, content=_call(n))
                if answer.status_code != 200 or b'"done"' not in answer.content:
                    wrong += 1

        async with trio.open_nursery() as nursery:
            for _ in range(CLIENTS):
                nursery.start_soon(one_client)
        await trio.sleep(0.05)  # far inside resume_window (5 s)
        return {
            "calls": CLIENTS * calls_each,
            "bytes": app.retained_stream_bytes,
            "streams": _streams_held(app),
            "wrong": wrong,
        }


def _scope(headers: dict[str, str]) -> dict[str, object]:
    return post_scope([(k.encode(), v.encode()) for k, v in headers.items()])


async def _unread_post(
    app: McpHttpApp,
    nursery: trio.Nursery,
    headers: dict[str, str],
    down: trio.Event,
    running: set[trio.Event],
) -> None:
    """One POST whose client reads nothing: every body ``send()`` blocks until the app
    returned (then the server closes the connection), or the bench ends (*down*)."""
    body = _call(1)
    closed = trio.Event()
    fed = False

    async def receive() -> MutableMapping[str, Any]:
        nonlocal fed
        if not fed:
            fed = True
            return {"type": "http.request", "body": body, "more_body": False}
        await closed.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        await trio.lowlevel.checkpoint()
        if message["type"] == "http.response.body":
            with trio.CancelScope(shield=True):
                while not (closed.is_set() or down.is_set()):
                    with trio.move_on_after(0.05):
                        await closed.wait()

    async def run() -> None:
        try:
            await app(_scope(headers), receive, send)
        finally:
            closed.set()
            running.discard(closed)

    running.add(closed)
    nursery.start_soon(run)


async def _initialize(app: McpHttpApp) -> str:
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": INITIALIZE, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(_scope(JSON_HEADERS), receive, send)
    return str(dict(sent[0]["headers"])[b"mcp-session-id"].decode())


async def _lifespan(app: McpHttpApp, up: trio.Event, down: trio.Event) -> None:
    """The app's ASGI lifespan, as a server runs it: up until *down*."""
    sent: list[str] = []

    async def receive() -> MutableMapping[str, Any]:
        if not sent:
            return {"type": "lifespan.startup"}
        await down.wait()
        return {"type": "lifespan.shutdown"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message["type"])
        if message["type"] == "lifespan.startup.complete":
            up.set()

    await app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)


async def _unread(calls: int, budget: int | None) -> dict[str, Any]:
    limits = HttpLimits() if budget is None else HttpLimits(max_retained_stream_bytes=budget)
    # A short resume_window only so that the run ends soon: calls whose clients were
    # dropped as stalled wait that long for a resume before they are cancelled.
    app = McpHttpApp(_server(), http_limits=limits, resume_window=0.5)
    up, down, gone = trio.Event(), trio.Event(), trio.Event()
    running: set[trio.Event] = set()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_lifespan, app, up, down)
        await up.wait()
        sessions = [await _initialize(app) for _ in range(CLIENTS)]
        peak = 0
        for i in range(calls):
            headers = {
                **JSON_HEADERS,
                "mcp-session-id": sessions[i % CLIENTS],
                "mcp-protocol-version": LEGACY,
            }
            await _unread_post(app, nursery, headers, gone, running)
            await trio.sleep(0.001)
            peak = max(peak, app.retained_stream_bytes)
        for _ in range(50):  # every call finishes (26 x 2 ms); all wait, unread
            await trio.sleep(0.01)
            peak = max(peak, app.retained_stream_bytes)
        evicted = app._responder.stream_budget.evictions
        gone.set()  # the clients read at last: every request ends, then the server stops
        with trio.move_on_after(10):
            await until(lambda: not running)
        down.set()
    return {"peak": peak, "evicted": evicted, "budget": limits.max_retained_stream_bytes}


async def rows(quick: bool) -> list[Row]:
    read = await _read_fully(4 if quick else 40)
    per_call = read["bytes"] / read["calls"]
    unread_calls = 40 if quick else 160
    default = await _unread(unread_calls, None)
    small = await _unread(unread_calls, 4 * MB)
    table = [
        Row(
            BENCH,
            f"streams: bytes held per finished call (legacy SSE, chatty tool, {CLIENTS} clients"
            f" read fully, {read['calls']} calls, hypercorn)",
            f"{per_call:.0f} B ({read['streams']} streams held); {read['wrong']} wrong answers",
            "~0",
            "PASS" if read["bytes"] == 0 and not read["wrong"] else "MISS",
        )
    ]
    for label, r in (("default budget", default), ("4 MiB budget", small)):
        ok = r["peak"] <= r["budget"]
        table.append(
            Row(
                BENCH,
                f"streams: bytes held by {unread_calls} unread finished calls, {label}",
                f"peak {r['peak'] / MB:.1f} MiB, {r['evicted']} evicted",
                f"<= {r['budget'] / MB:.0f} MiB",
                "PASS" if ok else "MISS",
            )
        )
    return table
