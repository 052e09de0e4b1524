"""What a suspended HTTP call holds (issue 27): a writer task only while something is to be
written, the replay buffer within its bound, and one watcher task.

The writer of a streamed response runs *on demand* (``ResponseWriter.start``):
a task is spawned when a message is queued and ends when the queue is empty,
so a call suspended in its tool, whose client read everything so far, holds
no writer task; the order, the deadline and ``done`` are those of
``ResponseWriter.run``.  Driven with a fake ``send`` and trio's MockClock, and
through the app with the in-memory ASGI harness.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.transports.http.resume import ResumableStream
from trio_mcp_cancel.transports.http.writer import WRITER_TASK, ResponseWriter

from _support.asgi import AsgiClient, headers_of, modern_call

HEAD = {"type": "http.response.start", "status": 200, "headers": []}


def body(data: bytes, *, final: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": not final}


class Send:
    def __init__(self, *, blocked: bool = False) -> None:
        self.blocked = blocked
        self.messages: list[MutableMapping[str, Any]] = []

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        if self.blocked:
            await trio.sleep_forever()
        self.messages.append(message)


class _Tasks(trio.abc.Instrument):
    """Live tasks by name suffix."""

    def __init__(self) -> None:
        self.live: dict[str, int] = {}

    def _key(self, task: trio.lowlevel.Task) -> str | None:
        if task.name == WRITER_TASK:
            return "writer"
        return "watcher" if task.name.endswith("._watch") else None

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        key = self._key(task)
        if key is not None:
            self.live[key] = self.live.get(key, 0) + 1

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        key = self._key(task)
        if key is not None:
            self.live[key] -= 1


async def test_an_on_demand_writer_writes_in_order_and_holds_no_task_while_idle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    send = Send()
    writer = ResponseWriter(send, 1 << 20)
    async with trio.open_nursery() as nursery:
        writer.put(HEAD)
        writer.start(nursery.start_soon)
        await trio.testing.wait_all_tasks_blocked()
        assert send.messages == [HEAD]
        assert not nursery.child_tasks and not writer.running and not writer.done
        writer.put(body(b"progress"))
        writer.put(body(b"more"))
        await trio.testing.wait_all_tasks_blocked()
        assert [m.get("body") for m in send.messages[1:]] == [b"progress", b"more"]
        assert not nursery.child_tasks and not writer.done
        writer.put(body(b"answer", final=True), final=True)
        with trio.fail_after(1):
            await writer.wait_done()
    assert writer.done and not writer.abandoned
    assert send.messages[-1] == body(b"answer", final=True)


async def test_an_idle_on_demand_writer_abandoned_or_closed_is_done_without_a_task() -> None:
    for end in ("abandon", "close"):
        writer = ResponseWriter(Send(), 1 << 20)
        async with trio.open_nursery() as nursery:
            writer.put(HEAD)
            writer.start(nursery.start_soon)
            await trio.testing.wait_all_tasks_blocked()
            getattr(writer, end)()
            assert not nursery.child_tasks
            assert writer.done and writer.abandoned == (end == "abandon")
            await writer.wait_done()  # returns at once


async def test_an_on_demand_write_keeps_its_deadline_and_wakes_the_watcher_then(
    autojump_clock: trio.testing.MockClock,
) -> None:
    writer = ResponseWriter(Send(blocked=True), 1 << 20)
    writer.outbox.timeout = 5.0
    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as wakes:
            writer.wakes = wakes
            start = trio.current_time()
            writer.put(HEAD)
            writer.start(nursery.start_soon)
            await trio.sleep(1)
            assert writer.running and writer.stall_at == start + 5.0
            assert wakes.deadline == start + 5.0  # the watcher is woken when it passes
        writer.abandon()
        nursery.cancel_scope.cancel()
    assert writer.done and writer.abandoned


async def test_a_writer_whose_nursery_closed_is_abandoned_not_raised() -> None:
    def closed(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Nursery is closed to new arrivals")

    writer = ResponseWriter(Send(), 1 << 20)
    writer.put(HEAD)
    writer.start(closed)
    assert writer.done and writer.abandoned and not writer.running


def test_the_replay_buffer_keeps_its_bound_and_replays_what_it_holds_in_order() -> None:
    stream = ResumableStream("0123456789ab", limit=2_000)
    writer = ResponseWriter(Send(), 1 << 30)
    stream.attach(writer)
    for n in range(500):
        assert stream.emit(b"data: %d\n\n" % n + b"x" * 100)
        assert stream.size <= stream.limit
        # Dropped entries are cut off in batches: never more than half the list (plus a batch).
        assert len(stream.events) <= 2 * (len(stream.events) - stream.dropped) + 32
    held = [seq for seq, _ in stream.held()]
    assert held == list(range(stream.first_held, 501)) and not stream.overflowed
    assert stream.can_resume(stream.first_held - 1) and not stream.can_resume(0)
    again = ResponseWriter(Send(), 1 << 30)
    assert stream.attach(again, after=498)
    replayed = []
    while (message := again.outbox.start_write()) is not None:
        replayed.append(message["body"].split(b"\n", 1)[0])
        again.outbox.written()
    assert replayed == [b"id: 0123456789ab.499", b"id: 0123456789ab.500"]


def test_an_event_dropped_before_any_connection_took_it_overflows_the_stream() -> None:
    stream = ResumableStream("0123456789ab", limit=1_000)
    stream.attach(ResponseWriter(Send(), 1 << 30))
    stream.emit(b"data: first\n\n")
    stream.detach()
    for _ in range(20):
        stream.emit(b"data: " + b"y" * 100 + b"\n\n")
    assert stream.overflowed and not stream.can_resume(1)


@pytest.mark.mcp_registry(grace_period=0)
async def test_a_suspended_streamed_call_holds_its_watcher_and_no_writer_task(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    server = McpServer("suspended")

    @server.tool()
    async def waits(ctx: Context) -> str:
        await ctx.report_progress(1)
        await trio.sleep(3600)
        return "slept"

    tasks = _Tasks()
    trio.lowlevel.add_instrument(tasks)
    try:
        async with trio.open_nursery() as nursery:
            client = AsgiClient(McpHttpApp(server, mcp_registry), nursery)
            async with client.lifespan():
                message = modern_call(1, "waits", progress_token="p")
                call = client.start("POST", headers_of(message), message)
                with trio.fail_after(10):
                    progress = await call.next_message()
                assert progress["method"] == "notifications/progress"
                await trio.sleep(1)
                assert tasks.live == {"writer": 0, "watcher": 1}
                call.disconnect()  # still watched: the disconnect cancels the call
                with trio.fail_after(10):
                    await client.wait_all_done()
                assert mcp_registry.in_flight_count == 0
                assert tasks.live.get("watcher") == 0
    finally:
        trio.lowlevel.remove_instrument(tasks)


def _await_chain(task: trio.lowlevel.Task) -> list[str]:
    """The qualified names of the coroutines *task* is suspended in, outermost first
    (up to ``await_then``, which drives the call's coroutine itself)."""
    names = []
    awaited: Any = task.coro
    while awaited is not None:
        code = getattr(awaited, "cr_code", None) or getattr(awaited, "gi_code", None)
        if code is None:
            break
        names.append(code.co_qualname)
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return names


@pytest.mark.mcp_registry(grace_period=0)
async def test_a_suspended_call_holds_no_frame_of_the_apps_routing_or_admission(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    # Every coroutine frame on a suspended call's await chain is held for the
    # call's life: routing (with the body it read), admission and the choice of
    # a response path run in frames that are over, or return the coroutine to await.
    server = McpServer("suspended")
    request_task: list[trio.lowlevel.Task] = []

    @server.tool()
    async def waits(ctx: Context) -> str:
        request_task.append(trio.lowlevel.current_task())
        await trio.sleep(3600)
        return "slept"

    async with trio.open_nursery() as nursery:
        client = AsgiClient(McpHttpApp(server, mcp_registry), nursery)
        async with client.lifespan():
            message = modern_call(1, "waits")
            call = client.start("POST", headers_of(message), message)
            await trio.sleep(1)
            chain = _await_chain(request_task[0])
            start = chain.index("McpHttpApp.__call__")
            assert chain[start:] == ["McpHttpApp.__call__", "Responder._stream", "await_then"]
            call.disconnect()
            with trio.fail_after(10):
                await client.wait_all_done()
            assert mcp_registry.in_flight_count == 0
