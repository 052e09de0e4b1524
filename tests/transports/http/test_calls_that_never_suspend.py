"""``await_then``: a coroutine run in the caller's task, a hook only if it suspends."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_mcp_cancel.transports.http.answer import await_then


async def _instant(value: int) -> int:
    return value * 2


async def _sleeping(seconds: float, value: int) -> int:
    await trio.sleep(seconds)
    await trio.sleep(seconds)
    return value


async def test_a_coroutine_that_never_suspends_never_calls_the_hook() -> None:
    calls: list[int] = []
    assert await await_then(_instant(21), lambda: calls.append(1)) == 42
    assert calls == []


async def test_the_hook_runs_once_before_the_first_suspension(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[float] = []
    start = trio.current_time()
    assert await await_then(_sleeping(1, 7), lambda: calls.append(trio.current_time())) == 7
    assert calls == [start]  # once, before the first sleep ran
    assert trio.current_time() == start + 2


async def test_the_hook_can_start_a_task_that_runs_while_the_coroutine_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []

    async def helper() -> None:
        seen.append("helper")

    async with trio.open_nursery() as nursery:
        await await_then(_sleeping(1, 0), lambda: nursery.start_soon(helper))
        assert seen == ["helper"]


async def test_cancellation_reaches_the_coroutine_and_propagates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cleaned: list[bool] = []

    async def forever() -> None:
        try:
            await trio.sleep_forever()
        finally:
            cleaned.append(True)

    with trio.move_on_after(5) as scope:
        await await_then(forever(), lambda: None)
    assert scope.cancelled_caught and cleaned == [True]


async def test_exceptions_of_the_coroutine_propagate() -> None:
    async def fails() -> None:
        await trio.lowlevel.checkpoint()
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await await_then(fails(), lambda: None)


async def test_a_failing_hook_closes_the_coroutine() -> None:
    cleaned: list[bool] = []

    async def waits() -> None:
        try:
            await trio.sleep_forever()
        finally:
            cleaned.append(True)

    def hook() -> None:
        raise RuntimeError("hook")

    with pytest.raises(RuntimeError, match="hook"):
        await await_then(waits(), hook)
    assert cleaned == [True]


# -- in the HTTP app: the disconnect watcher of a cancellable call ----------------

from trio_mcp_cancel import Registry  # noqa: E402
from trio_mcp_cancel.http import McpHttpApp  # noqa: E402
from trio_mcp_cancel.server import Context, McpServer  # noqa: E402

from _support.asgi import AsgiClient, headers_of, modern_call  # noqa: E402


class _Watchers(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("._watch"):
            self.spawned += 1


@pytest.mark.mcp_registry(grace_period=0)
async def test_a_call_that_never_suspends_spawns_no_watcher_and_one_that_does_is_watched(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    server = McpServer("lazy")

    @server.tool()
    async def instant(ctx: Context) -> str:
        return "done"

    @server.tool()
    async def waits(ctx: Context) -> str:
        await trio.sleep(3600)
        return "slept"

    watchers = _Watchers()
    trio.lowlevel.add_instrument(watchers)
    try:
        async with trio.open_nursery() as nursery:
            client = AsgiClient(McpHttpApp(server, mcp_registry), nursery)
            async with client.lifespan():
                message = modern_call(1, "instant")
                quick = client.start("POST", headers_of(message), message)
                await quick.wait_complete()
                # Finished before it suspended: one JSON body, no SSE stream, no watcher.
                assert not quick.is_sse
                assert quick.json()["result"]["content"][0]["text"] == "done"
                assert watchers.spawned == 0
                message = modern_call(2, "waits")
                slow = client.start("POST", headers_of(message), message)
                await slow.wait_started()
                # Still running: committed to SSE, its head sent before the tool says anything.
                assert slow.is_sse and slow.status == 200 and not slow.messages()
                await trio.sleep(1)
                assert watchers.spawned == 1
                slow.disconnect()  # the watcher sees it: the tool is cancelled
                with trio.fail_after(10):
                    await client.wait_all_done()
                assert mcp_registry.in_flight_count == 0
    finally:
        trio.lowlevel.remove_instrument(watchers)
