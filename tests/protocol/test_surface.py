"""The server surface beyond text tools, in memory: content, schemas, resources, prompts,
completion, logging, ``subscriptions/listen`` and multi round-trip requests.

Everything goes through :func:`open_test_client` (the real message path of the
stream transports) under MockClock.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel import RegistryConfig, RequestCancelled, cancelled, checkpoint_cancelled
from trio_mcp_cancel.server import (
    Audio,
    Context,
    EmbeddedResource,
    Image,
    InputRequired,
    McpServer,
    PromptMessage,
    ResourceData,
    ResourceLink,
    Text,
    ToolError,
    ToolResult,
)
from trio_mcp_cancel.testing import McpError, assert_no_leaks, open_test_client

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
MISSING_CLIENT_CAPABILITY = -32021
PNG = b"\x89PNG\r\n\x1a\n-not-really"
SUB_ID = "io.modelcontextprotocol/subscriptionId"

SCHEMA_2020 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}},
    "properties": {"name": {"type": "string"}, "at": {"$ref": "#/$defs/point"}},
    "required": ["name"],
    "additionalProperties": False,
}


def build() -> tuple[McpServer, list[str]]:
    server = McpServer("surface-test", "1.0")
    ran: list[str] = []

    @server.tool()
    async def pictures(ctx: Context) -> list[Any]:
        """Every content type."""
        return [
            Text("caption"),
            Image(PNG, "image/png"),
            Audio(b"RIFF", "audio/wav"),
            EmbeddedResource("test://doc", "inline text", "text/plain"),
            EmbeddedResource("test://bin", b"\x00\x01", "application/octet-stream"),
            ResourceLink("test://doc", "doc", mime_type="text/plain"),
        ]

    @server.tool()
    async def spelled_out(ctx: Context) -> ToolResult:
        return ToolResult([Text("partial")], structured={"ok": False}, is_error=True)

    @server.tool()
    async def refuses(ctx: Context) -> str:
        raise ToolError("no such city")

    @server.tool()
    async def crashes(ctx: Context) -> str:
        raise KeyError("boom")

    @server.tool(
        output_schema={"type": "object", "properties": {"sum": {"type": "number"}}},
        annotations={"readOnlyHint": True},
        title="Adder",
    )
    async def add(
        ctx: Context, a: Annotated[float, "first addend"], b: float = 2.0
    ) -> dict[str, float]:
        """Add two numbers.

        Args:
            b: second addend
               (optional)
        """
        return {"sum": a + b}

    @server.tool(output_schema={"type": "object"})
    async def wrong_output(ctx: Context) -> str:
        return "not an object"

    @server.tool(input_schema=SCHEMA_2020)
    async def explicit(ctx: Context, name: str, at: dict[str, float] | None = None) -> str:
        return f"{name} at {at}"

    @server.resource("test://text", name="text", mime_type="text/plain", description="Some text")
    async def text(ctx: Context) -> str:
        return "hello"

    @server.resource("test://bin", name="bin", mime_type="application/octet-stream")
    async def binary(ctx: Context) -> bytes:
        return b"\x00\xff"

    @server.resource("test://slow", name="slow")
    async def slow(ctx: Context) -> str:
        try:
            for _ in range(100):
                await checkpoint_cancelled()
                await trio.sleep(1)
        except RequestCancelled:
            ran.append("slow read stopped")
            raise
        return "finished"

    @server.resource_template("test://items/{kind}/{id}", name="item", mime_type="text/plain")
    async def item(ctx: Context, kind: str, id: str) -> list[ResourceData]:
        return [ResourceData(f"test://items/{kind}/{id}", f"{kind} #{id}")]

    @server.prompt(description="Greets someone")
    async def greet(
        ctx: Context, who: Annotated[str, "whom to greet"], style: str = "plain"
    ) -> list[Any]:
        return [
            PromptMessage("user", f"Greet {who} ({style})"),
            PromptMessage("assistant", Image(PNG)),
            EmbeddedResource("test://text", "hello", "text/plain"),
        ]

    @server.completion("prompt", "greet", "who")
    async def complete_who(ctx: Context, value: str, context: dict[str, str]) -> list[str]:
        names = [f"{n}-{context.get('style', '')}" for n in ("ann", "anna", "bob")]
        return [n for n in names if n.startswith(value)]

    @server.completion("resource", "test://items/{kind}/{id}", "kind")
    async def complete_kind(ctx: Context, value: str, context: dict[str, str]) -> list[str]:
        return [f"k{i}" for i in range(150)]

    @server.tool()
    async def chatty(ctx: Context) -> str:
        for level in ("debug", "info", "error"):
            await ctx.log(level, f"{level} line", logger="chatty")
        return "logged"

    @server.tool()
    async def logs_after_cancel(ctx: Context) -> str:
        while not cancelled():
            await trio.sleep(0.1)
        await ctx.log("error", "too late")  # the client cancelled: never sent
        ran.append("logged after cancel")
        return "unreachable"

    @server.tool()
    async def confirm(ctx: Context, item: str) -> str | InputRequired:
        ran.append(f"confirm ran with state {ctx.request_state!r}")
        answer = (ctx.input_responses or {}).get("ok")
        if answer is None or ctx.request_state is None:
            schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
            return InputRequired(
                {"ok": InputRequired.elicit(f"Delete {item}?", schema)}, state={"item": item}
            )
        return f"deleted {ctx.request_state['item']}: {answer['content']['ok']}"

    @server.tool()
    async def asks_model(ctx: Context) -> InputRequired:
        return InputRequired({"q": InputRequired.sample("2+2?")})

    return server, ran


def text_of(result: dict[str, Any]) -> str:
    content = result["content"]
    assert content[0]["type"] == "text", content
    text: str = content[0]["text"]
    return text


# -- tools -------------------------------------------------------------------------


async def test_every_content_type(autojump_clock: trio.testing.MockClock) -> None:
    server, _ = build()
    async with open_test_client(server) as client:
        result = await client.call_tool("pictures")
    assert result["isError"] is False
    text, image, audio, embedded, blob, link = result["content"]
    assert text == {"type": "text", "text": "caption"}
    assert image == {
        "type": "image",
        "data": base64.b64encode(PNG).decode(),
        "mimeType": "image/png",
    }
    assert audio["type"] == "audio" and base64.b64decode(audio["data"]) == b"RIFF"
    assert embedded == {
        "type": "resource",
        "resource": {"uri": "test://doc", "mimeType": "text/plain", "text": "inline text"},
    }
    assert base64.b64decode(blob["resource"]["blob"]) == b"\x00\x01"
    assert link == {
        "type": "resource_link",
        "uri": "test://doc",
        "name": "doc",
        "mimeType": "text/plain",
    }


async def test_tool_results_and_errors(autojump_clock: trio.testing.MockClock) -> None:
    server, _ = build()
    async with open_test_client(server) as client:
        spelled = await client.call_tool("spelled_out")
        refused = await client.call_tool("refuses")
        crashed = await client.call_tool("crashes")
    assert spelled == {
        "content": [{"type": "text", "text": "partial"}],
        "isError": True,
        "structuredContent": {"ok": False},
        "resultType": "complete",
        "_meta": spelled["_meta"],
    }
    assert refused["isError"] and text_of(refused) == "no such city"
    assert crashed["isError"] and text_of(crashed) == "KeyError: 'boom'"


async def test_structured_output_and_tool_metadata(autojump_clock: trio.testing.MockClock) -> None:
    server, _ = build()
    async with open_test_client(server) as client:
        tools = {t["name"]: t for t in (await client.request("tools/list"))["tools"]}
        result = await client.call_tool("add", {"a": 1.5})
        wrong = await client.call_tool("wrong_output")
    add = tools["add"]
    assert add["title"] == "Adder"
    assert add["annotations"] == {"readOnlyHint": True}
    assert add["outputSchema"] == {"type": "object", "properties": {"sum": {"type": "number"}}}
    assert add["description"] == "Add two numbers."
    assert add["inputSchema"] == {
        "type": "object",
        "properties": {
            "a": {"type": "number", "description": "first addend"},
            "b": {"type": "number", "description": "second addend (optional)", "default": 2.0},
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    assert result["structuredContent"] == {"sum": 3.5}
    assert json.loads(text_of(result)) == {"sum": 3.5}
    assert wrong["isError"] and "output schema" in text_of(wrong)


async def test_explicit_input_schema_is_kept_and_enforced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, _ = build()
    async with open_test_client(server) as client:
        tools = {t["name"]: t for t in (await client.request("tools/list"))["tools"]}
        ok = await client.call_tool("explicit", {"name": "p", "at": {"x": 1}})
        extra = await client.call_tool("explicit", {"name": "p", "color": "red"})
        missing = await client.call_tool("explicit", {})
    assert tools["explicit"]["inputSchema"] == SCHEMA_2020
    assert text_of(ok) == "p at {'x': 1}"
    assert extra["isError"] and "unknown argument 'color'" in text_of(extra)
    assert missing["isError"] and "missing argument 'name'" in text_of(missing)


def test_explicit_schema_must_fit_the_function() -> None:
    server = McpServer()
    with pytest.raises(TypeError, match="no parameter 'other'"):

        @server.tool(input_schema={"type": "object", "properties": {"other": {}}})
        async def tool(ctx: Context) -> str:
            return ""

    with pytest.raises(ValueError, match="tool name"):

        @server.tool("has space")
        async def tool3(ctx: Context) -> str:
            return ""

    with pytest.raises(ValueError, match="type 'object'"):

        @server.tool(input_schema={"type": "string"})
        async def tool2(ctx: Context) -> str:
            return ""


# -- resources -----------------------------------------------------------------------


async def test_resources_list_and_read(autojump_clock: trio.testing.MockClock) -> None:
    server, _ = build()
    async with open_test_client(server) as client:
        listed = await client.request("resources/list")
        templates = await client.request("resources/templates/list")
        text = await client.request("resources/read", {"uri": "test://text"})
        binary = await client.request("resources/read", {"uri": "test://bin"})
        item = await client.request("resources/read", {"uri": "test://items/big%20box/7"})
        with pytest.raises(McpError) as unknown:
            await client.request("resources/read", {"uri": "test://nope"})
    assert [r["uri"] for r in listed["resources"]] == ["test://text", "test://bin", "test://slow"]
    assert listed["resources"][0] == {
        "uri": "test://text",
        "name": "text",
        "description": "Some text",
        "mimeType": "text/plain",
    }
    assert (listed["ttlMs"], listed["cacheScope"]) == (300_000, "public")
    assert templates["resourceTemplates"] == [
        {"uriTemplate": "test://items/{kind}/{id}", "name": "item", "mimeType": "text/plain"}
    ]
    assert text["contents"] == [{"uri": "test://text", "mimeType": "text/plain", "text": "hello"}]
    assert (text["ttlMs"], text["cacheScope"]) == (0, "private")
    assert base64.b64decode(binary["contents"][0]["blob"]) == b"\x00\xff"
    assert item["contents"][0]["text"] == "big box #7"
    assert unknown.value.code == INVALID_PARAMS
    assert unknown.value.data == {"uri": "test://nope"}


async def test_legacy_lists_carry_no_cache_fields(autojump_clock: trio.testing.MockClock) -> None:
    server, _ = build()
    async with open_test_client(server, era="legacy") as client:
        listed = await client.request("resources/list")
        assert await client.request("resources/subscribe", {"uri": "test://text"}) == {}
        assert await client.request("resources/unsubscribe", {"uri": "test://text"}) == {}
        with pytest.raises(McpError) as unknown:
            await client.request("resources/subscribe", {"uri": "test://nope"})
        assert unknown.value.code == INVALID_PARAMS
        capabilities = client.initialize_result["capabilities"]  # type: ignore[index]
    assert "ttlMs" not in listed and "cacheScope" not in listed
    # The connection is a legacy client's notification stream: both are delivered.
    assert capabilities["resources"] == {"listChanged": True, "subscribe": True}
    assert capabilities["prompts"] == {"listChanged": True}
    assert capabilities["completions"] == {}


async def test_resource_read_is_cancellable_like_a_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, ran = build()
    async with open_test_client(server, registry_config=RegistryConfig(grace_period=5)) as client:
        call = client.start_request("resources/read", {"uri": "test://slow"})
        await trio.sleep(2.5)
        await client.wait_in_flight(call)
        await call.cancel("not needed")
        await trio.sleep(1)
        await client.assert_no_answer(call)
        assert ran == ["slow read stopped"]
        assert_no_leaks(client.registry)


# -- prompts and completion ------------------------------------------------------------


async def test_prompts(autojump_clock: trio.testing.MockClock) -> None:
    server, _ = build()
    async with open_test_client(server) as client:
        (prompt,) = (await client.request("prompts/list"))["prompts"][:1]
        got = await client.request("prompts/get", {"name": "greet", "arguments": {"who": "Ann"}})
        with pytest.raises(McpError) as missing:
            await client.request("prompts/get", {"name": "greet", "arguments": {}})
        with pytest.raises(McpError) as unknown:
            await client.request("prompts/get", {"name": "nope"})
    assert prompt == {
        "name": "greet",
        "description": "Greets someone",
        "arguments": [
            {"name": "who", "required": True, "description": "whom to greet"},
            {"name": "style", "required": False},
        ],
    }
    user, assistant, embedded = got["messages"]
    assert user == {"role": "user", "content": {"type": "text", "text": "Greet Ann (plain)"}}
    assert assistant["role"] == "assistant" and assistant["content"]["type"] == "image"
    assert embedded["content"]["resource"]["uri"] == "test://text"
    assert missing.value.code == INVALID_PARAMS and "'who'" in missing.value.message
    assert unknown.value.code == INVALID_PARAMS


async def test_completion(autojump_clock: trio.testing.MockClock) -> None:
    server, _ = build()
    async with open_test_client(server) as client:
        names = await client.request(
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "who", "value": "an"},
                "context": {"arguments": {"style": "x"}},
            },
        )
        kinds = await client.request(
            "completion/complete",
            {
                "ref": {"type": "ref/resource", "uri": "test://items/{kind}/{id}"},
                "argument": {"name": "kind", "value": ""},
            },
        )
        none = await client.request(
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "style", "value": ""},
            },
        )
        with pytest.raises(McpError) as bad:
            await client.request("completion/complete", {"ref": {"type": "ref/x"}, "argument": {}})
    assert names["completion"] == {"values": ["ann-x", "anna-x"], "total": 2, "hasMore": False}
    assert len(kinds["completion"]["values"]) == 100
    assert kinds["completion"]["total"] == 150 and kinds["completion"]["hasMore"] is True
    assert none["completion"]["values"] == []
    assert bad.value.code == INVALID_PARAMS


# -- logging ------------------------------------------------------------------------------


@pytest.mark.parametrize(("level", "expected"), [(None, []), ("info", ["info", "error"])])
async def test_modern_logging_is_per_request(
    level: str | None, expected: list[str], autojump_clock: trio.testing.MockClock
) -> None:
    server, _ = build()
    async with open_test_client(server, log_level=level) as client:
        await client.call_tool("chatty")
    assert [m["level"] for m in client.log_messages] == expected
    assert all(m["logger"] == "chatty" for m in client.log_messages)


async def test_legacy_logging_follows_set_level(autojump_clock: trio.testing.MockClock) -> None:
    server, _ = build()
    async with open_test_client(server, era="legacy") as client:
        await client.call_tool("chatty")
        assert await client.request("logging/setLevel", {"level": "error"}) == {}
        await client.call_tool("chatty")
    levels = [m["level"] for m in client.log_messages]
    assert levels == ["debug", "info", "error", "error"]


async def test_no_log_message_after_the_client_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, ran = build()
    async with open_test_client(
        server, log_level="debug", registry_config=RegistryConfig(grace_period=5)
    ) as client:
        call = client.start_call("logs_after_cancel")
        await client.wait_in_flight(call)
        await call.cancel()
        await trio.sleep(1)
        await client.assert_no_answer(call)
    assert ran == ["logged after cancel"]
    assert client.log_messages == [] and client.unexpected == []


# -- subscriptions/listen ----------------------------------------------------------------


async def test_listen_acknowledges_then_forwards_what_was_asked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, _ = build()
    async with open_test_client(server, registry_config=RegistryConfig(grace_period=5)) as client:
        listen = client.start_request(
            "subscriptions/listen",
            {
                "notifications": {
                    "toolsListChanged": True,
                    "resourceSubscriptions": ["test://text"],
                    "somethingElse": True,
                }
            },
        )
        prompts_only = client.start_request(
            "subscriptions/listen", {"notifications": {"promptsListChanged": True}}
        )
        await client.wait_in_flight(listen)

        @server.tool()
        async def newcomer(ctx: Context) -> str:
            return "new"

        server.resource_updated("test://text")
        server.resource_updated("test://bin")  # not subscribed
        await trio.sleep(1)
        ack, changed, updated = listen.notifications
        assert ack == {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {
                "notifications": {
                    "toolsListChanged": True,
                    "resourceSubscriptions": ["test://text"],
                },
                "_meta": {SUB_ID: listen.id},
            },
        }
        assert changed["method"] == "notifications/tools/list_changed"
        assert changed["params"] == {"_meta": {SUB_ID: listen.id}}
        assert updated["params"] == {"uri": "test://text", "_meta": {SUB_ID: listen.id}}
        # The prompts-only stream got its acknowledgement and nothing else.
        assert [m["method"] for m in prompts_only.notifications] == [
            "notifications/subscriptions/acknowledged"
        ]
        # notifications/cancelled ends a listen stream like any request (stdio's way).
        await listen.cancel("done listening")
        await trio.sleep(1)
        server.tools_changed()
        await trio.sleep(1)
        await client.assert_no_answer(listen)
        assert len(listen.notifications) == 3
        assert len(server.dispatcher.runtime.subscriptions.listeners) == 1
        await prompts_only.cancel()
        await trio.sleep(1)
        assert server.dispatcher.runtime.subscriptions.listeners == set()
        assert_no_leaks(client.registry)
        assert client.unexpected == []


class _Steps(trio.abc.Instrument):
    """Counts the scheduling steps of every task but the test's own."""

    def __init__(self) -> None:
        self.steps = 0
        self.mine = trio.lowlevel.current_task()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is not self.mine:
            self.steps += 1


async def test_an_idle_listener_never_wakes_and_a_cancel_wakes_it_at_once(
    mock_clock: trio.testing.MockClock,
) -> None:
    """No polling: hours of idle time cost no step; the flag ends the stream at once."""
    server, _ = build()
    clock = mock_clock  # no autojump: time moves only when we say
    # The registry's hourly sweep is the one timer left; switch it off here.
    async with open_test_client(
        server, registry_config=RegistryConfig(grace_period=5, cleanup_interval=None)
    ) as client:
        listen = client.start_request(
            "subscriptions/listen", {"notifications": {"toolsListChanged": True}}
        )
        await client.wait_in_flight(listen)
        await trio.testing.wait_all_tasks_blocked()
        steps = _Steps()
        trio.lowlevel.add_instrument(steps)
        try:
            for _ in range(3):
                clock.jump(3600)
                await trio.lowlevel.checkpoint()  # the scheduler sees the jumped clock
                await trio.testing.wait_all_tasks_blocked()
            assert steps.steps == 0  # nothing woke in three idle hours
        finally:
            trio.lowlevel.remove_instrument(steps)
        server.tools_changed()  # a queued notification wakes it
        await trio.testing.wait_all_tasks_blocked()
        assert [m["method"] for m in listen.notifications][-1] == (
            "notifications/tools/list_changed"
        )
        start = trio.current_time()
        await listen.cancel("done")
        await client.registry.wait_idle()
        assert trio.current_time() == start  # ended at once, without the clock moving
        assert server.dispatcher.runtime.subscriptions.listeners == set()
        await client.assert_no_answer(listen)
        assert_no_leaks(client.registry)


async def test_listen_overflow_ends_the_stream_with_a_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, _ = build()
    server.dispatcher.runtime.subscriptions.queue_size = 2
    async with open_test_client(server) as client:
        listen = client.start_request(
            "subscriptions/listen", {"notifications": {"toolsListChanged": True}}
        )
        await client.wait_in_flight(listen)
        for _ in range(5):  # with nobody reading in between
            server.tools_changed()
        result = await listen.result()
    assert result["_meta"][SUB_ID] == listen.id
    assert result["resultType"] == "complete"
    assert server.dispatcher.runtime.subscriptions.listeners == set()


async def test_listen_is_modern_only_and_checks_its_filter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, _ = build()
    async with open_test_client(server) as client:
        with pytest.raises(McpError) as bad:
            await client.request("subscriptions/listen", {"notifications": "all"})
    assert bad.value.code == INVALID_PARAMS
    async with open_test_client(server, era="legacy") as client:
        with pytest.raises(McpError) as legacy:
            await client.request("subscriptions/listen", {"notifications": {}})
    assert legacy.value.code == METHOD_NOT_FOUND


# -- multi round-trip requests -------------------------------------------------------------


async def test_mrtr_round_trip_with_sealed_state(autojump_clock: trio.testing.MockClock) -> None:
    server, ran = build()
    async with open_test_client(server, client_capabilities={"elicitation": {}}) as client:
        first = await client.call_tool("confirm", {"item": "file.txt"})
        assert first["resultType"] == "input_required"
        assert first["inputRequests"]["ok"]["method"] == "elicitation/create"
        state = first["requestState"]
        assert "file.txt" not in state or "." in state  # opaque, signed
        retry = {
            "name": "confirm",
            "arguments": {"item": "file.txt"},
            "inputResponses": {"ok": {"action": "accept", "content": {"ok": True}}},
            "requestState": state,
        }
        done = await client.request("tools/call", retry)
        assert text_of(done) == "deleted file.txt: True"
        # Tampering with the state, or reusing it for other arguments, is refused
        # before the tool runs.
        ran.clear()
        head, _, tag = state.partition(".")
        forged = head[:-2] + ("A" if head[-2] != "A" else "B") + head[-1] + "." + tag
        for params in (
            {**retry, "requestState": forged},
            {**retry, "arguments": {"item": "other.txt"}},
            {**retry, "requestState": "garbage"},
            {**retry, "inputResponses": ["not", "an", "object"]},
        ):
            with pytest.raises(McpError) as refused:
                await client.request("tools/call", params)
            assert refused.value.code == INVALID_PARAMS
        assert ran == []
        # An expired state is refused too.
        server.registration.state_signer.now = lambda: 10**12
        with pytest.raises(McpError) as expired:
            await client.request("tools/call", retry)
        assert "expired" in expired.value.message


async def test_mrtr_needs_the_capability_and_the_modern_era(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, _ = build()
    async with open_test_client(server) as client:  # declares no sampling
        with pytest.raises(McpError) as missing:
            await client.call_tool("asks_model")
    assert missing.value.code == MISSING_CLIENT_CAPABILITY
    assert missing.value.data == {"requiredCapabilities": {"sampling": {}}}
    async with open_test_client(
        server, era="legacy", client_capabilities={"sampling": {}}
    ) as client:
        with pytest.raises(McpError) as legacy:
            await client.call_tool("asks_model")
    assert "2026-07-28" in legacy.value.message


async def test_state_is_bound_to_the_principal() -> None:
    from trio_mcp_cancel._protocol.mrtr import StateSigner, binding

    signer = StateSigner(b"k" * 32)
    token = signer.seal({"n": 1}, binding("alice", "tools/call", "t", {}))
    assert signer.open(token, binding("alice", "tools/call", "t", {})) == {"n": 1}
    with pytest.raises(Exception, match="another request"):
        signer.open(token, binding("mallory", "tools/call", "t", {}))
    with pytest.raises(Exception, match="integrity"):
        StateSigner(b"x" * 32).open(token, binding("alice", "tools/call", "t", {}))
    with pytest.raises(ValueError):
        StateSigner(b"short")
