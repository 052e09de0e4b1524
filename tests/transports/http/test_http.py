"""End to end: a real hypercorn server on 127.0.0.1 talking Streamable HTTP.

These use the real clock (autojump would skip over socket waits), small
grace periods, and ``trio.fail_after`` on every test so a hang fails fast.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import httpx
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from trio_mcp_cancel import (
    HardCancelEvent,
    Registry,
    RequestCancelledEvent,
    open_registry,
)
from trio_mcp_cancel.http import McpHttpApp, bearer_auth
from trio_mcp_cancel.lowlevel import current_request
from trio_mcp_cancel.lowlevel.wire import REQUEST_CANCELLED
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.testing import EventRecorder, assert_no_leaks

from _support.http_server import call, server, tool_log
from _support.plain_asgi import ALSO_PLAIN_ASGI, asgi_paths  # noqa: F401 (a fixture)

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
TIMEOUT = 10

Serve = Callable[..., Awaitable[tuple[str, Registry]]]
EARLY = 0.2


@pytest.fixture
async def serve_app(nursery: trio.Nursery) -> AsyncIterator[Serve]:
    """Start ``McpHttpApp(server, registry, **options)`` on a random port."""
    stack: list[Registry] = []

    async def start(
        *, grace: float = 0.3, mcp: McpServer = server, **options: Any
    ) -> tuple[str, Registry]:
        async def run(task_status: trio.TaskStatus[tuple[str, Registry]]) -> None:
            # Early cancels (kept for a request whose POST comes after its
            # cancel's) live briefly here, so teardown can wait them out.
            async with open_registry(grace_period=grace, early_cancel_ttl=EARLY) as registry:
                config = Config()
                config.bind = ["127.0.0.1:0"]
                config.errorlog = None
                config.graceful_timeout = 0.5
                app = McpHttpApp(mcp, registry, **options)
                binds = await nursery.start(partial(serve, app, config))  # type: ignore[arg-type]
                stack.append(registry)
                task_status.started((f"{binds[0]}/mcp", registry))
                await trio.sleep_forever()

        result: tuple[str, Registry] = await nursery.start(run)
        return result

    yield start
    for registry in stack:
        if registry.row_count:
            await trio.sleep(EARLY)
            registry.cleanup()
        assert_no_leaks(registry)
    nursery.cancel_scope.cancel()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        yield client


async def wait_in_flight(registry: Registry, count: int = 1) -> None:
    """Poll until the server is running *count* tracked requests."""
    while registry.in_flight_count < count:
        await trio.sleep(0.01)


def cancel(request_id: object, reason: str | None = None) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": request_id, "reason": reason},
    }


async def initialize(client: httpx.AsyncClient, url: str, **headers: str) -> dict[str, str]:
    message = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t"},
        },
    }
    reply = await client.post(url, headers={**HEADERS, **headers}, json=message)
    assert reply.status_code == 200
    assert final(reply)["result"]["protocolVersion"] == "2025-06-18"
    session = reply.headers["mcp-session-id"]
    assert len(session) >= 32
    return {**HEADERS, **headers, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}


def final(response: httpx.Response) -> Any:
    """The JSON-RPC answer of a read reply: its JSON body, or its SSE stream's last message.

    A cancellable tool call still running when it first suspends is answered
    on an SSE stream; everything else with one JSON body.
    """
    if response.headers["content-type"] == "application/json":
        return response.json()
    assert response.headers["content-type"] == "text/event-stream"
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return json.loads(data[-1]) if data else None  # a client-cancelled call ends silently


async def sse(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The messages of a reply: an SSE stream, or one JSON body when nothing streamed."""
    if response.headers["content-type"] == "application/json":
        yield json.loads(await response.aread())
        return
    assert response.headers["content-type"] == "text/event-stream"
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


async def stream_and_cancel(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], at: int, reason: str
) -> list[dict[str, Any]]:
    """Stream a counting call (id 1) and cancel it by notification at progress *at*."""
    messages: list[dict[str, Any]] = []
    async with client.stream(
        "POST", url, headers=headers, json=call(1, "count", {}, token="p")
    ) as response:
        async for message in sse(response):
            messages.append(message)
            if message.get("params", {}).get("progress") == at:
                reply = await client.post(url, headers=headers, json=cancel(1, reason))
                assert reply.status_code == 202 and reply.content == b""
    return messages


@ALSO_PLAIN_ASGI
async def test_initialize_list_and_call(serve_app: Serve, client: httpx.AsyncClient) -> None:
    with trio.fail_after(TIMEOUT):
        url, _ = await serve_app()
        headers = await initialize(client, url)
        listed = await client.post(
            url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        )
        assert {t["name"] for t in final(listed)["result"]["tools"]} == set(
            server.registration.tools
        )
        assert {"count", "stubborn", "echo", "quick"} <= set(server.registration.tools)
        pong = await client.post(
            url, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}
        )
        assert final(pong) == {"jsonrpc": "2.0", "id": 2, "result": {}}
        async with client.stream(
            "POST", url, headers=headers, json=call(3, "count", {"n": 3, "delay": 0}, token="t")
        ) as response:
            messages = [m async for m in sse(response)]
        assert [m["params"]["progress"] for m in messages[:-1]] == [1, 2, 3]
        assert messages[-1]["result"]["content"] == [{"type": "text", "text": "counted to 3"}]


@ALSO_PLAIN_ASGI
async def test_sessions_are_required_and_can_end(
    serve_app: Serve, client: httpx.AsyncClient
) -> None:
    with trio.fail_after(TIMEOUT):
        url, _ = await serve_app()
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        missing = await client.post(url, headers=HEADERS, json=ping)
        assert missing.status_code == 400
        unknown = await client.post(url, headers={**HEADERS, "mcp-session-id": "nope"}, json=ping)
        assert unknown.status_code == 404
        headers = await initialize(client, url)
        assert (await client.post(url, headers=headers, json=ping)).status_code == 200
        assert (await client.delete(url, headers=headers)).status_code == 204
        assert (await client.post(url, headers=headers, json=ping)).status_code == 404


@ALSO_PLAIN_ASGI
async def test_cancel_by_notification(serve_app: Serve, client: httpx.AsyncClient) -> None:
    with trio.fail_after(TIMEOUT):
        url, registry = await serve_app(grace=5)
        events = EventRecorder.attach(registry)
        headers = await initialize(client, url)
        messages = await stream_and_cancel(client, url, headers, 2, "stop\nnow")
        # MCP: after the client's cancel nothing more is sent, neither the
        # response nor progress; the stream just ends.
        assert [m["method"] for m in messages] == ["notifications/progress"] * len(messages)
        assert messages[-1]["params"]["progress"] == 2
        [event] = events.of_type(RequestCancelledEvent)
        assert (event.request_id, event.kind, event.reason) == (1, "client", "stop now")
        # It stopped cooperatively, long before the 5 s grace period.
        await registry.wait_idle()
        assert events.names() == ["request.cancelled", "request.stopped"]


@ALSO_PLAIN_ASGI
async def test_cancel_by_disconnect(serve_app: Serve, client: httpx.AsyncClient) -> None:
    with trio.fail_after(TIMEOUT):
        url, registry = await serve_app(
            grace=5,
            limits=ConnectionLimits(disconnect_grace_period=0.2),
            resume_window=0,  # no waiting for a resume (see test_resumption.py)
        )
        events = EventRecorder.attach(registry)
        headers = await initialize(client, url)
        async with client.stream(
            "POST", url, headers=headers, json=call(1, "count", {}, token="p")
        ) as response:
            async for _ in sse(response):
                break  # drop the stream after the first progress event
        await registry.wait_idle()
        cancelled = events.of_type(RequestCancelledEvent)
        assert [(e.request_id, e.kind, e.reason) for e in cancelled] == [
            (1, "disconnect", "client disconnected")
        ]
        assert events.of_type(HardCancelEvent) == []  # the polite tool stopped by itself


@ALSO_PLAIN_ASGI
async def test_disconnect_hard_cancels_a_stubborn_tool(
    serve_app: Serve, client: httpx.AsyncClient
) -> None:
    with trio.fail_after(TIMEOUT):
        url, registry = await serve_app(
            grace=60,
            limits=ConnectionLimits(disconnect_grace_period=0.2),
            resume_window=0,  # no waiting for a resume (see test_resumption.py)
        )
        events = EventRecorder.attach(registry)
        headers = await initialize(client, url)
        tool_log.clear()
        started = trio.current_time()
        with trio.move_on_after(0.3):
            await client.post(url, headers=headers, json=call(7, "stubborn", {}))
        await registry.wait_idle()
        assert trio.current_time() - started < 5  # not the 60 s grace: the stream timeout
        assert tool_log == ["stubborn 7 hard-cancelled"]
        assert [(e.request_id, e.kind) for e in events.of_type(HardCancelEvent)] == [
            (7, "disconnect")
        ]


async def test_cross_scope_cancel_is_refused(serve_app: Serve, client: httpx.AsyncClient) -> None:
    with trio.fail_after(TIMEOUT):
        url, registry = await serve_app()
        alice = await initialize(client, url)
        mallory = await initialize(client, url)
        async with trio.open_nursery() as nursery:
            results: dict[str, Any] = {}

            async def run(name: str, headers: dict[str, str]) -> None:
                reply = await client.post(
                    url, headers=headers, json=call(1, "count", {"n": 15, "delay": 0.02})
                )
                results[name] = final(reply)

            nursery.start_soon(run, "alice", alice)
            nursery.start_soon(run, "mallory", mallory)
            await wait_in_flight(registry, 2)
            # Mallory can only cancel her own request 1; Alice's runs to completion.
            assert (
                await client.post(url, headers=mallory, json=cancel(1, "gotcha"))
            ).status_code == 202
        assert results["alice"]["result"]["content"][0]["text"] == "counted to 15"
        assert results["mallory"] is None  # cancelled by its client: no answer


@ALSO_PLAIN_ASGI
async def test_principals_scope_cancels_without_sessions(
    serve_app: Serve, client: httpx.AsyncClient
) -> None:
    with trio.fail_after(TIMEOUT):
        auth = bearer_auth({"token-a": "alice", "token-b": "bob"})
        url, registry = await serve_app(sessions=False, auth=auth)
        events = EventRecorder.attach(registry)
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        denied = await client.post(url, headers=HEADERS, json=ping)
        assert denied.status_code == 401 and denied.headers["www-authenticate"] == "Bearer"
        wrong = await client.post(
            url, headers={**HEADERS, "authorization": "Bearer nope"}, json=ping
        )
        assert wrong.status_code == 401
        alice = {**HEADERS, "authorization": "Bearer token-a"}
        bob = {**HEADERS, "authorization": "Bearer token-b"}
        async with trio.open_nursery() as nursery:
            replies: list[dict[str, Any]] = []

            async def run() -> None:
                async with client.stream(
                    "POST", url, headers=alice, json=call(5, "count", {"n": 200})
                ) as response:
                    replies.extend([m async for m in sse(response)])

            nursery.start_soon(run)
            while not registry.in_flight(5, "principal:alice"):
                await trio.sleep(0.01)
            await client.post(url, headers=bob, json=cancel(5, "not yours"))
            assert not registry.requests()[0].cancelled
            await client.post(url, headers=alice, json=cancel(5, "mine"))
        assert all("id" not in reply for reply in replies)  # ended without an answer
        assert [(e.namespace, e.reason) for e in events.of_type(RequestCancelledEvent)] == [
            ("principal:alice", "mine")
        ]


@ALSO_PLAIN_ASGI
async def test_delete_session_cancels_its_requests(
    serve_app: Serve, client: httpx.AsyncClient
) -> None:
    with trio.fail_after(TIMEOUT):
        url, registry = await serve_app(grace=5)
        headers = await initialize(client, url)
        async with trio.open_nursery() as nursery:
            replies: list[dict[str, Any]] = []

            async def run() -> None:
                async with client.stream(
                    "POST", url, headers=headers, json=call(1, "count", {})
                ) as response:
                    replies.extend([m async for m in sse(response)])

            nursery.start_soon(run)
            await wait_in_flight(registry)
            assert (await client.delete(url, headers=headers)).status_code == 204
        assert replies[-1]["error"]["data"]["reason"] == "session terminated"


@ALSO_PLAIN_ASGI
async def test_json_response_mode(serve_app: Serve, client: httpx.AsyncClient) -> None:
    with trio.fail_after(TIMEOUT):
        url, registry = await serve_app(json_response=True)
        headers = await initialize(client, url)
        done = await client.post(url, headers=headers, json=call(1, "echo", {"text": "hi"}))
        assert done.headers["content-type"] == "application/json"
        assert final(done)["result"]["content"][0]["text"] == "hi"
        async with trio.open_nursery() as nursery:
            replies: list[httpx.Response] = []

            async def run() -> None:
                replies.append(await client.post(url, headers=headers, json=call(2, "count", {})))

            nursery.start_soon(run)
            await wait_in_flight(registry)
            await client.post(url, headers=headers, json=cancel(2, "json mode"))
        assert final(replies[0])["error"]["code"] == REQUEST_CANCELLED


@ALSO_PLAIN_ASGI
async def test_silent_cancel_ends_the_stream_without_a_response(
    serve_app: Serve, client: httpx.AsyncClient
) -> None:
    silent = McpServer("silent", on_cancel="silent")
    silent.registration.tools = server.registration.tools
    with trio.fail_after(TIMEOUT):
        url, registry = await serve_app(mcp=silent)
        headers = await initialize(client, url)
        messages = await stream_and_cancel(client, url, headers, 1, "hush")
        # The stream closed cleanly and carried progress only: no response.
        assert messages and all(m.get("method") == "notifications/progress" for m in messages)
        await registry.wait_idle()


BAD_INPUTS = [
    # (body, headers override, expected status, expected JSON-RPC code or None)
    (b"{not json", {}, 400, -32700),
    (b"", {}, 400, -32700),
    (b"\xff\xfe", {}, 400, -32700),
    (b"[" * 60_000, {}, 400, -32700),
    (b"1" * 5000, {}, 400, -32700),
    (b"NaN", {}, 400, -32700),
    (json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]).encode(), {}, 400, -32600),
    (json.dumps({"jsonrpc": "1.0", "id": 1, "method": "ping"}).encode(), {}, 400, -32600),
    (json.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}).encode(), {}, 400, -32600),
    (json.dumps({"jsonrpc": "2.0", "id": "x" * 300, "method": "ping"}).encode(), {}, 400, -32600),
    (json.dumps({"jsonrpc": "2.0", "id": [1], "method": "ping"}).encode(), {}, 400, -32600),
    (json.dumps({"jsonrpc": "2.0", "id": 1, "method": 5}).encode(), {}, 400, -32600),
    (
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}).encode(),
        {},
        400,
        -32602,
    ),
    (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "nope"}).encode(), {}, 200, -32601),
    (json.dumps(call(1, "missing", {})).encode(), {}, 200, -32602),
    (json.dumps(cancel([1, 2])).encode(), {}, 202, None),
    (json.dumps(cancel("x" * 10_000)).encode(), {}, 202, None),
    (b"{}", {"content-type": "text/plain"}, 415, -32600),
    (b"{}", {"accept": "text/html"}, 406, -32600),
    (b"{}", {"mcp-protocol-version": "1999-01-01"}, 400, -32600),
    (b"{}", {"origin": "https://evil.example"}, 403, -32600),
    (b"x" * (70_000), {}, 413, -32600),
]


@ALSO_PLAIN_ASGI
async def test_bad_input_gets_clear_errors_and_the_server_keeps_serving(
    serve_app: Serve, client: httpx.AsyncClient
) -> None:
    with trio.fail_after(TIMEOUT * 2):
        url, registry = await serve_app(limits=ConnectionLimits(max_message_size=65_536))
        headers = await initialize(client, url)
        for body, override, status, code in BAD_INPUTS:
            reply = await client.post(url, headers={**headers, **override}, content=body)
            assert reply.status_code == status, (body[:40], reply.text)
            if code is None:
                assert reply.content == b""
            else:
                error = final(reply)["error"]
                assert error["code"] == code, (body[:40], error)
                assert isinstance(error["message"], str)
        # GET is the session's SSE stream: a client that does not take SSE gets 406.
        json_only = {**headers, "accept": "application/json"}
        assert (await client.get(url, headers=json_only)).status_code == 406
        assert (await client.post(url + "/other", headers=headers, json={})).status_code == 404
        local = await client.post(
            url,
            headers={**headers, "origin": "http://localhost:3000"},
            json={"jsonrpc": "2.0", "id": 9, "method": "ping"},
        )
        assert final(local)["result"] == {}
        # Wrong arguments are a tool error the model can read (SEP-1303).
        bad_args = await client.post(url, headers=headers, json=call(1, "echo", {"text": 5}))
        assert final(bad_args)["result"]["isError"] is True
        assert registry.row_count == 0 and registry.in_flight_count == 0


@server.tool(cancellable=False)
async def quick(ctx: Context, text: str) -> str:
    """Not tracked: answered without a disconnect watcher."""
    assert current_request(None) is None
    await trio.lowlevel.checkpoint()
    return text.upper()


async def test_non_cancellable_tool_is_not_tracked(
    serve_app: Serve, client: httpx.AsyncClient
) -> None:
    with trio.fail_after(TIMEOUT):
        url, registry = await serve_app()
        headers = await initialize(client, url)
        seen: list[int] = []
        registry.events.subscribe(lambda event: seen.append(1))
        reply = await client.post(url, headers=headers, json=call(1, "quick", {"text": "hi"}))
        assert final(reply)["result"]["content"][0]["text"] == "HI"
        # Cancelling it cancels nothing: it was never in flight (the cancel is
        # at most kept a moment, in case its request is still on its way).
        await client.post(url, headers=headers, json=cancel(1))
        assert seen == [] and registry.in_flight_count == 0
        odd = await client.post(url, headers=headers, json=call(2, ["not", "a", "name"], {}))  # type: ignore[arg-type]
        assert final(odd)["error"]["code"] == -32602


async def test_a_cancel_flood_leaves_no_rows_and_denies_no_one(
    serve_app: Serve, client: httpx.AsyncClient
) -> None:
    with trio.fail_after(TIMEOUT * 2):
        url, registry = await serve_app(grace=5)
        victim = await initialize(client, url)
        flooder = await initialize(client, url)
        async with trio.open_nursery() as nursery:
            replies: list[dict[str, Any]] = []

            async def run() -> None:
                reply = await client.post(url, headers=victim, json=call(1, "count", {"n": 500}))
                replies.append(final(reply))

            nursery.start_soon(run)
            await wait_in_flight(registry)
            # 300 cancels for every id the victim might use, and garbage ids.
            ids: list[object] = [*range(150), *(str(i) for i in range(100)), 1.5, None, [1]]
            ids += ["x" * 300] * 47
            for request_id in ids:
                reply = await client.post(url, headers=flooder, json=cancel(request_id, "flood"))
                assert reply.status_code == 202
            # At most the flooder's own early cancels, within its quota.
            [victim_request] = registry.requests()
            assert registry.namespace_row_count(victim_request.namespace) == 0
            assert registry.row_count <= registry.config.max_rows_per_namespace  # type: ignore[operator]
            assert not victim_request.cancelled
            events = EventRecorder.attach(registry)
            await client.post(url, headers=victim, json=cancel(1, "mine"))
        assert replies == [None]  # cancelled by its client: no answer
        assert [(e.request_id, e.reason) for e in events.of_type(RequestCancelledEvent)] == [
            (1, "mine")
        ]


async def test_initialize_with_a_stale_session_header_starts_a_new_session(
    serve_app: Serve, client: httpx.AsyncClient
) -> None:
    with trio.fail_after(TIMEOUT):
        url, _ = await serve_app()
        first = await initialize(client, url)
        assert (await client.delete(url, headers=first)).status_code == 204
        second = await initialize(client, url, **{"mcp-session-id": first["mcp-session-id"]})
        assert second["mcp-session-id"] != first["mcp-session-id"]


@ALSO_PLAIN_ASGI
async def test_max_request_time_cancels_from_the_server(
    serve_app: Serve, client: httpx.AsyncClient
) -> None:
    with trio.fail_after(TIMEOUT):
        url, registry = await serve_app(grace=5, limits=ConnectionLimits(max_request_time=0.2))
        events = EventRecorder.attach(registry)
        headers = await initialize(client, url)
        reply = await client.post(url, headers=headers, json=call(1, "count", {}))
        assert final(reply)["error"]["data"] == {"reason": "request time limit reached"}
        [event] = events.of_type(RequestCancelledEvent)
        assert event.kind == "server"
        quick = await client.post(url, headers=headers, json=call(2, "count", {"n": 2}))
        assert final(quick)["result"]["content"][0]["text"] == "counted to 2"


async def test_a_session_runs_at_most_max_concurrent_calls(
    serve_app: Serve, client: httpx.AsyncClient
) -> None:
    with trio.fail_after(TIMEOUT):
        url, registry = await serve_app(limits=ConnectionLimits(max_concurrent_calls=2))
        headers = await initialize(client, url)
        other = await initialize(client, url)
        async with trio.open_nursery() as nursery:
            for request_id in (1, 2):
                nursery.start_soon(
                    partial(client.post, url, headers=headers, json=call(request_id, "count", {}))
                )
            await wait_in_flight(registry, 2)
            refused = await client.post(url, headers=headers, json=call(3, "count", {}))
            assert final(refused)["error"]["code"] == -32001
            # Another session is not affected by this one's limit.
            fine = await client.post(url, headers=other, json=call(1, "echo", {"text": "ok"}))
            assert final(fine)["result"]["content"][0]["text"] == "ok"
            for request_id in (1, 2):
                await client.post(url, headers=headers, json=cancel(request_id))


async def test_scopes_never_contain_the_session_secret(
    serve_app: Serve, client: httpx.AsyncClient
) -> None:
    with trio.fail_after(TIMEOUT):
        url, registry = await serve_app()
        events = EventRecorder.attach(registry)
        headers = await initialize(client, url)
        await stream_and_cancel(client, url, headers, 1, "bye")
        [event] = events.of_type(RequestCancelledEvent)
        assert event.namespace.startswith("session:")
        assert headers["mcp-session-id"] not in event.namespace
