"""Progress inside a task becomes its ``statusMessage`` (issue 10), in memory on MockClock.

A task has no request stream for ``notifications/progress``, so
``ctx.report_progress`` updates the task record instead: ``tasks/get`` shows
``"3/10: message"`` while it is ``working``, listeners get it as
``notifications/tasks``, the store is written at most once per
``progress_interval`` and the last value is written before the task settles.
"""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from trio_mcp_cancel import checkpoint_cancelled
from trio_mcp_cancel._tasks.progress import MAX_STATUS_MESSAGE, progress_message
from trio_mcp_cancel.backends.memory import MemoryTaskStore
from trio_mcp_cancel.backends.task_records import TaskRecord
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, McpServer, Tasks

from _support.tasks import serving

CAPABILITIES = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


@attrs.define(eq=False)
class CountingStore(MemoryTaskStore):
    writes: list[tuple[float, str]] = attrs.field(factory=list)

    async def set_message(self, task_id: str, message: str) -> TaskRecord | None:
        self.writes.append((trio.current_time(), message))
        return await super().set_message(task_id, message)


def make_server(store: MemoryTaskStore, interval: float) -> McpServer:
    tasks = TaskManager(store=store, progress_interval=interval)
    server = McpServer("task-progress", extensions=[Tasks(tasks)])

    @server.tool(task="optional")
    async def steps(ctx: Context, n: int = 10, delay: float = 0.3) -> str:
        for i in range(1, n + 1):
            await ctx.report_progress(i, n, f"step {i}")
            await trio.sleep(delay)
        await trio.sleep(0.05)
        return "done"

    @server.tool(task="optional")
    async def endless(ctx: Context) -> str:
        i = 0
        while True:
            i += 1
            await ctx.report_progress(i)
            await checkpoint_cancelled()
            await trio.sleep(0.01)

    return server


async def test_progress_updates_status_message_rate_limited_and_last_value_before_settling(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingStore(clock=trio.current_time)
    server = make_server(store, interval=10.0)
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        created = await client.request("tools/call", {"name": "steps", "arguments": {}})
        task_id = created["taskId"]
        listen = client.start_request(
            "subscriptions/listen", {"notifications": {"taskIds": [task_id]}}
        )
        await client.wait_in_flight(listen)
        await trio.sleep(1.5)  # reported 1..5; only the first was written
        polled = await client.request("tasks/get", {"taskId": task_id})
        assert polled["status"] == "working" and polled["statusMessage"] == "1/10: step 1"
        await trio.sleep(3.0)
        done = await client.request("tasks/get", {"taskId": task_id})
        assert done["status"] == "completed"
        # The last value was written (before the final status), within the interval.
        assert done["statusMessage"] == "10/10: step 10"
        assert [text for _, text in store.writes] == ["1/10: step 1", "10/10: step 10"]
        _, *changes = listen.notifications
        seen = [(m["params"]["status"], m["params"].get("statusMessage")) for m in changes]
        assert seen == [
            ("working", "1/10: step 1"),
            ("working", "10/10: step 10"),
            ("completed", "10/10: step 10"),
        ]
        await listen.cancel()


async def test_at_most_one_store_write_per_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingStore(clock=trio.current_time)
    server = make_server(store, interval=1.0)
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        args = {"n": 100, "delay": 0.05}
        task_id = (await client.request("tools/call", {"name": "steps", "arguments": args}))[
            "taskId"
        ]
        await trio.sleep(2.5)
        polled = await client.request("tasks/get", {"taskId": task_id})
        assert polled["status"] == "working"
        assert polled["statusMessage"] == store.writes[-1][1]  # the latest write, shown
        await server.dispatcher.extension(Tasks).manager.wait_idle()
        times = [at for at, _ in store.writes]
        assert 5 <= len(times) <= 7  # 100 reports over 5 s
        assert all(b - a >= 1.0 for a, b in itertools.pairwise(times))
        done = await client.request("tasks/get", {"taskId": task_id})
        assert done["status"] == "completed" and done["statusMessage"] == "100/100: step 100"


async def test_progress_never_overwrites_a_cancelled_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingStore(clock=trio.current_time)
    server = make_server(store, interval=0.5)
    async with serving(server, capabilities=CAPABILITIES) as (client, _):
        task_id = (await client.request("tools/call", {"name": "endless", "arguments": {}}))[
            "taskId"
        ]
        await trio.sleep(1.2)
        assert (await client.request("tasks/get", {"taskId": task_id}))["statusMessage"].isdigit()
        await client.request("tasks/cancel", {"taskId": task_id})
        await server.dispatcher.extension(Tasks).manager.wait_idle()
        await trio.sleep(2.0)
        final = await client.request("tasks/get", {"taskId": task_id})
        assert final["status"] == "cancelled"
        assert final["statusMessage"] == "cancelled by the client"
        # A write after the task settled does nothing.
        assert await store.set_message(task_id, "late") is None
        record = await store.get(task_id)
        assert record is not None and record.status_message == "cancelled by the client"


def test_progress_message_format() -> None:
    assert progress_message(3, 10, "copying") == "3/10: copying"
    assert progress_message(3.0, None, None) == "3"
    assert progress_message(0.5, 1.0, "") == "0.5/1"
    assert len(progress_message(1, None, "x" * 5000)) == MAX_STATUS_MESSAGE


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
async def test_bad_progress_in_a_task_is_refused_like_anywhere(bad: float) -> None:
    seen: list[Any] = []
    ctx = Context(1, None, task_progress=lambda *a: seen.append(a))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await ctx.report_progress(bad)
    assert seen == []
