"""Tasks and client input (SEP-2663 + SEP-2322), in memory on MockClock.

Inside a task, a tool returning ``InputRequired`` parks the task in
``input_required`` (``tasks/get`` shows the pending ``inputRequests``)
until ``tasks/update`` answers every key, possibly in several calls; then
the tool runs again with the answers.  ``before_task`` gathers input before
the task exists instead: it answers ``InputRequired`` in the request itself
(no task yet), and the retry that carries the answers creates the task.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel.backends.memory import MemoryTaskStore
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, InputRequired, McpServer, Tasks
from trio_mcp_cancel.testing import McpError

from _support.tasks import get, serving, wall_clock

CAPABILITIES = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def answered_name(ctx: Context) -> str | None:
    answer = (ctx.input_responses or {}).get("user_name")
    content = answer.get("content") if isinstance(answer, dict) else None
    name = content.get("name") if isinstance(content, dict) else None
    return name if isinstance(name, str) else None


def make_server() -> tuple[McpServer, list[str]]:
    server = McpServer("task-input-test", extensions=[Tasks(TaskManager(store=MemoryTaskStore()))])
    asked: list[str] = []

    async def ask_name(ctx: Context, greeting: str = "Hello") -> InputRequired | None:
        asked.append(greeting)
        if answered_name(ctx) is None:
            return InputRequired(
                {"user_name": InputRequired.elicit("What is your name?", NAME)}, state="r1"
            )
        return None

    @server.tool(task="required", before_task=ask_name)
    async def greet_later(ctx: Context, greeting: str = "Hello") -> str:
        await trio.sleep(5.0)
        return f"{greeting}, {answered_name(ctx)} (state {ctx.request_state})"

    @server.tool(task="optional")
    async def confirm(ctx: Context, item: str = "x") -> str | InputRequired:
        await trio.sleep(1.0)
        answers = ctx.input_responses or {}
        if "first" not in answers or "second" not in answers:
            return InputRequired(
                {
                    "first": InputRequired.elicit(f"Delete {item}?", NAME),
                    "second": InputRequired.elicit("Sure?", NAME),
                },
                state={"item": item},
            )
        names = [answers[key]["content"]["name"] for key in ("first", "second")]
        return f"{ctx.request_state['item']}: {' and '.join(names)}"

    @server.tool(task="optional")
    async def samples(ctx: Context) -> str | InputRequired:
        return InputRequired({"q": InputRequired.sample("Hi?", 10)})

    @server.tool(task="optional")
    async def state_only(ctx: Context) -> str | InputRequired:
        return InputRequired(state="nothing to ask")

    return server, asked


async def test_input_is_gathered_before_the_task_and_reaches_its_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, asked = make_server()
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        params: dict[str, Any] = {"name": "greet_later", "arguments": {"greeting": "Hi"}}
        first = await client.request("tools/call", params)
        assert first["resultType"] == "input_required" and "taskId" not in first
        assert list(first["inputRequests"]) == ["user_name"]
        assert server.dispatcher.extension(Tasks).manager.running_count == 0  # no task yet
        retry = {
            **params,
            "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Alice"}}},
            "requestState": first["requestState"],
        }
        created = await client.request("tools/call", retry)
        assert created["resultType"] == "task" and created["status"] == "working"
        assert "requestState" not in created and "inputRequests" not in created
        assert asked == ["Hi", "Hi"]  # before_task got the call's arguments both times
        await trio.sleep(6.0)
        done = await get(client, created["taskId"])
        assert done["status"] == "completed"
        assert done["result"]["content"][0]["text"] == "Hi, Alice (state r1)"
        assert client.registry.in_flight_count == 0


async def test_a_tampered_state_creates_no_task(autojump_clock: trio.testing.MockClock) -> None:
    server, _ = make_server()
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        params: dict[str, Any] = {"name": "greet_later", "arguments": {}}
        first = await client.request("tools/call", params)
        forged = first["requestState"][:-4] + (
            "AAAA" if first["requestState"][-4:] != "AAAA" else "BBBB"
        )
        answers = {"user_name": {"action": "accept", "content": {"name": "Mallory"}}}
        with pytest.raises(McpError) as caught:
            await client.request(
                "tools/call", {**params, "inputResponses": answers, "requestState": forged}
            )
        assert caught.value.code == -32602
        assert server.dispatcher.extension(Tasks).manager.running_count == 0


def accept(name: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": name}}


async def test_a_task_parks_for_input_and_resumes_when_every_key_is_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, _ = make_server()
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        created = await client.request(
            "tools/call", {"name": "confirm", "arguments": {"item": "f"}}
        )
        task_id = created["taskId"]
        await trio.sleep(1.5)
        parked = await get(client, task_id)
        assert parked["status"] == "input_required" and "requestState" not in parked
        assert sorted(parked["inputRequests"]) == ["first", "second"]
        assert parked["inputRequests"]["first"]["method"] == "elicitation/create"

        update = {"taskId": task_id, "inputResponses": {"first": accept("A"), "bogus": {}}}
        ack = await client.request("tasks/update", update)
        assert set(ack) - {"_meta"} == {"resultType"} and ack["resultType"] == "complete"
        partial = await get(client, task_id)
        assert partial["status"] == "input_required"
        assert list(partial["inputRequests"]) == ["second"]  # the answered key is gone
        # An unknown key, or one already answered, changes nothing.
        update = {"taskId": task_id, "inputResponses": {"first": accept("Z")}}
        await client.request("tasks/update", update)
        assert list((await get(client, task_id))["inputRequests"]) == ["second"]

        update = {"taskId": task_id, "inputResponses": {"second": accept("B")}}
        await client.request("tasks/update", update)
        # Recorded before the acknowledgement: a tasks/get right after sees it.
        assert (await get(client, task_id))["status"] == "working"
        await trio.sleep(1.5)
        done = await get(client, task_id)
        assert done["status"] == "completed" and "inputRequests" not in done
        assert done["result"]["content"][0]["text"] == "f: A and B"
        assert (
            server.dispatcher.extension(Tasks).manager.running_count == 0
            and client.registry.in_flight_count == 0
        )


async def test_a_parked_task_is_cancelled_at_once(autojump_clock: trio.testing.MockClock) -> None:
    server, _ = make_server()
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        task_id = (await client.request("tools/call", {"name": "confirm", "arguments": {}}))[
            "taskId"
        ]
        await trio.sleep(1.5)
        assert (await get(client, task_id))["status"] == "input_required"
        cancelled_at = trio.current_time()
        await client.request("tasks/cancel", {"taskId": task_id})
        await server.dispatcher.extension(Tasks).manager.wait_idle()
        assert trio.current_time() - cancelled_at < 0.1  # not after the grace period
        done = await get(client, task_id)
        assert done["status"] == "cancelled" and "inputRequests" not in done
        # tasks/update on a finished task is acknowledged and changes nothing.
        update = {"taskId": task_id, "inputResponses": {"first": accept("late")}}
        assert (await client.request("tasks/update", update))["resultType"] == "complete"
        assert (await get(client, task_id))["status"] == "cancelled"
        assert client.registry.in_flight_count == 0


async def test_bad_input_requests_in_a_task_fail_it_clearly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, _ = make_server()
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        undeclared = await client.request("tools/call", {"name": "samples", "arguments": {}})
        empty = await client.request("tools/call", {"name": "state_only", "arguments": {}})
        await server.dispatcher.extension(Tasks).manager.wait_idle()
        failed = await get(client, undeclared["taskId"])
        # The client did not declare sampling: asking for it is -32021, as outside tasks.
        assert failed["status"] == "failed" and failed["error"]["code"] == -32021
        failed = await get(client, empty["taskId"])
        assert failed["status"] == "failed" and failed["error"]["code"] == -32603
        assert "without inputRequests" in failed["error"]["message"]
        with pytest.raises(McpError) as caught:
            await client.request("tasks/update", {"taskId": empty["taskId"], "inputResponses": 3})
        assert caught.value.code == -32602


def test_before_task_needs_a_task_capable_tool() -> None:
    server = McpServer("x", extensions=[Tasks()])

    async def never(ctx: Context) -> None:
        return None

    with pytest.raises(ValueError, match="before_task"):
        server.tool(before_task=never)


class SlowStore(MemoryTaskStore):
    """A store whose writes take a while, like a remote one."""

    async def settle(self, task_id: str, status: Any, **fields: Any) -> Any:
        await trio.sleep(0.5)
        return await super().settle(task_id, status, **fields)


async def test_an_update_is_recorded_before_it_is_acknowledged(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, _ = make_server()
    server.dispatcher.extension(Tasks).manager.store = SlowStore()
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        created = await client.request("tools/call", {"name": "confirm", "arguments": {}})
        task_id = created["taskId"]
        await trio.sleep(2.0)
        assert (await get(client, task_id))["status"] == "input_required"
        update = {"taskId": task_id, "inputResponses": {"first": accept("A")}}
        await client.request("tasks/update", update)
        assert list((await get(client, task_id))["inputRequests"]) == ["second"]
        update = {"taskId": task_id, "inputResponses": {"second": accept("B")}}
        await client.request("tasks/update", update)
        assert (await get(client, task_id))["status"] == "working"
        await trio.sleep(3.0)
        assert (await get(client, task_id))["result"]["content"][0]["text"] == "x: A and B"


async def test_a_task_waiting_for_input_ends_when_its_record_expires(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, _ = make_server()
    server.dispatcher.extension(Tasks).manager.store = MemoryTaskStore(clock=wall_clock)
    server.dispatcher.extension(Tasks).manager.ttl_ms = 60_000
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        created = await client.request("tools/call", {"name": "confirm", "arguments": {}})
        await trio.sleep(30.0)
        assert (await get(client, created["taskId"]))["status"] == "input_required"
        assert server.dispatcher.extension(Tasks).manager.running_count == 1
        await trio.sleep(31.0)
        # Nobody can answer any more: the work is gone, nothing waits for ever.
        assert (
            server.dispatcher.extension(Tasks).manager.running_count == 0
            and client.registry.in_flight_count == 0
        )
        with pytest.raises(McpError):
            await get(client, created["taskId"])  # expired: not found
