"""The prose of RESULTS.md that depends on the run: conditions, and why a target was missed."""

from __future__ import annotations

import os
import re

from ._common import Row

__all__ = ["analysis", "conditions", "shapes"]


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


#: What the httptools evaluation found (issue 35, ``python -m benchmarks.eval_httptools``).
HTTPTOOLS_NOTE = (
    "an HTTP/1.1 protocol for hypercorn's Trio worker on httptools (llhttp, in C, as the SDK's"
    " uvicorn[standard] parses) cut the server's instructions per no-op call by 22.9% (legacy,"
    " 2,240k -> 1,727k) and 22.3% (modern) under callgrind, and the floor's by 37%"
    " (`python -m benchmarks.eval_httptools`), more than the 15% issue 35 set for offering it:"
    ' it ships opt-in (`serve(http="httptools")`, `run --http httptools`, the `httptools`'
    ' extra), the same bytes on the wire as h11\'s path, and its rows (`http="httptools"`)'
    " compare it with the SDK on the same parser.  h11 stays the default, so the target rows"
    " are ours as installed by default."
)


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
            " with two ASGI messages, about 10 µs of Python per call.  Issue 27's pass cut what"
            " ours does per call to the MCP server's own work: a call that never suspends makes"
            " no response writer or queue (`transports/http/answer.py`, `CallResponse`), and"
            " its whole reply goes out in one socket write on hypercorn's"
            " HTTP/1.1 (`hypercorn_compat.send_whole`: the bytes hypercorn writes in three,"
            " with one send lock, one syscall and one scheduling point instead of three; the"
            " floor's app goes through hypercorn's own three); the body hypercorn queued is"
            " taken without a coroutine or a cancel scope; tracking is a plain `with`; the"
            " tool's context is built without a coroutine.  What remains is listed stage by"
            " stage in the per-call counts above and the profile: the head rules (origin,"
            " accept, content type and length, the head's size), routing and the session"
            " lookup, the admission counters, JSON-RPC classification and the tool lookup,"
            " argument binding and the tool's context, the tracked cancel scope and registry"
            " entry (next paragraph), the result's encoding, and one `ioctl` to know the write"
            " cannot block.  None of it can go without losing a feature a no-op still needs"
            " (limits, tenants, cancellation), so the 95% target is missed by the margin the"
            " rows show; against the MCP SDK on uvicorn, the headline, ours is ahead in the"
            " rows above."
        )
    if _missed(rows, "sdk-uvicorn-standard"):
        parts.append(
            "**Ours vs the MCP SDK on uvicorn[standard].**  The SDK's server on"
            " `uvicorn[standard]` parses HTTP/1.1 in C (httptools, llhttp) and runs its event"
            " loop in C (uvloop, libuv); ours parses with h11 and schedules with Trio, both"
            " pure Python.  The profile below says what that costs per call: the columns"
            " hypercorn + h11 and Trio are the two places a C server does the same work for"
            " a fraction, and together they are most of a no-op call.  What issue 35 cut at"
            " its cause: hypercorn's keep-alive timer, which started a Trio task on every"
            " request, is one watcher per connection whose deadline moves"
            " (`transports/http/hypercorn_idle.py`, proposed upstream in"
            " `docs/upstream/hypercorn-idle-timeout.md`: one task and five scheduler steps"
            " fewer per request, 0.78x the floor's instructions); a call in flight holds"
            " fewer frames and allocates about a quarter fewer bytes.  The parser:"
            f" {HTTPTOOLS_NOTE}  What is left is Trio's own per-task and per-cancel-scope"
            " work (the Trio column), which no server on Trio avoids; a row is missed by the"
            " margin it shows, and the SDK on plain uvicorn (asyncio, h11), the same pure"
            " Python parser as ours, is behind ours in its rows."
        )
    if _missed(rows, "per-worker efficiency"):
        parts.append(
            "**Workers.**  The target (2 workers >= 0.85 x 2 x one) assumes the load"
            " generator on a core of its own; this machine has two cores, so the second"
            " worker shares its core with wrk and redis-server (the core layout row).  The"
            ' "where it goes" rows split the efficiency into two factors measured from'
            " CPU time, not from rates: the cores the two workers got (what the layout leaves"
            " them: wrk's and Redis's CPU is taken from the second worker's core) and the"
            " calls per worker CPU-second with a sibling against alone (what the library"
            " costs a worker for having a sibling: the shared listening socket, and on Redis"
            " the traffic that keeps sessions, cancels and tasks visible to both).  When the"
            " second factor is near 1.00 the shortfall is the machine's, not the library's:"
            " on three cores the same two workers would reach the product's second factor."
        )
    if _missed(rows, "cancellation layer"):
        scope = _value(rows, "`with trio.CancelScope(): pass`")
        parts.append(
            "**Cancellation layer.**  A no-op, cancellable or not, is answered the same way:"
            " one whole JSON response written in the request's task, with no task, nursery or"
            " response object of its own.  What a cancellable call adds is what makes it"
            " cancellable: its `tracked()` cancel scope (Trio's own enter and exit of a bare"
            f" `CancelScope` is {scope} in the tracked row above: two `@contextmanager`"
            " deadline checks and a cancel status per scope, which no caller can avoid); the"
            " registry's in-flight entry, its private token and the current-request context"
            " variable; and the check whether the call suspends (`answer.await_then`, which"
            " starts the disconnect watcher only then).  A key a `notifications/cancelled` can"
            " find, a scope to hard-cancel and a stream whose close is watched are the price of"
            " a call that can be cancelled at all; the row shows what they cost per call under"
            " wrk, with its round spread."
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
            f" request task and its channels).  What the library adds is {added} (19.7 KiB"
            " before issue 27, about 14 KiB before issue 35).  The load-independent measure is"
            " `python -m benchmarks.memory_sites 1000`: the tracemalloc heap growth per"
            " in-flight call, charged to the innermost frame of this library that allocated it"
            " (30.5 KB at 1,000 calls when this text was written, 34.5 KB before issue 35,"
            " 40.3 KB before issue 27, 21.7 KB for the floor).  What issue 35 took out: a"
            " suspended call's await chain is now three frames (`__call__`,"
            " `Responder._stream`, `await_then`): the request's routing, body and admission"
            " frames have returned before the call runs, and the dispatch layers return the"
            " coroutine to await instead of awaiting it in a frame of their own; the tool's"
            " per-call closure and `functools.partial` are gone; a key in flight holds its"
            " request directly (a dict only when duplicates share the key); header names and"
            " repeating values are decoded once and shared.  What the rest is: the"
            " disconnect watcher, one Trio task in the service nursery waiting on `receive()`"
            " for `http.disconnect` with its wait's cancel scope (about 3.2 KB), which also"
            " sends keep-alives and enforces the time limit and the write stall; the tool's"
            " context, its tracked cancel scope and registry entry (about 3.5 KB); the"
            " resumable stream with the one progress event it holds for a replay; and the"
            " benchmark's own `slow` tool, whose event and `move_on_after` scope (about 1.9 KB)"
            " the floor's app does not have.  None of it is a leak (the count returns to the"
            " baseline when the calls end, see the hostile benchmark).  What is left to cut,"
            " measured: the watcher task, by a disconnect callback from `hypercorn_compat` and"
            " one timer for the app's keep-alives and limits instead of one task per call"
            " (about 3 KB, enough for the target).  The MCP SDK on uvicorn holds more per call"
            " (its row)."
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
            # "1: 2,049, 16: 2,030, 64: 1,882": the entries are ", "-separated.
            first = row.value.split(", ")[0].split(": ")[1]
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


#: Shapes of the code whose comments give only the reason; the figures behind them, with
#: how each was measured, so they are re-measured here rather than trusted in a comment.
_SHAPES: tuple[tuple[str, str], ...] = (
    (
        "A cancellable HTTP call runs in the request's own task and starts its disconnect"
        " watcher only when it first suspends (`transports/http/answer.py`, `await_then`)",
        "a watcher task spawned for every call instead adds 20 Python calls to a no-op modern"
        " `tools/call` (345 to 365, +5.8%, `python -m benchmarks.percall`) before the task"
        " has even run; its run and exit come on top.  Trio has no hook for a task's first"
        " suspension, hence the small coroutine driver.",
    ),
    (
        "One response object per call (`answer.CallResponse`), its writer and queue made on"
        " first need",
        "when `_CallRun` and the `CallResponse` it made became one object (and its three"
        " bound-method callbacks went), the heap per suspended call went from 34,587 to"
        " 34,251 bytes (`python -m benchmarks.memory_sites 300`); a no-op call makes no"
        " writer or queue at all (the per-call counts above).",
    ),
    (
        "The watcher holds one cancel scope at a time, the same one the request's end"
        " cancels (`CallResponse._watch`)",
        "each further scope, with its cancel status, was about 650 bytes of a suspended"
        " call (`memory_sites`, issue 27).",
    ),
    (
        "A streamed response is written on demand, by tasks that live only while something"
        " waits to be written (`transports/http/writer.py`, `ResponseWriter.start`)",
        "a writer task parked on an empty queue for a call's life was about 2.5 KB of each"
        " suspended call's heap (`memory_sites`, issue 27).",
    ),
    (
        "Queues exist only while something is queued (`transports/_outbox.py`); the replay"
        " buffer is a list cut in batches (`transports/http/resume.py`)",
        "an empty `collections.deque` is 760 bytes (`sys.getsizeof`, CPython 3.12), held by"
        " every suspended call whose client reads.",
    ),
    (
        "Per-request records are `attrs.define`, not frozen (`answer.Post`, `answer.Routed`)",
        "building a frozen attrs class of seven fields takes 3.4 times as long (`timeit`;"
        " its `__init__` goes through `object.__setattr__`).",
    ),
    (
        "A whole response that cannot block is written in the request's task, and on"
        " hypercorn's HTTP/1.1 in one socket write (`transports/http/hypercorn_compat.py`,"
        " `HypercornSink`)",
        "a writer task per response was the largest single item of the no-op call's profile"
        " before issue 27; `send_whole` makes one socket write, one send lock and one"
        " scheduling point of hypercorn's three (the profile's `socket writes` per call).",
    ),
)


def shapes() -> str:
    """The section of RESULTS.md that gives the measured reasons behind code shapes."""
    items = "\n".join(f"- **{shape}**: {why}" for shape, why in _SHAPES)
    return (
        "Code comments give reasons and invariants; the micro-costs behind a shape are"
        " kept here, with how they were measured, to be re-measured when the code"
        " changes.\n\n" + items + "\n"
    )
