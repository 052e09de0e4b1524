"""Every refusal of the resource server, on the wire: status, challenge, and what it cost.

The MCP app runs in memory (:mod:`_support.asgi`); the authorization server
it asks is a real one on 127.0.0.1 (:mod:`_support.oauth`): metadata, JWKS
with rotation, introspection.  A refused request never reaches a tool.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import jwt
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric import ec

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import McpHttpApp, app_from_env
from trio_mcp_cancel.oauth import (
    AccessToken,
    IntrospectionVerifier,
    InvalidToken,
    JwtOrOpaque,
    JwtVerifier,
    OAuthResource,
)
from trio_mcp_cancel.server import Context, McpServer

from _support.asgi import AsgiClient, HttpExchange, modern_call, modern_headers, served
from _support.oauth import AuthServer, running_auth_server

RESOURCE = "http://mcp.test/mcp"
METADATA_URL = "http://mcp.test/.well-known/oauth-protected-resource/mcp"
TIMEOUT = 20


def build(ran: list[str]) -> McpServer:
    server = McpServer("oauth-refusals")

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        ran.append(f"echo {text}")
        return text

    @server.tool(scopes=["files:write"])
    async def write(ctx: Context, text: str) -> str:
        ran.append(f"write {text}")
        return "written"

    return server


#: The registry of every test here (``mcp_registry``).
pytestmark = pytest.mark.mcp_registry(grace_period=5)


@asynccontextmanager
async def protected(
    registry: Registry, **options: Any
) -> AsyncIterator[tuple[AsgiClient, AuthServer, list[str], OAuthResource]]:
    ran: list[str] = []
    async with running_auth_server() as issuer:
        jwt_verifier = JwtVerifier(issuer.issuer, RESOURCE, refresh_interval=0.2, timeout=2)
        opaque = IntrospectionVerifier(
            issuer.issuer, RESOURCE, "resource-server", "rs-secret", timeout=2
        )
        resource = OAuthResource(
            RESOURCE, [issuer.issuer], JwtOrOpaque(jwt_verifier, opaque), **options
        )
        async with served(McpHttpApp(build(ran), registry, auth=resource)) as client:
            yield client, issuer, ran, resource


def challenge(exchange: HttpExchange) -> dict[str, str]:
    header = exchange.headers["www-authenticate"]
    assert header.startswith("Bearer "), header
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


async def call(
    client: AsgiClient, token: str | None, name: str = "echo", text: str = "hi"
) -> HttpExchange:
    headers = modern_headers("tools/call", name)
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return await client.post(headers, modern_call(1, name, {"text": text}))


def result_text(exchange: HttpExchange) -> str:
    assert exchange.status == 200, exchange.content
    reply = exchange.answer()
    return str(reply["result"]["content"][0]["text"])


async def test_an_unauthenticated_post_gets_401_with_a_metadata_challenge_naming_the_issuer(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with protected(mcp_registry, required_scopes=["mcp"]) as (client, issuer, ran, _):
            refused = await call(client, None)
            assert refused.status == 401
            params = challenge(refused)
            assert params == {"scope": "mcp", "resource_metadata": METADATA_URL}
            # The metadata is served, unauthenticated, where the challenge points (and at
            # the bare well-known path), and names the issuer.
            for path in ("/.well-known/oauth-protected-resource/mcp",
                         "/.well-known/oauth-protected-resource"):  # fmt: skip
                document = await client.request("GET", {}, path=path)
                assert document.status == 200
                assert document.headers["access-control-allow-origin"] == "*"
                assert json.loads(document.content) == {
                    "resource": RESOURCE,
                    "authorization_servers": [issuer.issuer],
                    "bearer_methods_supported": ["header"],
                    "scopes_supported": ["mcp"],
                }
            assert (await client.request("POST", {}, path=path)).status == 405
            assert ran == []


@pytest.mark.parametrize(
    ("case", "description"),
    [
        ("expired", "the token has expired"),
        ("not yet valid", "the token is not valid yet (nbf)"),
        ("another audience", "the token is not for this resource (http://mcp.test/mcp)"),
        ("no audience", "the token has no aud claim"),
        ("another issuer", "the token was not issued by"),
        ("alg none", "the token's algorithm 'none' is not accepted"),
        ("hs256 with a guessable secret", "the token's algorithm 'HS256' is not accepted"),
        ("unknown key", "unknown signing key 'stranger'"),
        ("forged signature", "the token's signature does not verify"),
        ("garbage", "the token is not a well-formed JWT"),
        ("opaque unknown", "the token is not active"),
        ("opaque for another audience", "the token is not for this resource"),
    ],
)
async def test_a_bad_token_gets_401_invalid_token_saying_why(
    case: str, description: str, mcp_registry: Registry
) -> None:
    with trio.fail_after(TIMEOUT):
        async with protected(mcp_registry) as (client, issuer, ran, _):
            now = time.time()
            tokens = {
                "expired": lambda: issuer.mint(aud=RESOURCE, expires_in=-120),
                "not yet valid": lambda: issuer.mint(aud=RESOURCE, nbf=now + 600),
                "another audience": lambda: issuer.mint(aud="http://other.test/mcp"),
                "no audience": lambda: issuer.mint(aud=None),
                "another issuer": lambda: issuer.mint(aud=RESOURCE, iss="http://evil.test"),
                "alg none": lambda: jwt.encode(
                    {"iss": issuer.issuer, "aud": RESOURCE, "sub": "x", "exp": now + 60},
                    None,
                    algorithm="none",
                ),
                "hs256 with a guessable secret": lambda: jwt.encode(
                    {"iss": issuer.issuer, "aud": RESOURCE, "sub": "x", "exp": now + 60},
                    "a-secret-of-at-least-32-bytes-long!!",
                    algorithm="HS256",
                    headers={"kid": issuer.keys[0][0]},
                ),
                "unknown key": lambda: issuer.mint(aud=RESOURCE, kid="stranger"),
                "forged signature": lambda: issuer.mint(
                    aud=RESOURCE, key=ec.generate_private_key(ec.SECP256R1())
                ),
                "garbage": lambda: "not.a.jwt",
                "opaque unknown": lambda: "opaque-token-nobody-issued",
                "opaque for another audience": lambda: issuer.mint_opaque(
                    "client-a", "http://other.test/mcp"
                ),
            }
            refused = await call(client, tokens[case]())
            assert refused.status == 401, refused.content
            params = challenge(refused)
            assert params["error"] == "invalid_token"
            assert params["error_description"].startswith(description), params
            assert params["resource_metadata"] == METADATA_URL
            assert ran == []


async def test_a_valid_jwt_calls_the_tool_and_its_later_requests_do_not_ask_the_issuer(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with protected(mcp_registry) as (client, issuer, ran, _):
            token = issuer.mint("client-a", RESOURCE)
            assert result_text(await call(client, token, text="one")) == "one"
            asked = dict(issuer.calls)
            assert asked == {"/.well-known/oauth-authorization-server": 1, "/jwks": 1}
            issuer.down = True  # a cached key needs no authorization server
            assert result_text(await call(client, token, text="two")) == "two"
            assert ran == ["echo one", "echo two"]


async def test_an_unknown_kid_refetches_the_rotated_jwks_at_most_once_per_interval(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with protected(mcp_registry) as (client, issuer, ran, _):
            assert result_text(await call(client, issuer.mint(aud=RESOURCE))) == "hi"
            issuer.rotate()  # the old key is gone, a new one signs
            await trio.sleep(0.25)  # past the refresh interval since the first fetch
            rotated = issuer.mint(aud=RESOURCE)
            assert result_text(await call(client, rotated)) == "hi"
            assert issuer.calls["/jwks"] == 2
            # Forged kids in a burst: the general slot is spent, then the small budget
            # for kids never seen (3 a minute), then nothing, however many kids come.
            for n in range(8):
                refused = await call(client, issuer.mint(aud=RESOURCE, kid=f"forged-{n}"))
                assert refused.status == 401
            assert issuer.calls["/jwks"] == 2 + 3
            assert len(ran) == 2


async def test_an_opaque_token_is_introspected_once_for_its_lifetime(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with protected(mcp_registry) as (client, issuer, ran, _):
            token = issuer.mint_opaque("client-a", RESOURCE)
            for text in ("a", "b", "c"):
                assert result_text(await call(client, token, text=text)) == text
            assert issuer.calls["/introspect"] == 1
            assert ran == ["echo a", "echo b", "echo c"]


async def test_introspection_down_answers_503_with_the_reason_not_a_hang_or_a_500(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with protected(mcp_registry) as (client, issuer, ran, _):
            token = issuer.mint_opaque("client-a", RESOURCE)
            issuer.down = True
            refused = await call(client, token)
            assert refused.status == 503
            # The wait before the server is asked again (a short back-off: the
            # metadata discovery failed at first use).
            assert int(refused.headers["retry-after"]) >= 1
            message = refused.json()["error"]["message"]
            assert "cannot validate the token" in message and "HTTP 503" in message
            # Within the retry interval the next token is answered at once, without a call.
            asked = sum(issuer.calls.values())
            again = await call(client, issuer.mint_opaque("client-b", RESOURCE))
            assert again.status == 503
            assert sum(issuer.calls.values()) == asked
            assert ran == []


async def test_a_jwks_that_cannot_be_fetched_is_asked_once_per_interval_and_answers_503(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with protected(mcp_registry) as (client, issuer, ran, _):
            assert result_text(await call(client, issuer.mint(aud=RESOURCE))) == "hi"
            await trio.sleep(0.25)  # past the refresh interval
            issuer.rotate()
            issuer.down = True
            for _ in range(3):
                refused = await call(client, issuer.mint(aud=RESOURCE))
                assert refused.status == 503
                assert "HTTP 503" in refused.json()["error"]["message"]
            assert issuer.calls["/jwks"] == 2  # the first fetch, and one failed refetch
            assert ran == ["echo hi"]


async def test_an_unreachable_authorization_server_answers_503_within_the_timeout(
    mcp_registry: Registry,
) -> None:
    closed = "http://127.0.0.1:9"  # discard: nothing listens there
    resource = OAuthResource(RESOURCE, [closed], JwtVerifier(closed, RESOURCE, timeout=1))
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            client = AsgiClient(McpHttpApp(build([]), mcp_registry, auth=resource), nursery)
            async with client.lifespan():
                refused = await call(client, "a.b.c")
                assert refused.status in (401, 503)  # 'a.b.c' is not even a JWT: 401
                forged = jwt.encode(
                    {"sub": "x"},
                    ec.generate_private_key(ec.SECP256R1()),
                    algorithm="ES256",
                    headers={"kid": "k"},
                )
                refused = await call(client, forged)
                assert refused.status == 503
                assert "no authorization server metadata" in refused.json()["error"]["message"]


async def test_a_tool_with_a_required_scope_answers_403_insufficient_scope(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with protected(mcp_registry, required_scopes=["mcp"]) as (client, issuer, ran, _):
            without = issuer.mint(aud=RESOURCE, scope="mcp files:read")
            refused = await call(client, without, name="write")
            assert refused.status == 403
            params = challenge(refused)
            assert params["error"] == "insufficient_scope"
            # Every scope the operation needs, in one challenge.
            assert params["scope"] == "files:write mcp"
            assert params["resource_metadata"] == METADATA_URL
            assert result_text(await call(client, without, name="echo")) == "hi"
            granted = issuer.mint(aud=RESOURCE, scope="mcp files:write")
            assert result_text(await call(client, granted, name="write")) == "written"
            assert ran == ["echo hi", "write hi"]


async def test_a_token_without_the_scope_every_request_needs_is_refused_403(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with protected(mcp_registry, required_scopes=["mcp"]) as (client, issuer, ran, _):
            refused = await call(client, issuer.mint(aud=RESOURCE, scope="other"))
            assert refused.status == 403
            assert challenge(refused)["scope"] == "mcp"
            assert ran == []


async def test_a_broader_scope_implies_the_narrower_ones_it_includes(
    mcp_registry: Registry,
) -> None:
    implied = {"files": ["files:read", "files:write"]}
    with trio.fail_after(TIMEOUT):
        async with protected(mcp_registry, implied_scopes=implied) as (client, issuer, ran, _):
            token = issuer.mint(aud=RESOURCE, scope="files")
            assert result_text(await call(client, token, name="write")) == "written"
            assert ran == ["write hi"]


async def test_a_non_bearer_scheme_or_a_malformed_header_gets_401(mcp_registry: Registry) -> None:
    with trio.fail_after(TIMEOUT):
        async with protected(mcp_registry) as (client, _, ran, _resource):
            headers = modern_headers("tools/call", "echo")
            for value, error in (("Basic dXNlcjpwYXNz", None), ("Bearer", "invalid_token"),
                                 ("Bearer a b", "invalid_token")):  # fmt: skip
                refused = await client.post(
                    {**headers, "authorization": value}, modern_call(1, "echo", {"text": "x"})
                )
                assert refused.status == 401
                assert challenge(refused).get("error") == error
            assert ran == []


def test_the_verifier_refuses_none_and_hmac_algorithms_in_its_allow_list() -> None:
    with pytest.raises(ValueError, match="not allowed"):
        JwtVerifier("http://as.test", RESOURCE, algorithms=["RS256", "none"])
    with pytest.raises(ValueError, match="not allowed"):
        JwtVerifier("http://as.test", RESOURCE, algorithms=["HS256"])


async def test_a_custom_verifier_plugs_in_through_the_protocol(mcp_registry: Registry) -> None:
    class Static:
        async def verify(self, token: str) -> AccessToken:
            if token != "letmein":
                raise InvalidToken("not the password")
            return AccessToken("alice", "https://as.test", frozenset({"mcp"}))

    resource = OAuthResource(RESOURCE, ["https://as.test"], Static(), required_scopes="mcp")
    ran: list[str] = []
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            client = AsgiClient(McpHttpApp(build(ran), mcp_registry, auth=resource), nursery)
            async with client.lifespan():
                assert result_text(await call(client, "letmein")) == "hi"
                refused = await call(client, "guess")
                assert challenge(refused)["error_description"] == "not the password"


def test_app_from_env_reads_the_issuer_audience_scopes_and_introspection_settings() -> None:
    server = build([])
    plain = app_from_env(server, {})
    assert plain.oauth is None and plain.auth is None
    env = {
        "MCP_AUTH_ISSUER": "https://as.test",
        "MCP_AUTH_AUDIENCE": "https://mcp.test/mcp",
        "MCP_AUTH_SCOPES": "mcp, tools",
        "MCP_AUTH_CLIENT_ID": "rs",
        "MCP_AUTH_CLIENT_SECRET": "secret",
        "MCP_AUTH_INTROSPECTION_URL": "https://as.test/introspect",
    }
    app = app_from_env(server, env)
    assert app.oauth is not None
    assert app.oauth.metadata() == {
        "resource": "https://mcp.test/mcp",
        "authorization_servers": ["https://as.test"],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["mcp", "tools"],
    }
    verifier = app.oauth.verifier
    assert isinstance(verifier, JwtOrOpaque)
    assert isinstance(verifier.opaque, IntrospectionVerifier)
    assert verifier.opaque.endpoint == "https://as.test/introspect"
    with pytest.raises(ValueError, match="MCP_AUTH_AUDIENCE"):
        app_from_env(server, {"MCP_AUTH_ISSUER": "https://as.test"})
    with pytest.raises(ValueError, match="go together"):
        app_from_env(server, {**env, "MCP_AUTH_CLIENT_SECRET": ""})


async def test_a_remembered_token_is_refused_once_it_expires() -> None:
    with trio.fail_after(TIMEOUT):
        async with running_auth_server() as issuer:
            verifier = JwtVerifier(issuer.issuer, RESOURCE, leeway=0)
            token = issuer.mint(aud=RESOURCE, expires_in=2)
            assert (await verifier.verify(token)).subject == "client-a"
            assert (await verifier.verify(token)).subject == "client-a"  # remembered
            exp = jwt.decode(token, options={"verify_signature": False})["exp"]
            await trio.sleep(max(0.0, exp - time.time()) + 0.05)
            with pytest.raises(InvalidToken, match="expired"):
                await verifier.verify(token)
