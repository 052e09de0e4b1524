"""Admission runs once per call, at the edge, the same way on every transport.

A transport takes a call's slots with ``Dispatcher.admit`` before it commits
to a response (so HTTP refuses with a ``429``, not an SSE stream carrying the
error), then runs it with ``Dispatcher.answer(..., admitted=True)``, which
gives the slots back.  These tests count the admission checks a call costs,
and check that a call admitted and then never run (refused by the tenant's
slots across workers, or cancelled while the backend is asked) gives its
slots back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry
from trio_mcp_cancel._protocol import dispatcher as dispatcher_module
from trio_mcp_cancel._protocol.calls import RequestCall
from trio_mcp_cancel._protocol.dispatcher import Dispatcher
from trio_mcp_cancel._protocol.exchange import Caller
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer, ServerLimits
from trio_mcp_cancel.testing import open_test_client
from trio_mcp_cancel.transports.http.answer import Responder, Routed

from _support.asgi import AsgiClient, modern_call, modern_headers, served
from _support.cancellation_tools import probe_server


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The admission checks made, by the method of the call checked."""
    made: list[str] = []
    check = dispatcher_module._limit_refusal

    def counted(dispatcher: Dispatcher, call: RequestCall, caller: Caller) -> Any:
        made.append(call.request.method)
        return check(dispatcher, call, caller)

    monkeypatch.setattr(dispatcher_module, "_limit_refusal", counted)
    yield made


#: The registry of every test here (the ``mcp_registry`` fixture).
pytestmark = pytest.mark.mcp_registry(grace_period=5)


@asynccontextmanager
async def serving(registry: Registry, server: McpServer) -> AsyncIterator[AsgiClient]:
    async with served(McpHttpApp(server, registry)) as client:
        yield client


async def test_a_tool_call_over_http_is_admitted_once(
    autojump_clock: trio.testing.MockClock, checks: list[str], mcp_registry: Registry
) -> None:
    server = probe_server(limits=ServerLimits(max_calls=4))
    async with serving(mcp_registry, server) as client:
        answer = await client.post(
            modern_headers("tools/call", "echo"), modern_call(1, "echo", {"text": "hi"})
        )
        assert answer.status == 200 and answer.answer()["result"]["content"][0]["text"] == "hi"
    assert checks == ["tools/call"]
    assert server.dispatcher.calls_in_flight == 0


async def test_a_tool_call_over_a_stream_transport_is_admitted_once(
    autojump_clock: trio.testing.MockClock, checks: list[str]
) -> None:
    server = probe_server(limits=ServerLimits(max_calls=4))
    async with open_test_client(server) as client:
        assert (await client.call_tool("echo", {"text": "hi"}))["content"][0]["text"] == "hi"
    assert checks == ["tools/call"]
    assert server.dispatcher.calls_in_flight == 0


async def test_a_call_over_the_server_cap_is_a_429_checked_once_and_takes_nothing(
    autojump_clock: trio.testing.MockClock, checks: list[str], mcp_registry: Registry
) -> None:
    server = probe_server(limits=ServerLimits(max_calls=1))
    dispatcher = server.dispatcher
    async with serving(mcp_registry, server) as client:
        running = client.start(
            "POST", modern_headers("tools/call", "count"), modern_call(1, "count")
        )
        await trio.testing.wait_all_tasks_blocked()
        assert dispatcher.calls_in_flight == 1
        over = await client.post(
            modern_headers("tools/call", "echo"), modern_call(2, "echo", {"text": "hi"})
        )
        assert over.status == 429
        assert over.json()["error"]["data"] == {"limit": "server", "max": 1}
        assert dispatcher.calls_in_flight == 1
        running.disconnect()
    assert checks == ["tools/call", "tools/call"]
    assert dispatcher.calls_in_flight == 0


class _Counters:
    """Shared per-tenant counters that refuse every call, or never answer."""

    shared = True

    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.asked = 0

    async def acquire(self, name: str, cap: int) -> bool:
        self.asked += 1
        if self.hang:
            await trio.sleep_forever()
        return False

    async def release(self, name: str) -> None:  # pragma: no cover - never taken
        raise AssertionError("a slot that was refused was released")


class _Backend:
    def __init__(self, counters: _Counters) -> None:
        self.counters = counters


def _responder(server: McpServer, counters: _Counters) -> Responder:
    return Responder(
        server,
        _Backend(counters),  # type: ignore[arg-type]
        json_response=False,
        disconnect_grace_period=None,
        max_request_time=None,
        keepalive_interval=None,
        legacy_disconnect_cancels=True,
        write_timeout=None,
        max_buffered_bytes=1 << 20,
    )


async def _never_called() -> MutableMapping[str, Any]:  # pragma: no cover
    raise AssertionError("the call ran")


@pytest.mark.parametrize("hang", [False, True], ids=["refused", "cancelled-while-asking"])
async def test_a_call_admitted_here_but_not_across_workers_gives_its_slots_back(
    autojump_clock: trio.testing.MockClock, hang: bool, mcp_registry: Registry
) -> None:
    server = probe_server(limits=ServerLimits(max_calls_per_tenant=5))
    dispatcher = server.dispatcher
    counters = _Counters(hang=hang)
    responder = _responder(server, counters)
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    caller = Caller("ip:192.0.2.1", mcp_registry, tenant="ip:192.0.2.1")
    call = dispatcher.prepare(modern_call(1, "echo", {"text": "hi"}), caller)
    assert isinstance(call, RequestCall)
    routed = Routed(call, caller, [], "modern")
    with trio.move_on_after(1):
        await responder.answer(routed, _never_called, send)
    assert counters.asked == 1
    assert dispatcher.calls_in_flight == 0 and dispatcher.calls.by_tenant == {}
    if hang:
        assert sent == []
    else:
        assert sent[0]["status"] == 429
