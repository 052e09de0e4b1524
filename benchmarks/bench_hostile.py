"""Hostile and broken clients under load, measured over real sockets (issue 9).

One process: hypercorn's Trio worker serving :class:`McpHttpApp` on
127.0.0.1 (with its lifespan, so responses go through the app's writer
tasks), and the clients, raw sockets driven by h11 or httpx.  Three cases;
each reports counts, no timing is judged:

* **session flood**: a tenant loops ``initialize`` (legacy) while another
  tenant, the victim, has a call running, one more session idle, and tries
  to start a session and ping its own every so often.  Reported: the attempt
  at which the victim was first harmed (its call cancelled, a session of its
  gone, its ``initialize`` refused), "never" if not, up to the number tried.
  Once with one attacking principal (the per-tenant bound), once with the
  attack spread over many principals against a small store (the store's
  bound: the biggest tenant pays).
* **stalled bodies**: many connections send a request head and part of the
  body, then nothing.  Reported: how many were held at once, the latency of
  a normal client's calls while they were all open, and when (after
  ``body_timeout``) each got its ``408``.  The count stays well below the
  process's file descriptor limit (two descriptors per connection here,
  client and server being one process).
* **load with faults**: many concurrent ``count`` calls, half modern, half
  legacy (a session each); a third run to the end, a third are cancelled by
  closing their stream after the first progress message, a third dropped
  abruptly (``SO_LINGER`` 0: a reset) at the same point.  Reported: clients
  that hung, answers that were wrong, cancellations the server saw, and what
  was left once it drained: registry rows and requests in flight, calls
  counted against the admission caps, sessions with calls still counted,
  and Trio tasks compared with before the load.

Run: ``python -m benchmarks.bench_hostile [--quick]`` (or ``python3 dev.py
bench --only hostile``).
"""

from __future__ import annotations

import json
import logging
import resource
import socket
import statistics
import struct
import sys
import time
from collections import Counter
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs
import h11
import httpx
import trio

from trio_mcp_cancel import RequestCancelledEvent, checkpoint_cancelled, open_registry
from trio_mcp_cancel.http import HttpLimits, McpHttpApp, bearer_auth
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer, ServerLimits
from trio_mcp_cancel.testing import EventRecorder

from . import (
    hostile_auth,
    hostile_redis,
    hostile_redis_slow,
    hostile_resources,
    hostile_streams,
    hostile_tasks,
    hostile_workers,
)
from ._client import INITIALIZE, LEGACY, MODERN
from ._common import Row
from ._hostile_serve import serving, until

NAME = "hostile"
BENCH = "9 hostile"
ACCEPT = "application/json, text/event-stream"
JSON_HEADERS = {"accept": ACCEPT, "content-type": "application/json"}
HANG_LIMIT = 30.0
"""Seconds after which a client of the load counts as hung."""
KEEP_ALIVE = 2.0
"""hypercorn's ``keep_alive_timeout``.  A client that closes its connection the
moment its response ends can leave hypercorn's idle timer running (a race in
hypercorn: the timer is started after the read loop saw the close), which then
holds the connection until it fires; what is left after that is a leak."""


# -- the server ----------------------------------------------------------------------


def _server(release: trio.Event, **caps: Any) -> McpServer:
    server = McpServer("bench-hostile", **caps)

    @server.tool()
    async def hold(ctx: Context) -> str:
        """Run, polling the flag, until the benchmark releases it."""
        while not release.is_set():
            await checkpoint_cancelled()
            await trio.sleep(0.02)
        return "released"

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    @server.tool()
    async def count(ctx: Context, n: int = 10, delay: float = 0.1) -> str:
        for i in range(1, n + 1):
            await checkpoint_cancelled()
            await trio.sleep(delay)
            await ctx.report_progress(i, total=n)
        return f"counted {n}"

    return server


def _serving(app: McpHttpApp) -> AbstractAsyncContextManager[int]:
    return serving(app, KEEP_ALIVE)


def _modern_call(request_id: object, name: str, arguments: dict[str, Any], token: object) -> bytes:
    meta: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    }
    if token is not None:
        meta["progressToken"] = token
    params = {"name": name, "arguments": arguments, "_meta": meta}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message).encode()


def _modern_headers(name: str) -> dict[str, str]:
    return {
        **JSON_HEADERS,
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": name,
    }


def _legacy_call(request_id: object, name: str, arguments: dict[str, Any], token: object) -> bytes:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message).encode()


PING = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}).encode()


def _sse_data(body: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(line[6:])
        for block in body.split(b"\n\n")
        for line in block.split(b"\n")
        if line.startswith(b"data: ")
    ]


def _answer_text(content_type: str, body: bytes) -> str | None:
    """The text of a tool call's result, ``None`` when there is none."""
    messages = [json.loads(body)] if content_type == "application/json" else _sse_data(body)
    for message in messages:
        if "id" in message and "result" in message:
            text = message["result"]["content"][0]["text"]
            return text if isinstance(text, str) else None
    return None


def _fd_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- a raw HTTP/1.1 client on h11 ----------------------------------------------------


@attrs.define(eq=False)
class _Raw:
    """One connection; requests one after the other (keep-alive)."""

    stream: trio.SocketStream
    port: int
    conn: h11.Connection = attrs.field(factory=lambda: h11.Connection(h11.CLIENT))

    @classmethod
    async def open(cls, port: int) -> _Raw:
        return cls(await trio.open_tcp_stream("127.0.0.1", port), port)

    async def send(self, headers: dict[str, str], body: bytes, method: str = "POST") -> None:
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
        fields = [("host", f"127.0.0.1:{self.port}"), ("content-length", str(len(body)))]
        fields += list(headers.items())
        data = self.conn.send(h11.Request(method=method, target="/mcp", headers=fields))
        data = (data or b"") + (self.conn.send(h11.Data(data=body)) or b"")
        data += self.conn.send(h11.EndOfMessage()) or b""
        await self.stream.send_all(data)

    async def event(self) -> Any:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.conn.receive_data(await self.stream.receive_some(1 << 16))

    async def response(self) -> tuple[int, dict[str, str]]:
        event = await self.event()
        assert isinstance(event, h11.Response), event
        headers = {k.decode().lower(): v.decode() for k, v in event.headers}
        return event.status_code, headers

    async def whole(
        self, headers: dict[str, str], body: bytes, method: str = "POST"
    ) -> tuple[int, dict[str, str], bytes]:
        """One request and its whole response."""
        await self.send(headers, body, method)
        status, response_headers = await self.response()
        chunks = []
        while not isinstance(event := await self.event(), h11.EndOfMessage):
            chunks.append(bytes(event.data))
        return status, response_headers, b"".join(chunks)

    async def until_first_progress(self) -> bool:
        """Read SSE until the first progress notification; ``False`` if the response ended first."""
        buffer = b""
        while True:
            event = await self.event()
            if isinstance(event, h11.EndOfMessage):
                return False
            buffer += bytes(event.data)
            if b"notifications/progress" in buffer:
                return True

    def reset(self) -> None:
        """Close abruptly: a TCP reset, as a crashed client or a cut network does."""
        self.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.stream.socket.close()


# -- (i) session flood ---------------------------------------------------------------


async def _session_flood(attempts: int, principals: int, max_sessions: int) -> dict[str, Any]:
    """Attack with *attempts* initializes over *principals*; when was the victim harmed?"""
    release = trio.Event()
    tokens = {"victim-token": "victim"}
    tokens.update({f"attacker-{k}": f"attacker-{k}" for k in range(principals)})
    victim = {"authorization": "Bearer victim-token"}
    harmed: dict[str, int] = {}
    statuses: Counter[int] = Counter()
    done = 0
    async with open_registry(grace_period=1.0) as registry:
        app = McpHttpApp(
            _server(release),
            registry,
            auth=bearer_auth(tokens),
            http_limits=HttpLimits(max_sessions=max_sessions),
        )
        store = app.sessions
        assert store is not None
        limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
        async with _serving(app) as port, httpx.AsyncClient(limits=limits, timeout=30) as client:
            url = f"http://127.0.0.1:{port}/mcp"

            async def initialize(headers: dict[str, str]) -> httpx.Response:
                return await client.post(
                    url, headers={**JSON_HEADERS, **headers}, content=INITIALIZE
                )

            async def session(headers: dict[str, str]) -> dict[str, str]:
                reply = await initialize(headers)
                assert reply.status_code == 200, reply.text
                return {
                    **JSON_HEADERS,
                    **headers,
                    "mcp-session-id": reply.headers["mcp-session-id"],
                    "mcp-protocol-version": LEGACY,
                }

            busy = await session(victim)
            idle = await session(victim)
            answer: list[str | None] = []

            async def victim_call() -> None:
                reply = await client.post(
                    url, headers=busy, content=_legacy_call(1, "hold", {}, None)
                )
                answer.append(_answer_text(reply.headers["content-type"], reply.content))

            def harm(what: str) -> None:
                harmed.setdefault(what, done)

            async def check_victim() -> None:
                for headers in (busy, idle):
                    if (await client.post(url, headers=headers, content=PING)).status_code != 200:
                        harm("a session of the victim ended")
                reply = await initialize(victim)
                if reply.status_code != 200:
                    harm(f"victim's initialize refused ({reply.status_code})")
                else:
                    extra = {**victim, "mcp-session-id": reply.headers["mcp-session-id"]}
                    await client.delete(url, headers={**extra, "mcp-protocol-version": LEGACY})
                if any(r.cancelled for r in registry.requests()):
                    harm("victim's call cancelled")

            async def attacker(worker: int, workers: int) -> None:
                nonlocal done
                for i in range(worker, attempts, workers):
                    token = f"attacker-{i % principals}"
                    reply = await initialize({"authorization": f"Bearer {token}"})
                    statuses[reply.status_code] += 1
                    done += 1

            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(victim_call)
                await until(lambda: registry.in_flight_count >= 1)
                async with trio.open_nursery() as flood:
                    workers = 8
                    for worker in range(workers):
                        flood.start_soon(attacker, worker, workers)
                    checked = -1
                    while done < attempts:
                        if done // 100 != checked:
                            checked = done // 100
                            await check_victim()
                        await trio.sleep(0.005)
                await check_victim()
                release.set()
            elapsed = time.perf_counter() - started
            if answer != ["released"]:
                harm("victim's call did not complete")
            biggest = max(store.tenant_count(f"principal:attacker-{k}") for k in range(principals))
            return {
                "attempts": attempts,
                "principals": principals,
                "max_sessions": max_sessions,
                "per_tenant": store.max_sessions_per_tenant,
                "statuses": dict(sorted(statuses.items())),
                "harmed": harmed,
                "sessions": len(store),
                "attacker_biggest_tenant": biggest,
                "seconds": elapsed,
            }


# -- (ii) stalled bodies ---------------------------------------------------------------


async def _stalled_bodies(connections: int, body_timeout: float, probes: int) -> dict[str, Any]:
    """Hold *connections* with stalled bodies; serve a normal client meanwhile."""
    release = trio.Event()
    opened = 0
    all_open = trio.Event()
    results: list[tuple[int, float]] = []  # (status, seconds from head to answer)
    latencies: list[float] = []
    normal_ok = 0
    answered_while_probing = 0
    async with open_registry(grace_period=1.0) as registry:
        app = McpHttpApp(
            _server(release), registry, http_limits=HttpLimits(body_timeout=body_timeout)
        )
        async with _serving(app) as port:
            body = _modern_call(1, "echo", {"text": "never"}, None)
            head = (
                f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in _modern_headers("echo").items())
                + f"content-length: {len(body)}\r\n\r\n"
            ).encode()
            connect = trio.Semaphore(64)

            async def stalled() -> None:
                nonlocal opened
                async with connect:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                async with stream:
                    await stream.send_all(head + body[: len(body) // 2])
                    sent = trio.current_time()
                    opened += 1
                    if opened == connections:
                        all_open.set()
                    raw = b""
                    with trio.move_on_after(body_timeout + HANG_LIMIT):
                        try:
                            while chunk := await stream.receive_some(1 << 16):
                                raw += chunk
                        except trio.BrokenResourceError:
                            pass
                    status = int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/") else 0
                    results.append((status, trio.current_time() - sent))

            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(connections):
                    nursery.start_soon(stalled)
                await all_open.wait()
                held = connections - len(results)
                async with httpx.AsyncClient(timeout=30) as client:
                    url = f"http://127.0.0.1:{port}/mcp"
                    for i in range(probes):
                        t0 = time.perf_counter()
                        reply = await client.post(
                            url,
                            headers=_modern_headers("echo"),
                            content=_modern_call(i, "echo", {"text": "hi"}, None),
                        )
                        latencies.append(time.perf_counter() - t0)
                        normal_ok += (
                            _answer_text(reply.headers["content-type"], reply.content) == "hi"
                        )
                answered_while_probing = len(results)
            elapsed = time.perf_counter() - started
    times = sorted(t for _, t in results)
    return {
        "connections": connections,
        "held_at_once": held,
        "answered_before_probes_ended": answered_while_probing,
        "statuses": dict(Counter(status for status, _ in results)),
        "to_408_median": statistics.median(times),
        "to_408_max": times[-1],
        "to_408_min": times[0],
        "body_timeout": body_timeout,
        "normal_ok": normal_ok,
        "probes": probes,
        "normal_median": statistics.median(latencies),
        "normal_max": max(latencies),
        "fd_limit": _fd_limit(),
        "seconds": elapsed,
    }


# -- (iii) load with faults --------------------------------------------------------------


async def _load_with_faults(calls: int, n: int, delay: float) -> dict[str, Any]:
    release = trio.Event()
    outcomes: Counter[str] = Counter()
    durations: list[float] = []
    session_ids: list[str] = []
    async with open_registry(grace_period=1.0) as registry:
        events = EventRecorder.attach(registry)
        server = _server(release, limits=ServerLimits(max_calls=None, max_calls_per_tenant=None))
        app = McpHttpApp(
            server,
            registry,
            limits=ConnectionLimits(write_timeout=5.0),
            http_limits=HttpLimits(max_sessions=calls * 2, max_sessions_per_tenant=calls * 2),
        )
        store = app.sessions
        assert store is not None
        async with _serving(app) as port:
            await trio.sleep(0.2)
            tasks_before = trio.lowlevel.current_statistics().tasks_living
            connect = trio.Semaphore(128)

            async def client(i: int) -> None:
                fault = ("complete", "cancel", "drop")[i % 3]
                legacy = (i // 3) % 2 == 1
                t0 = trio.current_time()
                with trio.move_on_after(HANG_LIMIT) as hang:
                    async with connect:
                        raw = await _Raw.open(port)
                    try:
                        if legacy:
                            status, headers, _ = await raw.whole(JSON_HEADERS, INITIALIZE)
                            if status != 200:
                                outcomes[f"{fault}: initialize {status}"] += 1
                                return
                            session_ids.append(headers["mcp-session-id"])
                            session = {
                                **JSON_HEADERS,
                                "mcp-session-id": headers["mcp-session-id"],
                                "mcp-protocol-version": LEGACY,
                            }
                            body = _legacy_call(i, "count", {"n": n, "delay": delay}, f"p{i}")
                            await raw.send(session, body)
                        else:
                            body = _modern_call(i, "count", {"n": n, "delay": delay}, f"p{i}")
                            await raw.send(_modern_headers("count"), body)
                        status, headers = await raw.response()
                        if status != 200:
                            outcomes[f"{fault}: status {status}"] += 1
                            return
                        if fault == "complete":
                            chunks = []
                            while not isinstance(event := await raw.event(), h11.EndOfMessage):
                                chunks.append(bytes(event.data))
                            text = _answer_text(headers["content-type"], b"".join(chunks))
                            ok = text == f"counted {n}"
                            outcomes["complete: ok" if ok else "complete: wrong answer"] += 1
                            if legacy:  # a client that finished ends its session
                                status, _, _ = await raw.whole(session, b"", "DELETE")
                                outcomes[f"complete: DELETE {status}"] += 1
                        else:
                            if not await raw.until_first_progress():
                                outcomes[f"{fault}: ended before progress"] += 1
                                return
                            if fault == "cancel":
                                await raw.stream.aclose()
                            else:
                                raw.reset()
                            outcomes[f"{fault}: done"] += 1
                    except (trio.BrokenResourceError, h11.RemoteProtocolError, OSError) as exc:
                        outcomes[f"{fault}: {type(exc).__name__}"] += 1
                    finally:
                        if raw.stream.socket.fileno() != -1:
                            await raw.stream.aclose()
                if hang.cancelled_caught:
                    outcomes[f"{fault}: hung"] += 1
                durations.append(trio.current_time() - t0)

            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(calls):
                    nursery.start_soon(client, i)
            clients_seconds = time.perf_counter() - started
            drain_started = time.perf_counter()
            with trio.move_on_after(HANG_LIMIT):
                await until(
                    lambda: not (registry.in_flight_count or server.dispatcher.calls_in_flight)
                )
            drained = time.perf_counter() - drain_started
            # Let hypercorn close the connections the clients left (see KEEP_ALIVE).
            settle_started = time.perf_counter()
            tasks_after = trio.lowlevel.current_statistics().tasks_living
            with trio.move_on_after(KEEP_ALIVE + 3):
                while tasks_after > tasks_before:
                    await trio.sleep(0.05)
                    tasks_after = trio.lowlevel.current_statistics().tasks_living
            settled = time.perf_counter() - settle_started
            now = trio.current_time()
            left = [store.get(sid, None, now) for sid in session_ids]
            busy_sessions = sum(1 for session in left if session is not None and session.busy)
            result = {
                "calls": calls,
                "outcomes": dict(sorted(outcomes.items())),
                "hung": sum(v for k, v in outcomes.items() if k.endswith("hung")),
                "cancelled_seen": dict(
                    Counter(e.kind for e in events.of_type(RequestCancelledEvent))
                ),
                "hard_cancelled": len(
                    [e for e in events.events if e.name == "request.hard_cancelled"]
                ),
                "rows_left": registry.row_count,
                "in_flight_left": registry.in_flight_count,
                "calls_counted_left": server.dispatcher.calls_in_flight,
                "sessions_left": len(store),
                "busy_sessions_left": busy_sessions,
                "tasks_before": tasks_before,
                "tasks_after": tasks_after,
                "clients_seconds": clients_seconds,
                "drain_seconds": drained,
                "settle_seconds": settled,
                "client_max_seconds": max(durations) if durations else 0.0,
            }
    return result


# -- the table -------------------------------------------------------------------------


def _harm(result: dict[str, Any]) -> str:
    if not result["harmed"]:
        return f"never (in {result['attempts']} attempts)"
    return ", ".join(f"{what} after {n}" for what, n in result["harmed"].items())


async def rows(quick: bool) -> list[Row]:
    logger = logging.getLogger("trio_mcp_cancel")
    disabled, logger.disabled = logger.disabled, True  # refusals and cancels log by design
    try:
        return await _rows(quick)
    finally:
        logger.disabled = disabled


async def _rows(quick: bool) -> list[Row]:
    attempts = 300 if quick else 2000
    table: list[Row] = []
    for principals, max_sessions in ((1, 10_000), (50, 500)):
        r = await _session_flood(attempts, principals, max_sessions)
        label = (
            "one principal"
            if principals == 1
            else f"{principals} principals, store of {max_sessions}"
        )
        table.append(
            Row(
                BENCH,
                f"session flood, {label}: initializes until another tenant is harmed",
                _harm(r),
                "never",
                "PASS" if not r["harmed"] else "MISS",
            )
        )
        statuses = ", ".join(f"{n}x {s}" for s, n in r["statuses"].items())
        table.append(
            Row(
                BENCH,
                f"session flood, {label}: attacker's answers; sessions kept",
                f"{statuses}; {r['sessions']} sessions, biggest attacker tenant "
                f"{r['attacker_biggest_tenant']} (bound {r['per_tenant']}), {r['seconds']:.1f} s",
            )
        )

    fds = _fd_limit()
    connections = min(50 if quick else 300, max(10, (fds - 200) // 3))
    body_timeout = 2.0 if quick else 5.0
    r = await _stalled_bodies(connections, body_timeout, 10 if quick else 20)
    table.append(
        Row(
            BENCH,
            f"stalled bodies: connections held at once (fd limit {r['fd_limit']})",
            f"{r['held_at_once']}/{connections}",
        )
    )
    table.append(
        Row(
            BENCH,
            f"stalled bodies: normal client's calls while {r['held_at_once']} are held",
            f"{r['normal_ok']}/{r['probes']} answered, median {r['normal_median'] * 1000:.1f} ms,"
            f" max {r['normal_max'] * 1000:.1f} ms",
            f"{r['probes']}/{r['probes']}",
            "PASS" if r["normal_ok"] == r["probes"] else "MISS",
        )
    )
    statuses = ", ".join(f"{n}x {s or 'none'}" for s, n in r["statuses"].items())
    table.append(
        Row(
            BENCH,
            f"stalled bodies: answers (body_timeout {r['body_timeout']:g} s)",
            f"{statuses}; after {r['to_408_min']:.2f}-{r['to_408_max']:.2f} s"
            f" (median {r['to_408_median']:.2f} s)",
            f"{connections}x 408",
            "PASS" if r["statuses"] == {408: connections} else "MISS",
        )
    )

    calls = 100 if quick else 1200  # quick (the smoke test): faults go round-robin, all drawn
    r = await _load_with_faults(calls, 10, 0.1)
    outcomes = ", ".join(f"{n} {k}" for k, n in r["outcomes"].items())
    table.append(Row(BENCH, f"load with faults: {calls} calls, outcomes", outcomes))
    cancels = ", ".join(f"{n} {k}" for k, n in r["cancelled_seen"].items()) or "none"
    table.append(
        Row(
            BENCH,
            "load with faults: cancellations the server saw",
            f"{cancels}; {r['hard_cancelled']} hard-cancelled",
        )
    )
    leaks = (
        r["hung"],
        r["rows_left"],
        r["in_flight_left"],
        r["calls_counted_left"],
        r["busy_sessions_left"],
        max(0, r["tasks_after"] - r["tasks_before"]),
    )
    table.append(
        Row(
            BENCH,
            "load with faults: hung clients / rows / in flight / calls counted /"
            " busy sessions / extra tasks left",
            " / ".join(str(x) for x in leaks)
            + f" ({r['sessions_left']} idle sessions of clients that never ended theirs;"
            f" tasks {r['tasks_before']} -> {r['tasks_after']},"
            f" back to the baseline {r['settle_seconds']:.1f} s after the drain)",
            "all 0",
            "PASS" if not any(leaks) else "MISS",
        )
    )
    table.append(
        Row(
            BENCH,
            "load with faults: wall time",
            f"clients {r['clients_seconds']:.1f} s (slowest {r['client_max_seconds']:.1f} s),"
            f" server drained {r['drain_seconds']:.2f} s later",
        )
    )
    table.extend(await hostile_tasks.rows(quick))
    table.extend(await hostile_redis.rows(quick))
    table.extend(await hostile_redis_slow.rows(quick))
    table.extend(await hostile_workers.rows(quick))
    table.extend(await hostile_auth.rows(quick))
    table.extend(await hostile_resources.rows(quick))
    table.extend(await hostile_streams.rows(quick))
    return table


def main(argv: list[str]) -> None:
    from .__main__ import table

    out = trio.run(rows, "--quick" in argv)
    print(table(out))


if __name__ == "__main__":
    main(sys.argv[1:])
