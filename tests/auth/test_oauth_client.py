"""Our client's ``ClientCredentialsAuth`` against our OAuth-protected server and the test issuer.

The client starts from the server's URL alone: the ``401`` challenge leads
it to the Protected Resource Metadata, the issuer's metadata and a
``client_credentials`` token for this resource; the token is kept and
renewed before it expires; a ``403 insufficient_scope`` steps up once;
wrong credentials are a clear error, asked once.  Cancellation is as
exact as without authorization.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import pytest
import trio

from trio_mcp_cancel import RequestCancelled, open_registry
from trio_mcp_cancel._client.oauth import parse_challenge
from trio_mcp_cancel.client import (
    ClientCredentialsAuth,
    McpError,
    McpTransportError,
    OAuthError,
    open_http_client,
)
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.oauth import JwtVerifier, OAuthResource
from trio_mcp_cancel.server import Context, McpServer

from _support.oauth import AuthServer, listening_socket, running_auth_server, serving_asgi

TIMEOUT = 30


@attrs.define
class Protected:
    url: str
    issuer: AuthServer
    seen: list[str]
    started: trio.Event


def build(seen: list[str], started: trio.Event) -> McpServer:
    server = McpServer("oauth-client")

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    @server.tool(scopes=["admin"])
    async def purge(ctx: Context) -> str:
        return "purged"

    @server.tool()
    async def wait(ctx: Context) -> str:
        started.set()
        await ctx.request.wait_cancelled()
        cancellation = ctx.request.cancellation
        assert cancellation is not None
        seen.append(f"cancelled: {cancellation.kind}")
        raise RequestCancelled(cancellation.reason, cancellation.kind)

    return server


@asynccontextmanager
async def protected(
    token_lifetime: int = 300, audience: str | None = None
) -> AsyncIterator[Protected]:
    """Our server, requiring scope ``mcp``, protected by the test issuer, over real sockets.

    *audience*: what its verifier wants in ``aud`` instead of its own URL
    (then it refuses every token the issuer gives for it).
    """
    seen: list[str] = []
    started = trio.Event()
    async with running_auth_server() as issuer:
        issuer.token_lifetime = token_lifetime
        sock, port = listening_socket()
        url = f"http://127.0.0.1:{port}/mcp"
        resource = OAuthResource(
            url,
            [issuer.issuer],
            JwtVerifier(issuer.issuer, audience or url),
            required_scopes=["mcp"],
            scopes_supported=["mcp", "admin"],
        )
        async with open_registry(grace_period=5) as registry:
            app = McpHttpApp(build(seen, started), registry, auth=resource)
            async with serving_asgi(app, sock):
                yield Protected(url, issuer, seen, started)


def text(result: dict[str, Any]) -> str:
    value: str = result["content"][0]["text"]
    return value


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_the_client_finds_the_issuer_from_the_challenge_and_keeps_its_token(
    era: Literal["modern", "legacy"],
) -> None:
    with trio.fail_after(TIMEOUT):
        async with protected() as served:
            auth = ClientCredentialsAuth("client-a", "secret-a")
            async with open_http_client(served.url, era=era, auth=auth) as client:
                assert text(await client.call_tool("echo", {"text": "one"})) == "one"
                assert text(await client.call_tool("echo", {"text": "two"})) == "two"
            calls = served.issuer.calls
            assert calls["/token"] == 1  # one token, kept for the second call
            # Discovered once by the client, once by the server's verifier.
            assert calls["/.well-known/oauth-authorization-server"] == 2


async def test_a_cancelled_call_is_seen_by_the_server_as_without_authorization() -> None:
    with trio.fail_after(TIMEOUT):
        async with protected() as served:
            auth = ClientCredentialsAuth("client-a", "secret-a")
            async with open_http_client(served.url, auth=auth) as client:
                with trio.CancelScope() as scope:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(client.call_tool, "wait")
                        await served.started.wait()
                        scope.cancel()
                while not served.seen:
                    await trio.sleep(0.01)
                assert text(await client.call_tool("echo", {"text": "after"})) == "after"
            assert served.seen == ["cancelled: disconnect"]
            assert served.issuer.calls["/token"] == 1


async def test_a_token_about_to_expire_is_replaced_before_it_is_sent() -> None:
    with trio.fail_after(TIMEOUT):
        async with protected(token_lifetime=2) as served:
            # Renewed at half its lifetime at the latest (the margin is larger).
            auth = ClientCredentialsAuth("client-a", "secret-a", expiry_margin=30)
            async with open_http_client(served.url, auth=auth) as client:
                await client.call_tool("echo", {"text": "a"})
                assert served.issuer.calls["/token"] == 1
                await trio.sleep(1.2)
                await client.call_tool("echo", {"text": "b"})
                assert served.issuer.calls["/token"] == 2
                await client.call_tool("echo", {"text": "c"})
                assert served.issuer.calls["/token"] == 2


async def test_insufficient_scope_steps_up_once_with_the_challenges_scopes() -> None:
    with trio.fail_after(TIMEOUT):
        async with protected() as served:
            auth = ClientCredentialsAuth("client-a", "secret-a")
            async with open_http_client(served.url, auth=auth) as client:
                await client.call_tool("echo", {"text": "first"})
                assert text(await client.call_tool("purge")) == "purged"
                assert served.issuer.calls["/token"] == 2
                # The stepped-up token serves both tools from now on.
                await client.call_tool("echo", {"text": "again"})
                assert text(await client.call_tool("purge")) == "purged"
                assert served.issuer.calls["/token"] == 2


async def test_wrong_credentials_are_a_clear_error_asked_once_per_call() -> None:
    with trio.fail_after(TIMEOUT):
        async with protected() as served:
            auth = ClientCredentialsAuth("client-a", "not-the-secret")
            async with open_http_client(served.url, auth=auth) as client:
                with pytest.raises(OAuthError, match=r"refused client 'client-a'.*invalid_client"):
                    await client.call_tool("echo", {"text": "x"})
                assert served.issuer.calls["/token"] == 1


async def test_a_client_the_issuer_does_not_know_fails_the_legacy_handshake_clearly() -> None:
    with trio.fail_after(TIMEOUT):
        async with protected() as served:
            auth = ClientCredentialsAuth("nobody", "nothing")
            with pytest.raises(McpTransportError, match="invalid_client") as failure:
                async with open_http_client(served.url, era="legacy", auth=auth):
                    pass
            assert isinstance(failure.value, OAuthError)
            assert failure.value.data == {"status": 401, "error": "invalid_client"}


async def test_credentials_go_only_to_the_configured_issuer() -> None:
    with trio.fail_after(TIMEOUT):
        async with protected() as served:
            auth = ClientCredentialsAuth("client-a", "secret-a", issuer="https://other.test")
            async with open_http_client(served.url, auth=auth) as client:
                with pytest.raises(OAuthError, match="does not name the configured issuer"):
                    await client.call_tool("echo", {"text": "x"})
            assert served.issuer.calls["/token"] == 0


async def test_a_server_that_refuses_every_token_gets_each_request_twice_never_more() -> None:
    with trio.fail_after(TIMEOUT):
        async with protected(audience="http://elsewhere.test/mcp") as served:
            auth = ClientCredentialsAuth("client-a", "secret-a")
            async with open_http_client(served.url, auth=auth) as client:
                for _ in range(2):
                    with pytest.raises(McpError):
                        await client.call_tool("echo", {"text": "x"})
            # Call 1: no token, 401, token 1, 401.  Call 2: token 1, 401, token 2, 401.
            assert served.issuer.calls["/token"] == 2


async def test_metadata_naming_another_resource_is_refused_before_any_credentials_go_out() -> None:
    with trio.fail_after(TIMEOUT):
        async with protected() as served:
            auth = ClientCredentialsAuth("client-a", "secret-a")
            # The same server under another name: its metadata names 127.0.0.1.
            other = served.url.replace("127.0.0.1", "localhost")
            async with open_http_client(other, auth=auth) as client:
                with pytest.raises(OAuthError, match="which is not the server called"):
                    await client.call_tool("echo", {"text": "x"})
            assert served.issuer.calls["/token"] == 0


def test_the_bearer_challenge_is_parsed_among_others_with_quoted_commas() -> None:
    header = (
        'Basic realm="x", Bearer error="insufficient_scope", '
        'scope="a b", error_description="needs a, b", resource_metadata="http://h/m"'
    )
    assert parse_challenge(header) == {
        "error": "insufficient_scope",
        "scope": "a b",
        "error_description": "needs a, b",
        "resource_metadata": "http://h/m",
    }
    assert parse_challenge('Basic realm="x"') is None
    assert parse_challenge("Bearer") == {}
    assert parse_challenge(None) is None


async def test_one_provider_never_hands_a_servers_token_to_another_server() -> None:
    with trio.fail_after(TIMEOUT):
        async with protected() as first, protected() as second:
            auth = ClientCredentialsAuth("client-a", "secret-a")
            async with open_http_client(first.url, auth=auth) as client:
                await client.call_tool("echo", {"text": "x"})
            async with open_http_client(second.url, auth=auth) as client:
                with pytest.raises(OAuthError, match="use one per server"):
                    await client.call_tool("echo", {"text": "x"})
            assert second.issuer.calls["/token"] == 0
