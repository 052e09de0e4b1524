"""What an OAuth token opened over HTTP ends when the token expires.

A running call and a ``subscriptions/listen`` stream are cancelled at the
token's ``exp`` (kind ``"server"``, ``-32800`` with a reason naming the
expiry); a legacy GET stream is ended cleanly.  A token without ``exp``
changes nothing.  In memory, under a mock clock; the verifier is a stand-in
that hands out tokens with the expiry a test chooses.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import attrs
import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry, checkpoint_cancelled
from trio_mcp_cancel._telemetry.names import server_cause
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.oauth import AccessToken, InvalidToken, OAuthResource
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.transports.http.oauth import Expiries

from _support.asgi import (
    AsgiClient,
    HttpExchange,
    initialize_message,
    legacy_headers,
    modern_call,
    modern_headers,
    modern_request,
    notification,
    served,
)

RESOURCE = "http://mcp.test/mcp"
ISSUER = "http://as.test"
LIFETIME = 30.0
LISTEN = {"notifications": {"toolsListChanged": True}}

pytestmark = pytest.mark.mcp_registry(grace_period=1.0)


@attrs.define
class Tokens:
    """``expiring`` lives :data:`LIFETIME` seconds from when it is first checked; ``lasting``
    has no ``exp``."""

    expires_at: float | None = None

    async def verify(self, token: str) -> AccessToken:
        if token == "lasting":
            return AccessToken("user", ISSUER)
        if token != "expiring":
            raise InvalidToken("unknown token")
        if self.expires_at is None:
            self.expires_at = time.time() + LIFETIME
        return AccessToken("user", ISSUER, expires_at=self.expires_at)


def build() -> McpServer:
    server = McpServer("oauth-expiry")

    @server.tool()
    async def forever(ctx: Context) -> str:
        while True:
            await checkpoint_cancelled()
            await trio.sleep(1)

    return server


@asynccontextmanager
async def protected(registry: Registry) -> AsyncIterator[tuple[AsgiClient, Tokens]]:
    tokens = Tokens()
    resource = OAuthResource(RESOURCE, [ISSUER], tokens)
    async with served(McpHttpApp(build(), registry, auth=resource)) as client:
        yield client, tokens


def bearer(headers: dict[str, str], token: str) -> dict[str, str]:
    return {**headers, "authorization": f"Bearer {token}"}


def expiry_reason(tokens: Tokens) -> str:
    assert tokens.expires_at is not None
    when = datetime.fromtimestamp(tokens.expires_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"the access token expired at {when}"


def ended_at(exchange: HttpExchange, began: float) -> float:
    assert exchange.completed_at is not None
    return exchange.completed_at - began


async def test_a_running_call_is_cancelled_at_its_tokens_expiry_with_the_reason(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with protected(mcp_registry) as (client, tokens):
        began = trio.current_time()
        call = client.start(
            "POST",
            bearer(modern_headers("tools/call", "forever"), "expiring"),
            modern_call(1, "forever"),
        )
        with trio.fail_after(3 * LIFETIME):
            await call.done.wait()
        final = call.answer()
        assert final["error"]["code"] == -32800
        assert final["error"]["data"] == {"reason": expiry_reason(tokens)}
        assert LIFETIME - 0.5 <= ended_at(call, began) <= LIFETIME + 1.0 + 0.5  # + grace
        assert server_cause(expiry_reason(tokens)) == "token_expired"  # telemetry's cause


async def test_a_listen_stream_ends_at_its_tokens_expiry(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with protected(mcp_registry) as (client, tokens):
        began = trio.current_time()
        listen = client.start(
            "POST",
            bearer(modern_headers("subscriptions/listen"), "expiring"),
            modern_request(2, "subscriptions/listen", LISTEN),
        )
        with trio.fail_after(3 * LIFETIME):
            await listen.done.wait()
        assert listen.complete
        assert listen.answer()["error"]["data"] == {"reason": expiry_reason(tokens)}
        assert LIFETIME - 0.5 <= ended_at(listen, began) <= LIFETIME + 1.0 + 0.5


async def test_a_get_stream_is_closed_cleanly_at_its_tokens_expiry(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with protected(mcp_registry) as (client, _):
        session = await open_session(client, "expiring")
        began = trio.current_time()
        get = client.start("GET", bearer(legacy_headers(session), "expiring"))
        with trio.fail_after(3 * LIFETIME):
            await get.done.wait()
        assert get.status == 200 and get.complete  # ended by the server, not cut
        assert LIFETIME - 0.5 - 1.0 <= ended_at(get, began) <= LIFETIME + 0.5
        # Not resumable: the client opens a new one with a fresh token.
        again = client.start("GET", bearer(legacy_headers(session), "lasting"))
        await again.wait_started()
        assert again.status == 200
        again.disconnect()


async def test_a_call_served_without_a_lifespan_is_cancelled_at_its_tokens_expiry_too(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    resource = OAuthResource(RESOURCE, [ISSUER], (tokens := Tokens()))
    async with trio.open_nursery() as nursery:
        client = AsgiClient(McpHttpApp(build(), mcp_registry, auth=resource), nursery)
        call = client.start(
            "POST",
            bearer(modern_headers("tools/call", "forever"), "expiring"),
            modern_call(1, "forever"),
        )
        with trio.fail_after(3 * LIFETIME):
            await call.done.wait()
        assert call.answer()["error"]["data"] == {"reason": expiry_reason(tokens)}


def test_the_expiry_timers_hold_the_requests_in_flight_not_every_request_seen() -> None:
    expiries = Expiries()
    live = [expiries.add(3600.0 + n, lambda: None) for n in range(10)]
    for n in range(100_000):
        expiries.discard(expiries.add(3600.0 + n, lambda: None))
    assert len(expiries._heap) <= 2 * len(live) + 64 + 1
    for handle in live:
        expiries.discard(handle)
    assert not expiries._actions


async def test_a_token_without_exp_ends_nothing(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with protected(mcp_registry) as (client, _):
        call = client.start(
            "POST",
            bearer(modern_headers("tools/call", "forever"), "lasting"),
            modern_call(1, "forever"),
        )
        session = await open_session(client, "lasting")
        get = client.start("GET", bearer(legacy_headers(session), "lasting"))
        await trio.sleep(10 * LIFETIME)
        assert not call.done.is_set() and not get.done.is_set()
        call.disconnect()
        get.disconnect()


async def open_session(client: AsgiClient, token: str) -> str:
    reply = await client.post(bearer(legacy_headers(version=None), token), initialize_message())
    session = reply.headers["mcp-session-id"]
    initialized = notification("notifications/initialized")
    assert (await client.post(bearer(legacy_headers(session), token), initialized)).status == 202
    return session
