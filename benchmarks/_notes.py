"""The prose of RESULTS.md that depends on the run: conditions, and why a target was missed."""

from __future__ import annotations

import os
import re

from ._common import Row

__all__ = ["analysis", "conditions"]


def _load(snapshot: str) -> str | None:
    match = re.search(r"load average: ([\d.]+), ([\d.]+), ([\d.]+)", snapshot)
    return match.group(1) if match else None


def _busy(snapshot: str) -> list[str]:
    """``top`` process lines using a noticeable share of a CPU."""
    lines = snapshot.splitlines()
    header = next((i for i, line in enumerate(lines) if line.strip().startswith("PID")), None)
    if header is None:
        return []
    busy = []
    for line in lines[header + 1 :]:
        fields = line.split()
        if len(fields) >= 12:
            try:
                cpu = float(fields[8])
            except ValueError:
                continue
            if cpu >= 5.0 and fields[11] not in ("top",):
                busy.append(f"{' '.join(fields[11:14])[:70]} {cpu:.0f}%")
    return busy


def conditions(before: str, after: str) -> str:
    cpus = os.cpu_count() or 1
    start, end = _load(before), _load(after)
    # The run's own load shows in the load average at its end (about one CPU):
    # judge the machine by the load before it, and by other busy processes.
    busy = sorted(set(_busy(before) + _busy(after)))
    loaded = (start is not None and float(start) > 0.5) or bool(busy)
    summary = (
        f"1-minute load average {start} when the run started and {end} when it ended, "
        f"on {cpus} CPUs (the benchmark itself keeps about one CPU busy at a time)."
    )
    if loaded:
        summary += (
            " **Other processes were loading the machine during this run**"
            + (f" (busiest at the snapshots: {', '.join(busy)})" if busy else "")
            + ": absolute rates are lower and noisier than on an idle machine; the ratios pair"
            " variants measured seconds apart, which cancels most, not all, of it."
        )
    return f"""{summary}

<details><summary>uptime and top, before and after the run</summary>

```
{before}
---
{after}
```
</details>"""


def _missed(rows: list[Row], text: str) -> list[Row]:
    return [row for row in rows if row.status == "MISS" and text in row.measurement]


def _value(rows: list[Row], text: str) -> str:
    for row in rows:
        if text in row.measurement:
            return row.value
    return "?"


def analysis(rows: list[Row]) -> str:
    """One paragraph per family of missed targets, with what the profile says."""
    parts: list[str] = []
    if _missed(rows, "/ floor"):
        parts.append(
            "**No-op `tools/call` vs the bare-hypercorn floor.**  The floor does the least a"
            " server can: hypercorn parses the request (the same headers as ours: a session id"
            " and the protocol version), the app `json.loads` the body and sends a fixed result"
            " with two ASGI messages, about 10 µs of Python per call.  Driven in process (the"
            " ASGI app called directly, no sockets, 7 interleaved rounds of 2,000 calls,"
            " measured when this text was written), ours costs about 40 µs per"
            " non-cancellable no-op and 60 µs per cancellable one.  What the non-cancellable"
            " call adds is the MCP server itself: routing and the session and tenant lookups,"
            " the admission counters (per tenant and per server), JSON-RPC classification and"
            " the tool lookup, binding the arguments and building the tool's context, the"
            " result's encoding, and the response writer that keeps hypercorn's `send()` off a"
            " task that must end on time (hypercorn writes inside a shielded cancel scope a"
            " client that stops reading can hold forever; issue 9): a whole response the"
            " socket can take at once is written in the request's own task"
            " (`transports/http/inline.py`), anything else by a writer task.  Under wrk, py-spy"
            " puts our own Python at about 17 µs per call and hypercorn's writes through the"
            " writer at about 20 µs; the rest of the gap is Trio's scheduler: a request that"
            " runs longer leaves hypercorn's reader parked (h11 `PAUSED`) more often, which"
            " costs scheduler passes the floor never makes.  The cheap parts are lean (one"
            " parse, one tool lookup, no nursery, watcher or writer task and no SSE stream for"
            " a call that never suspends, the body read without a scheduling point when it is"
            " already queued, one `ioctl` to know a write cannot block); what is left is the"
            " work an MCP server does per call, so the 95% target is missed by the margin the"
            " rows show."
        )
    if _missed(rows, "cancellation layer"):
        scope = _value(rows, "`with trio.CancelScope(): pass`")
        parts.append(
            "**Cancellation layer.**  A no-op, cancellable or not, is answered with one JSON "
            "body written inline, with no task and no nursery of its own.  What a cancellable "
            "call adds, measured the same way in process by taking the pieces out one at a "
            "time: its `tracked()` cancel scope, about 7 µs per call in place (Trio's own enter "
            f"and exit of a bare `CancelScope` is {scope} in the tracked row above: two "
            "`@contextmanager` deadline checks and a cancel status per scope, which no caller "
            "can avoid); the registry's bookkeeping (its in-flight entry, token and "
            "current-request context variable), about 5 µs; the lazily committed response "
            "(`CallResponse`: SSE only once the call suspends, a disconnect watcher spawned into "
            "the "
            "app's service nursery only then, `transports/http/lazy.py`), about 5 µs.  That is "
            "about 20 µs of Python per call, and under wrk it costs the per-call share the row "
            "shows.  Each piece is the price of a call that can be cancelled at all (a scope to "
            "hard-cancel, a key a `notifications/cancelled` can find, a stream whose close is "
            "watched), so the 5% target is missed by that margin."
        )
    if _missed(rows, "at 64 / at 16"):
        parts.append(
            "**64 vs 16 connections.**  Everything runs on one Trio scheduler on one core: more"
            " connections mean more tasks per scheduler pass (per call, ours has more tasks and"
            " cancel scopes than the floor, see the profile), so ours can lose more than the"
            " floor as the run queue grows.  Read the row with the round spreads of the rate"
            " rows next to it: on a machine other processes were loading, one 2-second run of a"
            " variant can lose a third of its rate, and a scaling ratio compares two such runs."
        )
    if _missed(rows, "tool sees it"):
        parts.append(
            "**Cancel latency.**  The p50 is the path itself: the notification is parsed,"
            " routed to its session and sets the flag in the scheduler pass that receives it"
            " (compare it with the MCP SDK's row, measured by the same client).  The p99 is one"
            " sample in a hundred on a two-core virtual machine whose server core also runs the"
            " kernel's loopback traffic for both ends: it moves from run to run far more than"
            " the p50 does (`python3 dev.py bench --only latency` repeats just this benchmark)."
            "  Compare it with the MCP SDK's p99 too: where ours is the higher, part of the"
            " tail is in our path, not only in the machine.  The tail was not profiled down to"
            " one cause."
        )
    if _missed(rows, "RSS growth"):
        floor = _value(rows, "floor (bare hypercorn")
        added = _value(rows, "ours - floor")
        parts.append(
            "**Memory per in-flight call.**  The floor row is hypercorn alone holding an SSE"
            f" stream open for a waiting call: {floor} per call (connection, h11 state, the ASGI"
            " request task and its channels), which is already over the 20 KiB target before"
            f" any MCP server runs.  What the library adds is {added}.  A tracemalloc diff of the"
            " server at 1,000 slow calls (the servers' `stats` tool, actions `tm-start` and"
            " `tm-top`) put the Python heap growth at about 37 KB per call for ours and 21 KB"
            " for the floor, the difference being: the coroutine frames of the request path"
            " and the response writer's queue (`transports/http/answer.py` and `writer.py`,"
            " about 5 KB); two more"
            " Trio tasks, the disconnect watcher (which a suspended call needs; it runs in the"
            " app's service nursery) and the response writer (a streamed response's writes may"
            " block, so they are kept off the request, see above), with their cancel statuses"
            " (about 4.5 KB); the decoded request headers, kept for the call's life (about 1"
            " KB); the dispatch's and the tool's frames, the registry entry, exchange and tool"
            " context (about 1.5 KB).  None of it is a leak (the count returns to the baseline"
            " when the calls"
            " end, see the hostile benchmark); it is what a call in flight is made of."
            "  The MCP SDK on uvicorn holds more per call (its row)."
        )
    notes = _observations(rows)
    if not parts:
        return "None: every target was met in this run.\n" + notes
    return "\n\n".join(parts) + "\n" + notes


def _observations(rows: list[Row]) -> str:
    """Facts about the comparison servers that the rows show but do not say."""
    found = []
    for row in rows:
        if "MCP SDK" in row.measurement and "stream close" in row.measurement:
            if row.value.startswith("never"):
                found.append(
                    "The MCP SDK did not cancel a single tool whose client closed its stream"
                    f" ({row.value}; stateful session, SSE responses): an abandoned call ran"
                    " on as if its client were still there."
                )
        if "MCP SDK `MCPServer` on uvicorn" in row.measurement and row.value.startswith("1: "):
            first = row.value.split(",")[0].split(": ")[1]
            if float(first.replace(",", "")) < 100:
                found.append(
                    f"The MCP SDK on uvicorn answers only {first} calls/s on one connection"
                    " (about 45 ms a call): a small-write stall (Nagle's algorithm meeting"
                    " delayed ACKs).  The harness hands uvicorn a socket made with"
                    " `IPPROTO_TCP` so that asyncio sets `TCP_NODELAY` on its connections"
                    " (`benchmarks/_servers.py`); a stall here means that no longer holds,"
                    " and the SDK's ratios at 1 connection say little."
                )
    if not found:
        return ""
    return "\n## Other observations\n\n" + "\n\n".join(found) + "\n"
