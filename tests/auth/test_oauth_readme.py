"""The README's "Authorization" example runs as written and refuses what its table says."""

from __future__ import annotations

import re
from typing import Any

import attrs
import trio

from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.oauth import AccessToken, InvalidToken, OAuthResource

from _support.asgi import AsgiClient, HttpExchange, modern_call, modern_headers
from _support.repo_paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
(SOURCE,) = [block for block in BLOCKS if "OAuthResource(" in block]
EXAMPLE: dict[str, Any] = {}
exec(compile(SOURCE, "README.md", "exec"), EXAMPLE)

METADATA = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"


class Tokens:
    """Stands in for the identity provider: two tokens, with and without ``notes:write``."""

    async def verify(self, token: str) -> AccessToken:
        scopes = {"reader": {"notes:read"}, "writer": {"notes:read", "notes:write"}}
        if token not in scopes:
            raise InvalidToken("the token has expired")
        return AccessToken(token, "https://auth.example.com", frozenset(scopes[token]))


def params(exchange: HttpExchange) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', exchange.headers["www-authenticate"]))


async def test_the_readme_example_answers_as_its_table_says() -> None:
    app: McpHttpApp = EXAMPLE["app"]
    readme_resource: OAuthResource = EXAMPLE["resource"]
    assert app.oauth is readme_resource
    resource = attrs.evolve(readme_resource, verifier=Tokens())
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            client = AsgiClient(McpHttpApp(EXAMPLE["server"], auth=resource), nursery)
            async with client.lifespan():

                async def call(token: str | None, name: str) -> HttpExchange:
                    headers = modern_headers("tools/call", name)
                    if token is not None:
                        headers["authorization"] = f"Bearer {token}"
                    arguments = {"name": "todo", "text": "x"}
                    if name == "read_note":
                        arguments = {"name": "todo"}
                    return await client.post(headers, modern_call(1, name, arguments))

                anonymous = await call(None, "read_note")
                assert anonymous.status == 401
                assert params(anonymous) == {"scope": "notes:read", "resource_metadata": METADATA}
                expired = await call("stale", "read_note")
                assert (expired.status, params(expired)["error"]) == (401, "invalid_token")
                assert params(expired)["error_description"] == "the token has expired"
                reader = await call("reader", "write_note")
                assert reader.status == 403
                assert params(reader)["scope"] == "notes:read notes:write"
                assert (await call("reader", "read_note")).status == 200
                assert (await call("writer", "write_note")).status == 200
