"""The seams made by splitting TaskManager and ClientEngine hold on their own.

``RunningTasks`` is the one table every piece of the task manager shares:
its per-tenant counts are what admission trusts, and its signals are what
``wait_idle`` and ``end_owner`` wait on.  ``Inbound`` is the client's
receiving side: bounded without ``keep_history``, and it still cancels a
task made late for a call that was cancelled and forgotten.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import trio
import trio.testing

from trio_mcp_cancel._client.calls import PendingCall
from trio_mcp_cancel._client.inbound import MAX_KEPT, Inbound
from trio_mcp_cancel._protocol.exchange import Exchange
from trio_mcp_cancel._tasks.table import PendingInputs, RunningTask, RunningTasks


def test_the_table_counts_each_tenant_and_forgets_a_tenant_with_no_task() -> None:
    table = RunningTasks()
    table.add("a", RunningTask(Exchange(), "alice", "acme"))
    table.add("b", RunningTask(Exchange(), "bob", "acme"))
    table.add("c", RunningTask(Exchange(), "carol", "other"))
    assert (len(table), table.tenant_count("acme"), table.tenant_count("other")) == (3, 2, 1)
    table.remove("a")
    table.remove("a")  # a second remove changes nothing
    table.remove("c")
    assert (len(table), table.tenant_count("acme"), table.tenant_count("other")) == (1, 1, 0)
    assert "b" in table and "a" not in table and table.ids() == ["b"]


async def test_ending_an_owner_cancels_only_its_tasks_and_waits_until_they_are_removed() -> None:
    table = RunningTasks()
    mine, theirs = Exchange(), Exchange()
    table.add("mine", RunningTask(mine, "alice", "alice"))
    table.add("theirs", RunningTask(theirs, "bob", "bob"))
    ended = trio.Event()

    async def end() -> None:
        await table.end_owner("alice", "connection closed")
        ended.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(end)
        await trio.testing.wait_all_tasks_blocked()
        assert mine.cancel_kind == "disconnect" and theirs.cancel_kind is None
        assert not ended.is_set()  # still running: end_owner waits for it
        table.remove("mine")
        await trio.testing.wait_all_tasks_blocked()
        assert ended.is_set() and len(table) == 1


async def test_waiting_for_idle_returns_once_the_last_task_is_removed() -> None:
    table = RunningTasks()
    await table.wait_idle()  # nothing runs: at once
    table.add("a", RunningTask(Exchange(), "alice", "alice"))
    idle = trio.Event()

    async def wait() -> None:
        await table.wait_idle()
        idle.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        assert not idle.is_set()
        table.remove("a")
        await trio.testing.wait_all_tasks_blocked()
        assert idle.is_set()


def test_cancelling_a_parked_task_wakes_it_to_see_its_flag() -> None:
    table = RunningTasks()
    running = RunningTask(Exchange(), "alice", "alice")
    table.add("a", running)
    running.inputs = PendingInputs({"k": {}})
    assert table.cancel("a") and running.inputs.wake.is_set()
    assert running.exchange.cancel_kind == "client"
    assert not table.cancel("unknown")


@attrs.define
class _Wire:
    sent: list[dict[str, Any]] = attrs.field(factory=list)

    def transmit(self, message: dict[str, Any], call: PendingCall | None) -> None:
        self.sent.append(message)

    def cancel(self, call: PendingCall, reason: str | None) -> None:
        pass

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)


@attrs.define
class _Engine:
    """Just what Inbound reads of its engine (the InboundEngine protocol)."""

    transport: _Wire = attrs.field(factory=_Wire)
    era: Any = "modern"
    initialize_result: dict[str, Any] | None = None
    protocol_version: str = "x"
    calls: dict[int, PendingCall] = attrs.field(factory=dict)
    unexpected: list[dict[str, Any]] = attrs.field(factory=list)
    log_messages: list[dict[str, Any]] = attrs.field(factory=list)
    keep_history: bool = False
    answer_server_requests: bool = True
    server_requests: Any = None  # no ClientHandlers: the server's requests are refused
    started: list[tuple[str, Any]] = attrs.field(factory=list)

    def start_request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        capabilities: Mapping[str, Any] | None = None,
    ) -> PendingCall:
        self.started.append((method, params))
        return PendingCall(99, method, lambda call, reason: None, None)


def test_without_history_the_inbound_keeps_only_the_newest_strays() -> None:
    engine = _Engine()
    inbound = Inbound(engine)
    for n in range(MAX_KEPT + 5):
        inbound.receive({"jsonrpc": "2.0", "method": "notifications/odd", "params": {"n": n}})
    inbound.receive_text("not json")
    assert len(engine.unexpected) == MAX_KEPT
    assert engine.unexpected[-1] == {"non-json": "not json"}


def test_a_late_task_of_a_forgotten_cancelled_call_is_cancelled() -> None:
    engine = _Engine()
    inbound = Inbound(engine)
    call = PendingCall(7, "tools/call", lambda call, reason: None, None)
    call.task_capabilities = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    inbound.remember_abandoned(call)  # cancelled, and no longer in engine.calls
    answer = {"jsonrpc": "2.0", "id": 7, "result": {"resultType": "task", "taskId": "t-1"}}
    inbound.receive(answer)
    assert engine.started == [("tasks/cancel", {"taskId": "t-1"})]
    inbound.receive(answer)  # once only
    assert len(engine.started) == 1


def test_the_server_ping_is_answered_and_other_server_requests_refused() -> None:
    engine = _Engine()
    inbound = Inbound(engine)
    inbound.receive({"jsonrpc": "2.0", "id": "p", "method": "ping"})
    inbound.receive({"jsonrpc": "2.0", "id": "q", "method": "sampling/createMessage"})
    assert engine.transport.sent[0] == {"jsonrpc": "2.0", "id": "p", "result": {}}
    assert engine.transport.sent[1]["error"]["code"] == -32601
