"""Hostile and broken HTTP clients, in memory on MockClock (issue 9).

The socket-level versions of these live in ``test_hostile_sockets.py``;
here the timings are exact.  :mod:`_support.asgi` models hypercorn's
behaviour with a client that stopped reading: a ``send()`` blocks, shielded,
until the app returns and the "server" closes the connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from trio_mcp_cancel import (
    OverrunEvent,
    Registry,
    RegistryConfig,
    RequestCancelledEvent,
    checkpoint_cancelled,
)
from trio_mcp_cancel.http import HttpLimits, McpHttpApp, bearer_auth
from trio_mcp_cancel.lowlevel.wire import LEGACY_TOO_MANY_REQUESTS
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer, ServerLimits
from trio_mcp_cancel.testing import EventRecorder

from _support.asgi import (
    AsgiClient,
    HttpExchange,
    headers_of,
    initialize_message,
    legacy_call,
    legacy_headers,
    modern_call,
    notification,
    served,
)

GRACE = 5.0
WRITE_TIMEOUT = 3.0


@attrs.define
class Notes:
    """When things happened to the tools (mock time)."""

    started: dict[object, float] = attrs.field(factory=dict)
    hard: dict[object, float] = attrs.field(factory=dict)
    finished: dict[object, float] = attrs.field(factory=dict)
    kinds: dict[object, str | None] = attrs.field(factory=dict)


def build(notes: Notes, **options: Any) -> McpServer:
    server = McpServer("hostile", **options)

    @server.tool()
    async def chatter(ctx: Context, seconds: int = 100, size: int = 100) -> str:
        """Reports progress every second, ignoring the flag."""
        notes.started[ctx.request_id] = trio.current_time()
        try:
            for i in range(1, seconds + 1):
                await ctx.report_progress(i, message="x" * size)
                await trio.sleep(1)
        except trio.Cancelled:
            notes.hard[ctx.request_id] = trio.current_time()
            raise
        finally:
            cancellation = ctx.request.cancellation
            notes.kinds[ctx.request_id] = None if cancellation is None else cancellation.kind
        notes.finished[ctx.request_id] = trio.current_time()
        return "done"

    @server.tool()
    async def shielded(ctx: Context, seconds: float = 30.0) -> str:
        """Shields itself from cancellation: the hard cancel cannot stop it."""
        with trio.CancelScope(shield=True):
            await trio.sleep(seconds)
        notes.finished[ctx.request_id] = trio.current_time()
        return "finished anyway"

    @server.tool()
    async def wait(ctx: Context, seconds: float = 10.0) -> str:
        """Polls the flag once a second."""
        for _ in range(int(seconds)):
            await checkpoint_cancelled()
            await trio.sleep(1)
        return "waited"

    return server


@attrs.define
class Served:
    client: AsgiClient
    registry: Registry
    events: EventRecorder
    notes: Notes
    app: McpHttpApp


def over_defaults(given: Any, **defaults: Any) -> Any:
    """*given* settings (or the library's) with this file's *defaults* for what it left unset."""
    cls = type(given)
    unset = {k: v for k, v in defaults.items() if getattr(given, k) == getattr(cls(), k)}
    return attrs.evolve(given, **unset)


#: The registry of every test here (``mcp_registry``), unless a test's own marker differs.
pytestmark = pytest.mark.mcp_registry(grace_period=GRACE)


@asynccontextmanager
async def serving(
    registry: Registry, server_options: dict[str, Any] | None = None, **app_options: Any
) -> AsyncIterator[Served]:
    notes = Notes()
    server = build(notes, **(server_options or {}))
    app_options["limits"] = over_defaults(
        app_options.get("limits", ConnectionLimits()), write_timeout=WRITE_TIMEOUT
    )
    events = EventRecorder.attach(registry)
    app = McpHttpApp(server, registry, **app_options)
    async with served(app) as client:
        yield Served(client, registry, events, notes, app)
    assert server.dispatcher.calls_in_flight == 0


def start_modern(asgi: AsgiClient, message: dict[str, Any], **options: Any) -> HttpExchange:
    return asgi.start("POST", headers_of(message), message, **options)


def chatter(request_id: object, **arguments: Any) -> dict[str, Any]:
    return modern_call(request_id, "chatter", arguments, progress_token=f"p{request_id}")


# -- item 2: a client that stops reading -------------------------------------------


async def test_a_client_that_stops_reading_does_not_pin_its_tool(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        exchange = start_modern(s.client, chatter(1))
        await exchange.wait_started()
        await trio.sleep(0.5)  # the first progress message was read
        assert exchange.is_sse and len(exchange.messages()) == 1
        exchange.stop_reading()
        # The progress at t=1 blocks in the server; WRITE_TIMEOUT later the
        # client counts as gone: the flag, then the hard cancel GRACE later.
        await exchange.done.wait()
        (cancel,) = s.events.of_type(RequestCancelledEvent)
        assert (cancel.kind, cancel.reason) == ("disconnect", "client stopped reading")
        assert s.notes.kinds[1] == "disconnect"
        flagged_at = 1 + WRITE_TIMEOUT
        assert s.notes.hard[1] == pytest.approx(flagged_at + GRACE)
        # The request returned at once, so the server closed the connection,
        # which released the blocked write.
        assert exchange.closed_at == pytest.approx(flagged_at + GRACE)
        await trio.testing.wait_all_tasks_blocked()
        assert exchange.blocked_sends == 0
        assert not exchange.complete


async def test_progress_piling_up_behind_a_slow_client_disconnects_it(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(
        mcp_registry, limits=ConnectionLimits(write_timeout=None, max_buffered_bytes=10_000)
    ) as s:
        exchange = start_modern(s.client, chatter(1, size=3000))
        await exchange.wait_started()
        exchange.stop_reading()
        await exchange.done.wait()
        (cancel,) = s.events.of_type(RequestCancelledEvent)
        assert cancel.kind == "disconnect"
        # No write deadline: the queue bound alone caught it.  Writes block
        # from the head on; about 10_000 / 3000 progress messages fit.
        flagged_at = s.notes.hard[1] - GRACE
        assert 2 <= flagged_at <= 5
        await trio.testing.wait_all_tasks_blocked()
        assert exchange.blocked_sends == 0


async def test_a_slow_client_that_catches_up_in_time_is_served(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        exchange = start_modern(s.client, chatter(1, seconds=5))
        await exchange.wait_started()
        exchange.stop_reading()
        await trio.sleep(WRITE_TIMEOUT - 0.5)
        exchange.reading = True
        exchange._closed.set()  # releases the blocked write, like a late read
        # (the harness drops what it got while "closed"; only the outcome matters)
        await exchange.done.wait()
        assert s.events.of_type(RequestCancelledEvent) == []
        assert s.notes.finished[1] == pytest.approx(5)


async def test_a_stalled_plain_response_is_given_up_after_the_write_timeout(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        message = modern_call(1, "wait", {"seconds": 0})
        exchange = start_modern(s.client, message)
        exchange.stop_reading()
        await exchange.done.wait()
        assert exchange.status is None  # nothing got through
        assert exchange.closed_at == pytest.approx(WRITE_TIMEOUT)
        await trio.testing.wait_all_tasks_blocked()
        assert exchange.blocked_sends == 0


async def test_legacy_disconnect_setting_does_not_spare_a_stalled_client(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, legacy_disconnect_cancels=False) as s:
        init = await s.client.post(legacy_headers(version=None), initialize_message())
        session = init.headers["mcp-session-id"]
        exchange = s.client.start(
            "POST", legacy_headers(session), legacy_call(1, "chatter", {}, token="t")
        )
        await exchange.wait_started()
        exchange.stop_reading()
        await exchange.done.wait()
        assert s.notes.kinds[1] == "disconnect"


# -- item 3: slow request bodies ---------------------------------------------------


async def test_a_stalled_body_gets_408_after_the_body_timeout(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, http_limits=HttpLimits(body_timeout=7.0)) as s:
        message = modern_call(1, "wait", {"seconds": 0})
        exchange = start_modern(s.client, message, chunk_size=10)
        exchange.stall_body()
        await exchange.done.wait()
        assert exchange.status == 408
        assert exchange.started_at == pytest.approx(7.0)
        assert exchange.headers["connection"] == "close"
        # A well-behaved client is served meanwhile and afterwards.
        ok = await s.client.post(headers_of(message), message)
        assert ok.status == 200


# -- item 1: sessions ----------------------------------------------------------------


async def open_session(
    client: AsgiClient, *, token: str | None = None, address: str = "127.0.0.1"
) -> HttpExchange:
    headers = legacy_headers(version=None)
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return await client.request("POST", headers, initialize_message(), client=(address, 40000))


def session_of(exchange: HttpExchange) -> str:
    assert exchange.status == 200, (exchange.status, exchange.content)
    return exchange.headers["mcp-session-id"]


def start_legacy_wait(
    client: AsgiClient,
    session: str,
    request_id: int,
    *,
    token: str | None = None,
    address: str = "127.0.0.1",
) -> HttpExchange:
    headers = legacy_headers(session)
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return client.start(
        "POST",
        headers,
        legacy_call(request_id, "wait", {"seconds": 30}),
        client=(address, 40001),
    )


TOKENS = {"alice-token": "alice", "mallory-token": "mallory"}


async def test_a_session_flood_never_ends_another_tenants_calls(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    auth = bearer_auth(TOKENS)
    async with serving(
        mcp_registry, auth=auth, http_limits=HttpLimits(max_sessions=10, max_sessions_per_tenant=4)
    ) as s:
        alice = session_of(await open_session(s.client, token="alice-token"))
        call = start_legacy_wait(s.client, alice, 1, token="alice-token")
        await trio.testing.wait_all_tasks_blocked()
        statuses = []
        for _ in range(50):
            flood = await open_session(s.client, token="mallory-token")
            statuses.append(flood.status)
        # Mallory only ever evicts her own idle sessions.
        assert statuses == [200] * 50
        assert s.app.sessions is not None
        assert s.app.sessions.tenant_count("principal:mallory") == 4
        await call.done.wait()
        assert "result" in call.messages()[-1] or "result" in call.json()
        assert s.events.of_type(RequestCancelledEvent) == []


async def test_a_tenant_whose_sessions_are_all_busy_is_refused_with_429(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, http_limits=HttpLimits(max_sessions_per_tenant=2)) as s:
        calls = []
        for i in range(2):
            session = session_of(await open_session(s.client))
            calls.append(start_legacy_wait(s.client, session, i))
        await trio.testing.wait_all_tasks_blocked()
        refused = await open_session(s.client)
        assert refused.status == 429
        assert refused.headers["retry-after"] == "1"
        error = refused.json()["error"]
        assert error["code"] == LEGACY_TOO_MANY_REQUESTS
        assert error["data"] == {"limit": "tenant", "max": 2}
        # Another address bucket is another tenant.
        assert (await open_session(s.client, address="192.0.2.7")).status == 200
        for call in calls:
            await call.done.wait()
        assert s.events.of_type(RequestCancelledEvent) == []
        # Idle again: the next initialize evicts one of them.
        assert (await open_session(s.client)).status == 200


async def test_a_full_store_evicts_the_largest_tenants_idle_session_or_answers_503(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(
        mcp_registry, http_limits=HttpLimits(max_sessions=4, max_sessions_per_tenant=3)
    ) as s:
        small = session_of(await open_session(s.client, address="192.0.2.1"))
        big = [session_of(await open_session(s.client, address="192.0.2.2")) for _ in range(3)]
        # Full: a new tenant's session takes the place of the big tenant's
        # least recently used idle session, not the small tenant's.
        session_of(await open_session(s.client, address="192.0.2.3"))
        gone = await s.client.post(legacy_headers(big[0]), notification("notifications/x"))
        assert gone.status == 404
        kept = await s.client.post(legacy_headers(small), notification("notifications/x"))
        assert kept.status == 202
        # Every session busy: nobody can make room, so 503.
        sessions = {
            "192.0.2.1": [small],
            "192.0.2.2": big[1:],
        }
        calls = [
            start_legacy_wait(s.client, sid, n, address=address)
            for n, (address, sid) in enumerate(
                (address, sid) for address, sids in sessions.items() for sid in sids
            )
        ]
        await trio.testing.wait_all_tasks_blocked()
        # The fourth session (192.0.2.3) is idle and gets evicted first...
        assert (await open_session(s.client, address="192.0.2.4")).status == 200
        last = [
            start_legacy_wait(s.client, sid, 99, address="192.0.2.4")
            for sid in [next(iter(s.app.sessions._tenants["ip:192.0.2.4"]))]  # type: ignore[union-attr]
        ]
        await trio.testing.wait_all_tasks_blocked()
        refused = await open_session(s.client, address="192.0.2.5")
        assert refused.status == 503
        assert refused.json()["error"]["data"] == {"limit": "server", "max": 4}
        for call in [*calls, *last]:
            await call.done.wait()
        assert s.events.of_type(RequestCancelledEvent) == []


# -- item 4: server-wide and per-tenant caps on calls in flight -----------------------


async def test_server_wide_cap_holds_across_sessions_and_eras(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    options = {"limits": ServerLimits(max_calls=3, max_calls_per_tenant=None)}
    async with serving(mcp_registry, server_options=options) as s:
        calls = [
            start_modern(
                s.client, modern_call(i, "wait", {"seconds": 5}), client=(f"192.0.2.{i}", 1)
            )
            for i in range(3)
        ]
        await trio.testing.wait_all_tasks_blocked()
        session = session_of(await open_session(s.client, address="192.0.2.9"))
        refused = await s.client.request(
            "POST", legacy_headers(session), legacy_call(9, "wait", {}), client=("192.0.2.9", 2)
        )
        assert refused.status == 429
        error = refused.json()["error"]
        assert error["code"] == LEGACY_TOO_MANY_REQUESTS
        assert error["data"] == {"limit": "server", "max": 3}
        assert refused.json()["id"] == 9
        for call in calls:
            await call.done.wait()
            assert call.messages()[-1]["result"]["content"][0]["text"] == "waited"
        # Capacity is back once they finished.
        again = await s.client.post(
            headers_of(modern_call(10, "wait", {"seconds": 0})),
            modern_call(10, "wait", {"seconds": 0}),
        )
        assert again.status == 200


async def test_per_tenant_cap_counts_every_session_of_the_tenant(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    options = {"limits": ServerLimits(max_calls_per_tenant=2)}
    async with serving(mcp_registry, server_options=options) as s:
        sessions = [session_of(await open_session(s.client)) for _ in range(3)]
        calls = [start_legacy_wait(s.client, sid, n) for n, sid in enumerate(sessions[:2])]
        await trio.testing.wait_all_tasks_blocked()
        refused = await s.client.request(
            "POST", legacy_headers(sessions[2]), legacy_call(5, "wait", {}), client=("127.0.0.1", 1)
        )
        assert refused.status == 429
        assert refused.json()["error"]["code"] == LEGACY_TOO_MANY_REQUESTS  # a legacy session
        assert refused.json()["error"]["data"] == {"limit": "tenant", "max": 2}
        # Another tenant is not affected.
        other = modern_call(6, "wait", {"seconds": 0})
        served = await s.client.request(
            "POST", headers_of(other), other, client=("198.51.100.1", 1)
        )
        assert served.status == 200
        for call in calls:
            await call.done.wait()


# -- item 5: a tool that shields itself ------------------------------------------------


@pytest.mark.mcp_registry(grace_period=GRACE, overrun_margin=2.0)
async def test_a_shielded_tool_is_reported_and_its_result_never_sent_as_success(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, limits=ConnectionLimits(max_request_time=4.0)) as s:
        message = modern_call(1, "shielded", {"seconds": 30})
        exchange = start_modern(s.client, message)
        await exchange.done.wait()
        (overrun,) = s.events.of_type(OverrunEvent)
        assert overrun.kind == "server"
        assert overrun.late_by == pytest.approx(2.0)
        # Reported at time limit + grace + margin, while it was still running.
        assert s.notes.finished[1] == pytest.approx(30)
        final = exchange.messages()[-1]
        assert final["error"]["code"] == -32800
        assert final["error"]["data"] == {"reason": "request time limit reached"}


@pytest.mark.mcp_registry(grace_period=GRACE, overrun_margin=1.0)
async def test_a_shielded_tool_the_client_cancelled_sends_nothing(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as s:
        message = modern_call(1, "shielded", {"seconds": 20})
        exchange = start_modern(s.client, message)
        await exchange.wait_started()
        await trio.sleep(1)
        exchange.disconnect()
        await exchange.done.wait()
        assert exchange.after_disconnect == []
        (overrun,) = s.events.of_type(OverrunEvent)
        assert overrun.kind == "disconnect"
        assert s.notes.finished[1] == pytest.approx(20)


# -- lifespan ------------------------------------------------------------------------


async def test_the_lifespan_opens_a_registry_when_none_is_given(
    autojump_clock: trio.testing.MockClock,
) -> None:
    notes = Notes()
    app = McpHttpApp(build(notes), registry_config=RegistryConfig(grace_period=1.0))
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        async with client.lifespan():
            assert app.registry.config.grace_period == 1.0
            message = modern_call(1, "wait", {"seconds": 0})
            exchange = await client.post(headers_of(message), message)
            assert exchange.status == 200
            registry = app.registry
        assert not registry.running
    # Without a lifespan and without open_registry(): a clear 503, not a crash.
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        message = modern_call(2, "wait", {"seconds": 0})
        exchange = await client.post(headers_of(message), message)
        assert exchange.status == 503
