"""A hung or unreachable Redis costs a request only what it must (issue 20, item 5).

The circuit breaker's state machine runs on a fake clock; the rest runs
against a real ``redis-server`` on 127.0.0.1 (a port the kernel picked),
frozen with ``SIGSTOP`` (and always thawed with ``SIGCONT``): a hung Redis
accepts connections and answers nothing, which is what made every tool
call wait out ``op_timeout``.  No timing assertions: the backends get an
``op_timeout`` of 30 s and the tests a ``fail_after`` well below it, so
they can only pass if nothing on the request path waited for it.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_mcp_cancel import Event, checkpoint_cancelled
from trio_mcp_cancel._core.events import EventHub
from trio_mcp_cancel.backends import BackendEvent, TaskStoreUnavailable
from trio_mcp_cancel.backends._breaker import Breaker
from trio_mcp_cancel.backends._outbox import Outbox, PendingState
from trio_mcp_cancel.backends.redis import RedisBackend, _Health
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, McpServer, Tasks

from _support.asgi import AsgiClient, headers_of, modern_call, modern_request
from _support.deploy import WITH_TASKS, RedisServer, redis_server
from _support.redis import (
    client_of,
    prefix,
    record,
    redis,
    running,
    start_cluster_node,
    task_process,
    wait_tracked,
)

__all__ = ["prefix", "redis"]  # the fixtures, for pytest


# -- the breaker, on a fake clock ---------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_breaker_opens_once_skips_calls_and_probes_after_a_growing_delay() -> None:
    clock = FakeClock()
    breaker = Breaker(clock, base_delay=0.5, max_delay=4.0)
    assert breaker.allow() and not breaker.is_open
    assert breaker.failure() is True  # the outage starts: reported once
    assert breaker.failure() is False  # a call that was in flight: nothing new
    assert not breaker.allow()
    assert breaker.retry_at == 100.5
    assert not breaker.try_probe()  # not due yet
    delays = []
    for _ in range(6):
        clock.now = breaker.retry_at
        assert breaker.try_probe()
        assert not breaker.try_probe()  # one probe at a time
        start = clock.now
        assert breaker.failure(probe=True) is False
        delays.append(breaker.retry_at - start)
    assert delays == [1.0, 2.0, 4.0, 4.0, 4.0, 4.0]  # doubling, up to the cap
    clock.now = breaker.retry_at
    for _ in range(2):  # half-open: a probe that succeeds makes the next one due at once
        assert breaker.try_probe()
        assert breaker.success(probe=True) is False
        assert breaker.half_open and not breaker.allow()
    assert breaker.try_probe()
    assert breaker.success(probe=True) is True  # the third in a row: reported once
    assert breaker.success(probe=True) is False
    assert breaker.allow() and not breaker.try_probe()


def close(breaker: Breaker, clock: FakeClock) -> None:
    """Probe until the breaker closes (each probe succeeds)."""
    while breaker.is_open:
        clock.now = max(clock.now, breaker.retry_at)
        assert breaker.try_probe()
        breaker.success(probe=True)


def test_failures_of_calls_in_flight_do_not_push_the_next_probe_out() -> None:
    clock = FakeClock()
    breaker = Breaker(clock)
    breaker.failure()
    due = breaker.retry_at
    clock.now += 0.2
    for _ in range(100):  # a burst of timeouts of calls started before it opened
        assert breaker.failure() is False
    assert breaker.retry_at == due
    # After an outage, and healthy for max_delay, the delays start again from the base.
    clock.now = due
    assert breaker.try_probe()
    breaker.failure(probe=True)
    close(breaker, clock)
    clock.now += breaker.max_delay
    breaker.failure()
    assert breaker.retry_at == clock.now + 0.5


def test_a_failed_probe_while_half_open_reopens_it_with_a_longer_delay() -> None:
    clock = FakeClock()
    breaker = Breaker(clock, base_delay=0.5, max_delay=8.0)
    breaker.failure()
    clock.now = breaker.retry_at
    assert breaker.try_probe() and breaker.success(probe=True) is False
    assert breaker.half_open
    assert breaker.try_probe()
    assert breaker.failure(probe=True) is False  # still one outage: nothing reported
    assert not breaker.half_open and breaker.retry_at == clock.now + 1.0
    # A call in flight since before it opened proves nothing: it stays open.
    assert breaker.success() is False and breaker.is_open


def test_a_backend_failing_now_and_then_does_not_make_the_breaker_flap() -> None:
    """One call in five fails (a Redis at the edge of the timeout): over 60 s of calls
    every 50 ms the breaker opens a handful of times, not once per failure, and
    the open time grows while it keeps failing, up to max_delay."""
    clock = FakeClock()
    breaker = Breaker(clock, base_delay=0.5, max_delay=8.0)
    opened, closed, calls = 0, 0, 0
    open_delays = []
    end = clock.now + 60
    while clock.now < end:
        ok = calls % 5 != 4
        calls += 1
        if breaker.allow():
            if ok:
                closed += breaker.success()
            elif breaker.failure():
                opened += 1
                open_delays.append(breaker.retry_at - clock.now)
        elif breaker.try_probe():
            if ok:
                closed += breaker.success(probe=True)
            else:
                breaker.failure(probe=True)
        clock.now += 0.05
    assert opened <= 8, opened  # without hysteresis: one per success of a probe (~30 here)
    assert closed <= opened
    assert open_delays == sorted(open_delays) and open_delays[-1] == 8.0, open_delays


def test_a_breaker_needs_sane_delays() -> None:
    with pytest.raises(ValueError):
        Breaker(FakeClock(), base_delay=0)
    with pytest.raises(ValueError):
        Breaker(FakeClock(), base_delay=5, max_delay=1)
    with pytest.raises(ValueError):
        Breaker(FakeClock(), close_after=0)


async def test_while_the_breaker_is_open_calls_skip_redis_and_the_heartbeat_wakes_to_probe(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hub = EventHub()
    seen: list[Event] = []
    hub.subscribe(seen.append)
    health = _Health(hub, op_timeout=2.0, hot_timeout=0.1)
    health.prober = True  # a heartbeat runs
    reached: list[str] = []

    async def hung() -> None:
        reached.append("hung")
        await trio.sleep_forever()

    async def fine() -> str:
        reached.append("fine")
        await trio.lowlevel.checkpoint()
        return "ok"

    async def heartbeat_sleep(woke: list[float]) -> None:
        await health.until_probe(5.0)
        woke.append(trio.current_time())

    woke: list[float] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat_sleep, woke)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(TaskStoreUnavailable):
            await health.call("quota.acquire", hung, TaskStoreUnavailable)
        opened_at = trio.current_time()
        assert opened_at == pytest.approx(0.1)  # the hot timeout, not op_timeout
        for _ in range(3):  # skipped without touching Redis
            with pytest.raises(TaskStoreUnavailable, match="skipped"):
                await health.call("sessions.get", fine, TaskStoreUnavailable)
    assert reached == ["hung"]
    # The heartbeat's sleep ended at the first probe's time, not after its 5 s.
    assert woke == [pytest.approx(opened_at + 0.5)]
    for _ in range(3):  # the breaker's hysteresis: three probes in a row close it
        assert health.down
        assert await health.call("heartbeat", fine, TaskStoreUnavailable, probe=True) == "ok"
    assert not health.down
    assert [(e.name, e.operation) for e in seen] == [  # type: ignore[union-attr]
        ("backend.unavailable", "quota.acquire"),
        ("backend.recovered", "heartbeat"),
    ]


async def test_without_a_heartbeat_one_call_is_let_through_as_the_probe(
    autojump_clock: trio.testing.MockClock,
) -> None:
    health = _Health(EventHub(), op_timeout=2.0, hot_timeout=0.1)
    calls = 0

    async def refused() -> None:
        nonlocal calls
        calls += 1
        await trio.lowlevel.checkpoint()
        raise ConnectionRefusedError("refused")

    with pytest.raises(TaskStoreUnavailable):
        await health.call("tasks.get", refused, TaskStoreUnavailable)
    with pytest.raises(TaskStoreUnavailable, match="skipped"):
        await health.call("tasks.get", refused, TaskStoreUnavailable)
    assert calls == 1
    await trio.sleep(0.5)
    with pytest.raises(TaskStoreUnavailable, match="refused"):
        await health.call("tasks.get", refused, TaskStoreUnavailable)  # the probe
    with pytest.raises(TaskStoreUnavailable, match="skipped"):
        await health.call("tasks.get", refused, TaskStoreUnavailable)
    assert calls == 2
    await trio.sleep(0.5)  # the failed probe doubled the pause: not due yet
    with pytest.raises(TaskStoreUnavailable, match="skipped"):
        await health.call("tasks.get", refused, TaskStoreUnavailable)
    assert calls == 2


def test_a_full_outbox_drops_its_oldest_state_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outbox = Outbox(2)
    states = {
        name: PendingState("completed", float(i), {"content": []}, None, None)
        for i, name in enumerate(("first-task", "second-task", "third-task"))
    }
    with caplog.at_level(logging.WARNING, logger="trio_mcp_cancel"):
        for name, state in states.items():
            outbox.keep(name, state)
    assert [name for name, _ in outbox.pending()] == ["second-task", "third-task"]
    assert outbox.dropped == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert "first-ta" in line and "dropped" in line
    with pytest.raises(ValueError):
        Outbox(0)


# -- a real redis-server ------------------------------------------------------------


@contextmanager
def frozen(redis: RedisServer) -> Iterator[None]:
    """Redis hung: its process stopped (it keeps its sockets, answers nothing)."""
    assert redis.process is not None
    pid = redis.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def hung_server(finish: trio.Event) -> McpServer:
    server = McpServer("hung-redis", extensions=[Tasks(TaskManager(cancel_poll_interval=1000))])

    @server.tool(task="optional")
    async def wait(ctx: Context) -> str:
        while not finish.is_set():
            await checkpoint_cancelled()
            await trio.sleep(0.01)
        return "finished"

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    return server


def _post_json(reply: Any) -> dict[str, Any]:
    answer = reply.answer()
    assert isinstance(answer, dict)
    return answer


@pytest.mark.redis
async def test_a_hung_redis_costs_a_tool_call_nothing_and_tasks_that_ended_meanwhile_settle(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    finish = trio.Event()
    server = hung_server(finish)
    with redis_server() as redis:
        # op_timeout far beyond the test's own limits: waiting it out fails the test.
        backend = RedisBackend(redis.url, prefix=prefix, op_timeout=30.0, reconnect_delay=0.2)
        events: list[BackendEvent] = []
        backend.events.subscribe(events.append)  # type: ignore[arg-type]
        app = McpHttpApp(server, backend=backend)
        caplog.set_level(logging.INFO, logger="trio_mcp_cancel")
        async with trio.open_nursery() as nursery:
            client = AsgiClient(app, nursery, client=("192.0.2.20", 1))
            async with client.lifespan():

                async def post(message: dict[str, Any]) -> dict[str, Any]:
                    return _post_json(await client.post(headers_of(message), message))

                def task_request(n: int, method: str, task_id: str) -> dict[str, Any]:
                    return modern_request(n, method, {"taskId": task_id}, capabilities=WITH_TASKS)

                with trio.fail_after(10):
                    done = (await post(modern_call(1, "wait", capabilities=WITH_TASKS)))["result"]
                    stopped = (await post(modern_call(2, "wait", capabilities=WITH_TASKS)))[
                        "result"
                    ]
                assert done["resultType"] == stopped["resultType"] == "task"
                done_id, stopped_id = done["taskId"], stopped["taskId"]
                with frozen(redis), trio.fail_after(10):  # << op_timeout
                    for n in range(10, 20):
                        answer = await post(modern_call(n, "echo", {"text": f"hi {n}"}))
                        assert answer["result"]["content"][0]["text"] == f"hi {n}"
                    # What needs Redis says so at once...
                    refused = await post(task_request(20, "tasks/get", done_id))
                    assert refused["error"]["code"] == -32603
                    # ... a task running here is cancelled here, another one completes.
                    assert (await post(task_request(21, "tasks/cancel", stopped_id)))["result"]
                    finish.set()
                    # A task leaves the running count before its final state is kept:
                    # wait for both states (fail_after above bounds it).
                    tasks = server.dispatcher.extension(Tasks).manager
                    while tasks.running_count or len(backend.tasks.outbox) < 2:
                        await trio.sleep(0.01)
                    assert [e.name for e in events] == ["backend.unavailable"]
                with trio.fail_after(20):  # thawed: the heartbeat finds it back
                    while backend.health_down or len(backend.tasks.outbox):
                        await trio.sleep(0.02)
                assert [e.name for e in events] == ["backend.unavailable", "backend.recovered"]
                read = await post(task_request(30, "tasks/get", done_id))
                assert read["result"]["status"] == "completed"
        # Another process reads what was written to Redis itself.
        other = RedisBackend(redis.url, prefix=prefix)
        async with running(other):
            completed = await other.tasks.get(done_id)
            cancelled = await other.tasks.get(stopped_id)
    assert completed is not None and completed.status == "completed"
    assert completed.result is not None
    assert completed.result["content"][0]["text"] == "finished"
    assert cancelled is not None and cancelled.status == "cancelled"
    written = [r.getMessage() for r in caplog.records if "kept during the outage" in r.getMessage()]
    assert written and "2 final task state(s)" in written[0]


async def test_a_final_state_kept_locally_is_read_here_and_never_overwrites_a_terminal_one(
    redis: RedisServer, prefix: str
) -> None:
    here = RedisBackend(redis.url, prefix=prefix, op_timeout=5.0)
    elsewhere = RedisBackend(redis.url, prefix=prefix, op_timeout=5.0)
    async with running(here, elsewhere):
        for task_id in ("ours", "settled-elsewhere"):
            await here.tasks.create(record(task_id))
        result = {"content": [{"type": "text", "text": "done"}], "isError": False}
        # As if both had ended here while Redis was down.
        here.tasks.outbox.keep("ours", PendingState("completed", time.time(), result, None, "ok"))
        here.tasks.outbox.keep(
            "settled-elsewhere", PendingState("cancelled", time.time(), None, None, None)
        )
        await elsewhere.tasks.settle(
            "settled-elsewhere", "failed", error={"code": 1, "message": "x"}
        )
        ours = await here.tasks.get("ours")
        assert ours is not None and ours.status == "completed" and ours.result == result
        assert (await elsewhere.tasks.get("ours")).status == "working"  # type: ignore[union-attr]
        assert await here.tasks.flush() == 1
        assert len(here.tasks.outbox) == 0
        ours = await elsewhere.tasks.get("ours")
        assert ours is not None and ours.status == "completed" and ours.result == result
        assert ours.status_message == "ok"
        theirs = await elsewhere.tasks.get("settled-elsewhere")
        assert theirs is not None and theirs.status == "failed"


async def test_a_settle_refused_while_redis_is_unreachable_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = RedisBackend("redis://127.0.0.1:1/0", op_timeout=0.5, reconnect_delay=0.2)
    async with running(backend):
        with pytest.raises(TaskStoreUnavailable, match="kept to be written"):
            await backend.tasks.settle("lost-task", "completed", result={"content": []})
        with pytest.raises(TaskStoreUnavailable):
            await backend.tasks.settle("parked", "input_required", input_requests={"k": {}})
    assert [name for name, _ in backend.tasks.outbox.pending()] == ["lost-task"]


async def _reads_processed(backend: RedisBackend) -> int:
    """Redis's count of socket reads: one per round trip of a small request."""
    stats = await backend.client.info("stats")
    return int(stats["total_reads_processed"])


async def test_a_listen_naming_a_thousand_task_ids_reads_them_in_one_round_trip(
    redis: RedisServer, prefix: str
) -> None:
    finish = trio.Event()
    server = hung_server(finish)
    async with task_process(redis, prefix, server) as backend, client_of(server) as client:
        ours = (await client.request("tools/call", {"name": "wait", "arguments": {}}))["taskId"]
        async with client_of(server, namespace="someone-else") as other:
            theirs = (await other.request("tools/call", {"name": "wait", "arguments": {}}))[
                "taskId"
            ]
        wanted = [ours, theirs, *(f"unknown-{n}" for n in range(998))]
        # The measure counts round trips: a thousand sequential reads show up.
        before = await _reads_processed(backend)
        for task_id in wanted:
            await backend.tasks.get(task_id)
        assert await _reads_processed(backend) - before >= 1000
        before = await _reads_processed(backend)
        listen = client.start_request(
            "subscriptions/listen", {"notifications": {"taskIds": wanted}}
        )
        await wait_tracked(client, listen)
        reads = await _reads_processed(backend) - before
        assert reads < 50  # a few reads of one pipelined batch, plus the heartbeat's
        ack = listen.notifications[0]
        assert ack["params"]["notifications"] == {"taskIds": [ours]}
        await listen.cancel()
        finish.set()


@pytest.mark.redis
async def test_the_batched_read_works_on_a_redis_cluster(tmp_path: Path) -> None:
    process, port = start_cluster_node(tmp_path)
    try:
        backend = RedisBackend(f"redis+cluster://127.0.0.1:{port}", prefix="batch")
        async with running(backend):
            with trio.fail_after(20):
                await backend.tasks.create(record("here", owner="me"))
                found = await backend.tasks.get_many(["here", "missing", "here"])
        assert [r.task_id if r else None for r in found] == ["here", None, "here"]
    finally:
        process.kill()
        process.wait()
