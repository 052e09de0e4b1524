"""Token checking under attack: floods of made-up tokens, a throttling or slow
authorization server, a failed first key fetch, a rotation right after a spent refetch.

Everything in memory under a mock clock: the MCP app through :mod:`_support.asgi`,
the authorization server through ``httpx2.ASGITransport``
(:func:`_support.oauth.in_process_auth_server`).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.oauth import IntrospectionVerifier, JwtOrOpaque, JwtVerifier, OAuthResource
from trio_mcp_cancel.server import Context, McpServer

from _support.asgi import AsgiClient, HttpExchange, modern_call, modern_headers, served
from _support.oauth import AuthServer, in_process_auth_server

RESOURCE = "http://mcp.test/mcp"
ATTACKER = ("198.51.100.7", 40000)
USER = ("203.0.113.9", 40001)

pytestmark = pytest.mark.mcp_registry(grace_period=5)


def build() -> McpServer:
    server = McpServer("oauth-hostile")

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    return server


@asynccontextmanager
async def protected(
    registry: Registry, jwt_options: dict[str, Any] | None = None, **options: Any
) -> AsyncIterator[tuple[AsgiClient, AuthServer]]:
    issuer, transport = in_process_auth_server()
    opaque = IntrospectionVerifier(
        issuer.issuer, RESOURCE, "resource-server", "rs-secret", transport=transport, **options
    )
    keys = JwtVerifier(issuer.issuer, RESOURCE, transport=transport, **(jwt_options or {}))
    resource = OAuthResource(RESOURCE, [issuer.issuer], JwtOrOpaque(keys, opaque))
    async with served(McpHttpApp(build(), registry, auth=resource)) as client:
        yield client, issuer


def start(
    client: AsgiClient, token: str, address: tuple[str, int] = USER, text: str = "hi"
) -> HttpExchange:
    headers = {**modern_headers("tools/call", "echo"), "authorization": f"Bearer {token}"}
    return client.start("POST", headers, modern_call(1, "echo", {"text": text}), client=address)


async def call(
    client: AsgiClient, token: str, address: tuple[str, int] = USER, text: str = "hi"
) -> HttpExchange:
    exchange = start(client, token, address, text)
    await exchange.done.wait()
    return exchange


def answered(exchange: HttpExchange, text: str = "hi") -> bool:
    return exchange.status == 200 and exchange.answer()["result"]["content"][0]["text"] == text


async def test_a_flood_of_made_up_tokens_from_one_address_reaches_the_server_at_its_budget(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with protected(mcp_registry, client_burst=4, client_rate=0.5) as (client, issuer):
        issuer.delay = 0.5  # a flood overlaps the legitimate token's check
        flood = [
            # One IPv6 /64 is one address, as everywhere in the library.
            start(client, secrets.token_urlsafe(24), (f"2001:db8::{n:x}", 40000))
            for n in range(60)
        ]
        began = trio.current_time()
        legitimate = await call(client, issuer.mint_opaque("client-a", RESOURCE))
        assert answered(legitimate)
        assert legitimate.completed_at is not None
        # Its own check only (discovery and introspection, 0.5 s each), not the flood's.
        assert legitimate.completed_at - began <= 1.0 + 0.01
        for exchange in flood:
            await exchange.done.wait()
        statuses = sorted({exchange.status for exchange in flood})
        assert statuses == [401, 429]
        refused = next(exchange for exchange in flood if exchange.status == 429)
        assert int(refused.headers["retry-after"]) >= 1
        # The flood's budget (4) plus the legitimate token: the rest never left.
        assert issuer.calls["/introspect"] == 4 + 1


async def test_a_refused_token_is_remembered_briefly_within_its_byte_bound(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    options = {"refusal_ttl": 10.0, "refusal_cache_bytes": 4096, "client_burst": 1000}
    async with protected(mcp_registry, **options) as (client, issuer):
        dead = secrets.token_urlsafe(24)
        for _ in range(3):
            assert (await call(client, dead)).status == 401
        assert issuer.calls["/introspect"] == 1  # the refusal is remembered
        await trio.sleep(10.5)
        assert (await call(client, dead)).status == 401
        assert issuer.calls["/introspect"] == 2  # briefly: asked again after refusal_ttl
        verifier = _opaque(client)
        for _ in range(100):
            assert (await call(client, secrets.token_urlsafe(24))).status == 401
        assert 0 < verifier._refused_bytes <= 4096
        assert len(verifier._refused) < 100


async def test_a_429_with_retry_after_spares_cached_tokens_and_answers_new_ones_at_once(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with protected(mcp_registry) as (client, issuer):
        cached = issuer.mint_opaque("client-a", RESOURCE)
        assert answered(await call(client, cached))
        issuer.throttle = 30
        first = await call(client, issuer.mint_opaque("client-b", RESOURCE))
        assert first.status == 503
        assert first.headers["retry-after"] == "30"
        asked = issuer.calls["/introspect"]
        began = trio.current_time()
        waiting = issuer.mint_opaque("client-b", RESOURCE)
        again = await call(client, waiting)
        assert again.status == 503
        assert again.completed_at is not None and again.completed_at - began < 0.1
        assert 1 <= int(again.headers["retry-after"]) <= 30
        assert issuer.calls["/introspect"] == asked  # the server is not asked in the window
        assert answered(await call(client, cached, text="still"), "still")
        await trio.sleep(30)
        issuer.throttle = None
        assert answered(await call(client, waiting))


async def test_a_new_token_waits_at_most_the_timeout_behind_a_slow_server_and_a_queue(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with protected(mcp_registry, concurrency=1, timeout=5.0) as (client, issuer):
        assert answered(await call(client, issuer.mint_opaque("client-a", RESOURCE)))
        issuer.delay = 4.0
        began = trio.current_time()
        exchanges = [
            start(client, issuer.mint_opaque("client-a", RESOURCE), (f"192.0.2.{n}", 1))
            for n in range(1, 5)
        ]
        for exchange in exchanges:
            await exchange.done.wait()
        waits = [exchange.completed_at - began for exchange in exchanges]  # type: ignore[operator]
        assert max(waits) <= 5.0 + 0.01, waits
        assert [exchange.status for exchange in exchanges].count(200) == 1
        assert {exchange.status for exchange in exchanges} == {200, 503}


async def test_a_failed_first_jwks_fetch_is_retried_after_a_short_back_off(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with protected(mcp_registry) as (client, issuer):
        issuer.down = True
        token = issuer.mint(aud=RESOURCE)
        refused = await call(client, token)
        assert refused.status == 503
        assert refused.headers["retry-after"] == "1"
        issuer.down = False
        await trio.sleep(1.1)  # not the 30 s refresh interval
        assert answered(await call(client, token))


async def test_a_rotated_key_validates_at_once_after_someone_spent_the_refetch_slot(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with protected(mcp_registry) as (client, issuer):
        assert answered(await call(client, issuer.mint(aud=RESOURCE)))
        await trio.sleep(31)  # the general refetch slot is free again
        forged = issuer.mint(aud=RESOURCE, kid="made-up")
        assert (await call(client, forged, ATTACKER)).status == 401  # ...and spent on this
        assert issuer.calls["/jwks"] == 2
        issuer.rotate(keep_old=True)
        assert answered(await call(client, issuer.mint(aud=RESOURCE)))
        assert issuer.calls["/jwks"] == 3
        # The made-up kid does not spend the new-kid budget a second time.
        assert (await call(client, forged, ATTACKER)).status == 401
        assert issuer.calls["/jwks"] == 3


def _opaque(client: AsgiClient) -> IntrospectionVerifier:
    app = client.app
    assert isinstance(app, McpHttpApp) and app.oauth is not None
    verifier = app.oauth.verifier
    assert isinstance(verifier, JwtOrOpaque) and isinstance(verifier.opaque, IntrospectionVerifier)
    return verifier.opaque


async def test_remembered_active_tokens_are_bounded_in_bytes_not_only_in_count(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    """Claims are the authorization server's to size: tokens whose answers carry large
    claims are remembered within ``cache_bytes``, the oldest forgotten first (a later
    request for one is introspected again, and still validates)."""
    options = {"cache_bytes": 64 * 1024, "client_burst": 1000}
    async with protected(mcp_registry, **options) as (client, issuer):
        tokens = [issuer.mint_opaque(f"client-{n}", RESOURCE) for n in range(20)]
        for token in tokens:
            issuer.opaque[token]["profile"] = "x" * 16_000  # 16 KB of claims each
            assert answered(await call(client, token))
        verifier = _opaque(client)
        assert 0 < verifier._cache_held <= 64 * 1024
        assert len(verifier._cache) < len(tokens)
        asked = issuer.calls["/introspect"]
        assert answered(await call(client, tokens[-1]))  # the newest is still remembered
        assert issuer.calls["/introspect"] == asked
        assert answered(await call(client, tokens[0]))  # the oldest was forgotten: asked again
        assert issuer.calls["/introspect"] == asked + 1
