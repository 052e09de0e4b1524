"""The official TypeScript SDK v2 client completes the authorization flow from the 401 alone.

``conformance/ts_client_oauth.mjs`` starts with no token and only the MCP
URL and the issuer it trusts (``expectedIssuer``).  Our server answers
``401`` with ``resource_metadata``; the client reads the Protected Resource
Metadata, the authorization server's metadata (the test server of
:mod:`_support.oauth`, plain ``http`` on 127.0.0.1: the SDK accepts a
loopback token endpoint without TLS), gets a ``client_credentials`` token
for our resource (RFC 8707 ``resource``) with the scope the challenge
named, calls a tool, steps up on the ``403 insufficient_scope`` of a tool
that needs more, and aborts that long call: the tool sees the cancellation.
Both eras: the SDK's default legacy handshake (a session, bound to the
principal) and 2026-07-28 pinned (stateless).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_mcp_cancel import RequestCancelled, checkpoint_cancelled, open_registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.oauth import JwtVerifier, OAuthResource
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import assert_no_leaks

from _support.oauth import listening_socket, running_auth_server, serving_asgi
from _support.repo_paths import ROOT

sys.path.insert(0, str(ROOT / "conformance"))
import node_tools

pytestmark = [pytest.mark.node, pytest.mark.subprocess]

SCRIPT = ROOT / "conformance" / "ts_client_oauth.mjs"


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_typescript_sdk_v2_discovers_gets_a_token_calls_and_cancels(
    node: Path, era: str
) -> None:
    server = McpServer("ts-oauth-test")
    seen: list[str] = []
    principals: list[str] = []

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        principals.append(ctx.namespace)
        return text

    @server.tool(scopes=["mcp:slow"])
    async def slow(ctx: Context) -> str:
        seen.append("slow started")
        try:
            while True:
                await checkpoint_cancelled()
                await trio.sleep(0.05)
        except RequestCancelled as exc:
            seen.append(f"slow stopped: {exc.kind}")
            raise

    with trio.fail_after(90):
        async with running_auth_server() as issuer, open_registry(grace_period=5) as registry:
            sock, port = listening_socket()
            url = f"http://127.0.0.1:{port}/mcp"
            resource = OAuthResource(
                url,
                [issuer.issuer],
                JwtVerifier(issuer.issuer, url),
                required_scopes=["mcp"],
                scopes_supported=["mcp", "mcp:slow"],
            )
            async with serving_asgi(McpHttpApp(server, registry, auth=resource), sock):
                script = shutil.copy(SCRIPT, node_tools.TOOLS / SCRIPT.name)
                done = await trio.run_process(
                    [str(node), str(script), url, issuer.issuer, era],
                    cwd=node_tools.TOOLS,
                    env=node_tools.env(),
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
                assert done.returncode == 0, done.stderr.decode()[-3000:]
                lines = done.stdout.decode().strip().splitlines()
                report: dict[str, Any] = json.loads(lines[-1])
                await registry.wait_idle()
                assert_no_leaks(registry)
    assert report["errors"] == [], report
    assert report["protocolVersion"] == ("2025-11-25" if era == "legacy" else era), report
    # The first answer was the challenge; the client found everything from it.
    assert report["statuses"][0] == 401
    assert issuer.calls["/.well-known/oauth-authorization-server"] >= 1
    assert issuer.calls["/token"] >= 1
    assert report["echo"] == "authorized"
    assert len(principals) == 2  # both echo calls ran
    # The first token had the scope the 401 challenge named; the slow tool's 403
    # (insufficient_scope) made the client step up: a second token, and the call went through.
    assert report["tokenScope"] == "mcp"
    assert 403 in report["statuses"]
    assert issuer.calls["/token"] == 2
    assert report["abortOutcome"] == "aborted"
    # Legacy: notifications/cancelled (kind "client"); modern: the client closes the call's
    # stream, which is how that era cancels (kind "disconnect").
    kind = "client" if era == "legacy" else "disconnect"
    assert seen == ["slow started", f"slow stopped: {kind}"]
    assert report["afterAbort"] == "still here"
