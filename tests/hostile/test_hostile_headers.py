"""Header bounds hold as written (issue 20, must-have 6, HTTP parts).

* A header that must appear once (``Mcp-Method``, ``Mcp-Name``,
  ``MCP-Protocol-Version``, ``Mcp-Param-*``, ``Mcp-Session-Id``,
  ``Authorization``, ``Content-Type``, ``Content-Length``, ``Origin``) sent
  twice is a ``400`` before anything acts on either copy: a gateway that
  routes, allow-lists or authenticates on the first copy must never see
  another request than the server.  ``Accept`` may repeat (its values
  combine).
* The head-size bound (16 KiB, as ``server_config()``'s) holds however the
  bytes arrive: in one write (which hypercorn's HTTP/1.1 bound, applied
  only to an incomplete head, would let through) or trickled.

Most run in memory through :mod:`_support.asgi`; one of each over a real socket.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import HttpLimits, McpHttpApp, bearer_auth, serve, server_config
from trio_mcp_cancel.server import Context, McpServer

from _support.asgi import (
    ACCEPT,
    AsgiClient,
    HttpExchange,
    initialize_message,
    legacy_call,
    legacy_headers,
    modern_call,
    modern_headers,
    served,
)

TOKEN = "tokA"
AUTH = f"Bearer {TOKEN}"
REGION_SCHEMA = {
    "type": "object",
    "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
    "required": ["region"],
}
TIMEOUT = 10


class Repeated(list[tuple[str, str]]):
    """Header pairs, repeats included, where the harness takes a dict (it calls ``.items()``)."""

    def items(self) -> list[tuple[str, str]]:  # type: ignore[override]
        return list(self)


def with_copy(headers: dict[str, str], name: str, first: str) -> Repeated:
    """*headers* with *name* sent twice: *first*, then the copy the body agrees with."""
    pairs = Repeated((k, v) for k, v in headers.items() if k != name)
    pairs.append((name, first))
    pairs.append((name, headers.get(name, first)))
    return pairs


def build(ran: list[str]) -> McpServer:
    server = McpServer("headers-test")

    @server.tool(input_schema=REGION_SCHEMA)
    async def routed(ctx: Context, region: str) -> str:
        ran.append(region)
        return region

    @server.tool()
    async def admin(ctx: Context) -> str:
        ran.append("admin")
        return "admin"

    return server


#: The registry of every test here (the ``mcp_registry`` fixture).
pytestmark = pytest.mark.mcp_registry(grace_period=1)


@asynccontextmanager
async def serving(registry: Registry, ran: list[str], **options: Any) -> AsyncIterator[AsgiClient]:
    app = McpHttpApp(build(ran), registry, auth=bearer_auth({TOKEN: "alice"}), **options)
    async with served(app) as client:
        yield client


def refused_for(exchange: HttpExchange, header: str) -> None:
    assert exchange.status == 400, exchange.content
    error = exchange.json()["error"]
    assert error["code"] == -32600
    assert header in error["message"] and "repeated" in error["message"]


def modern_routed() -> tuple[dict[str, Any], dict[str, str]]:
    message = modern_call(1, "routed", {"region": "eu"})
    headers = modern_headers("tools/call", "routed", authorization=AUTH)
    headers["mcp-param-region"] = "eu"
    return message, headers


# What the first (gateway-visible) copy says, per header.
FIRST_COPIES = {
    "mcp-method": "tools/list",
    "mcp-name": "admin",
    "mcp-protocol-version": "2025-11-25",
    "mcp-param-region": "us",
    "authorization": "Bearer nope",
    "content-type": "text/plain",
    "origin": "http://localhost:1",
    "content-length": "2",
}


@pytest.mark.parametrize("header", sorted(FIRST_COPIES))
async def test_a_repeated_singleton_header_is_400_in_the_modern_era(
    autojump_clock: trio.testing.MockClock, header: str, mcp_registry: Registry
) -> None:
    ran: list[str] = []
    async with serving(mcp_registry, ran) as client:
        message, headers = modern_routed()
        if header == "content-length":
            headers["content-length"] = str(len(json.dumps(message)))
        if header == "origin":
            headers["origin"] = "http://localhost:2"
        exchange = await client.post(with_copy(headers, header, FIRST_COPIES[header]), message)  # type: ignore[arg-type]
        refused_for(exchange, header)
        # The same request with one copy is served: the refusal was the repeat.
        assert (await client.post(headers, message)).status == 200
    assert ran == ["eu"]


@pytest.mark.parametrize(
    "header", ["mcp-session-id", "authorization", "content-type", "mcp-protocol-version"]
)
async def test_a_repeated_singleton_header_is_400_in_the_legacy_era(
    autojump_clock: trio.testing.MockClock, header: str, mcp_registry: Registry
) -> None:
    ran: list[str] = []
    async with serving(mcp_registry, ran) as client:
        exchange = await client.post(
            legacy_headers(version=None, authorization=AUTH), initialize_message()
        )
        session = exchange.headers["mcp-session-id"]
        headers = legacy_headers(session, authorization=AUTH)
        first = {"mcp-session-id": "another-session", **FIRST_COPIES}[header]
        message = legacy_call(2, "admin")
        refused_for(await client.post(with_copy(headers, header, first), message), header)  # type: ignore[arg-type]
        assert ran == []


async def test_a_repeated_accept_header_combines_its_values(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    ran: list[str] = []
    async with serving(mcp_registry, ran) as client:
        message, headers = modern_routed()
        del headers["accept"]
        pairs = Repeated(headers.items())
        pairs += [("accept", "application/json"), ("accept", "text/event-stream")]
        exchange = await client.post(pairs, message)  # type: ignore[arg-type]
        assert exchange.status == 200, exchange.content
    assert ran == ["eu"]


async def test_a_head_over_the_bound_is_431_and_one_within_it_is_served(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    ran: list[str] = []
    async with serving(mcp_registry, ran) as client:
        message, headers = modern_routed()
        big = await client.post({**headers, "x-pad": "a" * (16 * 1024)}, message)
        assert big.status == 431, big.content
        assert big.json()["error"]["code"] == -32600
        fits = await client.post({**headers, "x-pad": "a" * (12 * 1024)}, message)
        assert fits.status == 200, fits.content
    assert ran == ["eu"]


async def test_the_head_bound_is_configurable(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    ran: list[str] = []
    async with serving(
        mcp_registry, ran, http_limits=HttpLimits(max_head_size=64 * 1024)
    ) as client:
        message, headers = modern_routed()
        exchange = await client.post({**headers, "x-pad": "a" * (40 * 1024)}, message)
        assert exchange.status == 200, exchange.content
    async with serving(mcp_registry, ran, http_limits=HttpLimits(max_head_size=1024)) as client:
        exchange = await client.post({**headers, "x-pad": "a" * 1024}, message)
        assert exchange.status == 431


async def test_a_refusal_from_the_head_reads_the_body_it_drops_within_the_body_bounds(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    """A refused POST is answered once its body was read (so no stream is left sending),
    but a body that stalls is not waited for longer than ``body_timeout``."""
    ran: list[str] = []
    async with serving(mcp_registry, ran, http_limits=HttpLimits(body_timeout=3)) as client:
        message, headers = modern_routed()
        refused = {**headers, "content-type": "text/plain"}
        whole = client.start("POST", refused, message, chunk_size=16)
        await whole.done.wait()
        assert (whole.status, whole.started_at) == (415, 0)
        assert whole._pending == []  # every piece of the body was taken
        stalled = client.start("POST", refused, message, chunk_size=16)
        stalled.stall_body()
        await stalled.done.wait()
        assert (stalled.status, stalled.started_at) == (415, 3)
    assert ran == []


# -- over real sockets ----------------------------------------------------------


async def start(nursery: trio.Nursery) -> int:
    app = McpHttpApp(build([]), auth=bearer_auth({TOKEN: "alice"}))
    binds = await nursery.start(partial(serve, app, server_config(port=0, errorlog=None)))
    return int(binds[0].rsplit(":", 1)[1])


def http11_head(extra: str = "", body: bytes = b"") -> bytes:
    return (
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        f"accept: {ACCEPT}\r\ncontent-type: application/json\r\n"
        f"authorization: {AUTH}\r\ncontent-length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


async def http11_status(port: int, chunks: list[bytes]) -> int:
    """Send *chunks* one write each; the response's status."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        for chunk in chunks:
            try:
                await stream.send_all(chunk)
            except trio.BrokenResourceError:
                break  # refused mid-head: the server closed the connection
            await trio.lowlevel.checkpoint()
        received = b""
        while b"\r\n" not in received:
            data = await stream.receive_some()
            assert data, "closed without an answer"
            received += data
        return int(received.split(b" ", 2)[1])


def initialize_bytes() -> bytes:
    return json.dumps(initialize_message()).encode()


async def test_a_large_http11_head_in_one_write_is_431(nursery: trio.Nursery) -> None:
    port = await start(nursery)
    with trio.fail_after(TIMEOUT):
        pad = "x-pad: " + "a" * (63 * 1024) + "\r\n"
        assert await http11_status(port, [http11_head(pad, initialize_bytes())]) == 431
        assert await http11_status(port, [http11_head("", initialize_bytes())]) == 200
    nursery.cancel_scope.cancel()


async def test_a_large_http11_head_trickled_is_431(nursery: trio.Nursery) -> None:
    port = await start(nursery)
    with trio.fail_after(TIMEOUT):
        whole = http11_head("x-pad: " + "a" * (20 * 1024) + "\r\n", initialize_bytes())
        chunks = [whole[i : i + 1024] for i in range(0, len(whole), 1024)]
        assert await http11_status(port, chunks) == 431
        fits = http11_head("x-pad: " + "a" * (12 * 1024) + "\r\n", initialize_bytes())
        assert (
            await http11_status(port, [fits[i : i + 1024] for i in range(0, len(fits), 1024)])
            == 200
        )
    nursery.cancel_scope.cancel()


async def test_a_repeated_mcp_name_over_http2_is_400(nursery: trio.Nursery) -> None:
    port = await start(nursery)
    with trio.fail_after(TIMEOUT):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        message, headers = modern_routed()
        body = json.dumps(message).encode()
        pairs = [(":method", "POST"), (":path", "/mcp"), (":scheme", "http")]
        pairs += [(":authority", "127.0.0.1"), *with_copy(headers, "mcp-name", "admin")]
        conn.send_headers(1, pairs)
        conn.send_data(1, body, end_stream=True)
        await stream.send_all(conn.data_to_send())
        events: list[h2.events.Event] = []
        while not any(isinstance(e, h2.events.StreamEnded) for e in events):
            data = await stream.receive_some()
            assert data
            events += conn.receive_data(data)
        (head,) = [e for e in events if isinstance(e, h2.events.ResponseReceived)]
        assert dict(head.headers)[b":status"] == b"400"
        content = b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))
        assert "mcp-name" in json.loads(content)["error"]["message"]
        await stream.aclose()
    nursery.cancel_scope.cancel()
