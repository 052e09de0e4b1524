"""The README's code must work as written: its testing examples run here verbatim."""

from __future__ import annotations

import re
from pathlib import Path

from repo_paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
_blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def _block(needle: str) -> str:
    return next(block for block in _blocks if needle in block)


# Define the README's tests in this module, so pytest collects and runs them:
# the registry-level one, and the test-client one against the stdio
# section's server (whose ``run_stdio`` only runs as a script).
exec(compile(_block("def test_my_tool_stops_when_cancelled"), "README.md", "exec"))
exec(compile(_block("run_stdio(server"), "README.md", "exec"))
exec(compile(_block("def test_crunch_stops_when_cancelled"), "README.md", "exec"))

_features: dict[str, object] = {}
exec(compile(_block('McpServer("features-demo")'), "README.md", "exec"), _features)


async def test_the_features_example_serves_what_it_says(autojump_clock: object) -> None:
    from trio_mcp_cancel.testing import open_test_client

    server = _features["server"]
    caps = {"elicitation": {}}
    async with open_test_client(server, client_capabilities=caps, log_level="info") as client:
        assert (await client.call_tool("lookup", {"city": "Oslo"}))["content"][0]["text"] == (
            "Oslo: 3 results"
        )
        assert (await client.call_tool("lookup", {"city": "Atlantis"}))["isError"] is True
        assert [m["data"] for m in client.log_messages] == ["looking up Oslo"]
        assert [c["type"] for c in (await client.call_tool("chart"))["content"]] == [
            "text",
            "image",
        ]
        assert (await client.call_tool("add", {"a": 1, "b": 2}))["structuredContent"] == {"sum": 3}
        tools = {t["name"]: t for t in (await client.request("tools/list"))["tools"]}
        assert tools["hello"]["inputSchema"]["additionalProperties"] is False
        user = await client.request("resources/read", {"uri": "db://users/42"})
        assert user["contents"][0]["text"] == '{"id": "42"}'
        review = await client.request("prompts/get", {"name": "review", "arguments": {"path": "a"}})
        assert review["messages"][0]["content"]["type"] == "resource"
        asked = await client.call_tool("delete", {"item": "x"})
        assert asked["resultType"] == "input_required"
        retry = {
            "name": "delete",
            "arguments": {"item": "x"},
            "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
            "requestState": asked["requestState"],
        }
        assert (await client.request("tools/call", retry))["content"][0]["text"] == "deleted x"


def test_the_readme_examples_were_loaded() -> None:
    assert "test_my_tool_stops_when_cancelled" in globals()
    assert "test_crunch_stops_when_cancelled" in globals()
    assert "server" in _features


# The "where the work runs" examples: a build tool, a sync tool, a gateway tool.
_work: dict[str, object] = {}
for _needle in ("async def build(", "def checksum(", "async def ask_upstream(", "def run_job("):
    exec(compile(_block(_needle), "README.md", "exec"), _work)


async def test_the_readme_work_tools_register_and_the_sync_one_runs(tmp_path: Path) -> None:
    from trio_mcp_cancel.server import McpServer
    from trio_mcp_cancel.testing import open_test_client

    server = _work["server"]
    assert isinstance(server, McpServer)
    assert set(server.tools) == {"build", "checksum", "ask_upstream", "run_job"}
    data = tmp_path / "data"
    data.write_bytes(b"abc" * 1000)
    async with open_test_client(server) as client:
        result = await client.call_tool("checksum", {"path": str(data)})
    expected = sum(b"abc" * 1000) % (1 << 61)
    assert result["content"][0]["text"] == f"{expected:x}"
