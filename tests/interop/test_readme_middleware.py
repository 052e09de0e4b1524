"""The README's middleware block runs as written: it refuses an anonymous tool call."""

from __future__ import annotations

from typing import Any

import pytest

from trio_mcp_cancel.server import Context
from trio_mcp_cancel.testing import McpError, open_test_client

from _support.repo_paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block(needle: str) -> str:
    (found,) = [b for b in README.split("```python\n")[1:] if needle in b.split("```")[0]]
    return found.split("```")[0]


async def test_the_readme_middleware_refuses_anonymous_calls_and_serves_members() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(_block('McpServer("guarded"'), "README.md", "exec"), namespace)
    server = namespace["server"]

    @server.tool(annotations={"readOnlyHint": True})
    async def hello(ctx: Context) -> str:
        return "hi"

    async with open_test_client(server) as client:
        with pytest.raises(McpError) as refused:
            await client.call_tool("hello")
    assert refused.value.code == -31403
    async with open_test_client(server, principal="alice") as client:
        assert (await client.call_tool("hello"))["content"][0]["text"] == "hi"
