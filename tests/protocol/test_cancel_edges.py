"""The protocol layer decides about cancels and ids; transports only carry them.

* ``Dispatcher.notify`` says whether a ``notifications/cancelled`` may be
  meant for another worker (it names a valid request that does not run
  here): the HTTP transport forwards exactly those, and never asks the
  registry itself.
* A request id is validated once, when the message is classified: the
  registry tracks the classified request without checking its id again,
  while ``Registry.tracked`` still checks the ids its direct callers pass.
* Early cancels evicted by the global cap leave nothing behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing

import trio_mcp_cancel._core.registry as registry_module
import trio_mcp_cancel._wire.jsonrpc as jsonrpc_module
from trio_mcp_cancel import Registry, tracked
from trio_mcp_cancel._protocol.exchange import Caller
from trio_mcp_cancel._wire.jsonrpc import Notification
from trio_mcp_cancel.lowlevel import InvalidRequestId, track
from trio_mcp_cancel.testing import assert_no_leaks

from _support.cancellation_tools import probe_server


def cancel(request_id: object) -> Notification:
    return Notification("notifications/cancelled", {"requestId": request_id, "reason": "stop"})


@pytest.mark.mcp_registry(max_rows_per_namespace=1)
async def test_only_a_cancel_of_a_request_not_running_here_is_for_another_worker(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    dispatcher = probe_server().dispatcher
    caller = Caller("session:s", mcp_registry)
    async with tracked(1, "session:s", registry=mcp_registry) as request:
        assert dispatcher.notify(cancel(1), caller) is False  # it runs here
        assert request.cancelled
        assert dispatcher.notify(cancel(2), caller) is True  # kept early, and forwarded
        # The namespace is at its quota: refused here, so it may run elsewhere.
        assert dispatcher.notify(cancel(3), caller) is True
    async with tracked(4, "session:t", registry=mcp_registry) as request:
        mcp_registry.notify_cancelled("session:t", 5, "fills the quota")
        # Refused by the quota, but running here: nobody else has it.
        assert dispatcher.notify(cancel(4), Caller("session:t", mcp_registry)) is False
        assert not request.cancelled
    for bad in (None, 1.5, True, [1], "x" * 300):
        assert dispatcher.notify(cancel(bad), caller) is False
    assert dispatcher.notify(Notification("notifications/initialized", {}), caller) is False
    mcp_registry.clear(2, "session:s")
    mcp_registry.clear(5, "session:t")
    assert_no_leaks(mcp_registry)


@pytest.fixture
def id_checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Every request-id check made by classification and the registry."""
    made: list[object] = []
    valid, validate = jsonrpc_module.is_valid_request_id, registry_module.validate_request_id

    def counted_valid(request_id: object) -> Any:
        made.append(request_id)
        return valid(request_id)

    def counted_validate(request_id: object) -> Any:
        made.append(request_id)
        return validate(request_id)

    monkeypatch.setattr(jsonrpc_module, "is_valid_request_id", counted_valid)
    monkeypatch.setattr(registry_module, "validate_request_id", counted_validate)
    monkeypatch.setattr(registry_module, "is_valid_request_id", counted_valid)
    yield made


async def test_a_tool_calls_id_is_validated_once(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry, id_checks: list[object]
) -> None:
    dispatcher = probe_server().dispatcher
    message = {
        "jsonrpc": "2.0",
        "id": "call-7",
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "once"}},
    }
    reply = await dispatcher.handle(message, Caller("s", mcp_registry))
    assert reply is not None and reply["result"]["content"][0]["text"] == "once"
    assert id_checks == ["call-7"]


async def test_the_registry_still_checks_the_ids_its_direct_callers_pass(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    for bad in (True, 1.5, None, "x" * 300):
        with pytest.raises(InvalidRequestId):
            tracked(bad, "s", registry=mcp_registry)  # type: ignore[arg-type]
        with pytest.raises(InvalidRequestId):
            track(mcp_registry, bad, "s")  # type: ignore[arg-type]
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(max_rows=10, max_rows_per_namespace=None, early_cancel_ttl=3600)
async def test_early_cancels_evicted_by_the_cap_leave_nothing_behind(
    mcp_registry: Registry,
) -> None:
    for i in range(1000):
        mcp_registry.notify_cancelled("session:flood", i, "early")
    assert mcp_registry.row_count <= 10
    # What is kept for requests not started yet is bounded by the rows.
    assert len(mcp_registry._early) <= 10
    # An evicted early cancel no longer cancels its request.
    async with tracked(0, "session:flood", registry=mcp_registry) as request:
        assert not request.cancelled
    await trio.lowlevel.checkpoint()
