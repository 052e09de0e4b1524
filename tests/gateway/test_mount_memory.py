"""Mount and proxy in one process: names, cancellation across the hop, id remapping.

The gateway is served to the in-memory test client, its upstream (another
``McpServer``) in memory too, all under Trio's MockClock: every grace
period and backoff is skipped, and what is asserted is what the upstream
saw.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest
import trio
import trio.testing

from trio_mcp_cancel import RegistryConfig, RequestCancelled, checkpoint_cancelled
from trio_mcp_cancel.client import ClientHandlers, McpError
from trio_mcp_cancel.server import Context, McpServer, Tasks
from trio_mcp_cancel.testing import open_test_client


def upstream_server(seen: list[str]) -> McpServer:
    up = McpServer("upstream")

    @up.tool()
    async def echo(text: str) -> str:
        return f"up:{text}"

    @up.tool()
    async def wait(ctx: Context) -> str:
        seen.append(f"started {ctx.request_id}")
        try:
            while True:
                await trio.sleep(0.1)
                await checkpoint_cancelled()
        finally:
            seen.append("stopped")

    @up.resource("file:///notes.txt")
    async def notes() -> str:
        return "some notes"

    @up.resource_template("docs://items/{item}")
    async def item(item: str) -> str:
        return f"item {item}"

    @up.prompt()
    async def greet(who: str) -> str:
        return f"hello {who}"

    return up


async def test_an_upstreams_offer_appears_under_the_namespace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gateway = McpServer("gateway")
    gateway.mount(upstream_server([]), namespace="up")
    async with open_test_client(gateway) as client:
        tools = {tool["name"] for tool in await client.list_tools()}
        assert {"up_echo", "up_wait"} <= tools
        result = await client.call_tool("up_echo", {"text": "hi"})
        assert result["content"] == [{"type": "text", "text": "up:hi"}]
        resources = await client.request("resources/list")
        assert [r["uri"] for r in resources["resources"]] == ["file://up//notes.txt"]
        read = await client.request("resources/read", {"uri": "file://up//notes.txt"})
        assert read["contents"][0]["text"] == "some notes"
        read = await client.request("resources/read", {"uri": "docs://up/items/42"})
        assert read["contents"][0]["text"] == "item 42"
        prompt = await client.request(
            "prompts/get", {"name": "up_greet", "arguments": {"who": "x"}}
        )
        assert prompt["messages"][0]["content"]["text"] == "hello x"


async def test_a_cancel_at_the_gateway_stops_the_upstream_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []
    gateway = McpServer("gateway")
    gateway.mount(upstream_server(seen), namespace="up")
    async with open_test_client(gateway, registry_config=RegistryConfig(grace_period=5)) as client:
        call = client.start_call("up_wait")
        await trio.sleep(1)
        assert seen and seen[0].startswith("started")
        await call.cancel("user pressed stop")
        await trio.sleep(0.5)
        assert seen[-1] == "stopped"
        await client.assert_no_answer(call)


def stoppable(seen: list[str]) -> McpServer:
    """An upstream whose ``wait`` records how it stopped: at its flag (``polite``) or hard."""
    up = McpServer("upstream")

    @up.tool()
    async def wait(ctx: Context, label: str = "") -> str:
        seen.append(f"started {label} as upstream id {ctx.request_id}")
        try:
            while True:
                await trio.sleep(0.1)
                await checkpoint_cancelled()
        except RequestCancelled as exc:
            seen.append(f"stopped {label} polite ({exc.kind})")
            raise
        except trio.Cancelled:
            seen.append(f"stopped {label} hard")
            raise

    return up


UPSTREAM_ERAS = pytest.mark.parametrize("upstream_era", ["modern", "legacy"])


@UPSTREAM_ERAS
async def test_two_callers_using_id_1_never_collide_upstream(
    autojump_clock: trio.testing.MockClock, upstream_era: str
) -> None:
    seen: list[str] = []
    gateway = McpServer("gateway")
    gateway.mount(stoppable(seen), namespace="up", era=upstream_era)
    config = RegistryConfig(grace_period=5)
    async with open_test_client(gateway, registry_config=config) as a:
        async with open_test_client(gateway, registry=a.registry) as b:
            call_a = a.start_call("up_wait", {"label": "a"})
            call_b = b.start_call("up_wait", {"label": "b"})
            assert call_a.id == call_b.id == 1
            await trio.sleep(1)
            ids = {line.rsplit(" ", 1)[1] for line in seen if line.startswith("started")}
            assert len(ids) == 2  # the upstream saw two requests, numbered by the gateway
            await call_a.cancel("only a")
            await trio.sleep(1)
            assert [line for line in seen if line.startswith("stopped")] == [
                "stopped a polite (client)"
            ]
            await b.assert_no_answer(call_b)  # b's call still runs upstream
            await call_b.cancel("now b")
            await trio.sleep(1)
            assert seen[-1] == "stopped b polite (client)"


@UPSTREAM_ERAS
async def test_a_closed_connection_at_the_gateway_stops_the_upstream_tool(
    autojump_clock: trio.testing.MockClock, upstream_era: str
) -> None:
    seen: list[str] = []
    gateway = McpServer("gateway")
    gateway.mount(stoppable(seen), namespace="up", era=upstream_era)
    config = RegistryConfig(grace_period=5)
    async with open_test_client(gateway, registry_config=config) as keeper:
        async with open_test_client(gateway, registry=keeper.registry) as leaving:
            leaving.start_call("up_wait", {"label": "x"})
            await trio.sleep(1)
            start = trio.current_time()
        # Leaving the block closed the connection: the gateway cancelled its call
        # (kind disconnect), and the cancel crossed the hop at once.
        await trio.sleep(0.5)
        assert seen[-1] == "stopped x polite (client)"
        assert trio.current_time() - start < 1


async def test_tasks_cancel_at_the_gateway_stops_the_upstream_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []
    gateway = McpServer("gateway", extensions=[Tasks()])
    gateway.mount(stoppable(seen), namespace="up")
    config = RegistryConfig(grace_period=5)
    async with open_test_client(gateway, registry_config=config, tasks=True) as client:
        tasks: list[dict[str, Any]] = []
        with trio.move_on_after(2):
            await client.call_tool("up_wait", {"label": "t"}, on_task=tasks.append)
        assert tasks  # the gateway ran the call as a task
        assert [c.method for c in client.calls.values()][-1] == "tasks/cancel"
        await trio.sleep(1)
        assert seen[-1] == "stopped t polite (client)"
        assert (await client.get_task(tasks[0]["taskId"]))["status"] == "cancelled"


@UPSTREAM_ERAS
async def test_progress_and_log_messages_are_relayed_to_the_caller(
    autojump_clock: trio.testing.MockClock, upstream_era: str
) -> None:
    up = McpServer("upstream")

    @up.tool()
    async def work(ctx: Context) -> str:
        for step in (1, 2, 3):
            await ctx.report_progress(step, 3, f"step {step}")
            await ctx.log("info", {"step": step}, "worker")
            await trio.sleep(0.1)
        return "done"

    gateway = McpServer("gateway")
    gateway.mount(up, namespace="up", era=upstream_era)
    async with open_test_client(gateway, log_level="info") as client:
        call = client.start_call("up_work")
        await trio.sleep(1)
        assert call.answered
        assert [(p["progress"], p["total"], p["message"]) for p in call.progress] == [
            (1, 3, "step 1"),
            (2, 3, "step 2"),
            (3, 3, "step 3"),
        ]
        assert [m["data"] for m in client.log_messages] == [{"step": 1}, {"step": 2}, {"step": 3}]
        assert {m["logger"] for m in client.log_messages} == {"worker"}


@UPSTREAM_ERAS
@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_an_upstreams_question_is_asked_of_the_caller_and_answered_back(
    autojump_clock: trio.testing.MockClock, era: Literal["modern", "legacy"], upstream_era: str
) -> None:
    up = McpServer("upstream")

    @up.tool()
    async def ask(ctx: Context) -> str:
        answer = await ctx.elicit("your name?", {"type": "object", "properties": {}})
        roots = await ctx.list_roots()
        return f"{answer.action} {answer.content} {roots[0]['uri']}"

    asked: list[str] = []

    async def elicitation(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params["message"])
        return {"action": "accept", "content": {"name": "ada"}}

    async def roots(params: dict[str, Any]) -> dict[str, Any]:
        return {"roots": [{"uri": "file:///home/ada"}]}

    gateway = McpServer("gateway")
    gateway.mount(up, namespace="up", era=upstream_era)
    handlers = ClientHandlers(elicitation=elicitation, roots=roots)
    async with open_test_client(
        gateway, era=era, handlers=handlers, registry_config=RegistryConfig(grace_period=5)
    ) as client:
        result = await client.call_tool("up_ask")
        assert result["content"][0]["text"] == "accept {'name': 'ada'} file:///home/ada"
        assert asked and set(asked) == {"your name?"}


@UPSTREAM_ERAS
async def test_upstream_list_changes_and_resource_updates_fan_in(
    autojump_clock: trio.testing.MockClock, upstream_era: str
) -> None:
    up = upstream_server([])
    gateway = McpServer("gateway")
    gateway.mount(up, namespace="up", era=upstream_era)
    async with open_test_client(gateway, registry_config=RegistryConfig(grace_period=5)) as client:
        listen = client.start_request(
            "subscriptions/listen",
            {
                "notifications": {
                    "toolsListChanged": True,
                    "resourceSubscriptions": ["file://up//notes.txt"],
                }
            },
        )
        await trio.sleep(1)

        @up.tool()
        async def newcomer() -> str:
            return "new"

        await trio.sleep(1)
        assert "up_newcomer" in {tool["name"] for tool in await client.list_tools()}
        up.resource_updated("file:///notes.txt")
        await trio.sleep(1)
        methods = [m["method"] for m in listen.notifications]
        assert "notifications/tools/list_changed" in methods
        updated = [m for m in listen.notifications if m["method"].endswith("resources/updated")]
        assert [m["params"]["uri"] for m in updated] == ["file://up//notes.txt"]
        await listen.cancel()


async def test_an_unreachable_upstream_fails_its_namespace_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gateway = McpServer("gateway")

    @gateway.tool()
    async def own() -> str:
        return "mine"

    good = gateway.mount(upstream_server([]), namespace="up", reconnect_initial=60)
    bad = gateway.mount(["/nonexistent/mcp-server"], namespace="gone")
    async with open_test_client(gateway, registry_config=RegistryConfig(grace_period=5)) as client:
        assert bad.client is None and bad.error and "nonexistent" in bad.error
        names = {tool["name"] for tool in await client.list_tools()}
        assert {"own", "up_echo"} <= names
        assert (await client.call_tool("own"))["content"][0]["text"] == "mine"
        # The upstream is lost: its tools stay listed and answer a clear error.
        good.lose("test: the upstream went away")
        await trio.sleep(1)
        result = await client.call_tool("up_echo", {"text": "hi"})
        assert result["isError"] is True
        text = result["content"][0]["text"]
        assert "upstream 'up'" in text and "unreachable" in text
        with pytest.raises(McpError) as caught:
            await client.request("resources/read", {"uri": "file://up//notes.txt"})
        assert "upstream 'up'" in caught.value.message
        assert (await client.call_tool("own"))["content"][0]["text"] == "mine"
        # It comes back after its backoff.
        await trio.sleep(61)
        assert good.client is not None
        result = await client.call_tool("up_echo", {"text": "again"})
        assert result["content"][0]["text"] == "up:again"


async def test_proxy_serves_one_upstream_unprefixed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    proxy = McpServer.proxy(upstream_server([]), name="front")
    async with open_test_client(proxy) as client:
        assert {"echo", "wait"} <= {tool["name"] for tool in await client.list_tools()}
        result = await client.call_tool("echo", {"text": "hi"})
        assert result["content"][0]["text"] == "up:hi"
        read = await client.request("resources/read", {"uri": "file:///notes.txt"})
        assert read["contents"][0]["uri"] == "file:///notes.txt"


def test_a_namespace_with_the_separator_or_mounted_twice_is_refused() -> None:
    gateway = McpServer("gateway")
    with pytest.raises(ValueError, match="separator"):
        gateway.mount(McpServer("x"), namespace="a_b")
    gateway.mount(McpServer("x"), namespace="a")
    with pytest.raises(ValueError, match="already"):
        gateway.mount(McpServer("y"), namespace="a")
    with pytest.raises(ValueError, match="URL"):
        gateway.mount("ftp://example", namespace="b")
    with pytest.raises(ValueError, match="itself"):
        gateway.mount(gateway, namespace="c")
