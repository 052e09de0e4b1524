"""The Extension API: an extension adds methods, declares itself, and may wrap tools/call.

The Tasks extension is its first user (tests/tasks); these tests pin the API itself with
extensions written here, as a user of the library would write them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import trio

from trio_mcp_cancel._protocol.registration import Registration
from trio_mcp_cancel._wire.versions import Era
from trio_mcp_cancel.lowlevel.extensions import (
    Extension,
    ExtensionHost,
    HandlerInput,
    Method,
    ToolCall,
)
from trio_mcp_cancel.server import Context, McpServer, Tasks
from trio_mcp_cancel.testing import McpError, open_test_client

NAME = "com.example/echo-ext"


class Recorder(Extension):
    """Adds ``example/hello``, declares itself once a tool exists, and records tool calls."""

    name = NAME

    def __init__(self, label: str, seen: list[str]) -> None:
        self.label = label
        self.seen = seen
        self.host: ExtensionHost | None = None

    def methods(self) -> Mapping[str, Method]:
        return {f"example/{self.label}": Method(self._hello)}

    async def _hello(self, h: HandlerInput) -> dict[str, Any]:
        return {"hello": self.label, "asked": dict(h.params).get("who")}

    def capability(self, registration: Registration, era: Era) -> Mapping[str, Any] | None:
        return {"label": self.label} if registration.tools else None

    def bind(self, host: ExtensionHost) -> None:
        self.host = host

    async def call_tool(self, h: HandlerInput, call: ToolCall, call_next: Any) -> Any:
        self.seen.append(f"{self.label} before {call.tool.name}")
        if call.arguments.get("text") == "rewrite":
            call.arguments["text"] = f"rewritten by {self.label}"
        try:
            return await call_next()
        finally:
            self.seen.append(f"{self.label} after")


def server_with(*extensions: Extension) -> McpServer:
    server = McpServer("ext", extensions=extensions)

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    return server


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_an_extension_adds_methods_and_wraps_tool_calls_in_order(era: str) -> None:
    seen: list[str] = []
    outer, inner = Recorder("outer", seen), Recorder("inner", seen)
    server = server_with(outer, inner)
    assert outer.host is not None  # bound once, by the dispatcher
    async with open_test_client(server, era=era) as client:  # type: ignore[arg-type]
        answer = await client.request("example/outer", {"who": "me"})
        assert (answer["hello"], answer["asked"]) == ("outer", "me")
        result = await client.call_tool("echo", {"text": "rewrite"})
    # The outer one saw the arguments first and rewrote them; the inner one saw its rewrite.
    assert result["content"][0]["text"] == "rewritten by outer"
    assert seen == ["outer before echo", "inner before echo", "inner after", "outer after"]


async def test_an_extension_declares_itself_in_discover_only_when_it_says_so() -> None:
    with_tool = server_with(Recorder("a", []))
    async with open_test_client(with_tool) as client:
        found = await client.request("server/discover")
    assert found["capabilities"]["extensions"] == {NAME: {"label": "a"}}
    bare = McpServer("bare", extensions=[Recorder("b", [])])  # no tool: declines
    async with open_test_client(bare) as client:
        found = await client.request("server/discover")
    assert "extensions" not in found["capabilities"]


async def test_a_server_without_extensions_serves_no_extension_method() -> None:
    async with open_test_client(server_with()) as client:
        with pytest.raises(McpError) as refused:
            await client.request("tasks/get", {"taskId": "x"})
        found = await client.request("server/discover")
    assert refused.value.code == -32601
    assert "extensions" not in found["capabilities"]


def test_an_extension_cannot_replace_a_method_the_server_serves() -> None:
    class Hijack(Extension):
        name = "com.example/hijack"

        def methods(self) -> Mapping[str, Method]:
            async def steal(h: HandlerInput) -> dict[str, Any]:
                return {}

            return {"tools/call": Method(steal)}

    with pytest.raises(ValueError, match="redefines the method 'tools/call'"):
        McpServer("x", extensions=[Hijack()])
    with pytest.raises(ValueError, match="redefines"):  # two extensions, one name
        McpServer("y", extensions=[Recorder("same", []), Recorder("same", [])])


def test_an_extension_that_overrides_nothing_adds_nothing_to_a_call() -> None:
    server = McpServer("plain", extensions=[Extension()])
    plain = McpServer("none")
    assert server.dispatcher.methods.keys() == plain.dispatcher.methods.keys()
    # Neither wraps tools/call nor narrows listens: the core handlers are used as they are.
    assert (
        server.dispatcher.methods["tools/call"].handler
        is plain.dispatcher.methods["tools/call"].handler
    )


def test_a_task_tool_needs_the_tasks_extension_and_says_how_to_add_it() -> None:
    server = McpServer("no-tasks")
    with pytest.raises(ValueError, match=r"extensions=\[Tasks\(\)\]"):

        @server.tool(task="optional")
        async def crunch(ctx: Context) -> str:
            return "done"

    with_tasks = McpServer("tasks", extensions=[Tasks()])

    @with_tasks.tool(task="optional")
    async def crunch2(ctx: Context) -> str:
        return "done"

    tasks = with_tasks.dispatcher.extension(Tasks)
    assert tasks is not None and with_tasks.dispatcher.extension(Recorder) is None


async def test_an_extension_service_runs_while_a_transport_serves_and_stops_after() -> None:
    class Service(Extension):
        name = "com.example/service"

        def __init__(self) -> None:
            self.is_running = False

        @property
        def running(self) -> bool:
            return self.is_running

        async def serve(self, backend: Any = None, *, task_status: Any = trio.TASK_STATUS_IGNORED):
            self.is_running = True
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                self.is_running = False

    service = Service()
    server = server_with(service)
    async with open_test_client(server) as client:
        await client.call_tool("echo", {"text": "hi"})
        assert service.running
    assert not service.running
