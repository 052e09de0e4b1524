"""Benchmark 5: cancel latency over real sockets, ours and the MCP SDK's.

The server (pinned to its core, see :mod:`benchmarks._servers`) runs a
``slow`` tool that reports progress once and then waits to be cancelled;
the client (this process, pinned to the other core; raw HTTP/1.1 on Trio
sockets) waits for that progress event, so the tool is known to run, and
then cancels it.  Both sides read ``time.perf_counter()``
(``CLOCK_MONOTONIC``, one clock for every process on the machine):

* **notification -> flag**: from just before the client writes
  ``notifications/cancelled`` (legacy session, its own keep-alive
  connection) to the moment the tool sees the cancellation.  Ours: the tool
  is woken by the registry's ``request.cancelled`` event, emitted as the
  polled flag is set, so this includes the scheduler pass a polling tool
  would need too; the SDK: the tool's ``CancelledError`` (the SDK has no
  flag, it cancels the handler).
* **notification -> end of stream**: from the same moment to the client
  having read the end of the call's response stream.
* **stream close -> flag**: from just before the client closes the call's
  connection to the tool seeing the cancellation, in a legacy session (ours
  with resumption off, since a resumable legacy stream's close cancels only
  after ``resume_window``; the SDK's session) and without a session (ours:
  modern, where a close is the way to cancel; the SDK: ``stateless_http=True``).
  Where it never comes the row says how many of the calls were never
  cancelled within the wait: "never" is a measured outcome.

The SDK is measured on uvicorn[standard] (uvloop, httptools; see
:mod:`benchmarks._standard`) and on plain uvicorn, with SSE responses (its
default: a tool's progress reaches the client, so the client knows it
runs).  The rows are grouped by measurement, every server beside the others.

Targets (ours): notification -> flag p99 <= 1.5 ms, stream close -> flag p99 <= 1 ms.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import trio

from . import _client
from ._client import Connection, Server
from ._common import Row

NAME = "latency"
BENCH = "5 cancel latency"
NOTIFY_TARGET = 1.5e-3
CLOSE_TARGET = 1.0e-3
#: How long to wait for an SDK cancellation that may never come.
WAIT = 2.0
_keys = iter(range(10**9))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _fmt(values: list[float]) -> str:
    return f"p50 {_pct(values, 0.5) * 1e3:.3f} ms, p99 {_pct(values, 0.99) * 1e3:.3f} ms"


async def _start_slow(server: Server, *, modern: bool) -> tuple[Connection, str, int]:
    """Open a connection, start a ``slow`` call on it, return once it runs."""
    key = f"k{next(_keys)}"
    conn = await Connection.open(server.port)
    body = _client.call_body("slow", {"key": key}, modern=modern, progress=True)
    request_id = int(body.split(b'"id":', 1)[1].split(b",", 1)[0].split(b"}", 1)[0])
    await conn.send(body, _client.call_headers(server, "slow", modern=modern))
    await conn.read_until(b"notifications/progress")
    return conn, key, request_id


async def _end_of_stream(conn: Connection) -> bool:
    """Read until the chunked response ends (or the connection closes)."""
    try:
        await conn.read_until(b"\r\n0\r\n\r\n")
    except EOFError:
        pass
    return True


async def notification(server: Server, samples: int) -> tuple[list[float], list[float], int]:
    """(notification -> flag, notification -> end of stream, calls never cancelled)."""
    control = await Connection.open(server.port)
    sent: dict[str, float] = {}
    ends: list[float] = []
    try:
        for _ in range(samples):
            conn, key, request_id = await _start_slow(server, modern=False)
            note = (
                b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}'
                % request_id
            )
            headers = _client.call_headers(server, "", modern=False)
            sent[key] = time.perf_counter()
            await control.send(note, headers)
            with trio.move_on_after(WAIT):
                await _end_of_stream(conn)
                ends.append(time.perf_counter() - sent[key])
            await control.response()
            await conn.aclose()
            # As in close(): give the server its core back (the connection
            # just closed is torn down there) before the next sample.
            await trio.sleep(0.002)
    finally:
        await control.aclose()
    return await _flags(server, sent), ends, 0


async def close(
    server: Server, samples: int, *, modern: bool, wait: float = WAIT
) -> tuple[list[float], int]:
    """(stream close -> flag, calls never cancelled)."""
    sent: dict[str, float] = {}
    for _ in range(samples):
        conn, key, _ = await _start_slow(server, modern=modern)
        sent[key] = time.perf_counter()
        await conn.aclose()
        # Give the server its core back before the next sample, as a client
        # pausing between calls would.
        await trio.sleep(0.002)
    await trio.sleep(0.2 if len(sent) < 50 else 0.5)
    flags = await _flags(server, sent, wait)
    return flags, len(sent) - len(flags)


async def _flags(server: Server, sent: dict[str, float], wait: float = WAIT) -> list[float]:
    deadline = trio.current_time() + wait
    while True:
        seen = (await _client.stats(server))["seen"]
        if all(key in seen for key in sent) or trio.current_time() > deadline:
            return [seen[key] - t for key, t in sent.items() if key in seen]
        await trio.sleep(0.05)


def _row(
    label: str,
    values: list[float],
    never: int,
    total: int,
    target: float | None,
    wait: float = WAIT,
) -> Row:
    if not values:
        text = f"never: {never} of {total} calls not cancelled in {wait:g} s"
        if target is None:
            return Row(BENCH, label, text, "info")
        return Row(BENCH, label, text, f"p99 <= {target * 1e3:g} ms", "MISS")
    text = _fmt(values) + ("" if not never else f"; {never} of {total} never cancelled")
    if target is None:
        return Row(BENCH, label, text, "info")
    p99 = _pct(values, 0.99)
    ok = p99 <= target and not never
    return Row(BENCH, label, text, f"p99 <= {target * 1e3:g} ms", "PASS" if ok else "MISS")


@dataclass(frozen=True)
class Subject:
    """A server measured: *session* serves the legacy rows, *stateless* the close of a
    request without a session (ours: the modern era; the SDK: ``stateless_http=True``)."""

    who: str
    session: str
    stateless: str
    ours: bool = False


NOTIFY = "`notifications/cancelled` -> tool sees it (legacy session)"
NOTIFY_END = "`notifications/cancelled` -> client has the end of its stream (legacy session)"
CLOSE_SESSION = "stream close -> tool sees it (legacy session)"
CLOSE_STATELESS = "stream close -> tool sees it (no session: ours modern, the SDK stateless)"
#: The rows' order: each measurement, then every server beside it.
MEASUREMENTS = (NOTIFY, NOTIFY_END, CLOSE_SESSION, CLOSE_STATELESS)


async def _subjects() -> list[Subject]:
    from . import _standard
    from .bench_e2e import sdk_installed

    # Ours: a resumable legacy stream's close cancels only after resume_window
    # (5 s), so its close is measured with resumption off ("ours-noresume").
    found = [Subject("ours", "ours", "ours", ours=True)]
    if sdk_installed():
        if await _standard.ensure_installed() is None:
            std = "sdk-uvicorn-standard"
            found.append(Subject("MCP SDK on uvicorn[standard]", std, f"{std}-stateless"))
        found.append(Subject("MCP SDK on plain uvicorn", "sdk-uvicorn", "sdk-uvicorn-stateless"))
    return found


async def _measure_session(subject: Subject, samples: int, wait: float) -> dict[str, Row]:
    """The legacy rows: notification -> flag, -> end of stream, and close -> flag."""
    rows = {}
    async with _client.server(subject.session) as server:
        await _client.initialize(server)
        await notification(server, 2)  # warm up
        flags, ends, _ = await notification(server, samples)
        target = NOTIFY_TARGET if subject.ours else None
        rows[NOTIFY] = _row(f"{NOTIFY}: {subject.who}", flags, 0, samples, target)
        rows[NOTIFY_END] = _row(
            f"{NOTIFY_END}: {subject.who}", ends, samples - len(ends), samples, None
        )
        if not subject.ours:
            n = min(samples, 20)  # the SDK never cancels these: they pile up
            flags, never = await close(server, n, modern=False, wait=wait)
            rows[CLOSE_SESSION] = _row(
                f"{CLOSE_SESSION}: {subject.who}", flags, never, n, None, wait
            )
    if subject.ours:
        async with _client.server("ours-noresume") as plain:
            await _client.initialize(plain)
            flags, never = await close(plain, samples, modern=False, wait=wait)
        label = f"{CLOSE_SESSION}: ours (`resume_window=None`)"
        rows[CLOSE_SESSION] = _row(label, flags, never, samples, CLOSE_TARGET, wait)
    return rows


async def _measure_stateless(subject: Subject, samples: int, wait: float) -> Row:
    """Close -> flag of a request without a session (ours: modern; the SDK: stateless)."""
    async with _client.server(subject.stateless) as server:
        if subject.ours:
            await _client.initialize(server)  # for the harness's `stats` calls, not the calls
        # Ours: a modern request.  The SDK: its own stateless request, the
        # legacy body with no session (the same bytes but for the _meta).
        flags, never = await close(server, samples, modern=subject.ours, wait=wait)
    target = CLOSE_TARGET if subject.ours else None
    who = "ours (modern)" if subject.ours else subject.who
    return _row(f"{CLOSE_STATELESS}: {who}", flags, never, samples, target, wait)


async def run(quick: bool) -> list[Row]:
    samples = 3 if quick else 200
    wait = 0.5 if quick else WAIT
    measured: dict[str, list[Row]] = {name: [] for name in MEASUREMENTS}
    subjects = await _subjects()
    for subject in subjects:
        for name, row in (await _measure_session(subject, samples, wait)).items():
            measured[name].append(row)
        measured[CLOSE_STATELESS].append(await _measure_stateless(subject, samples, wait))
    rows = [row for name in MEASUREMENTS for row in measured[name]]
    if len(subjects) == 1:
        rows.append(Row(BENCH, "MCP SDK rows (`pip install mcp uvicorn`)", "not available"))
    return rows
