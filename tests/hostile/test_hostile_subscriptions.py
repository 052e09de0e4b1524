"""Resource subscriptions are bounded in bytes, not only in count (issue 36, item 2).

The count cap (1000 URIs per session) let 120 URIs of 900 KB add 107 MB in
half a second.  Now a URI longer than ``max_uri_bytes`` is ``-32602``, and
what a session, a tenant and the server hold is a byte budget, refused like
an admission limit (``-32001`` on a legacy session, ``-31429`` on a modern
listen stream; ``data.limit`` naming it).  Unsubscribing, ending the session
or closing a listen stream gives the bytes back.  The bytes held are measured
(tracemalloc), not only counted.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from trio_mcp_cancel import Registry
from trio_mcp_cancel._protocol.subscriptions import (
    ResourceSubscriptions,
    SubscriptionBytes,
    uri_bytes,
)
from trio_mcp_cancel._wire.jsonrpc import JsonRpcError
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.lowlevel import SubscriptionLimits
from trio_mcp_cancel.server import McpServer, ServerLimits
from trio_mcp_cancel.testing import McpError, open_test_client

from _support.asgi import AsgiClient, HttpExchange, modern_headers, modern_request, served

DEFAULTS = SubscriptionLimits()


def build(**options: Any) -> McpServer:
    server = McpServer("subscribe-bytes", **options)

    @server.resource_template("test://big/{key}")
    async def big(key: str) -> str:
        return "content"

    return server


def big_uri(index: int, size: int) -> str:
    """A distinct URI of *size* characters that the template matches."""
    prefix = f"test://big/{index}-"
    return prefix + "k" * (size - len(prefix))


#: What the server keeps of what clients sent (the messages it decoded) and the sets
#: holding subscriptions; the test client decodes its answers elsewhere.
KEPT = [
    tracemalloc.Filter(True, "*trio_mcp_cancel/_protocol/jsonrpc.py"),
    tracemalloc.Filter(True, "*trio_mcp_cancel/_protocol/subscriptions.py"),
]


@contextmanager
def measured() -> Iterator[list[int]]:
    """The bytes the server kept in the block and still holds after it, as ``[held]``."""
    gc.collect()
    tracemalloc.start(1)
    try:
        before = tracemalloc.take_snapshot().filter_traces(KEPT)
        out: list[int] = []
        yield out
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(KEPT)
        out.append(sum(stat.size_diff for stat in after.compare_to(before, "filename")))
    finally:
        tracemalloc.stop()


async def subscribe(client: Any, uri: str) -> Any:
    return await client.request("resources/subscribe", {"uri": uri})


async def test_a_uri_longer_than_the_bound_is_refused_as_invalid_params() -> None:
    server = build()
    async with open_test_client(server, era="legacy") as client:
        assert await subscribe(client, big_uri(0, 4096)) == {}
        with pytest.raises(McpError) as refused:
            await subscribe(client, big_uri(1, 4097))
    async with open_test_client(server) as modern:
        with pytest.raises(McpError) as listed:
            await modern.request(
                "subscriptions/listen",
                {"notifications": {"resourceSubscriptions": [big_uri(2, 4097)]}},
            )
    message = "Invalid params: a resource URI is longer than 4096 bytes"
    assert (refused.value.code, refused.value.message) == (-32602, message)
    assert (listed.value.code, listed.value.message) == (-32602, message)


async def test_a_flood_of_huge_uris_holds_nothing(autojump_clock: trio.testing.MockClock) -> None:
    """The issue's attack, shortened: every 900 KB URI is refused, none is kept."""
    server = build()
    ledger = server.dispatcher.runtime.subscription_bytes
    async with open_test_client(server, era="legacy") as client:
        with measured() as held:
            for index in range(12):
                with pytest.raises(McpError) as refused:
                    await subscribe(client, big_uri(index, 900_000))
                assert refused.value.code == -32602
        assert ledger.held == 0
    assert held[0] < 1_000_000  # before: 10.8 MB, every URI kept


async def test_many_large_uris_stop_at_the_session_budget_and_unsubscribing_frees_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = build()
    ledger = server.dispatcher.runtime.subscription_bytes
    budget = DEFAULTS.max_bytes_per_session
    uris = [big_uri(index, 4000) for index in range(200)]
    fit = budget // uri_bytes(uris[0])
    async with open_test_client(server, era="legacy") as client:
        with measured() as held:
            for uri in uris[:fit]:
                assert await subscribe(client, uri) == {}
            with pytest.raises(McpError) as refused:
                await subscribe(client, uris[fit])
        assert refused.value.code == -32001
        assert refused.value.message == "Too many subscribed bytes"
        assert refused.value.data == {"limit": "subscription_bytes_session", "max": budget}
        assert ledger.held == fit * uri_bytes(uris[0]) <= budget
        # Measured, what the server holds is the budget (before: 200 URIs, 800 KB),
        # and the set's table.
        assert held[0] < budget + 16 * 1024
        assert await subscribe(client, uris[0]) == {}  # held already: nothing more
        assert await client.request("resources/unsubscribe", {"uri": uris[0]}) == {}
        assert ledger.held == (fit - 1) * uri_bytes(uris[0])
        assert await subscribe(client, uris[fit]) == {}
    assert ledger.held == 0  # the connection ended: its bytes went back


async def test_a_tenants_sessions_share_one_budget_and_an_ended_session_frees_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = SubscriptionLimits(max_bytes_per_session=64 * 1024, max_bytes_per_tenant=96 * 1024)
    server = build(limits=ServerLimits(subscriptions=limits))
    ledger = server.dispatcher.runtime.subscription_bytes
    size = uri_bytes(big_uri(0, 4000))
    per_session = limits.max_bytes_per_session // size
    async with open_test_client(server, era="legacy", principal="mallory") as first:
        for index in range(per_session):
            await subscribe(first, big_uri(index, 4000))
        async with open_test_client(server, era="legacy", principal="mallory") as second:
            taken = 0
            with pytest.raises(McpError) as refused:
                while True:
                    await subscribe(second, big_uri(1000 + taken, 4000))
                    taken += 1
            assert refused.value.code == -32001
            assert refused.value.data == {
                "limit": "subscription_bytes_tenant",
                "max": limits.max_bytes_per_tenant,
            }
            assert ledger.by_tenant["principal:mallory"] == (per_session + taken) * size
            assert (per_session + taken) * size <= limits.max_bytes_per_tenant
            # Another tenant is not held back by mallory's.
            async with open_test_client(server, era="legacy", principal="alice") as other:
                assert await subscribe(other, big_uri(5000, 4000)) == {}
            assert "principal:alice" not in ledger.by_tenant
        # The second session ended: its share of mallory's budget is free again.
        assert ledger.by_tenant["principal:mallory"] == per_session * size
        async with open_test_client(server, era="legacy", principal="mallory") as third:
            for index in range(taken):
                assert await subscribe(third, big_uri(3000 + index, 4000)) == {}
    assert ledger.held == 0 and ledger.by_tenant == {}


LISTEN_LIMITS = SubscriptionLimits(max_bytes_per_session=64 * 1024, max_bytes_per_tenant=96 * 1024)


def listen(client: AsgiClient, request_id: int, uris: list[str], ip: str) -> HttpExchange:
    params = {"notifications": {"resourceSubscriptions": uris}}
    message = modern_request(request_id, "subscriptions/listen", params)
    return client.start("POST", modern_headers("subscriptions/listen"), message, client=(ip, 1))


@pytest.mark.mcp_registry(grace_period=1)
async def test_listen_streams_count_against_the_tenants_budget_over_http(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = build(limits=ServerLimits(subscriptions=LISTEN_LIMITS))
    ledger = server.dispatcher.runtime.subscription_bytes
    uris = [big_uri(index, 4000) for index in range(15)]  # 61 KB: one stream's worth
    async with served(McpHttpApp(server, mcp_registry)) as client:
        first = listen(client, 1, uris, "192.0.2.1")
        acknowledged = await first.next_message()
        assert acknowledged["method"] == "notifications/subscriptions/acknowledged"
        assert ledger.held == sum(map(uri_bytes, uris))
        over = listen(client, 2, uris, "192.0.2.1")
        await over.done.wait()
        assert over.status == 429
        assert over.json()["error"]["code"] == -31429
        assert over.json()["error"]["data"] == {
            "limit": "subscription_bytes_tenant",
            "max": LISTEN_LIMITS.max_bytes_per_tenant,
        }
        # One request naming more than a session's budget can never fit: -32602.
        too_many = listen(client, 3, [big_uri(100 + i, 4000) for i in range(17)], "198.51.100.7")
        await too_many.done.wait()
        assert too_many.status == 400 and too_many.json()["error"]["code"] == -32602
        first.disconnect()
        await trio.testing.wait_all_tasks_blocked()
        assert ledger.held == 0
        again = listen(client, 4, uris, "192.0.2.1")
        assert (await again.next_message())["method"] == "notifications/subscriptions/acknowledged"
        again.disconnect()
    assert ledger.held == 0


OPS = st.lists(
    st.tuples(st.sampled_from(["add", "discard", "clear"]), st.integers(0, 1), st.integers(0, 7)),
    max_size=60,
)


@given(OPS)
def test_the_ledger_always_equals_what_the_sessions_hold_and_never_exceeds_a_budget(
    ops: list[tuple[str, int, int]],
) -> None:
    """Hostile sequences of subscribe, unsubscribe and session ends on two sessions of
    one tenant, URIs of every size: the budgets hold and nothing leaks."""
    limits = SubscriptionLimits(
        max_uri_bytes=300,
        max_uris=5,
        max_bytes_per_session=900,
        max_bytes_per_tenant=1200,
        max_bytes=1500,
    )
    ledger = SubscriptionBytes()
    sessions = [ResourceSubscriptions(), ResourceSubscriptions()]
    uris = [f"u{n}" + "x" * (n * 50) for n in range(8)]  # up to 356 bytes: some too long
    for op, which, n in ops:
        session = sessions[which]
        if op == "add":
            try:
                session.add(uris[n], ledger, "t", limits)
            except JsonRpcError as exc:
                assert exc.code in (-32602, -32001)
                assert uris[n] not in session
        elif op == "discard":
            session.discard(uris[n])
        else:
            session.clear()
        for s in sessions:
            assert s.held == sum(map(uri_bytes, s.uris)) <= limits.max_bytes_per_session
            assert len(s) <= limits.max_uris
        assert ledger.held == sum(s.held for s in sessions) <= limits.max_bytes_per_tenant
        assert ledger.by_tenant.get("t", 0) == ledger.held
    for session in sessions:
        session.clear()
    assert ledger.held == 0 and ledger.by_tenant == {}


def test_a_session_dropped_without_clear_gives_its_bytes_back_when_collected() -> None:
    ledger = SubscriptionBytes()
    session = ResourceSubscriptions()
    session.add("test://a", ledger, "t", DEFAULTS)
    assert ledger.held == uri_bytes("test://a")
    del session
    gc.collect()
    assert ledger.held == 0 and ledger.by_tenant == {}
