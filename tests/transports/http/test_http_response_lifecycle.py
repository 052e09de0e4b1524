"""The HTTP response lifecycle as a state machine, and the outbox under it, without sockets.

:mod:`trio_mcp_cancel.transports.http.response` writes its legal
transitions down as a table; these tests hold the table to the lifecycle
the module docstring states, and drive :class:`CallResponse` with a fake
ASGI ``send`` to check what each path puts on the wire and whether the
answer counts as delivered.  :class:`~trio_mcp_cancel.transports._outbox.Outbox`
is the bounded queue both the HTTP writer and the message-stream
connections use.
"""

from __future__ import annotations

import json
import math
from collections.abc import MutableMapping
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_mcp_cancel.lowlevel import Exchange
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.transports._outbox import Outbox
from trio_mcp_cancel.transports.http.answer import CallResponse, Responder, Routed
from trio_mcp_cancel.transports.http.response import (
    TRANSITIONS,
    Event,
    ResponseMachine,
    ResponseStateError,
    State,
)

REPLY = {"jsonrpc": "2.0", "id": 1, "result": {"content": []}}

# -- the table -----------------------------------------------------------------


def test_the_table_ends_in_delivered_or_abandoned_and_both_are_final() -> None:
    for (state, _), after in TRANSITIONS.items():
        if state in (State.DELIVERED, State.ABANDONED):
            assert after is state  # nothing leaves a final state
    reachable = {State.PENDING}
    while True:
        more = {after for (state, _), after in TRANSITIONS.items() if state in reachable}
        if more <= reachable:
            break
        reachable |= more
    assert reachable == set(State)


def test_only_a_queued_final_message_can_be_written() -> None:
    for state in (State.PENDING, State.STREAMING):
        machine = ResponseMachine()
        machine.state = state
        with pytest.raises(ResponseStateError, match="written in state"):
            machine.handle(Event.WRITTEN)
    machine = ResponseMachine()
    assert machine.handle(Event.FINISH) is State.FINISHING
    assert machine.handle(Event.WRITTEN) is State.DELIVERED


def test_nothing_is_queued_after_the_final_message() -> None:
    machine = ResponseMachine()
    machine.handle(Event.COMMIT)
    machine.handle(Event.FINISH)
    for event in (Event.COMMIT, Event.FINISH):
        with pytest.raises(ResponseStateError):
            machine.handle(event)
    assert machine.state is State.FINISHING


def test_a_disconnect_after_the_final_message_leaves_it_to_the_writer() -> None:
    machine = ResponseMachine()
    machine.handle(Event.FINISH)
    assert machine.handle(Event.DISCONNECT) is State.FINISHING
    assert machine.handle(Event.ABANDON) is State.ABANDONED
    assert machine.handle(Event.COMMIT) is State.ABANDONED  # the client is gone: dropped


def test_a_disconnect_before_the_final_message_abandons_the_response() -> None:
    for first in (None, Event.COMMIT):
        machine = ResponseMachine()
        if first is not None:
            machine.handle(first)
        assert machine.handle(Event.DISCONNECT) is State.ABANDONED
        assert machine.handle(Event.FINISH) is State.ABANDONED


# -- CallResponse over a fake send ------------------------------------------------


class FakeSend:
    """An ASGI send that records messages; ``blocked`` makes every send wait forever."""

    def __init__(self, *, blocked: bool = False) -> None:
        self.messages: list[MutableMapping[str, Any]] = []
        self.blocked = blocked

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        if self.blocked:
            await trio.sleep_forever()
        self.messages.append(message)

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])

    def content_type(self) -> bytes:
        return dict(self.messages[0]["headers"])[b"content-type"]


class RecordingExchange(Exchange):
    """An exchange that records the cancels it is asked for."""

    def __init__(self, cancels: list[str]) -> None:
        super().__init__()
        self.cancels = cancels

    def cancel(self, reason: str, **kwargs: Any) -> None:
        self.cancels.append(reason)


async def _never_receive() -> MutableMapping[str, Any]:
    raise AssertionError("no watcher runs here")


def make(
    send: FakeSend, *, sse: bool = True, limit: int = 1 << 20
) -> tuple[CallResponse, list[str]]:
    """A call's response with no nursery: nothing starts its writer or watcher, the test
    runs ``response.writer`` itself; the cancels it asks for (a stall) are recorded."""
    responder = Responder(McpServer(), None, not sse, None, None, None, True, None, limit)
    routed: Any = Routed(call=None, caller=None, extra=[], era="modern")  # type: ignore[arg-type]
    cancels: list[str] = []
    response = CallResponse(
        responder, routed, RecordingExchange(cancels), _never_receive, send, None
    )
    return response, cancels


async def test_an_answer_before_any_commit_is_one_json_body() -> None:
    send = FakeSend()
    response, _ = make(send)
    response.finish(REPLY)
    assert response.state is State.FINISHING
    await response.writer.run()
    assert response.settle() and response.state is State.DELIVERED
    assert send.content_type() == b"application/json"
    assert json.loads(send.body()) == REPLY


async def test_a_committed_response_stays_sse_to_its_end() -> None:
    send = FakeSend()
    response, _ = make(send)
    await response.send_message({"jsonrpc": "2.0", "method": "notifications/progress"})
    assert response.state is State.STREAMING
    response.keepalive()
    response.finish(REPLY)
    await response.writer.run()
    assert response.settle()
    assert send.content_type() == b"text/event-stream"
    assert send.messages[-1]["more_body"] is False
    assert b'"result"' in send.body() and b"notifications/progress" in send.body()


async def test_a_json_only_client_never_gets_an_sse_head() -> None:
    send = FakeSend()
    response, _ = make(send, sse=False)
    response.commit()
    response.keepalive()
    assert response.state is State.PENDING
    response.finish(REPLY)
    await response.writer.run()
    assert response.settle() and send.content_type() == b"application/json"


async def test_a_silent_end_commits_and_ends_the_stream_without_a_message() -> None:
    send = FakeSend()
    response, _ = make(send)
    response.finish(None)
    await response.writer.run()
    assert response.settle()
    assert send.content_type() == b"text/event-stream" and send.body() == b""


async def test_a_disconnected_client_gets_nothing_more_and_the_answer_is_lost() -> None:
    send = FakeSend()
    response, _ = make(send)
    response.commit()
    response.disconnected()
    await response.send_message({"jsonrpc": "2.0", "method": "notifications/progress"})
    response.finish(REPLY)
    await response.writer.run()
    assert not response.settle() and response.state is State.ABANDONED
    assert [m["type"] for m in send.messages] == ["http.response.start"]


async def test_too_much_unread_output_stalls_the_client_once() -> None:
    send = FakeSend()
    response, stalls = make(send, limit=100)
    response.commit()
    for _ in range(5):
        await response.send_message({"jsonrpc": "2.0", "method": "x", "params": {"p": "y" * 60}})
    assert (
        stalls == ["client stopped reading"]
        and response.state is State.ABANDONED
        and response.writer.stalled
    )


async def test_an_abandoned_writer_means_a_lost_answer_even_once_finished(
    autojump_clock: MockClock,
) -> None:
    send = FakeSend(blocked=True)
    response, _ = make(send)
    response.finish(REPLY)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(response.writer.run)
        await trio.sleep(1)
        response.writer.abandon()
        nursery.cancel_scope.cancel()
    assert not response.settle() and response.state is State.ABANDONED


# -- the shared outbox --------------------------------------------------------------


def test_the_outbox_bound_excludes_the_item_in_flight_and_never_refuses_a_reply() -> None:
    outbox: Outbox[str] = Outbox(10)
    assert outbox.put("big", 50, bounded=True)  # the oldest is in flight: any size
    assert outbox.put("a", 10, bounded=True)
    assert not outbox.put("b", 1, bounded=True)  # 10 waiting + 1 > 10
    assert outbox.put("reply", 1000, bounded=False)
    assert outbox.bytes == 1060 and outbox.bounded_bytes == 60
    assert outbox.backlogged()
    outbox.written()
    assert outbox.start_write() == "a" and outbox.bytes == 1010


def test_a_lenient_outbox_takes_one_large_item_when_nothing_bounded_waits() -> None:
    strict: Outbox[str] = Outbox(10)
    lenient: Outbox[str] = Outbox(10, lenient=True)
    for outbox in (strict, lenient):
        outbox.put("head", 0, bounded=True)
    assert not strict.put("x", 11, bounded=True)
    assert lenient.put("x", 11, bounded=True)
    assert not lenient.put("y", 1, bounded=True)


def test_losing_the_outbox_calls_the_lost_callbacks_and_closes_it() -> None:
    lost: list[str] = []
    outbox: Outbox[str] = Outbox(10)
    outbox.put("n", 1, bounded=True)
    outbox.put("r", 1, bounded=False, on_lost=lambda: lost.append("r"))
    outbox.lose()
    assert lost == ["r"] and not outbox and outbox.closed and outbox.bytes == 0
    assert outbox.put("late", 1, bounded=False, on_lost=lambda: lost.append("late"))
    assert lost == ["r", "late"] and not outbox


async def test_the_write_deadline_is_kept_while_a_write_is_pending(
    autojump_clock: MockClock,
) -> None:
    outbox: Outbox[str] = Outbox(10, timeout=5.0)
    outbox.put("x", 1, bounded=False)
    assert outbox.stall_at == math.inf
    start = trio.current_time()
    assert outbox.start_write() == "x" and outbox.stall_at == start + 5.0
    outbox.written()
    assert outbox.stall_at == math.inf and not outbox


async def test_a_waiting_writer_wakes_for_an_item_or_the_end(autojump_clock: MockClock) -> None:
    outbox: Outbox[str] = Outbox(10)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.wait)
        await trio.sleep(1)
        outbox.put("x", 1, bounded=True)
    outbox.written()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.wait)
        await trio.sleep(1)
        outbox.end()
