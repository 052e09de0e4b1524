"""The WebSocket upgrade is authorized like an HTTP request; the connection lives by its token."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio
from trio_websocket import ConnectionClosed, ConnectionRejected, open_websocket_url

from trio_mcp_cancel import Registry
from trio_mcp_cancel.oauth import JwtVerifier, OAuthResource
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.websocket import serve_mcp_websocket

from _support.cancellation_tools import probe_server
from _support.oauth import AuthServer, running_auth_server

RESOURCE = "http://mcp.test/mcp"
TIMEOUT = 20


def build() -> McpServer:
    """The probe server and a tool only the ``admin`` scope may call."""
    server = probe_server("oauth-ws")

    @server.tool(scopes=["admin"])
    async def admin(ctx: Context) -> str:
        return "admin done"  # pragma: no cover - refused before it runs

    return server


@asynccontextmanager
async def serving(registry: Registry) -> AsyncIterator[tuple[str, AuthServer]]:
    async with running_auth_server() as issuer:
        resource = OAuthResource(
            RESOURCE,
            [issuer.issuer],
            JwtVerifier(issuer.issuer, RESOURCE),
            required_scopes=["mcp"],
        )
        async with trio.open_nursery() as nursery:
            server = await nursery.start(
                partial(serve_mcp_websocket, build(), registry, "127.0.0.1", 0, auth=resource)
            )
            yield f"ws://127.0.0.1:{server.port}/mcp", issuer
            nursery.cancel_scope.cancel()


def bearer(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {token}".encode())]


def challenge(rejected: ConnectionRejected) -> dict[str, str]:
    headers = {k.decode().lower(): v.decode() for k, v in rejected.headers or []}
    return dict(re.findall(r'(\w+)="([^"]*)"', headers["www-authenticate"]))


async def handshake(ws: Any) -> None:
    """The legacy handshake: initialize, then initialized."""
    hello = {"protocolVersion": "2025-11-25", "capabilities": {},
             "clientInfo": {"name": "t", "version": "0"}}  # fmt: skip
    await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                      "params": hello}))  # fmt: skip
    assert "result" in json.loads(await ws.get_message())
    await ws.send_message(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))


async def tool_call(ws: Any, request_id: int, name: str, arguments: dict[str, Any]) -> Any:
    params = {"name": name, "arguments": arguments}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    await ws.send_message(json.dumps(message))
    return json.loads(await ws.get_message())


@pytest.mark.parametrize(
    ("token", "status", "error"),
    [(None, 401, None), ("garbage", 401, "invalid_token"), ("no-scope", 403, "insufficient_scope")],
)
async def test_an_unauthorized_upgrade_is_rejected_with_the_http_challenge(
    token: str | None, status: int, error: str | None, mcp_registry: Registry
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(mcp_registry) as (url, issuer):
            value = {None: None, "garbage": "garbage", "no-scope": issuer.mint(aud=RESOURCE)}
            headers = [] if token is None else bearer(value[token] or "")
            with pytest.raises(ConnectionRejected) as rejected:
                async with open_websocket_url(url, extra_headers=headers):
                    pass  # pragma: no cover
            assert rejected.value.status_code == status
            params = challenge(rejected.value)
            assert params.get("error") == error
            assert params["resource_metadata"].endswith("/.well-known/oauth-protected-resource/mcp")


async def test_an_authorized_connection_is_closed_on_a_tool_it_lacks_the_scope_for(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(mcp_registry) as (url, issuer):
            token = issuer.mint(aud=RESOURCE, scope="mcp")
            async with open_websocket_url(url, extra_headers=bearer(token)) as ws:
                await handshake(ws)
                answer = await tool_call(ws, 1, "echo", {"text": "hello"})
                assert answer["result"]["content"][0]["text"] == "hello"
                # Junk and over-deep messages are answered, not a reason to drop the connection.
                for junk in ("{not json", "[" * 200 + "]" * 200):
                    await ws.send_message(junk)
                    assert "error" in json.loads(await ws.get_message())
                assert (await tool_call(ws, 3, "echo", {"text": "still"}))["result"]
                with pytest.raises(ConnectionClosed) as closed:
                    await tool_call(ws, 2, "admin", {})
                assert closed.value.reason.code == 1008
                assert closed.value.reason.reason == "insufficient_scope: admin"


async def test_a_connection_is_closed_when_its_token_expires(mcp_registry: Registry) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(mcp_registry) as (url, issuer):
            token = issuer.mint(aud=RESOURCE, scope="mcp", expires_in=1)
            async with open_websocket_url(url, extra_headers=bearer(token)) as ws:
                await handshake(ws)
                assert (await tool_call(ws, 1, "echo", {"text": "x"}))["result"]
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.get_message()
                assert closed.value.reason.code == 1008
                assert closed.value.reason.reason == "token expired"
