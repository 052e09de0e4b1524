"""``serve(..., http="httptools")`` writes the bytes hypercorn's h11 protocol writes.

Each case sends the same raw bytes to a server on each protocol (127.0.0.1,
port 0) and reads until the server closes the connection; the two byte
strings must be equal once the ``date`` header's value is blanked.  Every
case therefore ends in something that closes the connection (a request with
``Connection: close``, HTTP/1.0, an error).  The apps are a small raw ASGI
app (for the framing cases: Content-Length, streamed, HEAD, 204, an app's own
``Connection: close``, a websocket refusal) and the library's
:class:`McpHttpApp` (calls answered as JSON and as SSE, a body over the limit,
a disconnect that cancels the tool).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import McpHttpApp, serve, server_config
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.transports.http import hypercorn_compat, hypercorn_httptools

from _support.asgi import headers_of, modern_call

pytest.importorskip("httptools")

TIMEOUT = 20
PROTOCOLS = ("h11", "httptools")
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def raw_app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
    """Answers by path: ``/cl`` sized, ``/stream`` in two unsized parts, ``/echo`` the body."""
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": message["type"] + ".complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1000})  # refused: hypercorn's 403
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    path = scope["path"]
    headers: list[tuple[bytes, bytes]] = [(b"x-method", scope["method"].encode())]
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"one,", "more_body": True})
        await send({"type": "http.response.body", "body": b"two", "more_body": False})
        return
    status = 204 if path == "/204" else 200
    if path == "/close":
        headers.append((b"Connection", b"close"))
    answer = b"" if status == 204 else body or f"{scope['method']} {path}".encode()
    if status != 204:
        headers.append((b"content-length", str(len(answer)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


@asynccontextmanager
async def serving(app: Any, http: str, **settings: Any) -> AsyncIterator[int]:
    # keep_alive_timeout: a case h11 answers without closing ends by it, sooner
    settings.setdefault("keep_alive_timeout", 1.0)
    config = server_config(port=0, errorlog=None, graceful_timeout=0.5, **settings)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config, http=http))
        yield int(binds[0].rsplit(":", 1)[1])
        nursery.cancel_scope.cancel()


async def exchange(port: int, data: bytes, *, then: bytes = b"") -> bytes:
    """Send *data* (and *then*, once the first bytes came back); all bytes until the close."""
    received = bytearray()
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(data)
        if then:
            received += await stream.receive_some(65536)
            await stream.send_all(then)
        try:
            while chunk := await stream.receive_some(65536):
                received += chunk
        except trio.BrokenResourceError:
            pass  # reset by a server that closed with bytes unread
    return re.sub(rb"(?im)^date: [^\r]*", b"date: -", bytes(received))


async def both(app: Any, data: bytes, *, then: bytes = b"", **settings: Any) -> list[bytes]:
    answers = []
    for http in PROTOCOLS:
        async with serving(app, http, **settings) as port:
            answers.append(await exchange(port, data, then=then))
    return answers


def get(path: str, *extra: str, method: str = "GET", version: str = "1.1") -> bytes:
    lines = [f"{method} {path} HTTP/{version}", "host: 127.0.0.1", *extra, "", ""]
    return "\r\n".join(lines).encode()


def post(path: str, body: bytes, *extra: str) -> bytes:
    return get(path, f"content-length: {len(body)}", *extra, method="POST") + body


CLOSE = "connection: close"
RAW_CASES = {
    "keep-alive GET then a closing GET": get("/cl") + get("/cl", CLOSE),
    "POST with a body, then DELETE": post("/echo", b"hello") + get("/x", CLOSE, method="DELETE"),
    "pipelined": get("/cl") + post("/echo", b"abc") + get("/stream") + get("/cl", CLOSE),
    "chunked request body": get("/echo", "transfer-encoding: chunked", CLOSE, method="POST")
    + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "Expect: 100-continue": post("/echo", b"body", "expect: 100-continue", CLOSE),
    "HEAD of a sized and of a streamed answer": get("/cl", method="HEAD")
    + get("/stream", CLOSE, method="HEAD"),
    "streamed answer, chunked": get("/stream") + get("/stream", CLOSE),
    "HTTP/1.0": get("/cl", version="1.0"),
    "HTTP/1.0 keep-alive asked, streamed answer": get(
        "/stream", "connection: keep-alive", version="1.0"
    ),
    "HTTP/1.0 HEAD": get("/stream", method="HEAD", version="1.0"),
    "204 and the app's own Connection: close": get("/204") + get("/close") + get("/cl"),
    "header values with spaces and raw-cased names": get("/cl", "X-Thing:   a b  ", CLOSE),
    "oversized headers": get("/cl", "x-big: " + "a" * 20000),
    "malformed request line": b"GARBAGE\r\n\r\n",
    "a malformed second request": get("/cl") + b"GET / HTTP/1.1 what\r\n\r\n",
    "garbage bytes": bytes(range(256)) * 4,
    "no Host": b"GET /cl HTTP/1.1\r\nconnection: close\r\n\r\n",
    "two Hosts": b"GET /cl HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n",
    "a method llhttp does not know": get("/cl", CLOSE, method="FROB"),
    "HTTP/2 version line": b"GET /cl HTTP/2.0\r\nhost: x\r\n\r\n",
    "Transfer-Encoding other than chunked": get("/echo", "transfer-encoding: gzip", method="POST"),
    "Content-Length and Transfer-Encoding": get(
        "/echo", "content-length: 3", "transfer-encoding: chunked", method="POST"
    )
    + b"3\r\nabc\r\n0\r\n\r\n",
    "bad chunk size in the body of a started request": get(
        "/echo", "transfer-encoding: chunked", method="POST"
    )
    + b"zz\r\nhello\r\n",
    "bare LF line ends (llhttp refuses, h11 serves)": b"GET /cl HTTP/1.1\nhost: x\n\n",
    "obsolete line folding": get("/cl", "x: a\r\n b", CLOSE),
    "a lower-case method": get("/cl", CLOSE, method="get"),
    "chunk extensions and trailers": get(
        "/echo", "transfer-encoding: chunked", CLOSE, method="POST"
    )
    + b"3;ext=1\r\nabc\r\n0\r\nx-trailer: 1\r\n\r\n",
    "websocket upgrade (handed to h11, refused by the app)": get(
        "/ws",
        "connection: upgrade",
        "upgrade: websocket",
        "sec-websocket-version: 13",
        "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==",
    ),
    "websocket upgrade after a plain request": get("/cl")
    + get(
        "/ws",
        "connection: upgrade",
        "upgrade: websocket",
        "sec-websocket-version: 13",
        "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==",
    ),
}


@pytest.mark.parametrize("data", RAW_CASES.values(), ids=list(RAW_CASES))
async def test_the_same_request_bytes_get_the_same_response_bytes(data: bytes) -> None:
    with trio.fail_after(TIMEOUT):
        over_h11, over_httptools = await both(raw_app, data)
    assert over_h11  # each case gets an answer
    assert over_httptools == over_h11


async def test_expect_100_continue_is_answered_before_the_body_is_sent() -> None:
    head = get("/echo", "content-length: 4", "expect: 100-continue", CLOSE, method="POST")
    with trio.fail_after(TIMEOUT):
        over_h11, over_httptools = await both(raw_app, head, then=b"body")
    assert over_h11.startswith(b"HTTP/1.1 100 \r\n")
    assert over_h11.endswith(b"\r\n\r\nbody")
    assert over_httptools == over_h11


async def test_the_last_request_a_connection_may_carry_closes_it_the_same_way() -> None:
    with trio.fail_after(TIMEOUT):
        over_h11, over_httptools = await both(
            raw_app, get("/cl") + get("/stream") + get("/cl"), keep_alive_max_requests=2
        )
    assert over_h11.count(b"HTTP/1.1 200 ") == 2
    assert over_httptools == over_h11


async def test_an_h2c_upgrade_is_handed_to_hypercorn_and_answered_101() -> None:
    upgrade = get(
        "/cl",
        "connection: upgrade, http2-settings",
        "upgrade: h2c",
        "http2-settings: AAMAAABkAARAAAAAAAIAAAAA",
    )
    with trio.fail_after(TIMEOUT):
        over_h11, over_httptools = await both(raw_app, upgrade)
    switching = over_h11.split(b"\r\n\r\n", 1)[0]
    assert switching.startswith(b"HTTP/1.1 101 ")
    assert over_httptools.split(b"\r\n\r\n", 1)[0] == switching


async def test_a_header_flood_and_a_slow_head_within_the_limits_are_served_the_same() -> None:
    flood = get("/cl", *(f"x-h{i}: {i}" for i in range(300)), CLOSE)
    for_each: list[bytes] = []
    with trio.fail_after(TIMEOUT):
        for http in PROTOCOLS:
            async with serving(raw_app, http) as port:
                # one byte at a time (slowloris, well within the timeouts)
                async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                    for byte in get("/cl", CLOSE):
                        await stream.send_all(bytes([byte]))
                    slow = b""
                    while chunk := await stream.receive_some(65536):
                        slow += chunk
                for_each.append(re.sub(rb"date: [^\r]*", b"", slow))
                for_each.append(await exchange(port, flood))
    assert for_each[0].startswith(b"HTTP/1.1 200 ")
    assert for_each[2:] == for_each[:2]


def mutated(rng: random.Random) -> bytes:
    """One to three plain requests with a few bytes inserted, deleted or changed."""
    plain = [
        get("/cl"),
        post("/echo", b"hello"),
        get("/echo", "transfer-encoding: chunked", method="POST") + b"3\r\nabc\r\n0\r\n\r\n",
        get("/stream", version="1.0"),
        get("/stream", method="HEAD"),
    ]
    pieces = [b" ", b"\t", b"\r\n", b"\n", b":", b"\x00", b"\xff", b"0", b"host: y\r\n"]
    pieces += [b"content-length: 3\r\n", b"transfer-encoding: chunked\r\n", b"x: a\r\n b\r\n"]
    data = bytearray(b"".join(rng.choice(plain) for _ in range(rng.randint(1, 3))))
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data))
        choice = rng.random()
        if choice < 0.4:
            data[at:at] = rng.choice(pieces)
        elif choice < 0.7:
            del data[at : at + rng.randint(1, 3)]
        else:
            data[at] = rng.randrange(256)
    return bytes(data) + get("/cl", CLOSE)


async def test_mutated_requests_get_the_same_bytes_back() -> None:
    rng = random.Random(35)
    cases = [mutated(rng) for _ in range(60)]
    answers: dict[str, list[bytes]] = {}
    with trio.fail_after(TIMEOUT * 3):
        for http in PROTOCOLS:
            async with serving(raw_app, http) as port:
                answers[http] = [await exchange(port, case) for case in cases]
    differing = [
        case
        for case, h11, ours in zip(cases, answers["h11"], answers["httptools"], strict=True)
        if h11 != ours
    ]
    assert differing == []


# -- the library's app ---------------------------------------------------------------


def build(started: trio.Event, cancelled: trio.Event) -> McpServer:
    server = McpServer("httptools")

    @server.tool()
    async def noop(ctx: Context) -> str:
        return "ok"

    @server.tool()
    async def chatty(ctx: Context) -> str:
        await ctx.report_progress(1, 2)
        await ctx.report_progress(2, 2)
        return "done"

    @server.tool()
    async def forever(ctx: Context) -> str:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    return server


def mcp_post(request_id: int, tool: str, *extra: str, **options: Any) -> bytes:
    message = modern_call(request_id, tool, **options)
    body = json.dumps(message).encode()
    headers = [f"{k}: {v}" for k, v in headers_of(message).items()]
    return post("/mcp", body, *headers, *extra)


async def test_calls_answered_as_json_and_as_sse_are_the_same_bytes(
    mcp_registry: Registry,
) -> None:
    app = McpHttpApp(build(trio.Event(), trio.Event()), mcp_registry)
    data = mcp_post(1, "noop") + mcp_post(2, "chatty", CLOSE, progress_token="p")
    with trio.fail_after(TIMEOUT):
        over_h11, over_httptools = await both(app, data)
    assert b"text/event-stream" in over_h11 and b'"ok"' in over_h11
    assert over_httptools == over_h11


async def test_a_body_over_the_limit_is_refused_413_the_same_way(mcp_registry: Registry) -> None:
    app = McpHttpApp(
        build(trio.Event(), trio.Event()),
        mcp_registry,
        limits=ConnectionLimits(max_message_size=1000),
    )
    data = mcp_post(1, "noop", CLOSE, progress_token="x" * 2000)
    with trio.fail_after(TIMEOUT):
        over_h11, over_httptools = await both(app, data)
    assert over_h11.startswith(b"HTTP/1.1 413 ")
    assert over_httptools == over_h11


@pytest.mark.mcp_registry(grace_period=0)  # the tool does not look at its flag: hard cancel
@pytest.mark.parametrize("http", PROTOCOLS)
async def test_a_client_that_goes_away_mid_call_cancels_the_tool(
    http: str, mcp_registry: Registry
) -> None:
    started, cancelled = trio.Event(), trio.Event()
    app = McpHttpApp(build(started, cancelled), mcp_registry)
    with trio.fail_after(TIMEOUT):
        async with serving(app, http) as port:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(mcp_post(1, "forever", progress_token="p"))
            await started.wait()
            await stream.aclose()
            await cancelled.wait()  # the disconnect reached the tool


async def test_hypercorns_shortcuts_see_the_connection_or_safely_decline(
    mcp_registry: Registry,
) -> None:
    seen: list[Any] = []

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await raw_app(scope, receive, send)
        seen.append(type(hypercorn_compat.tcp_server_of(send)).__name__)
        head = {"type": "http.response.start", "status": 200, "headers": []}
        seen.append(await hypercorn_compat.send_whole(send, head, b"x"))
        if not seen[-1]:
            await send({**head, "headers": [(b"content-length", b"1")]})
            await send({"type": "http.response.body", "body": b"x"})

    with trio.fail_after(TIMEOUT):
        async with serving(app, "httptools") as port:
            answer = await exchange(port, get("/", CLOSE))
    assert seen == ["TCPServer", False]
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\nx")


def test_an_unknown_protocol_name_is_refused() -> None:
    with pytest.raises(ValueError, match="h11, httptools"):
        hypercorn_httptools.choose(server_config(), "h2")


def test_without_httptools_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hypercorn_httptools, "httptools", None)
    with pytest.raises(ImportError, match=r"trio-mcp-cancel\[httptools\]"):
        hypercorn_httptools.choose(server_config(), "httptools")
