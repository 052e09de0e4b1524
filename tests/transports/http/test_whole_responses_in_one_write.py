"""A whole response the socket can take at once goes out in one write, byte for byte hypercorn's.

hypercorn writes a response in three socket writes (head, body, the empty
end of a ``Content-Length`` message); ``hypercorn_compat.send_whole`` hands
it the same bytes in one, doing the same state changes (h11, the stream's
ASGI state, the access log, the keep-alive recycle).  Real hypercorn on
127.0.0.1: the behaviour is in the socket layer.  Writes are counted at
hypercorn's ``TCPServer.protocol_send``; the bytes are read off a raw
socket, so the comparison is with what the client really receives.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.events import RawData
from hypercorn.trio import serve
from hypercorn.trio.tcp_server import TCPServer

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.transports.http import hypercorn_compat

from _support.asgi import bare_app, headers_of, modern_call

TIMEOUT = 15
#: send_whole is a shortcut through h11's connection; the httptools protocol
#: (TEST_HTTP_PROTOCOL=httptools, see conftest) declines it, writing each
#: response once by itself (test_httptools_protocol).
h11_only = pytest.mark.skipif(
    os.environ.get("TEST_HTTP_PROTOCOL") == "httptools", reason="h11's send_whole"
)


def build() -> McpServer:
    server = McpServer("whole")

    @server.tool()
    async def instant(ctx: Context) -> str:
        return "done"

    return server


@contextmanager
def counting_writes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """Every non-empty ``RawData`` hypercorn's TCP server writes, in order."""
    writes: list[bytes] = []
    original = TCPServer.protocol_send

    async def protocol_send(self: Any, event: Any) -> None:
        if isinstance(event, RawData) and event.data:
            writes.append(bytes(event.data))
        await original(self, event)

    monkeypatch.setattr(TCPServer, "protocol_send", protocol_send)
    yield writes


@asynccontextmanager
async def serving(app: Any, max_requests: int = 1000) -> AsyncIterator[int]:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.graceful_timeout = 0.5
    config.keep_alive_max_requests = max_requests
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, app, config)
        yield int(binds[0].rsplit(":", 1)[1])
        nursery.cancel_scope.cancel()


def raw_request(request_id: int) -> bytes:
    message = modern_call(request_id, "instant")
    body = json.dumps(message).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers_of(message).items())
    return (
        f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}content-length: {len(body)}\r\n\r\n"
    ).encode() + body


async def read_response(stream: trio.SocketStream, buffer: bytearray) -> tuple[bytes, bytes]:
    """One response's head and body off *stream* (``Content-Length`` framing)."""
    while b"\r\n\r\n" not in buffer:
        buffer += await stream.receive_some(65536)
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        rest += await stream.receive_some(65536)
    buffer[:] = rest[length:]
    return head, rest[:length]


async def exchange(port: int, ids: list[int]) -> list[tuple[bytes, bytes]]:
    """Call ``instant`` once per id on one keep-alive connection; the raw responses."""
    answers = []
    buffer = bytearray()
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        for request_id in ids:
            await stream.send_all(raw_request(request_id))
            answers.append(await read_response(stream, buffer))
    return answers


async def test_whole_responses_go_out_in_one_write_and_the_connection_is_reused(
    monkeypatch: pytest.MonkeyPatch, mcp_registry: Registry
) -> None:
    with counting_writes(monkeypatch) as writes, trio.fail_after(TIMEOUT):
        async with serving(McpHttpApp(build(), mcp_registry)) as port:
            answers = await exchange(port, [1, 2, 3])
    assert len(writes) == 3  # one per response, not three
    for request_id, (head, body) in zip([1, 2, 3], answers, strict=True):
        assert head.startswith(b"HTTP/1.1 200 ")
        assert b"content-type: application/json" in head
        assert json.loads(body)["id"] == request_id
        assert json.loads(body)["result"]["content"][0]["text"] == "done"
        assert writes[request_id - 1] == head + b"\r\n\r\n" + body


@h11_only
async def test_the_bytes_are_the_ones_hypercorn_writes_in_three(
    monkeypatch: pytest.MonkeyPatch, mcp_registry: Registry
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(McpHttpApp(build(), mcp_registry)) as port:
            fused = await exchange(port, [7])
        with counting_writes(monkeypatch) as writes:
            plain = McpHttpApp(build(), mcp_registry, hypercorn_fast_paths=False)
            async with serving(plain) as port:
                unfused = await exchange(port, [7])
    assert len(writes) >= 2  # off: hypercorn's own writes (head, body)
    same = [(_without_date(h), b) for h, b in fused]
    assert same == [(_without_date(h), b) for h, b in unfused]


async def test_the_last_response_hypercorn_allows_on_a_connection_closes_it(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(McpHttpApp(build(), mcp_registry), max_requests=2) as port:
            answers = await exchange(port, [1, 2])
            first, second = (head for head, _ in answers)
            assert b"connection: close" not in first
            assert b"connection: close" in second
            # And a new connection is served as usual.
            ((head, body),) = await exchange(port, [3])
    assert head.startswith(b"HTTP/1.1 200 ") and json.loads(body)["id"] == 3


def _without_date(head: bytes) -> bytes:
    return b"\r\n".join(line for line in head.split(b"\r\n") if not line.startswith(b"date:"))


async def test_a_body_refused_before_it_is_read_closes_the_connection_and_says_so(
    mcp_registry: Registry,
) -> None:
    # A 413 answered from the declared length leaves the body unread: the
    # connection cannot carry another request, and the client is told not to
    # try (a client that reuses it would race the server's close).
    with trio.fail_after(TIMEOUT):
        limits = ConnectionLimits(max_message_size=1000)
        app = McpHttpApp(build(), mcp_registry, limits=limits)
        async with serving(app) as port:
            async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                message = modern_call(1, "instant")
                head = "".join(f"{k}: {v}\r\n" for k, v in headers_of(message).items())
                start = f"POST /mcp HTTP/1.1\r\nhost: x\r\n{head}content-length: 5000\r\n"
                await stream.send_all(start.encode() + b"\r\n")
                buffer = bytearray()
                response_head, body = await read_response(stream, buffer)
                assert response_head.startswith(b"HTTP/1.1 413 ")
                assert b"connection: close" in response_head.lower()
                assert json.loads(body)["error"]["code"] == -32600
                while chunk := await stream.receive_some(65536):  # then the server closes
                    buffer += chunk
                assert buffer == b""


@h11_only
async def test_a_cancelled_task_gets_no_one_write_and_hypercorn_state_stays_untouched() -> None:
    # Once h11's state moved on the bytes must go out; a task that is already
    # cancelled would be stopped at the send lock before writing, so it is
    # refused up front and the response is written the ordinary way.
    outcomes: list[bool] = []
    head = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}

    async def respond(send: Any) -> None:
        with trio.CancelScope() as cancelled:
            cancelled.cancel()
            outcomes.append(await hypercorn_compat.send_whole(send, head, b"no"))
        with trio.CancelScope(shield=True):  # the test leaves once the response is read
            outcomes.append(await hypercorn_compat.send_whole(send, head, b"ok"))

    with trio.fail_after(TIMEOUT):
        async with serving(bare_app(respond)) as port:
            async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                await stream.send_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
                response_head, body = await read_response(stream, bytearray())
    assert outcomes == [False, True]
    assert response_head.startswith(b"HTTP/1.1 200 ") and body == b"ok"
