"""MCP over WebSocket, end to end: a real trio-websocket server on 127.0.0.1.

Real clock and real sockets, so every test is bounded by ``trio.fail_after``
and the timeouts are kept small.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import pytest
import trio
from trio_websocket import ConnectionRejected, WebSocketConnection, open_websocket_url

from trio_mcp_cancel import (
    HardCancelEvent,
    Registry,
    RequestCancelled,
    RequestCancelledEvent,
    cancelled,
    checkpoint_cancelled,
)
from trio_mcp_cancel._protocol.registration import OnCancel
from trio_mcp_cancel._wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
)
from trio_mcp_cancel.http import bearer_auth
from trio_mcp_cancel.lowlevel.wire import (
    LATEST_LEGACY_VERSION,
    LEGACY_TOO_MANY_REQUESTS,
    REQUEST_CANCELLED,
)
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.testing import EventRecorder, assert_no_leaks
from trio_mcp_cancel.websocket import serve_mcp_websocket

Message = dict[str, Any]
TIMEOUT = 10
STREAM_CANCEL_TIMEOUT = 0.2


@attrs.frozen
class Record:
    """What a tool saw when it was stopped."""

    tool: str
    request_id: object
    namespace: str
    kind: str
    reason: str | None
    at: float


@attrs.define
class Probe:
    records: list[Record] = attrs.field(factory=list)

    def record(self, tool: str, ctx: Context, kind: str, reason: str | None) -> None:
        self.records.append(
            Record(tool, ctx.request_id, ctx.namespace, kind, reason, trio.current_time())
        )


def make_server(probe: Probe, on_cancel: OnCancel = "error") -> McpServer:
    server = McpServer("ws-test", "1.2.3", on_cancel=on_cancel)

    @server.tool()
    async def count(ctx: Context, n: int = 3, delay: float = 0.01) -> str:
        for i in range(1, n + 1):
            await checkpoint_cancelled()
            await trio.sleep(delay)
            await ctx.report_progress(i, total=n)
        return f"counted {n}"

    @server.tool()
    async def polite(ctx: Context) -> str:
        """Polls the flag: stops by itself."""
        try:
            while True:
                await checkpoint_cancelled()
                await trio.sleep(0.005)
        except RequestCancelled as exc:
            probe.record("polite", ctx, exc.kind, exc.reason)
            raise

    @server.tool()
    async def stubborn(ctx: Context) -> str:
        """Ignores the flag: only the hard cancel stops it."""
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancellation = ctx.request.cancellation
            assert cancellation is not None and cancelled()
            probe.record("stubborn", ctx, cancellation.kind, cancellation.reason)
            raise
        return "unreachable"

    @server.tool()
    async def whoami(ctx: Context) -> dict[str, Any]:
        caller = ctx.caller
        return {
            "namespace": ctx.namespace,
            "session": caller.session_id,
            "principal": caller.principal,
        }

    @server.tool()
    async def not_json(ctx: Context) -> dict[str, Any]:
        return {"a set": {1, 2}}

    return server


@asynccontextmanager
async def serving(server: McpServer, registry: Registry, **options: Any) -> AsyncIterator[str]:
    """Run ``serve_mcp_websocket`` on 127.0.0.1, port 0; yield ``ws://host:port``."""
    async with trio.open_nursery() as nursery:
        ws_server = await nursery.start(
            partial(serve_mcp_websocket, server, registry, "127.0.0.1", 0, **options)
        )
        yield f"ws://127.0.0.1:{ws_server.port}"
        nursery.cancel_scope.cancel()


def request(request_id: object, method: str, params: Message | None = None) -> Message:
    message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def call(request_id: object, name: str, arguments: Message | None = None, **params: Any) -> Message:
    return request(request_id, "tools/call", {"name": name, "arguments": arguments or {}, **params})


def cancel_note(request_id: object, reason: str | None = None) -> Message:
    params: Message = {"requestId": request_id}
    if reason is not None:
        params["reason"] = reason
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


async def send(ws: WebSocketConnection, message: object) -> None:
    await ws.send_message(json.dumps(message))


async def receive(ws: WebSocketConnection) -> Message:
    message = json.loads(await ws.get_message())
    assert isinstance(message, dict)
    return message


async def rpc(ws: WebSocketConnection, message: object) -> Message:
    await send(ws, message)
    return await receive(ws)


async def wait_until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await trio.sleep(0.005)


def cancelled_reply(request_id: object, reason: str) -> Message:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "code": REQUEST_CANCELLED,
            "message": "Request cancelled",
            "data": {"reason": reason},
        },
    }


async def test_initialize_ping_and_tools_list(mcp_registry: Registry) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(make_server(Probe()), mcp_registry) as url:
            async with open_websocket_url(url + "/mcp", subprotocols=["mcp"]) as ws:
                assert ws.subprotocol == "mcp"
                reply = await rpc(ws, request(1, "initialize", {"protocolVersion": "2025-03-26"}))
                assert reply["id"] == 1
                assert reply["result"]["protocolVersion"] == "2025-03-26"
                assert reply["result"]["serverInfo"] == {"name": "ws-test", "version": "1.2.3"}
                assert reply["result"]["capabilities"] == {
                    "tools": {"listChanged": True},
                    "logging": {},
                }
                await send(ws, {"jsonrpc": "2.0", "method": "notifications/initialized"})
                assert await rpc(ws, request("p", "ping")) == {
                    "jsonrpc": "2.0",
                    "id": "p",
                    "result": {},
                }
                reply = await rpc(ws, request(2, "tools/list"))
                names = [tool["name"] for tool in reply["result"]["tools"]]
                assert names == ["count", "polite", "stubborn", "whoami", "not_json"]
            # No subprotocol asked for, none chosen; the query string is ignored.
            async with open_websocket_url(url + "/mcp?x=1") as ws:
                assert ws.subprotocol is None
                reply = await rpc(ws, request(1, "initialize", {}))
                assert reply["result"]["protocolVersion"] == LATEST_LEGACY_VERSION
            assert_no_leaks(mcp_registry)


async def test_tools_call_streams_progress_then_the_result(mcp_registry: Registry) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(make_server(Probe()), mcp_registry) as url:
            async with open_websocket_url(url + "/mcp") as ws:
                message = call(7, "count", {"n": 3}, _meta={"progressToken": "tok"})
                await send(ws, message)
                received = [await receive(ws) for _ in range(4)]
            assert received[:3] == [
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": "tok", "progress": i, "total": 3},
                }
                for i in (1, 2, 3)
            ]
            assert received[3] == {
                "jsonrpc": "2.0",
                "id": 7,
                "result": {"content": [{"type": "text", "text": "counted 3"}], "isError": False},
            }
            assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=5)
async def test_cancel_by_notification(mcp_registry: Registry) -> None:
    probe = Probe()
    with trio.fail_after(TIMEOUT):
        async with (
            serving(make_server(probe), mcp_registry) as url,
        ):
            events = EventRecorder.attach(mcp_registry)
            async with open_websocket_url(url + "/mcp") as ws:
                await send(ws, call("job", "polite"))
                await wait_until(lambda: mcp_registry.in_flight_count == 1)
                await send(ws, cancel_note("job", "user pressed stop"))
                assert await receive(ws) == cancelled_reply("job", "user pressed stop")
                # The connection goes on serving.
                assert (await rpc(ws, request(2, "ping")))["result"] == {}
            [record] = probe.records
            assert (record.tool, record.request_id, record.kind, record.reason) == (
                "polite",
                "job",
                "client",
                "user pressed stop",
            )
            assert record.namespace.startswith("session:ws-")
            assert [e.kind for e in events.of_type(RequestCancelledEvent)] == ["client"]
            assert events.of_type(HardCancelEvent) == []
            assert_no_leaks(mcp_registry)


async def test_silent_on_cancel_sends_nothing(mcp_registry: Registry) -> None:
    with trio.fail_after(TIMEOUT):
        server = make_server(Probe(), on_cancel="silent")
        async with serving(server, mcp_registry) as url:
            async with open_websocket_url(url + "/mcp") as ws:
                await send(ws, call(1, "polite"))
                await wait_until(lambda: mcp_registry.in_flight_count == 1)
                await send(ws, cancel_note(1, "never mind"))
                await wait_until(lambda: mcp_registry.in_flight_count == 0)
                # Nothing was sent for request 1: the next message is the ping's.
                assert await rpc(ws, request(2, "ping")) == {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "result": {},
                }
            assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=60)
async def test_closing_the_socket_cancels_every_request_of_that_connection(
    mcp_registry: Registry,
) -> None:
    probe = Probe()
    with trio.fail_after(TIMEOUT):
        # A long registry grace period: the hard cancel must come from the
        # transport's own disconnect_grace_period.
        async with (
            serving(
                make_server(probe),
                mcp_registry,
                limits=ConnectionLimits(disconnect_grace_period=STREAM_CANCEL_TIMEOUT),
            ) as url,
        ):
            events = EventRecorder.attach(mcp_registry)
            async with open_websocket_url(url + "/mcp") as bystander:
                await send(bystander, call(1, "polite"))
                async with open_websocket_url(url + "/mcp") as ws:
                    await send(ws, call(1, "polite"))
                    await send(ws, call(2, "stubborn"))
                    await wait_until(lambda: mcp_registry.in_flight_count == 3)
                    closed_at = trio.current_time()
                # The polite tool stops at once, the stubborn one at the hard cancel.
                await wait_until(lambda: mcp_registry.in_flight_count == 1)
                done_at = trio.current_time()

                by_tool = {record.tool: record for record in probe.records}
                assert sorted(by_tool) == ["polite", "stubborn"]
                polite, stubborn = by_tool["polite"], by_tool["stubborn"]
                assert (polite.request_id, polite.kind, polite.reason) == (
                    1,
                    "disconnect",
                    "connection closed",
                )
                assert (stubborn.request_id, stubborn.kind, stubborn.reason) == (
                    2,
                    "disconnect",
                    "connection closed",
                )
                assert polite.namespace == stubborn.namespace
                assert polite.at < closed_at + STREAM_CANCEL_TIMEOUT
                assert closed_at + STREAM_CANCEL_TIMEOUT <= stubborn.at < closed_at + 5
                assert done_at - closed_at >= STREAM_CANCEL_TIMEOUT
                [hard] = events.of_type(HardCancelEvent)
                assert (hard.request_id, hard.kind) == (2, "disconnect")
                assert sorted(
                    (e.request_id, e.kind) for e in events.of_type(RequestCancelledEvent)
                ) == [(1, "disconnect"), (2, "disconnect")]

                # The other connection's request 1 was not touched.
                [survivor] = mcp_registry.requests()
                assert survivor.request_id == 1 and survivor.namespace != polite.namespace
                assert not survivor.cancelled
                await send(bystander, cancel_note(1, "now me"))
                assert await receive(bystander) == cancelled_reply(1, "now me")
            assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=5)
async def test_a_cancel_on_one_connection_does_not_touch_the_same_id_on_another(
    mcp_registry: Registry,
) -> None:
    probe = Probe()
    with trio.fail_after(TIMEOUT):
        async with (
            serving(make_server(probe), mcp_registry) as url,
        ):
            async with open_websocket_url(url + "/mcp") as a, open_websocket_url(url + "/mcp") as b:
                await send(a, call(1, "count", {"n": 20, "delay": 0.01}))
                await send(b, call(1, "polite"))
                await wait_until(lambda: mcp_registry.in_flight_count == 2)
                await send(b, cancel_note(1, "b only"))
                assert await receive(b) == cancelled_reply(1, "b only")
                [a_request] = mcp_registry.requests()
                assert a_request.request_id == 1 and not a_request.cancelled
                # A connection with nothing in flight cannot cancel A's request either.
                async with open_websocket_url(url + "/mcp") as c:
                    await send(c, cancel_note(1, "c"))
                    assert (await rpc(c, request(2, "ping")))["result"] == {}
                assert not a_request.cancelled
                assert await receive(a) == {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "result": {
                        "content": [{"type": "text", "text": "counted 20"}],
                        "isError": False,
                    },
                }
            assert [(r.tool, r.reason) for r in probe.records] == [("polite", "b only")]
            assert_no_leaks(mcp_registry)


def error(reply: Message) -> tuple[object, int]:
    assert "result" not in reply
    return reply["id"], reply["error"]["code"]


async def test_bad_input_is_answered_and_the_connection_keeps_serving(
    caplog: pytest.LogCaptureFixture,
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(make_server(Probe()), mcp_registry) as url:
            async with open_websocket_url(url + "/mcp") as ws:
                await ws.send_message("this is not json")
                assert error(await receive(ws)) == (None, PARSE_ERROR)
                await ws.send_message(b"\xff\xfe\x00\x80garbage")  # a binary frame
                assert error(await receive(ws)) == (None, PARSE_ERROR)
                await ws.send_message("[" * 100_000)
                assert error(await receive(ws)) == (None, PARSE_ERROR)
                await ws.send_message('{"jsonrpc":"2.0","id":1,"method":"ping","x":NaN}')
                assert error(await receive(ws)) == (None, PARSE_ERROR)
                # JSON in a binary frame is fine.
                await ws.send_message(json.dumps(request("bin", "ping")).encode())
                assert await receive(ws) == {"jsonrpc": "2.0", "id": "bin", "result": {}}

                assert error(await rpc(ws, [request(1, "ping")])) == (None, INVALID_REQUEST)
                for bad_id in (1.5, True, None, [1], "x" * 300):
                    assert error(await rpc(ws, request(bad_id, "ping"))) == (None, INVALID_REQUEST)
                    assert error(await rpc(ws, call(bad_id, "count"))) == (None, INVALID_REQUEST)
                bad_version = request(2, "ping") | {"jsonrpc": "1.0"}
                assert error(await rpc(ws, bad_version)) == (2, INVALID_REQUEST)
                assert error(await rpc(ws, request(3, "ping") | {"params": [1]})) == (
                    3,
                    INVALID_PARAMS,
                )
                assert error(await rpc(ws, request(4, "roots/list"))) == (4, METHOD_NOT_FOUND)
                assert error(await rpc(ws, call(5, "no-such-tool"))) == (5, INVALID_PARAMS)
                # Bad arguments are a tool error the model can read (SEP-1303).
                reply = await rpc(ws, call(6, "count", {"n": "3"}))
                assert reply["result"]["isError"] is True
                # A lone surrogate ("\ud800" is valid JSON) echoed in the error
                # data used to crash the connection when encoding the reply.
                await ws.send_message('{"jsonrpc":"2.0","id":7,"method":"\\ud800"}')
                reply = await receive(ws)
                assert error(reply) == (7, METHOD_NOT_FOUND)
                assert reply["error"]["data"] == {"method": "\ud800"}
                # A tool whose result is not JSON fails its own request only.
                reply = await rpc(ws, call(8, "not_json"))
                assert reply["id"] == 8
                if "error" in reply:
                    assert reply["error"]["code"] == INTERNAL_ERROR
                else:
                    assert reply["result"]["isError"] is True

                # Client responses and notifications, even odd ones, get no reply.
                await send(ws, {"jsonrpc": "2.0", "id": 99, "result": {}})
                await send(ws, {"jsonrpc": "2.0", "method": "notifications/whatever"})
                await send(ws, cancel_note({"not": "an id"}, "x"))
                await send(ws, cancel_note(12345))
                assert await rpc(ws, request(10, "ping")) == {
                    "jsonrpc": "2.0",
                    "id": 10,
                    "result": {},
                }
            assert mcp_registry.row_count == 0
            assert_no_leaks(mcp_registry)
        assert "WebSocket connection failed" not in caplog.text


@pytest.mark.mcp_registry(grace_period=5)
async def test_too_many_concurrent_requests(mcp_registry: Registry) -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving(
                make_server(Probe()),
                mcp_registry,
                limits=ConnectionLimits(max_concurrent_calls=2),
            ) as url,
        ):
            events = EventRecorder.attach(mcp_registry)
            async with open_websocket_url(url + "/mcp") as ws:
                await send(ws, call(1, "polite"))
                await send(ws, call(2, "polite"))
                await wait_until(lambda: mcp_registry.in_flight_count == 2)
                assert await rpc(ws, call(3, "count")) == {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "error": {
                        "code": LEGACY_TOO_MANY_REQUESTS,
                        "message": "Too many concurrent requests",
                        "data": {"limit": "channel", "max": 2},
                    },
                }
                assert mcp_registry.in_flight_count == 2
                # Other methods are not limited.
                assert (await rpc(ws, request(4, "ping")))["result"] == {}
                # A finished request frees its slot.
                await send(ws, cancel_note(1, "make room"))
                assert await receive(ws) == cancelled_reply(1, "make room")
                reply = await rpc(ws, call(5, "count", {"n": 1}))
                assert reply["result"]["content"][0]["text"] == "counted 1"
                await send(ws, cancel_note(2, "done"))
                assert await receive(ws) == cancelled_reply(2, "done")
            assert sorted(e.request_id for e in events.of_type(RequestCancelledEvent)) == [1, 2]
            assert_no_leaks(mcp_registry)


async def test_a_wrong_path_is_rejected(mcp_registry: Registry) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(make_server(Probe()), mcp_registry) as url:
            for path in ("/", "/nope", "/mcp/extra", "/MCP"):
                with pytest.raises(ConnectionRejected) as rejected:
                    async with open_websocket_url(url + path):
                        pass  # pragma: no cover
                assert rejected.value.status_code == 404
            async with open_websocket_url(url + "/mcp") as ws:
                assert (await rpc(ws, request(1, "ping")))["result"] == {}


async def test_a_repeated_authorization_or_origin_header_is_refused_not_read_as_its_last_copy(
    mcp_registry: Registry,
) -> None:
    auth = bearer_auth({"s3cret": "alice"})
    with trio.fail_after(TIMEOUT):
        async with (
            serving(make_server(Probe()), mcp_registry, auth=auth) as url,
        ):
            good = (b"authorization", b"Bearer s3cret")
            for headers in (
                [(b"authorization", b"Bearer nope"), good],
                [good, (b"origin", b"http://localhost"), (b"Origin", b"http://evil.example")],
            ):
                with pytest.raises(ConnectionRejected) as rejected:
                    async with open_websocket_url(url + "/mcp", extra_headers=headers):
                        pass  # pragma: no cover
                assert rejected.value.status_code == 400
                assert b"is repeated" in (rejected.value.body or b"")
            async with open_websocket_url(url + "/mcp", extra_headers=[good]) as ws:
                assert (await rpc(ws, call(1, "whoami")))["result"]["structuredContent"][
                    "principal"
                ] == "alice"


async def test_bearer_auth(mcp_registry: Registry) -> None:
    auth = bearer_auth({"s3cret": "alice"})
    with trio.fail_after(TIMEOUT):
        async with (
            serving(make_server(Probe()), mcp_registry, auth=auth) as url,
        ):
            for headers in (
                [],
                [(b"authorization", b"Bearer wrong")],
                [(b"authorization", b"s3cret")],
            ):
                with pytest.raises(ConnectionRejected) as rejected:
                    async with open_websocket_url(url + "/mcp", extra_headers=headers):
                        pass  # pragma: no cover
                assert rejected.value.status_code == 401
                assert (b"www-authenticate", b"Bearer") in [
                    (name.lower(), value) for name, value in rejected.value.headers
                ]
            good = [(b"Authorization", b"Bearer s3cret")]
            async with open_websocket_url(url + "/mcp", extra_headers=good) as ws:
                reply = await rpc(ws, call(1, "whoami"))
            who = reply["result"]["structuredContent"]
            assert who["principal"] == "alice"
            assert who["session"].startswith("ws-")
            # The scope is the connection's session, not the principal: two
            # connections of one principal do not share ids.
            assert who["namespace"] == f"session:{who['session']}"
            # The path is checked before the credentials.
            with pytest.raises(ConnectionRejected) as rejected:
                async with open_websocket_url(url + "/other", extra_headers=good):
                    pass  # pragma: no cover
            assert rejected.value.status_code == 404
            assert_no_leaks(mcp_registry)


def _masked_text_frame(text: str) -> bytes:
    """One client-to-server WebSocket text frame (clients must mask; RFC 6455 5.3)."""
    payload = text.encode()
    mask = os.urandom(4)
    if len(payload) < 126:
        head = bytes([0x81, 0x80 | len(payload)])
    else:
        head = bytes([0x81, 0x80 | 126]) + len(payload).to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


@pytest.mark.mcp_registry(grace_period=5)
async def test_a_peer_that_answers_no_ping_is_disconnected_and_its_calls_cancelled(
    mcp_registry: Registry,
) -> None:
    # A raw client: it completes the handshake and sends one call, then never
    # reads again, so the server's pings go unanswered (a vanished peer).
    with trio.fail_after(TIMEOUT):
        probe = Probe()
        async with (
            serving(
                make_server(probe), mcp_registry, limits=ConnectionLimits(keepalive_interval=0.2)
            ) as url,
        ):
            events = EventRecorder.attach(mcp_registry)
            port = int(url.rsplit(":", 1)[1])
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            key = base64.b64encode(os.urandom(16))
            await stream.send_all(
                b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                b"Sec-WebSocket-Key: " + key + b"\r\n\r\n"
            )
            head = b""
            while b"\r\n\r\n" not in head:
                head += await stream.receive_some()
            assert head.startswith(b"HTTP/1.1 101")
            await stream.send_all(_masked_text_frame(json.dumps(call(1, "polite"))))
            while mcp_registry.in_flight_count == 0:
                await trio.sleep(0.01)
            await mcp_registry.wait_idle()  # ended by the missed pong, not by the peer
            [cancelled] = events.of_type(RequestCancelledEvent)
            assert (cancelled.request_id, cancelled.kind) == (1, "disconnect")
            assert [record.tool for record in probe.records] == ["polite"]
            await stream.aclose()
            assert_no_leaks(mcp_registry)
