"""Hostile and broken clients over real sockets on 127.0.0.1 (issue 9).

Each failure here lives in the socket layer, so the in-memory ASGI harness
cannot show it: a client that stops reading (the kernel's buffers fill and
hypercorn's shielded write blocks), a client that never finishes its body,
one address or principal opening sessions in a loop, more calls than the
server's caps.  The server is hypercorn's Trio worker serving
:class:`McpHttpApp` with its lifespan (so responses go through the app's
writer tasks), with small timeouts so that every test takes about a second.

Real clock, ``trio.fail_after`` on every test; time bounds carry a wide
margin (the machines have two noisy cores): they tell "bounded" from "hung",
not fast from slow.  Tests that could hang on a shielded write close the
stuck client's socket on the way out, so a regression fails instead.

Two tests pin down bugs found here: a client given up on while its
response head was being written crashed hypercorn's ``serve()``, and a
session flood tied with its victim evicted the victim's idle session.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import httpx
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from trio_mcp_cancel import (
    HardCancelEvent,
    OverrunEvent,
    Registry,
    RegistryConfig,
    RequestCancelledEvent,
    checkpoint_cancelled,
    open_registry,
)
from trio_mcp_cancel.http import HttpLimits, McpHttpApp, bearer_auth
from trio_mcp_cancel.lowlevel.wire import LEGACY_TOO_MANY_REQUESTS, TOO_MANY_REQUESTS, Era
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer, ServerLimits
from trio_mcp_cancel.testing import EventRecorder, assert_no_leaks

from _support.asgi import (
    headers_of,
    initialize_message,
    legacy_call,
    legacy_headers,
    modern_call,
    modern_headers,
    modern_request,
    notification,
    request,
)
from _support.plain_asgi import ALSO_PLAIN_ASGI, asgi_paths  # noqa: F401 (a fixture)

GRACE = 0.2
WRITE_TIMEOUT = 0.5
BODY_TIMEOUT = 0.5
GRACEFUL = 0.5
#: Slack on every time bound: scheduling on two noisy cores, not the feature.
MARGIN = 1.5
TIMEOUT = 15
RCVBUF = 4096
#: How long the app lets a request's disconnect watcher outlive its response.
WATCHER_LINGER = 1.0
BIG = 20_000
"""Bytes of one progress message of the ``flood`` tool."""

TOKENS = {"tok-alice": "alice", "tok-mallory": "mallory"}
#: The registry settings of the tests served by ``setup`` (a marker on each such test).
SHORT_GRACE = pytest.mark.mcp_registry(grace_period=GRACE, overrun_margin=0.5)


# -- the server under test ---------------------------------------------------------


@attrs.define(eq=False)
class Probe:
    """What the tools saw, for the assertions."""

    flood_started: trio.Event = attrs.field(factory=trio.Event)
    flood_sent: int = 0
    flood_ended: list[tuple[float, str | None]] = attrs.field(factory=list)
    """``(when, cancellation kind)`` of every ``flood`` call that ended."""
    release: trio.Event = attrs.field(factory=trio.Event)
    holding: int = 0


def make_server(probe: Probe, **caps: Any) -> McpServer:
    server = McpServer("hostile", **caps)

    @server.tool()
    async def flood(ctx: Context, size: int = BIG, delay: float = 0.005) -> str:
        """Emit big progress messages until stopped; never polls the flag."""
        probe.flood_started.set()
        try:
            while True:
                probe.flood_sent += 1
                await ctx.report_progress(probe.flood_sent, message="x" * size)
                await trio.sleep(delay)
        finally:
            cancellation = ctx.request.cancellation
            kind = None if cancellation is None else cancellation.kind
            probe.flood_ended.append((trio.current_time(), kind))

    @server.tool()
    async def hold(ctx: Context) -> str:
        """Run (polling the flag) until the test releases every held call."""
        probe.holding += 1
        try:
            while not probe.release.is_set():
                await checkpoint_cancelled()
                await trio.sleep(0.01)
        finally:
            probe.holding -= 1
        return "released"

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    @server.tool()
    async def count(ctx: Context, n: int = 3, delay: float = 0.01) -> str:
        for i in range(1, n + 1):
            await checkpoint_cancelled()
            await trio.sleep(delay)
            await ctx.report_progress(i, total=n)
        return f"counted {n}"

    return server


@attrs.frozen
class Served:
    url: str
    port: int


@attrs.define(eq=False)
class Returns:
    """An ASGI middleware noting when each HTTP request's app call returned."""

    app: McpHttpApp
    returned: list[tuple[object, float]] = attrs.field(factory=list)
    """``(JSON-RPC id or None, when)``, in order."""
    _pending: int = 0
    _blocked_since: float | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        seen: list[object] = []

        async def timed_send(message: Any) -> None:
            self._pending += 1
            if self._blocked_since is None:
                self._blocked_since = trio.current_time()
            try:
                await send(message)
            finally:
                self._pending -= 1
                self._blocked_since = None

        async def peek() -> Any:
            message = await receive()
            if message.get("body"):
                try:
                    seen.append(json.loads(message["body"]).get("id"))
                except (ValueError, AttributeError):
                    pass
            return message

        try:
            await self.app(scope, peek, timed_send)
        finally:
            self.returned.append((seen[0] if seen else None, trio.current_time()))

    def blocked_for(self) -> float:
        """How long the write now pending has been (0: none is); for one connection at a time."""
        since = self._blocked_since
        return 0.0 if since is None or not self._pending else trio.current_time() - since

    def returned_at(self, request_id: object) -> float | None:
        return next((at for rid, at in self.returned if rid == request_id), None)


@asynccontextmanager
async def serving(app: Returns) -> AsyncIterator[Served]:
    """Serve *app* with hypercorn (lifespan included) on a random port of 127.0.0.1."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.graceful_timeout = GRACEFUL
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, app, config)
        base = binds[0]
        yield Served(f"{base}/mcp", int(base.rsplit(":", 1)[1]))
        nursery.cancel_scope.cancel()


def over_defaults(given: Any, **defaults: Any) -> Any:
    """*given* settings (or the library's) with this file's *defaults* for what it left unset."""
    cls = type(given)
    unset = {k: v for k, v in defaults.items() if getattr(given, k) == getattr(cls(), k)}
    return attrs.evolve(given, **unset)


@asynccontextmanager
async def setup(
    registry: Registry, probe: Probe, *, caps: dict[str, Any] | None = None, **options: Any
) -> AsyncIterator[tuple[Served, Registry, Returns]]:
    """The app on *registry* (a test marked ``SHORT_GRACE``), hypercorn; no leaks at the end."""
    options["limits"] = over_defaults(
        options.get("limits", ConnectionLimits()), write_timeout=WRITE_TIMEOUT
    )
    options["http_limits"] = over_defaults(
        options.get("http_limits", HttpLimits()), body_timeout=BODY_TIMEOUT
    )
    app = Returns(McpHttpApp(make_server(probe, **(caps or {})), registry, **options))
    async with serving(app) as served:
        yield served, registry, app
    await registry.wait_idle()
    assert_no_leaks(registry)
    assert app.app.dispatcher.calls_in_flight == 0


# -- raw HTTP/1.1 clients ----------------------------------------------------------


async def connect(port: int, *, rcvbuf: int | None = None) -> trio.SocketStream:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        # Before connect(), so the window the client advertises stays small.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    await sock.connect(("127.0.0.1", port))
    return trio.SocketStream(sock)


def post_head(port: int, headers: dict[str, str], length: int) -> bytes:
    lines = ["POST /mcp HTTP/1.1", f"host: 127.0.0.1:{port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"content-length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def read_until_closed(stream: trio.SocketStream, limit: float) -> bytes:
    """What the server sends until it closes the connection; ``TooSlowError`` after *limit*."""
    data = bytearray()
    with trio.fail_after(limit):
        while True:
            try:
                chunk = await stream.receive_some(1 << 16)
            except trio.BrokenResourceError:  # reset: closed with unread data
                break
            if not chunk:
                break
            data += chunk
    return bytes(data)


def parse_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


# -- httpx helpers -----------------------------------------------------------------


def answer(response: httpx.Response) -> Any:
    """The JSON-RPC answer of a reply: its JSON body, or its SSE stream's last message."""
    if response.headers["content-type"] == "application/json":
        return response.json()
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return json.loads(data[-1]) if data else None


def text_of(response: httpx.Response) -> str:
    reply = answer(response)
    assert reply is not None and "result" in reply, (response.status_code, response.text[:500])
    content = reply["result"]["content"]
    assert isinstance(content[0]["text"], str)
    return content[0]["text"]


async def call_modern(client: httpx.AsyncClient, url: str, name: str, **arguments: Any) -> str:
    message = modern_call(1, name, arguments)
    response = await client.post(url, headers=headers_of(message), json=message)
    assert response.status_code == 200, (response.status_code, response.text[:500])
    return text_of(response)


async def init_session(client: httpx.AsyncClient, url: str, **headers: str) -> httpx.Response:
    return await client.post(
        url, headers={**legacy_headers(version=None), **headers}, json=initialize_message()
    )


async def open_session(client: httpx.AsyncClient, url: str, **headers: str) -> dict[str, str]:
    """A legacy session: its request headers."""
    reply = await init_session(client, url, **headers)
    assert reply.status_code == 200, reply.text
    session = {**legacy_headers(reply.headers["mcp-session-id"]), **headers}
    notified = await client.post(
        url, headers=session, json=notification("notifications/initialized")
    )
    assert notified.status_code == 202
    return session


def assert_refused(
    response: httpx.Response, status: int, limit: str, cap: int, era: Era = "legacy"
) -> None:
    """An over-the-limit answer: *status*, the *era*'s code with ``data.limit``, ``Retry-After``."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["retry-after"]) >= 1
    error = response.json()["error"]
    assert error["code"] == (TOO_MANY_REQUESTS if era == "modern" else LEGACY_TOO_MANY_REQUESTS)
    assert error["data"] == {"limit": limit, "max": cap}


async def wait_until(condition: Callable[[], bool]) -> None:
    while not condition():
        await trio.sleep(0.01)


# -- a. a client that stops reading ------------------------------------------------


@pytest.mark.parametrize(
    ("path", "options", "delay"),
    [
        # The queue behind the client overflows long before any write times out.
        ("too much unread output", {"max_buffered_bytes": 256 * 1024}, 0.002),
        # The queue could grow without bound: the pending write's age decides.
        ("write timeout", {"max_buffered_bytes": 1 << 30}, 0.02),
    ],
)
@ALSO_PLAIN_ASGI
@SHORT_GRACE
async def test_slow_reader_is_disconnected_and_others_are_served(
    path: str,
    options: dict[str, Any],
    delay: float,
    caplog: pytest.LogCaptureFixture,
    mcp_registry: Registry,
) -> None:
    caplog.set_level(logging.INFO, logger="trio_mcp_cancel.http")
    probe = Probe()
    with trio.fail_after(TIMEOUT):
        async with setup(mcp_registry, probe, limits=ConnectionLimits(**options)) as (
            served,
            registry,
            app,
        ):
            events = EventRecorder.attach(registry)
            cancelled_at: list[float] = []
            registry.events.subscribe(
                lambda e: (
                    cancelled_at.append(trio.current_time())
                    if isinstance(e, RequestCancelledEvent)
                    else None
                )
            )
            message = modern_call("stuck", "flood", {"delay": delay}, progress_token="p")
            body = json.dumps(message).encode()
            stuck = await connect(served.port, rcvbuf=RCVBUF)
            # Closed on the way out, even on failure: that ends a server stuck on it.
            async with stuck:
                started = trio.current_time()
                await stuck.send_all(post_head(served.port, headers_of(message), len(body)) + body)
                await probe.flood_started.wait()

                # A well-behaved client, all the while: answered, and promptly.
                rounds = 0
                slowest = 0.0
                async with httpx.AsyncClient(timeout=5) as client:
                    while app.returned_at("stuck") is None or rounds < 3:
                        t0 = trio.current_time()
                        assert await call_modern(client, served.url, "echo", text="hi") == "hi"
                        assert await call_modern(client, served.url, "count", n=3) == "counted 3"
                        slowest = max(slowest, trio.current_time() - t0)
                        rounds += 1
                        assert t0 - started < GRACE + WATCHER_LINGER + 4 * MARGIN, "never returned"
                assert slowest < MARGIN

                # The tool saw a "disconnect" cancellation and ended in the grace period.
                [(ended_at, kind)] = probe.flood_ended
                assert kind == "disconnect"
                [event] = events.of_type(RequestCancelledEvent)
                assert (event.request_id, event.kind, event.reason) == (
                    "stuck",
                    "disconnect",
                    "client stopped reading",
                )
                assert ended_at - cancelled_at[0] <= GRACE + MARGIN
                assert cancelled_at[0] - started <= WRITE_TIMEOUT + 2 * MARGIN
                # It ignored the flag, so the hard cancel stopped it; it did not overrun.
                assert [(e.request_id, e.kind) for e in events.of_type(HardCancelEvent)] == [
                    ("stuck", "disconnect")
                ]
                assert events.of_type(OverrunEvent) == []
                assert f"client stopped reading its response ({path})" in caplog.text

                # The request returned while the client still read nothing: nothing
                # waits on the blocked write.  Then the server closed the connection:
                # what the client finally reads ends, with no answer in it (MCP:
                # nothing after a cancellation).
                returned_at = app.returned_at("stuck")
                assert returned_at is not None
                assert returned_at - ended_at <= WATCHER_LINGER + MARGIN
                leftover = await read_until_closed(stuck, MARGIN)
                assert leftover.startswith(b"HTTP/1.1 200")
                assert b'"result"' not in leftover and b'"error"' not in leftover


# -- b. shutdown with a stuck client -----------------------------------------------


@pytest.mark.parametrize(
    ("write_timeout", "own_registry"),
    [(WRITE_TIMEOUT, False), (None, False), (None, True)],
    ids=["write timeout", "no write timeout", "app's own registry"],
)
async def test_graceful_shutdown_with_a_stuck_client(
    write_timeout: float | None, own_registry: bool
) -> None:
    """hypercorn's graceful shutdown ends even with a write blocked on a client that never reads."""
    probe = Probe()
    shutdown = trio.Event()
    with trio.fail_after(TIMEOUT):
        async with contextlib.AsyncExitStack() as stack:
            if own_registry:
                given = None
                config = RegistryConfig(grace_period=GRACE, overrun_margin=0.5)
            else:
                given = await stack.enter_async_context(
                    open_registry(grace_period=GRACE, overrun_margin=0.5)
                )
                config = None
            # No overflow either: only shutdown (or the write timeout) ends it.
            app = Returns(
                McpHttpApp(
                    make_server(probe),
                    given,
                    registry_config=config,
                    limits=ConnectionLimits(
                        write_timeout=write_timeout, max_buffered_bytes=1 << 30
                    ),
                )
            )
            hypercorn = Config()
            hypercorn.bind = ["127.0.0.1:0"]
            hypercorn.errorlog = None
            hypercorn.graceful_timeout = GRACEFUL
            bound = GRACEFUL + (write_timeout or 0) + GRACE + MARGIN
            rescued = False

            async def rescue(stuck: trio.SocketStream) -> None:
                # Should serve() hang in hypercorn's shielded write, close the
                # client's socket, which ends it, so the test fails instead of hanging.
                nonlocal rescued
                await trio.sleep(bound + 1)
                rescued = True
                stuck.socket.close()

            async with trio.open_nursery() as outer:
                async with trio.open_nursery() as nursery:
                    binds = await nursery.start(
                        partial(serve, app, hypercorn, shutdown_trigger=shutdown.wait)
                    )
                    registry = app.app.registry
                    port = int(binds[0].rsplit(":", 1)[1])
                    message = modern_call("stuck", "flood", {"delay": 0.005}, progress_token="p")
                    body = json.dumps(message).encode()
                    stuck = await connect(port, rcvbuf=RCVBUF)
                    await stuck.send_all(post_head(port, headers_of(message), len(body)) + body)
                    # A write is blocked on the client (in hypercorn's shielded
                    # send(), which only the connection's closing ends), and
                    # not yet for the write timeout.
                    await wait_until(lambda: app.blocked_for() >= 0.2)
                    assert probe.flood_ended == [] and registry.in_flight_count == 1
                    triggered = trio.current_time()
                    shutdown.set()
                    outer.start_soon(rescue, stuck)
                outer.cancel_scope.cancel()
            returned = trio.current_time() - triggered
            assert not rescued, "serve() hung until the stuck client's socket was closed"
            assert returned <= bound, f"serve() took {returned:.2f}s to return after shutdown"
            assert len(probe.flood_ended) == 1
            assert app.returned_at("stuck") is not None
            async with stuck:
                leftover = await read_until_closed(stuck, MARGIN)
            assert b'"result"' not in leftover
            assert_no_leaks(registry)


@ALSO_PLAIN_ASGI
@pytest.mark.mcp_registry(grace_period=GRACE)
@pytest.mark.slow
async def test_pipelined_requests_to_a_client_that_never_reads(mcp_registry: Registry) -> None:
    """One connection pipelines many small requests and reads nothing: the kernel's
    buffers fill with whole responses, the next head blocks, the app gives up on the
    client after ``write_timeout``; the server must survive that."""
    probe = Probe()
    crashed: list[BaseException] = []
    answers: list[str] = []
    with trio.fail_after(TIMEOUT):
        app = McpHttpApp(
            make_server(probe), mcp_registry, limits=ConnectionLimits(write_timeout=WRITE_TIMEOUT)
        )
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.errorlog = None

        async def run(task_status: trio.TaskStatus[list[str]]) -> None:
            try:
                await serve(app, config, task_status=task_status)  # type: ignore[arg-type]
            except Exception as exc:  # the crash; Cancelled is no Exception
                crashed.append(exc)

        async with trio.open_nursery() as nursery:
            binds = await nursery.start(run)
            port = int(binds[0].rsplit(":", 1)[1])
            async with await connect(port, rcvbuf=RCVBUF) as stuck:
                # Notifications: each answered 202 with an empty body, so the
                # write that blocks is a response head.
                body = json.dumps(notification("notifications/x")).encode()
                head = post_head(port, modern_headers(None), len(body))

                async def pipeline() -> None:
                    with contextlib.suppress(trio.BrokenResourceError):
                        await stuck.send_all((head + body) * 3000)

                nursery.start_soon(pipeline)
                async with httpx.AsyncClient(timeout=5) as client:
                    deadline = trio.current_time() + 3 * WRITE_TIMEOUT + MARGIN
                    while trio.current_time() < deadline and not crashed:
                        with contextlib.suppress(httpx.TransportError):
                            await client.get(f"{binds[0]}/nope")
                        await trio.sleep(0.1)
                if not crashed:
                    message = modern_call(1, "echo", {"text": "still here"})
                    async with httpx.AsyncClient(timeout=5) as client:
                        reply = await client.post(
                            f"{binds[0]}/mcp", headers=headers_of(message), json=message
                        )
                    answers.append(text_of(reply))
            nursery.cancel_scope.cancel()
    assert not crashed, f"serve() crashed: {crashed[0]!r}"
    assert answers == ["still here"]


# -- c. request bodies that never arrive -------------------------------------------


@ALSO_PLAIN_ASGI
@SHORT_GRACE
@pytest.mark.slow
async def test_slow_bodies_get_408_while_others_are_served(mcp_registry: Registry) -> None:
    connections = 50
    body_timeout = 1.5  # room to serve a normal client while they all wait
    probe = Probe()
    with trio.fail_after(TIMEOUT):
        async with setup(
            mcp_registry, probe, http_limits=HttpLimits(body_timeout=body_timeout)
        ) as (
            served,
            registry,
            app,
        ):
            message = modern_call(1, "echo", {"text": "never sent"})
            head = post_head(served.port, headers_of(message), 1000)
            answered: list[tuple[int, float, bytes]] = []
            all_open = trio.Event()
            opened = 0

            async def slow(i: int) -> None:
                nonlocal opened
                async with await connect(served.port) as stream:
                    sent = trio.current_time()
                    await stream.send_all(head + b'{"jsonrpc": ')
                    opened += 1
                    if opened == connections:
                        all_open.set()
                    async with trio.open_nursery() as nursery:
                        if i % 2:  # trickle: a byte every 50 ms keeps nothing alive

                            async def trickle() -> None:
                                with contextlib.suppress(trio.BrokenResourceError):
                                    while True:
                                        await trio.sleep(0.05)
                                        await stream.send_all(b" ")

                            nursery.start_soon(trickle)
                        raw = await read_until_closed(stream, body_timeout + 3 * MARGIN)
                        nursery.cancel_scope.cancel()
                    answered.append((i, trio.current_time() - sent, raw))

            async with trio.open_nursery() as nursery:
                for i in range(connections):
                    nursery.start_soon(slow, i)
                await all_open.wait()
                # While every one of them holds a connection and a request:
                async with httpx.AsyncClient(timeout=5) as client:
                    assert await call_modern(client, served.url, "echo", text="hi") == "hi"
                    assert await call_modern(client, served.url, "count", n=3) == "counted 3"
                    assert answered == [], "the normal client waited for the slow ones"

            assert len(answered) == connections
            for i, elapsed, raw in answered:
                status, headers, _ = parse_response(raw)
                assert (status, headers.get("connection")) == (408, "close"), (i, raw[:200])
                # Not before the body timeout (trickled bytes do not restart it), nor long after.
                assert body_timeout - 0.05 <= elapsed <= body_timeout + 2 * MARGIN, (i, elapsed)
            # Each of their requests returned (the one id-less return per connection).
            assert [rid for rid, _ in app.returned].count(None) == connections
            assert registry.in_flight_count == 0


# -- d. one tenant opening sessions in a loop --------------------------------------

FLOOD = 40


async def hold_in(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> str:
    """Run the ``hold`` tool (legacy session *headers*, or a modern call) until released."""
    if "mcp-session-id" in headers:
        response = await client.post(url, headers=headers, json=legacy_call(1, "hold"))
    else:
        message = modern_call(1, "hold")
        response = await client.post(url, headers={**headers_of(message), **headers}, json=message)
    assert response.status_code == 200, (response.status_code, response.text)
    return text_of(response)


@SHORT_GRACE
async def test_session_flood_by_one_principal_spares_another(mcp_registry: Registry) -> None:
    probe = Probe()
    alice = {"authorization": "Bearer tok-alice"}
    mallory = {"authorization": "Bearer tok-mallory"}
    cap = 5
    with trio.fail_after(TIMEOUT):
        async with setup(
            mcp_registry,
            probe,
            auth=bearer_auth(TOKENS),
            http_limits=HttpLimits(max_sessions_per_tenant=cap),
        ) as (
            served,
            registry,
            app,
        ):
            store = app.app.sessions
            assert store is not None
            url = served.url
            ping = request(2, "ping")
            async with httpx.AsyncClient(timeout=5) as client, trio.open_nursery() as nursery:
                victim = await open_session(client, url, **alice)
                results: dict[str, list[str]] = {"alice": [], "mallory": []}

                async def hold(who: str, headers: dict[str, str]) -> None:
                    results[who].append(await hold_in(client, url, headers))

                nursery.start_soon(hold, "alice", victim)
                await wait_until(lambda: probe.holding == 1)

                # Mallory floods: every initialize succeeds by ending her own idle sessions.
                flood = []
                for _ in range(FLOOD):
                    reply = await init_session(client, url, **mallory)
                    assert reply.status_code == 200, reply.text
                    flood.append({**legacy_headers(reply.headers["mcp-session-id"]), **mallory})
                assert store.tenant_count("principal:mallory") == cap
                assert store.tenant_count("principal:alice") == 1
                for gone in flood[:-cap]:
                    assert (await client.post(url, headers=gone, json=ping)).status_code == 404
                # Alice's session and call are untouched.
                assert (await client.post(url, headers=victim, json=ping)).status_code == 200
                [running] = registry.requests()
                assert not running.cancelled

                # Once all of Mallory's sessions are busy, she is refused, not Alice.
                for headers in flood[-cap:]:
                    nursery.start_soon(hold, "mallory", headers)
                await wait_until(lambda: probe.holding == 1 + cap)
                assert_refused(await init_session(client, url, **mallory), 429, "tenant", cap)
                assert (await init_session(client, url, **alice)).status_code == 200
                assert not any(r.cancelled for r in registry.requests())
                probe.release.set()

            assert results == {"alice": ["released"], "mallory": ["released"] * cap}
            async with httpx.AsyncClient(timeout=5) as client:
                # Idle again: her next initialize ends one of her own sessions.
                assert (await init_session(client, url, **mallory)).status_code == 200
                assert store.tenant_count("principal:mallory") == cap


def from_address(source: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=5, transport=httpx.AsyncHTTPTransport(local_address=source))


@SHORT_GRACE
async def test_session_flood_from_one_address_when_the_store_is_full(
    mcp_registry: Registry,
) -> None:
    """Unauthenticated: tenants are client addresses; the store's bound is hit first."""
    probe = Probe()
    total = 6
    with trio.fail_after(TIMEOUT):
        async with setup(mcp_registry, probe, http_limits=HttpLimits(max_sessions=total)) as (
            served,
            registry,
            app,
        ):
            store = app.app.sessions
            assert store is not None
            url = served.url
            async with (
                from_address("127.0.0.2") as victim_client,
                from_address("127.0.0.1") as attacker,
                trio.open_nursery() as nursery,
            ):
                victim = await open_session(victim_client, url)
                idle = await open_session(victim_client, url)
                results: list[str] = []

                async def hold(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
                    results.append(await hold_in(client, url, headers))

                nursery.start_soon(hold, victim_client, victim)
                await wait_until(lambda: probe.holding == 1)
                flood = []
                for _ in range(FLOOD):
                    reply = await init_session(attacker, url)
                    assert reply.status_code == 200, reply.text
                    flood.append(legacy_headers(reply.headers["mcp-session-id"]))
                # The biggest tenant paid for the room: the attacker itself; the
                # victim keeps its busy session and its idle one.
                assert len(store) == total
                assert store.tenant_count("ip:127.0.0.2") == 2
                assert store.tenant_count("ip:127.0.0.1") == total - 2
                assert not any(r.cancelled for r in registry.requests())
                for mine in (victim, idle):
                    reply = await victim_client.post(url, headers=mine, json=request(2, "ping"))
                    assert reply.status_code == 200
                assert (await victim_client.delete(url, headers=idle)).status_code == 204

                # The attacker fills the room the victim left, then keeps everything busy.
                reply = await init_session(attacker, url)
                flood.append(legacy_headers(reply.headers["mcp-session-id"]))
                for headers in flood[-(total - 1) :]:
                    nursery.start_soon(hold, attacker, headers)
                await wait_until(lambda: probe.holding == total)
                assert_refused(await init_session(attacker, url), 503, "server", total)
                probe.release.set()
            assert results == ["released"] * total


@SHORT_GRACE
async def test_session_flood_tied_with_the_victim_evicts_its_own(mcp_registry: Registry) -> None:
    """A full store, the attacker as big as the victim: the attacker should pay."""
    probe = Probe()
    total = 4
    with trio.fail_after(TIMEOUT):
        async with setup(mcp_registry, probe, http_limits=HttpLimits(max_sessions=total)) as (
            served,
            _,
            app,
        ):
            store = app.app.sessions
            assert store is not None
            url = served.url
            async with (
                from_address("127.0.0.2") as victim_client,
                from_address("127.0.0.1") as attacker,
                trio.open_nursery() as nursery,
            ):
                victim = await open_session(victim_client, url)
                idle = await open_session(victim_client, url)

                async def hold() -> None:
                    assert await hold_in(victim_client, url, victim) == "released"

                nursery.start_soon(hold)
                await wait_until(lambda: probe.holding == 1)
                try:
                    for _ in range(3):  # 2 fill the store, the 3rd needs room
                        assert (await init_session(attacker, url)).status_code == 200
                    reply = await victim_client.post(url, headers=idle, json=request(2, "ping"))
                    assert reply.status_code == 200, "the victim's idle session was evicted"
                    assert store.tenant_count("ip:127.0.0.2") == 2
                finally:
                    probe.release.set()


# -- e. server-wide, tenant and session caps on calls in flight ---------------------


@ALSO_PLAIN_ASGI
@SHORT_GRACE
async def test_server_cap_on_calls_in_flight(mcp_registry: Registry) -> None:
    probe = Probe()
    cap = 4
    with trio.fail_after(TIMEOUT):
        async with setup(mcp_registry, probe, caps={"limits": ServerLimits(max_calls=cap)}) as (
            served,
            _,
            app,
        ):
            url = served.url
            results: list[str] = []
            async with (
                from_address("127.0.0.1") as client,
                from_address("127.0.0.2") as other,
                trio.open_nursery() as nursery,
            ):

                async def hold(scope: trio.CancelScope) -> None:
                    with scope:
                        results.append(await hold_in(client, url, {}))

                scopes = [trio.CancelScope() for _ in range(cap)]
                for scope in scopes:
                    nursery.start_soon(hold, scope)
                await wait_until(lambda: probe.holding == cap)
                message = modern_call(5, "echo", {"text": "fifth"})
                for who in (client, other):  # whoever asks: it is the server's cap
                    refused = await who.post(url, headers=headers_of(message), json=message)
                    assert_refused(refused, 429, "server", cap, "modern")
                # Methods other than tool calls are not capped.
                listed = modern_request(6, "tools/list")
                reply = await other.post(url, headers=headers_of(listed), json=listed)
                assert reply.status_code == 200 and "tools" in reply.json()["result"]

                # A call whose client goes away frees its place.
                scopes[0].cancel()
                await wait_until(lambda: app.app.dispatcher.calls_in_flight == cap - 1)
                assert await call_modern(other, url, "echo", text="in") == "in"
                probe.release.set()
            assert results == ["released"] * (cap - 1)
            await wait_until(lambda: app.app.dispatcher.calls_in_flight == 0)
            counted: list[str] = []

            async def count() -> None:
                counted.append(await call_modern(client, url, "count", n=20))

            async with httpx.AsyncClient(timeout=5) as client, trio.open_nursery() as nursery:
                # Every place is free again: a full set of concurrent calls is admitted.
                for _ in range(cap):
                    nursery.start_soon(count)
            assert counted == ["counted 20"] * cap


@SHORT_GRACE
async def test_tenant_and_session_caps_on_calls_in_flight(mcp_registry: Registry) -> None:
    probe = Probe()
    with trio.fail_after(TIMEOUT):
        async with setup(
            mcp_registry,
            probe,
            caps={"limits": ServerLimits(max_calls_per_tenant=3)},
            limits=ConnectionLimits(max_concurrent_calls=2),
        ) as (
            served,
            _,
            app,
        ):
            url = served.url
            async with (
                from_address("127.0.0.1") as client,
                from_address("127.0.0.2") as other,
                trio.open_nursery() as nursery,
            ):
                results: list[str] = []

                async def hold(headers: dict[str, str]) -> None:
                    results.append(await hold_in(client, url, headers))

                # One session runs two calls: its third is over the session's cap.
                first = await open_session(client, url)
                nursery.start_soon(hold, first)
                nursery.start_soon(hold, first)
                await wait_until(lambda: probe.holding == 2)
                refused = await client.post(
                    url, headers=first, json=legacy_call(3, "echo", {"text": "x"})
                )
                assert_refused(refused, 429, "channel", 2)
                # Another session of the same address runs one more: three for the tenant.
                second = await open_session(client, url)
                nursery.start_soon(hold, second)
                await wait_until(lambda: probe.holding == 3)
                message = modern_call(4, "echo", {"text": "x"})
                refused = await client.post(url, headers=headers_of(message), json=message)
                assert_refused(refused, 429, "tenant", 3, "modern")
                refused = await client.post(
                    url, headers=second, json=legacy_call(5, "echo", {"text": "x"})
                )
                assert_refused(refused, 429, "tenant", 3)
                # Another address is another tenant.
                assert await call_modern(other, url, "echo", text="other") == "other"
                probe.release.set()
            assert results == ["released"] * 3
            await wait_until(lambda: app.app.dispatcher.calls_in_flight == 0)
            async with httpx.AsyncClient(timeout=5) as client:
                assert await call_modern(client, url, "echo", text="again") == "again"
