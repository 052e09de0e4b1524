"""The HTTP client on httpx2: pooled connections, exact cancellation, TLS, SSE.

Real 127.0.0.1 sockets where the behaviour lives in the socket layer (how
many connections calls open, what a cancel does to a connection and to
the requests sharing it, TLS); httpx2's ``MockTransport`` for what lives
in the bytes (SSE framing, resumption, headers, a stream's drain).  The
server counts connections by the client address of each request's ASGI
scope; :func:`counting_proxy` counts the TCP connections a client opens.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
import trustme
from hypercorn.config import Config
from trio.testing import MockClock

from trio_mcp_cancel import Registry, RequestCancelledEvent
from trio_mcp_cancel._client.http import DRAIN_BYTES, DRAIN_TIME
from trio_mcp_cancel.client import McpTransportError, open_http_client
from trio_mcp_cancel.http import McpHttpApp, serve
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import EventRecorder

BOUND = 30
seen_headers: list[dict[str, str]] = []
"""The headers of every request :func:`served` saw (the last server only)."""


class Slow:
    """A server whose ``hold`` tool waits until released; ``echo`` answers at once."""

    def __init__(self) -> None:
        self.server = McpServer("slow")
        self.started = trio.Event()
        self.release = trio.Event()

        @self.server.tool()
        async def hold(ctx: Context) -> str:
            self.started.set()
            await self.release.wait()
            return "held"

        @self.server.tool()
        async def echo(ctx: Context, text: str) -> str:
            return text


#: The registry of every test here (``mcp_registry``).
pytestmark = pytest.mark.mcp_registry(grace_period=0.2)


@asynccontextmanager
async def served(
    registry: Registry,
    server: McpServer,
    tmp_path: Path | None = None,
    ca: trustme.CA | None = None,
) -> AsyncIterator[tuple[str, Registry, set[Any]]]:
    """*server* on 127.0.0.1 on *registry* (TLS with a cert from *ca*).

    Yields ``(url, registry, connections)``.
    """
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.graceful_timeout = 0.5
    if ca is not None:
        assert tmp_path is not None
        cert = ca.issue_cert("127.0.0.1")
        cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
        config.certfile = config.keyfile = str(tmp_path / "server.pem")
    connections: set[Any] = set()
    seen_headers.clear()
    async with trio.open_nursery() as nursery:
        app = McpHttpApp(server, registry)

        async def counting(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                connections.add(tuple(scope.get("client") or ()))
                seen_headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
            await app(scope, receive, send)

        binds = await nursery.start(serve, counting, config)
        yield f"{binds[0]}/mcp", registry, connections
        nursery.cancel_scope.cancel()


async def test_a_hundred_sequential_calls_share_one_connection(mcp_registry: Registry) -> None:
    slow = Slow()
    with trio.fail_after(BOUND):
        async with (
            served(mcp_registry, slow.server) as (url, _, connections),
            open_http_client(url) as client,
        ):
            for i in range(100):
                result = await client.call_tool("echo", {"text": str(i)})
                assert result["content"][0]["text"] == str(i)
            assert len(connections) == 1


@pytest.mark.parametrize("http2", [False, True])
async def test_a_cancelled_call_is_a_disconnect_and_the_others_on_the_pool_go_on(
    http2: bool,
    mcp_registry: Registry,
) -> None:
    # HTTP/1.1: the cancelled request's connection is closed, not pooled;
    # HTTP/2: its stream is reset and the connection carries the rest.
    slow = Slow()
    with trio.fail_after(BOUND):
        async with (
            served(mcp_registry, slow.server) as (url, registry, connections),
            open_http_client(url, http2=http2) as client,
        ):
            events = EventRecorder.attach(registry)
            await client.call_tool("echo", {"text": "warm"})
            async with trio.open_nursery() as nursery:
                held = client.start_call("hold")
                nursery.start_soon(held.result)
                await slow.started.wait()
                with trio.move_on_after(0.05) as scope:
                    await client.call_tool("hold", {})  # a second hold, cancelled by its scope
                assert scope.cancelled_caught
                while not events.of_type(RequestCancelledEvent):
                    await trio.sleep(0.01)
                assert [e.kind for e in events.of_type(RequestCancelledEvent)] == ["disconnect"]
                assert (await client.call_tool("echo", {"text": "after"}))["content"][0][
                    "text"
                ] == "after"
                slow.release.set()
            assert held.response is not None
            assert held.response["result"]["content"][0]["text"] == "held"
            assert len(events.of_type(RequestCancelledEvent)) == 1
            # HTTP/1.1: warm + held, the cancelled one (closed), then one new
            # connection at most; HTTP/2: all on one connection.
            assert len(connections) == (1 if http2 else 3)


async def test_https_with_a_local_ca_and_http2(tmp_path: Path, mcp_registry: Registry) -> None:
    ca = trustme.CA()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    slow = Slow()
    with trio.fail_after(BOUND):
        async with served(mcp_registry, slow.server, tmp_path, ca) as (url, _, connections):
            assert url.startswith("https://")
            for http2 in (False, True):
                async with open_http_client(url, verify=context, http2=http2) as client:
                    for _ in range(5):
                        assert (await client.call_tool("echo", {"text": "s"}))["isError"] is False
            assert len(connections) == 2
            async with open_http_client(url) as untrusting:  # the system CAs do not know it
                with pytest.raises(McpTransportError, match="cannot connect"):
                    await untrusting.call_tool("echo", {"text": "s"})


# -- the bytes: MockTransport --------------------------------------------------------


def _sse(*events: str) -> bytes:
    return "".join(events).encode()


async def test_sse_keepalives_priming_events_ids_and_split_frames_are_understood() -> None:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        body = json.loads(request.content)
        answer = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": {"ok": True}})
        progress = json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": body["id"], "progress": 1},
            }
        )
        chunks = [
            b": keep-alive\r\n\r\n",
            b"id: 7\r\nretry: 250\r\ndata:\r\n\r\n",  # a priming event: no message
            _sse(f"id: 8\r\ndata: {progress}\r\n\r\n"),
            _sse(f"id: 9\ndata: {answer[:10]}"),
            _sse(f"{answer[10:]}\n\n"),
        ]

        async def body() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    with trio.fail_after(BOUND):
        async with http, open_http_client("http://mcp.test/mcp", http_client=http) as client:
            progress: list[Any] = []
            call = client.start_request("tools/list", on_progress=progress.append)
            assert await call.result() == {"ok": True}
            assert [p["progress"] for p in progress] == [1]
            assert client.unexpected == []
    assert seen[0].headers["mcp-method"] == "tools/list"


async def test_a_legacy_stream_that_ends_early_is_resumed_with_last_event_id() -> None:
    gets: list[httpx2.Request] = []
    session = "s-1"

    def handler(request: httpx2.Request) -> httpx2.Response:
        sse = {"content-type": "text/event-stream", "mcp-session-id": session}
        if request.method == "GET":
            if request.headers.get("last-event-id") is None:
                return httpx2.Response(405)  # no standalone stream
            gets.append(request)
            answer = json.dumps({"jsonrpc": "2.0", "id": 2, "result": {"tools": []}})
            return httpx2.Response(200, headers=sse, content=_sse(f"id: e2\ndata: {answer}\n\n"))
        if request.method == "DELETE":
            return httpx2.Response(204)
        body = json.loads(request.content)
        if body.get("method") == "initialize":
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {}}
            return httpx2.Response(
                200,
                headers={"mcp-session-id": session},
                json={"jsonrpc": "2.0", "id": body["id"], "result": init},
            )
        if "id" not in body:
            return httpx2.Response(202)
        # The server primes the stream, then closes it before the answer.
        return httpx2.Response(200, headers=sse, content=_sse("id: e1\nretry: 10\ndata:\n\n"))

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    with trio.fail_after(BOUND):
        async with (
            http,
            open_http_client("http://mcp.test/mcp", http_client=http, era="legacy") as client,
        ):
            assert await client.list_tools() == []
    assert [(g.headers["last-event-id"], g.headers["mcp-session-id"]) for g in gets] == [
        ("e1", session)
    ]


async def test_an_auth_hook_and_custom_headers_go_on_every_request(mcp_registry: Registry) -> None:
    class Bearer(httpx2.Auth):
        def auth_flow(self, request: httpx2.Request) -> Any:
            request.headers["Authorization"] = "Bearer t0k"
            yield request

    slow = Slow()
    with trio.fail_after(BOUND):
        async with (
            served(mcp_registry, slow.server) as (url, _, _),
            open_http_client(url, auth=Bearer(), headers={"X-Tenant": "a"}) as client,
        ):
            await client.call_tool("echo", {"text": "x"})
            await client.request("tools/list")
    assert [(h["authorization"], h["x-tenant"]) for h in seen_headers] == [("Bearer t0k", "a")] * 2


# -- streamed answers: the connection goes back to the pool -----------------------------

#: The connections the counting proxy accepts before it refuses more (a runaway test stays small).
MAX_PROXIED = 200


@asynccontextmanager
async def counting_proxy(url: str) -> AsyncIterator[tuple[str, list[trio.SocketStream]]]:
    """A TCP proxy on 127.0.0.1 in front of *url* that counts the connections it accepts.

    Yields ``(proxied url, accepted)``: every connection a client opened,
    whatever happens to it afterwards.  Bytes are copied as they come, in
    both directions; when either side closes, both are closed.
    """
    host, port = url.removeprefix("http://").split("/", 1)[0].rsplit(":", 1)
    accepted: list[trio.SocketStream] = []

    async def copy(
        source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope
    ) -> None:
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        done.cancel()

    async def handle(downstream: trio.SocketStream) -> None:
        accepted.append(downstream)
        async with downstream:
            if len(accepted) > MAX_PROXIED:
                return
            async with await trio.open_tcp_stream(host, int(port)) as upstream:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(copy, downstream, upstream, nursery.cancel_scope)
                    nursery.start_soon(copy, upstream, downstream, nursery.cancel_scope)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    proxy_port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        yield f"http://127.0.0.1:{proxy_port}/mcp", accepted
        nursery.cancel_scope.cancel()


def chatty_server() -> McpServer:
    """A server whose ``chatty`` tool reports progress, so its answer comes over SSE."""
    server = McpServer("chatty")

    @server.tool()
    async def chatty(ctx: Context) -> str:
        for step in (1, 2, 3):
            await ctx.report_progress(step, 3)
        return "done"

    return server


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_fifty_calls_answered_over_sse_reuse_their_connections(
    era: Any, mcp_registry: Registry
) -> None:
    # The server ends each stream right after the answer; the client reads it
    # to that end, so the connection goes back to the pool (before the fix:
    # 50 new connections).  The caller gets the answer before the end is
    # read, so the next call may find the connection still busy and open a
    # second one; the two then take turns.
    progress: list[Any] = []
    with trio.fail_after(BOUND):
        async with (
            served(mcp_registry, chatty_server()) as (url, _, _),
            counting_proxy(url) as (proxied, accepted),
            open_http_client(proxied, era=era) as client,
        ):
            await client.call_tool("chatty", progress=progress.append)
            while len(accepted) < (2 if era == "legacy" else 1):  # legacy: the GET stream too
                await trio.sleep(0.01)
            warm = len(accepted)
            for _ in range(50):
                result = await client.call_tool("chatty", progress=progress.append)
                assert result["content"][0]["text"] == "done"
            assert len(progress) == 51 * 3  # every answer came over SSE
            assert len(accepted) - warm <= 1


@pytest.mark.parametrize("http2", [False, True])
async def test_a_call_cancelled_while_its_answer_streams_still_closes_the_stream(
    http2: bool, mcp_registry: Registry
) -> None:
    # Modern era: closing the stream *is* the cancel; the drain after an
    # answer must never keep an unanswered stream open.
    server = McpServer("streaming")
    going = trio.Event()

    @server.tool()
    async def stream_forever(ctx: Context) -> str:
        await ctx.report_progress(1)
        going.set()
        await trio.sleep_forever()
        return "never"

    with trio.fail_after(BOUND):
        async with (
            served(mcp_registry, server) as (url, registry, _),
            open_http_client(url, http2=http2) as client,
        ):
            events = EventRecorder.attach(registry)
            progress: list[Any] = []
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(
                        lambda: client.call_tool("stream_forever", progress=progress.append)
                    )
                    await going.wait()
                    while not progress:
                        await trio.sleep(0.01)
                    scope.cancel()
            while not events.of_type(RequestCancelledEvent):
                await trio.sleep(0.01)
            assert [e.kind for e in events.of_type(RequestCancelledEvent)] == ["disconnect"]


def _sse_answering(after_answer: Any, closed: list[float]) -> httpx2.MockTransport:
    """A server that streams a ``tools/list`` answer, then whatever *after_answer* yields.

    *closed* gets the time the client closed the stream.
    """

    def handler(request: httpx2.Request) -> httpx2.Response:
        call_id = json.loads(request.content)["id"]
        answer = json.dumps({"jsonrpc": "2.0", "id": call_id, "result": {"tools": []}})

        async def body() -> AsyncIterator[bytes]:
            try:
                yield f"id: 1\ndata: {answer}\n\n".encode()
                async for chunk in after_answer():
                    yield chunk
            finally:
                closed.append(trio.current_time())

        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    return httpx2.MockTransport(handler)


async def test_a_stream_kept_open_after_its_answer_is_closed_after_a_short_drain(
    autojump_clock: MockClock,
) -> None:
    # A hostile (or slow) server never ends the stream: the caller has its
    # answer at once, and the client closes the stream DRAIN_TIME later.
    async def forever() -> AsyncIterator[bytes]:
        yield b": still here\n\n"
        await trio.sleep_forever()
        yield b""  # pragma: no cover

    closed: list[float] = []
    http = httpx2.AsyncClient(transport=_sse_answering(forever, closed))
    with trio.fail_after(BOUND):
        async with http, open_http_client("http://mcp.test/mcp", http_client=http) as client:
            start = trio.current_time()
            assert await client.list_tools() == []
            assert trio.current_time() == start  # the answer did not wait for the drain
            while not closed:
                await trio.sleep(0.01)
    assert closed[0] - start == pytest.approx(DRAIN_TIME, abs=0.02)


async def test_a_stream_that_floods_after_its_answer_is_closed_after_a_few_kilobytes(
    autojump_clock: MockClock,
) -> None:
    # The drain is bounded in bytes too: a server that pours keep-alives
    # (here without ever letting the clock move) is cut after DRAIN_BYTES.
    chunk = b": " + b"x" * 8190 + b"\n\n"
    sent: list[int] = []

    async def flood() -> AsyncIterator[bytes]:
        while sum(sent) < 100 * DRAIN_BYTES:
            sent.append(len(chunk))
            yield chunk
            await trio.lowlevel.checkpoint()

    closed: list[float] = []
    http = httpx2.AsyncClient(transport=_sse_answering(flood, closed))
    with trio.fail_after(BOUND):
        async with http, open_http_client("http://mcp.test/mcp", http_client=http) as client:
            assert await client.list_tools() == []
            while not closed:
                await trio.lowlevel.checkpoint()
    assert DRAIN_BYTES <= sum(sent) <= DRAIN_BYTES + 2 * len(chunk)


async def test_with_the_stream_reset_off_http2_calls_work_and_only_a_cancel_goes_unseen(
    mcp_registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MCP_HTTPCORE2_STREAM_RESET=off: the client is plain httpx2.  Calls,
    # a cancelled one included, still work on one connection; what is lost
    # is the RST_STREAM, so the server never hears of the cancel.
    monkeypatch.setenv("MCP_HTTPCORE2_STREAM_RESET", "off")
    slow = Slow()
    with trio.fail_after(BOUND):
        async with (
            served(mcp_registry, slow.server) as (url, registry, connections),
            open_http_client(url, http2=True) as client,
        ):
            events = EventRecorder.attach(registry)
            with trio.move_on_after(0.05) as scope:
                await client.call_tool("hold", {})
            assert scope.cancelled_caught
            await slow.started.wait()
            assert (await client.call_tool("echo", {"text": "after"}))["content"][0][
                "text"
            ] == "after"
            await trio.sleep(0.2)  # a reset would have reached the server by now
            assert events.of_type(RequestCancelledEvent) == []
            assert registry.in_flight_count == 1
            slow.release.set()
            assert len(connections) == 1
