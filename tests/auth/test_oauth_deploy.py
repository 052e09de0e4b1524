"""``hypercorn examples.slow_server:app`` with ``MCP_AUTH_*`` set: the deployment authorizes.

The environment alone (issuer, audience, scopes) turns the example's
``app_from_env`` app into a protected resource: an unauthenticated POST gets
``401`` with a ``resource_metadata`` challenge whose document names the
issuer, and a token from that issuer for that audience calls the tool.
"""

from __future__ import annotations

import re

import httpx
import pytest
import trio

from _support.asgi import modern_call, modern_headers
from _support.deploy import answer, run_hypercorn
from _support.oauth import running_auth_server

pytestmark = pytest.mark.subprocess

AUDIENCE = "http://mcp.test/mcp"


async def test_the_hypercorn_deployment_reads_its_authorization_from_the_environment() -> None:
    with trio.fail_after(60):
        async with running_auth_server() as issuer:
            env = {
                "MCP_AUTH_ISSUER": issuer.issuer,
                "MCP_AUTH_AUDIENCE": AUDIENCE,
                "MCP_AUTH_SCOPES": "mcp",
            }
            async with run_hypercorn(env=env) as served, httpx.AsyncClient() as client:
                message = modern_call(1, "count", {"n": 1, "delay": 0})
                headers = modern_headers("tools/call", "count")
                refused = await client.post(served.url, headers=headers, json=message)
                assert refused.status_code == 401
                challenge = dict(
                    re.findall(r'(\w+)="([^"]*)"', refused.headers["www-authenticate"])
                )
                metadata_url = "http://mcp.test/.well-known/oauth-protected-resource/mcp"
                assert challenge == {"scope": "mcp", "resource_metadata": metadata_url}
                base = served.url.removesuffix("/mcp")
                document = await client.get(f"{base}/.well-known/oauth-protected-resource/mcp")
                assert document.json()["authorization_servers"] == [issuer.issuer]
                assert document.json()["resource"] == AUDIENCE
                token = issuer.mint("client-a", AUDIENCE, "mcp")
                headers["authorization"] = f"Bearer {token}"
                called = await client.post(served.url, headers=headers, json=message)
                assert answer(called)["result"]["content"][0]["text"] == "counted to 1"
                headers["authorization"] = f"Bearer {issuer.mint('client-a', AUDIENCE)}"
                unscoped = await client.post(served.url, headers=headers, json=message)
                assert unscoped.status_code == 403
