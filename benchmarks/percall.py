"""Load-independent per-call costs of a no-op ``tools/call``, ours in process.

``python -m benchmarks.percall``: the benchmark server's app
(:func:`._servers._ours_app`) driven directly through ASGI (no socket, no
hypercorn, no wrk), so every number is a count, not a rate, and holds on a
busy machine: Python function calls per call (all, and into this library),
Trio checkpoints and awaits that reach the scheduler, and the bytes the call
allocates at its peak (tracemalloc).  Stages are the paths a call takes:
the dispatcher alone (what the memory and stdio transports share), then the
HTTP app in the modern stateless era and in a legacy session.  Run it before
and after a change to the hot path: the counts say what the change saved.
"""

from __future__ import annotations

import cProfile
import gc
import json
import math
import pstats
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any
from unittest import mock

import trio

from trio_mcp_cancel import open_registry
from trio_mcp_cancel.lowlevel import Caller
from trio_mcp_cancel.transports.http import hypercorn_compat

from ._client import INITIALIZE, LEGACY, MODERN, call_body
from ._common import post_scope
from ._servers import _ours_app

N = 2_000
#: Trio's scheduling points: a call to any of these may switch tasks.
_SCHEDULER = ("wait_task_rescheduled", "cancel_shielded_checkpoint", "checkpoint")


class _Asgi:
    """One HTTP request through the app: scope, a one-message body, the sent messages."""

    def __init__(self, app: Any, headers: dict[str, str]) -> None:
        self.app = app
        self.headers = [(b"host", b"127.0.0.1")] + [
            (k.encode(), v.encode())
            for k, v in {
                "accept": "application/json, text/event-stream",
                "content-type": "application/json",
                **headers,
            }.items()
        ]
        self.scope = post_scope(self.headers)
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, body: bytes) -> list[dict[str, Any]]:
        scope = {**self.scope}  # a fresh one each call, as a server makes; no call counted
        # A Trio memory channel, as hypercorn's Trio worker delivers a
        # request (so the app's hypercorn fast path for the body applies),
        # and in the two messages its HTTP/1.1 protocol queues for a body
        # read at once: the data, then an empty one that ends it.
        inbox, receive_channel = trio.open_memory_channel[dict[str, Any]](math.inf)
        inbox.send_nowait({"type": "http.request", "body": body, "more_body": True})
        inbox.send_nowait({"type": "http.request", "body": b"", "more_body": False})
        receive = receive_channel.receive
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await self.app(scope, receive, send)
        return sent


def _bodies(modern: bool) -> list[bytes]:
    return [call_body("noop", {}, modern=modern, progress=False) for _ in range(N)]


async def _measure(one: Callable[[int], Awaitable[object]]) -> dict[str, float]:
    for i in range(50):  # warm: caches, lazy imports, the first session lookups
        await one(i)
    gc.collect()
    profile = cProfile.Profile()
    profile.enable()
    for i in range(N):
        await one(i)
    profile.disable()
    raw = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    total = sum(nc for (_, nc, _, _, _) in raw.values())
    ours = sum(nc for (f, _, _), (_, nc, _, _, _) in raw.items() if "trio_mcp_cancel" in f)
    sched = sum(
        nc for (f, _, fn), (_, nc, _, _, _) in raw.items() if fn in _SCHEDULER and "trio" in f
    )
    batches = []
    for _ in range(5):  # wall clock: the min of five batches (noisy on a busy machine)
        start = time.perf_counter()
        for i in range(N // 4):
            await one(i)
        batches.append((time.perf_counter() - start) / (N // 4))
    tracemalloc.start()
    peaks = []
    for i in range(200):
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        await one(i)
        peaks.append(tracemalloc.get_traced_memory()[1] - before)
    tracemalloc.stop()
    peaks.sort()
    _LAST_PROFILE[0] = raw
    return {
        "calls": total / N,
        "library calls": ours / N,
        "scheduler calls": sched / N,
        "peak bytes": peaks[len(peaks) // 2],
        "µs (min of 5 batches)": min(batches) * 1e6,
    }


#: The raw profile of the stage measured last (for :func:`_breakdown`).
_LAST_PROFILE: list[Any] = [None]
#: Each HTTP stage's per-stage µs, as :func:`_breakdown` writes them.
_BREAKDOWN: dict[str, str] = {}

#: The stages of one HTTP call, as (label, [(file suffix, function)], [subtracted]).
_STAGES: tuple[tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]], ...] = (
    (
        "head rules (size, origin, accept, content type and length)",
        (
            ("http/rules.py", "request_headers"),
            ("http/rules.py", "check_origin"),
            ("http/rules.py", "check_accept"),
            ("http/rules.py", "check_content_type"),
            ("http/rules.py", "check_content_length"),
        ),
        (),
    ),
    ("body read", (("http/app.py", "take_queued"), ("http/app.py", "_read_rest")), ()),
    ("JSON decode", (("_protocol/jsonrpc.py", "decode"),), ()),
    (
        "routing and the session or envelope (less classification)",
        (("http/legacy.py", "route"), ("http/modern.py", "route")),
        (("_protocol/dispatcher.py", "prepare"),),
    ),
    ("classification and tool lookup", (("_protocol/dispatcher.py", "prepare"),), ()),
    (
        "admission (take, release)",
        (("_protocol/dispatcher.py", "admit"), ("_protocol/dispatcher.py", "release")),
        (),
    ),
    ("argument binding (pydantic)", (("_protocol/tools.py", "bind"),), ()),
    ("the tool's context", (("_protocol/context.py", "new_context"),), ()),
    (
        "tracking (cancel scope, registry entry, current request)",
        (("_core/registry.py", "__enter__"), ("_core/registry.py", "__exit__")),
        (),
    ),
    ("the tool's result", (("_protocol/tools.py", "result"),), ()),
    ("reply encoding", (("_protocol/jsonrpc.py", "encode"),), ()),
    ("writing (the whole response)", (("http/writer.py", "respond"),), ()),
)


def _breakdown(raw: Any, per_call_us: float) -> str:
    """Per-call µs of each stage: its share of the call's inclusive profile time, times the
    measured µs (cProfile weighs every Python call the same, so a stage of many small calls
    is over-counted a little; the shares, not the digits, are the information)."""

    def inclusive(names: tuple[tuple[str, str], ...]) -> float:
        return sum(
            ct
            for (f, _, fn), (_, _, _, ct, _) in raw.items()
            if any(f.endswith(suffix) and fn == name for suffix, name in names)
        )

    whole = inclusive((("benchmarks/percall.py", "__call__"),)) or 1.0
    parts = []
    counted = 0.0
    for label, names, minus in _STAGES:
        share = max(0.0, inclusive(names) - inclusive(minus)) / whole
        counted += share
        parts.append(f"{label} {share * per_call_us:.1f}")
    parts.append(
        f"the rest (the app's and dispatcher's own frames, the harness) "
        f"{max(0.0, 1 - counted) * per_call_us:.1f}"
    )
    return "; ".join(parts)


async def _stages() -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    async with open_registry() as registry:
        app = _ours_app(registry)
        async with trio.open_nursery() as nursery:
            lifespan: trio.MemorySendChannel[dict[str, Any]]
            lifespan, inbox = trio.open_memory_channel[dict[str, Any]](1)
            started = trio.Event()

            async def lifespan_send(message: dict[str, Any]) -> None:
                started.set()

            nursery.start_soon(app, {"type": "lifespan"}, inbox.receive, lifespan_send)
            await lifespan.send({"type": "lifespan.startup"})
            await started.wait()

            dispatcher = app.dispatcher
            caller = Caller("session:0123456789abcdef", registry)
            messages = [json.loads(b) for b in _bodies(False)]

            async def direct(i: int) -> object:
                return await dispatcher.handle(messages[i % N], caller)

            out["dispatcher.handle (memory/stdio path)"] = await _measure(direct)

            modern = _Asgi(
                app,
                {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "noop"},
            )
            bodies = _bodies(True)

            async def stateless(i: int) -> object:
                sent = await modern(bodies[i % N])
                assert b'"ok"' in sent[-1]["body"] or b'"ok"' in sent[-2].get("body", b""), sent
                return sent

            out["HTTP modern stateless"] = await _measure(stateless)
            _BREAKDOWN["HTTP modern stateless"] = _breakdown(
                _LAST_PROFILE[0], out["HTTP modern stateless"]["µs (min of 5 batches)"]
            )

            sent = await _Asgi(app, {})(INITIALIZE)
            session = dict(sent[0]["headers"])[b"mcp-session-id"].decode()
            headers = {"mcp-protocol-version": LEGACY, "mcp-session-id": session}
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await _Asgi(app, headers)(json.dumps(note).encode())
            legacy = _Asgi(app, headers)
            lbodies = _bodies(False)

            async def session_call(i: int) -> object:
                return await legacy(lbodies[i % N])

            out["HTTP legacy session"] = await _measure(session_call)
            _BREAKDOWN["HTTP legacy session"] = _breakdown(
                _LAST_PROFILE[0], out["HTTP legacy session"]["µs (min of 5 batches)"]
            )
            await lifespan.send({"type": "lifespan.shutdown"})
            nursery.cancel_scope.cancel()
    return out


def report(quick: bool = False) -> str:
    """The markdown lines for RESULTS.md: one per stage.

    The harness's ``send`` is not hypercorn's, so :func:`~trio_mcp_cancel.transports.http.
    hypercorn_compat.can_write_now` would say no and every response would go through a writer task,
    which under hypercorn (an idle HTTP/1.1 socket) a whole response does not: it says yes
    here, as hypercorn's socket would (the one-write ``send_whole`` still needs hypercorn's
    own objects, so the harness gets the two ``send()`` calls).
    """
    lines = []
    yes = staticmethod(lambda send, size: True)
    with mock.patch.object(hypercorn_compat.HypercornSink, "can_write_now", yes):
        stages = trio.run(_stages)
    for stage, numbers in stages.items():
        line = ", ".join(f"{k} {v:,.1f}" for k, v in numbers.items())
        lines.append(f"- {stage}: {line}")
    for stage, text in _BREAKDOWN.items():
        lines.append(f"- {stage}, µs per stage: {text}")
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.stdout.write(report())
    sys.stdout.flush()


if __name__ == "__main__":
    main()
