"""FastMCP-style signatures: the context by its annotation (anywhere, or absent), bare
decorators, sync functions, and the same parameter handling for prompts and resources."""

from __future__ import annotations

import enum
import threading
from typing import Annotated, Any

import pytest
import trio
import trio.testing
from pydantic import Field

from trio_mcp_cancel import ThreadAbandonedEvent, cancelled
from trio_mcp_cancel.client import McpError
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.testing import EventRecorder, open_test_client


class Level(enum.Enum):
    LOW = "low"
    HIGH = "high"


def text_of(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


async def test_the_context_is_found_by_its_annotation_at_any_position_or_is_absent() -> None:
    server = McpServer()
    seen: list[object] = []

    @server.tool
    async def who(a: int, b: int) -> str:
        return f"{a}+{b}={a + b}"

    @server.tool
    async def last(a: int, context: Context) -> str:
        seen.append(context)
        return f"a={a} ctx={type(context).__name__}"

    @server.tool
    async def noargs() -> str:
        return "none"

    async with open_test_client(server) as client:
        listed = {t["name"]: t for t in (await client.request("tools/list"))["tools"]}
        assert text_of(await client.call_tool("who", {"a": 1, "b": 2})) == "1+2=3"
        assert text_of(await client.call_tool("last", {"a": 5})) == "a=5 ctx=Context"
        assert text_of(await client.call_tool("noargs")) == "none"
    assert list(listed["who"]["inputSchema"]["properties"]) == ["a", "b"]
    assert list(listed["last"]["inputSchema"]["properties"]) == ["a"]
    assert listed["noargs"]["inputSchema"]["properties"] == {}
    assert isinstance(seen[0], Context)


async def test_an_unannotated_ctx_first_is_still_the_context() -> None:
    server = McpServer()

    @server.tool()
    async def legacy(ctx, n: int) -> str:  # type: ignore[no-untyped-def]
        return f"{type(ctx).__name__} {n}"

    async with open_test_client(server) as client:
        (tool,) = (await client.request("tools/list"))["tools"]
        assert text_of(await client.call_tool("legacy", {"n": 1})) == "Context 1"
    assert list(tool["inputSchema"]["properties"]) == ["n"]


def test_two_context_parameters_are_refused_at_registration() -> None:
    server = McpServer()

    async def twice(a: Context, b: Context) -> str:
        return "never"

    with pytest.raises(TypeError, match="more than one parameter takes the context"):
        server.tool(twice)


def test_bare_called_and_named_decorators_all_register() -> None:
    server = McpServer()

    @server.tool
    async def bare() -> str:
        return "bare"

    @server.tool()
    async def called() -> str:
        return "called"

    @server.tool(name="renamed")
    async def original() -> str:
        return "named"

    @server.prompt
    async def greet(name: str) -> str:
        return f"hi {name}"

    @server.prompt(name="farewell")
    async def bye() -> str:
        return "bye"

    # The decorators give the function back, so it stays callable and testable.
    assert bare.__name__ == "bare" and original.__name__ == "original"
    assert list(server.registration.tools) == ["bare", "called", "renamed"]
    assert list(server.registration.prompts.prompts) == ["greet", "farewell"]


def test_a_bare_resource_decorator_says_it_needs_the_uri() -> None:
    server = McpServer()

    async def read() -> str:
        return "x"

    with pytest.raises(TypeError, match="takes the URI first"):
        server.resource(read)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes the URI first"):
        server.resource_template(read)  # type: ignore[arg-type]
    assert not server.registration.resources


async def test_sync_functions_run_in_a_worker_thread_with_or_without_the_context() -> None:
    server = McpServer()

    @server.tool
    def plain(a: int, b: int) -> str:
        return f"{a + b} main={threading.current_thread() is threading.main_thread()}"

    @server.tool
    def with_ctx(n: int, ctx: Context) -> str:
        return f"{type(ctx).__name__} {n} cancelled={cancelled()}"

    async with open_test_client(server) as client:
        assert text_of(await client.call_tool("plain", {"a": 2, "b": 3})) == "5 main=False"
        assert text_of(await client.call_tool("with_ctx", {"n": 4})) == "Context 4 cancelled=False"


async def test_prompt_arguments_are_converted_from_strings_and_checked() -> None:
    server = McpServer()

    @server.prompt
    def advise(
        topic: Annotated[str, "what to talk about"],
        level: Level,
        count: Annotated[int, Field(ge=1, description="how many tips")] = 3,
    ) -> str:
        return f"{count} {level.value} tips on {topic}"

    async with open_test_client(server) as client:
        (prompt,) = (await client.request("prompts/list"))["prompts"]
        got = await client.request(
            "prompts/get", {"name": "advise", "arguments": {"topic": "trio", "level": "high"}}
        )
        counted = await client.request(
            "prompts/get",
            {"name": "advise", "arguments": {"topic": "t", "level": "low", "count": "2"}},
        )
        with pytest.raises(McpError) as wrong:
            await client.request(
                "prompts/get",
                {"name": "advise", "arguments": {"topic": "t", "level": "mid", "count": "0"}},
            )
    assert prompt["arguments"] == [
        {"name": "topic", "required": True, "description": "what to talk about"},
        {"name": "level", "required": True},
        {"name": "count", "required": False, "description": "how many tips"},
    ]
    assert got["messages"][0]["content"]["text"] == "3 high tips on trio"
    assert counted["messages"][0]["content"]["text"] == "2 low tips on t"
    assert wrong.value.code == -32602
    assert "'level'" in wrong.value.message and "'count'" in wrong.value.message


async def test_resource_template_variables_are_converted_to_the_readers_types() -> None:
    server = McpServer()
    seen: list[object] = []

    @server.resource_template("test://items/{item_id}")
    async def item(item_id: int) -> str:
        seen.append(item_id)
        return f"item {item_id}"

    @server.resource("test://static")
    def static(ctx: Context) -> str:
        return f"static via {type(ctx).__name__}"

    async with open_test_client(server) as client:
        found = await client.request("resources/read", {"uri": "test://items/42"})
        plain = await client.request("resources/read", {"uri": "test://static"})
        with pytest.raises(McpError) as wrong:
            await client.request("resources/read", {"uri": "test://items/abc"})
    assert found["contents"][0]["text"] == "item 42" and seen == [42]
    assert plain["contents"][0]["text"] == "static via Context"
    assert wrong.value.code == -32602 and "'item_id'" in wrong.value.message


def test_a_reader_parameter_outside_the_template_fails_at_registration() -> None:
    server = McpServer()

    async def read(item_id: str, extra: int) -> str:
        return "never"

    with pytest.raises(TypeError, match="'extra' is not in the URI"):
        server.resource_template("test://items/{item_id}")(read)
    with pytest.raises(TypeError, match="takes no parameter 'other'"):
        server.resource_template("test://things/{other}")(read)


async def test_a_sync_tool_is_cancelled_like_any_other(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = McpServer()
    release = threading.Event()

    @server.tool
    def stuck() -> str:
        release.wait()
        return "late"

    try:
        async with open_test_client(
            server, limits=ConnectionLimits(disconnect_grace_period=1)
        ) as client:
            recorder = EventRecorder.attach(client.registry)
            call = client.start_call("stuck")
            await client.wait_in_flight(call)
            await call.cancel("enough")
            await client.registry.wait_idle()
            # The thread never looked at the flag: abandoned at the hard cancel, on time.
            assert len(recorder.of_type(ThreadAbandonedEvent)) == 1
    finally:
        release.set()


async def test_a_keyword_only_context_is_passed_by_name() -> None:
    server = McpServer()

    @server.tool
    async def starred(*, ctx: Context, n: int) -> str:
        return f"{type(ctx).__name__} {n}"

    async with open_test_client(server) as client:
        assert text_of(await client.call_tool("starred", {"n": 3})) == "Context 3"
