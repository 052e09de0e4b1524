"""The servers the end-to-end benchmarks drive, each in a process of its own.

``python -m benchmarks._servers KIND`` binds 127.0.0.1 on an ephemeral port,
prints ``READY <port>`` on stdout and serves until terminated.  Kinds:

* ``floor``: hypercorn's Trio worker and a minimal ASGI app that reads the
  body, parses the JSON-RPC request and answers a no-op tool result as JSON.
  Nothing can serve a ``tools/call`` over hypercorn for less: it is the
  floor every other row is a ratio of.
  ``floor-patched``: the same with hypercorn's per-request idle-timeout
  task replaced by one watcher per connection (``transports/http/
  hypercorn_idle.py``, which ``ours`` gets too; proposed upstream in
  ``docs/upstream/hypercorn-idle-timeout.md``): what the floor becomes
  once hypercorn takes the patch.  Nothing else of ours is applied.
  ``floor-httptools``: the floor app on the opt-in httptools protocol
  (``serve(http="httptools")``), for :mod:`benchmarks.eval_httptools`.
* ``ours``: :class:`~trio_mcp_cancel.http.McpHttpApp` on the same hypercorn
  worker, with the same ``Config``; both eras on one endpoint.
  ``ours-httptools``: the same with ``serve(http="httptools")``, the opt-in
  HTTP/1.1 parser (the ``httptools`` extra).
* ``sdk-uvicorn``: the official MCP Python SDK (``mcp`` 2.x, ``MCPServer``,
  its streamable HTTP app, stateful sessions, SSE responses) on plain
  uvicorn (``loop="asyncio"``, ``http="h11"``: its pure-Python defaults).
  ``sdk-uvicorn-standard`` (and ``-json``, ``-json-stateless``): the same on
  uvicorn[standard] (``loop="uvloop"``, ``http="httptools"``, from the
  folder :mod:`benchmarks._standard` installs and puts on this process's path).
  ``sdk-uvicorn-json``: the same with ``json_response=True`` (one JSON body
  per call, the SDK's fastest mode); ``sdk-uvicorn-json-stateless``: that
  and ``stateless_http=True`` (no ``initialize``, no session).
* ``sdk-hypercorn`` (and ``-json``, ``-json-stateless``): the same SDK apps
  on hypercorn's Trio worker (anyio on its Trio backend).

Every server has the same tools: ``noop`` (returns ``"ok"``; ours also has
``noop_fast``, the same body registered ``cancellable=False``), ``slow``
(reports progress 1, so the client knows it runs, then waits to be
cancelled and records, by ``time.perf_counter()`` -- ``CLOCK_MONOTONIC``,
shared by every process -- when it saw the cancellation), and ``stats``
(calls counted, cancellation times seen, and a cProfile switch).  Limits
that would refuse 10,000 concurrent calls are raised: that many in flight is
what the memory benchmark measures.
"""

from __future__ import annotations

import cProfile
import gc
import json
import socket
import sys
import time
from functools import partial
from typing import Any

import trio

from trio_mcp_cancel import RequestCancelledEvent, cancelled, checkpoint_cancelled, open_registry
from trio_mcp_cancel.http import HttpLimits, McpHttpApp
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer, ServerLimits

#: Tool calls answered, per tool; cancellation times seen, per ``key``.
CALLS: dict[str, int] = {}
SEEN: dict[str, float] = {}
PROFILE: dict[str, Any] = {}
IN_FLIGHT = 0


def _count(tool: str) -> None:
    CALLS[tool] = CALLS.get(tool, 0) + 1


def _stats(action: str, path: str) -> dict[str, Any]:
    """The ``stats`` tool: counters, or start/stop a profile of this process."""
    if action == "profile-start":
        profile = cProfile.Profile()
        PROFILE["p"] = profile
        profile.enable()
    elif action == "profile-stop":
        profile = PROFILE.pop("p")
        profile.disable()
        profile.dump_stats(path)
    elif action == "reset":
        CALLS.clear()
        SEEN.clear()
    elif action == "tm-start":
        import tracemalloc

        tracemalloc.start(int(path or 8))  # path: frames kept per traceback
        PROFILE["tm"] = tracemalloc.take_snapshot()
    elif action == "tm-top":
        import tracemalloc

        gc.collect()
        before, after = PROFILE.pop("tm"), tracemalloc.take_snapshot()
        if path:  # both snapshots, for benchmarks.memory_sites
            before.dump(path + ".before")
            after.dump(path)
            with open(path + ".json", "w") as file:
                json.dump({"before": path + ".before"}, file)
        PROFILE["top"] = _allocations(after.compare_to(before, "traceback"))
    elif action == "gc":
        gc.collect()
    return {
        "calls": dict(CALLS),
        "seen": dict(SEEN),
        "in_flight": IN_FLIGHT,
        "top": PROFILE.pop("top", ""),
    }


def _allocations(diff: list[Any], n: int = 12) -> str:
    """The largest Python heap growths of a tracemalloc comparison, and their total."""
    lines = [f"total {sum(d.size_diff for d in diff):,} bytes in {len(diff):,} tracebacks"]
    for d in diff[:n]:
        where = " <- ".join(
            f"{frame.filename.rsplit('site-packages/', 1)[-1]}:{frame.lineno}"
            for frame in reversed(d.traceback[-4:])
        )
        lines.append(f"{d.size_diff:,} bytes, {d.count_diff:,} blocks: {where}")
    return "\n".join(lines)


def _hypercorn_config() -> Any:
    from hypercorn.config import Config

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.accesslog = None
    config.backlog = 4096
    return config


async def _serve_hypercorn_trio(app: Any, http: str = "h11") -> None:
    from hypercorn.trio import serve

    from trio_mcp_cancel.transports.http import hypercorn_httptools

    config = hypercorn_httptools.choose(_hypercorn_config(), http)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config))
        print("READY", binds[0].rsplit(":", 1)[1], flush=True)


# -- floor -------------------------------------------------------------------


async def floor_app(scope: Any, receive: Any, send: Any) -> None:
    """Parse one JSON-RPC request, answer a no-op tool result; nothing else."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = _queued(receive) or await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    request = json.loads(body)
    if request["params"]["name"] == "slow":  # the memory benchmark's reference
        await _floor_slow(request, receive, send)
        return
    if request["params"]["name"] == "stats":  # the harness's counters (not timed)
        text = json.dumps(_stats(**request["params"]["arguments"]))
    else:
        _count("noop")
        text = "ok"
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    reply = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(reply))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": reply})


def _queued(receive: Any) -> Any:
    """The next ASGI message if hypercorn queued it already (no scheduling point), else None.

    The same shortcut ours takes (``receive_now`` in ``transports/http/hypercorn_compat.py``),
    so the floor stays the least a server can do on hypercorn.
    """
    try:
        return receive.__self__.receive_nowait()
    except (AttributeError, trio.WouldBlock):
        return None


async def _floor_slow(request: Any, receive: Any, send: Any) -> None:
    """An SSE stream with one progress event, open until the client goes.

    The least any server holds for a call in flight on hypercorn: the
    connection, the ASGI request task and its stream, waiting on receive().
    """
    global IN_FLIGHT
    token = request["params"].get("_meta", {}).get("progressToken")
    progress = {"progressToken": token, "progress": 1}
    event = {"jsonrpc": "2.0", "method": "notifications/progress", "params": progress}
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    data = b"event: message\ndata: " + json.dumps(event).encode() + b"\n\n"
    await send({"type": "http.response.body", "body": data, "more_body": True})
    IN_FLIGHT += 1
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    finally:
        IN_FLIGHT -= 1


def _patch_idle_timer() -> None:
    """hypercorn's Trio ``TCPServer`` with the idle-timer patch only (``floor-patched``)."""
    from hypercorn.trio.tcp_server import TCPServer

    from trio_mcp_cancel.transports.http import hypercorn_idle

    why = hypercorn_idle.apply(TCPServer)
    if why:
        raise SystemExit(f"floor-patched: {why}")


# -- ours --------------------------------------------------------------------


def _ours_app(registry: Any, resume: bool = True) -> Any:
    server = McpServer("bench", limits=ServerLimits(max_calls=None, max_calls_per_tenant=None))
    waiting: dict[tuple[str, object], trio.Event] = {}

    @server.tool()
    async def noop(ctx: Context) -> str:
        _count("noop")
        return "ok"

    @server.tool(cancellable=False)
    async def noop_fast(ctx: Context) -> str:
        _count("noop_fast")
        return "ok"

    @server.tool()
    async def slow(ctx: Context, key: str) -> str:
        """Wait to be cancelled; note when the flag was seen."""
        global IN_FLIGHT
        IN_FLIGHT += 1
        flagged = waiting[(ctx.namespace, ctx.request_id)] = trio.Event()
        try:
            await ctx.report_progress(1)
            with trio.move_on_after(600):
                await flagged.wait()  # set by the registry's event, see on_event
                SEEN[key] = time.perf_counter()
                assert cancelled()
                await checkpoint_cancelled()  # raises RequestCancelled: the stream ends
            return "not cancelled"
        finally:
            IN_FLIGHT -= 1
            waiting.pop((ctx.namespace, ctx.request_id), None)

    @server.tool(cancellable=False)
    async def stats(ctx: Context, action: str = "", path: str = "") -> str:
        return json.dumps(_stats(action, path))

    def on_event(event: object) -> None:
        # The flag is set synchronously with this event; the tool, a task
        # like any polling tool, sees it on its next scheduler pass.
        if isinstance(event, RequestCancelledEvent):
            flagged = waiting.get((event.namespace, event.request_id))
            if flagged is not None:
                flagged.set()

    registry.events.subscribe(on_event)
    return McpHttpApp(
        server,
        registry,
        limits=ConnectionLimits(max_concurrent_calls=100_000, keepalive_interval=None),
        http_limits=HttpLimits(max_sessions_per_tenant=1000),
        **({} if resume else {"resume_window": None}),
    )


async def _serve_ours(resume: bool = True, http: str = "h11") -> None:
    async with open_registry() as registry:
        await _serve_hypercorn_trio(_ours_app(registry, resume), http)


def _sdk_app(kind: str) -> Any:
    """The SDK app a kind names: ``sdk-<server>[-standard][-json][-stateless]`` (default: SSE,
    session)."""
    from ._sdk_server import app

    flags = kind.split("-")[2:]
    return app(json_response="json" in flags, stateless="stateless" in flags)


def _serve_sdk_uvicorn(kind: str) -> None:
    import uvicorn

    # proto=IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on
    # sockets whose proto says TCP (``base_events._set_nodelay``), and the
    # accepted ones inherit it.  Without it every response written in two
    # pieces (headers, body) waits for the client's delayed ACK: 40 ms, the
    # "23 calls/s at one connection" an earlier RESULTS.md reported for the
    # SDK, a harness artefact, not the SDK's.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    standard = "standard" in kind.split("-")
    config = uvicorn.Config(
        _sdk_app(kind),
        log_level="warning",
        access_log=False,
        lifespan="on",
        backlog=4096,
        loop="uvloop" if standard else "asyncio",
        http="httptools" if standard else "h11",
    )
    print("READY", sock.getsockname()[1], flush=True)
    uvicorn.Server(config).run(sockets=[sock])


def main(kind: str) -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if kind == "floor":
        trio.run(_serve_hypercorn_trio, floor_app)
    elif kind == "floor-httptools":  # the floor app with serve(http="httptools")'s protocol
        trio.run(_serve_hypercorn_trio, floor_app, "httptools")
    elif kind == "floor-patched":
        _patch_idle_timer()
        trio.run(_serve_hypercorn_trio, floor_app)
    elif kind == "ours":
        trio.run(_serve_ours)
    elif kind == "ours-httptools":  # serve(http="httptools"): the opt-in parser
        trio.run(_serve_ours, True, "httptools")
    elif kind == "ours-noresume":  # legacy streams not resumable: a close is the cancel
        trio.run(_serve_ours, False)
    elif kind.startswith("sdk-hypercorn"):
        trio.run(_serve_hypercorn_trio, _sdk_app(kind))
    elif kind.startswith("sdk-uvicorn"):
        _serve_sdk_uvicorn(kind)
    else:
        raise SystemExit(f"unknown server kind {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1])
