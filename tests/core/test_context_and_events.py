"""Context-variable API, event delivery, and the pytest helpers we ship."""

from __future__ import annotations

import logging

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing
from trio.testing import MockClock

from trio_mcp_cancel import (
    CleanupEvent,
    Registry,
    RegistryConfig,
    RequestCancelled,
    RequestCancelledEvent,
    cancelled,
    checkpoint_cancelled,
    open_registry,
    tracked,
)
from trio_mcp_cancel._core.context import reason
from trio_mcp_cancel.lowlevel import (
    CancelOutcome,
    TrackedRequest,
    current_registry,
    current_request,
    track,
    untrack,
)
from trio_mcp_cancel.testing import EventRecorder, advance_past_grace_period, assert_no_leaks


@attrs.frozen
class ToolContext:
    request_id: int | str
    namespace: str


async def test_tracked_with_a_request_object_uses_the_current_registry(
    mcp_registry: Registry,
) -> None:
    assert current_registry() is mcp_registry
    async with tracked(ToolContext(3, "session:x")) as request:
        assert mcp_registry.requests() == [request]
        assert mcp_registry.in_flight(3, "session:x")
    async with tracked(4) as bare:
        assert bare.namespace == "global"
    assert_no_leaks(mcp_registry)


async def test_tracked_prefers_an_explicit_registry() -> None:
    async with open_registry() as outer, open_registry() as inner:
        async with tracked(ToolContext(1, "s"), registry=outer):
            assert outer.in_flight(1, "s") and not inner.in_flight(1, "s")


async def test_without_a_registry_the_error_says_what_to_do() -> None:
    with pytest.raises(RuntimeError, match="open_registry"):
        tracked(1)
    with pytest.raises(RuntimeError, match="not inside a tracked"):
        cancelled()
    with pytest.raises(RuntimeError, match="not inside a tracked"):
        reason()
    with pytest.raises(RuntimeError, match="not inside a tracked"):
        await checkpoint_cancelled()


@pytest.mark.mcp_registry(grace_period=None)
async def test_child_tasks_see_the_request_that_spawned_them(mcp_registry: Registry) -> None:
    seen: list[bool] = []

    async def helper() -> None:
        await trio.lowlevel.checkpoint()
        seen.append(cancelled())

    async with tracked(1, "s", registry=mcp_registry):
        mcp_registry.notify_cancelled("s", 1, "stop")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(helper)
    assert seen == [True]


async def test_nested_tracked_blocks_restore_the_outer_request(mcp_registry: Registry) -> None:
    async with tracked(1, "s", registry=mcp_registry) as outer:
        async with tracked(2, "s", registry=mcp_registry) as inner:
            assert current_request() is inner
        assert current_request() is outer


@pytest.mark.mcp_registry(grace_period=2)
async def test_hard_cancel_emits_an_event_and_raises_request_cancelled(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    events = EventRecorder.attach(mcp_registry)
    with pytest.raises(RequestCancelled) as info:
        async with tracked("job", "s", registry=mcp_registry):
            mcp_registry.notify_cancelled("s", "job", "slow")
            await trio.sleep_forever()
    assert info.value.reason == "slow"
    assert events.names() == ["request.cancelled", "request.hard_cancelled", "request.stopped"]
    first = events.of_type(RequestCancelledEvent)[0]
    assert (first.request_id, first.namespace, first.reason, first.kind) == (
        "job",
        "s",
        "slow",
        "client",
    )


def cancel_running(
    registry: Registry, request_id: int, reason: str | None, namespace: str = "s"
) -> TrackedRequest:
    """A request in flight (low-level ``track``, no block), cancelled the public way."""
    request = track(registry, request_id, namespace)
    assert registry.notify_cancelled(namespace, request_id, reason) is CancelOutcome.CANCELLED
    return request


async def test_events_reach_a_memory_channel_and_full_channels_drop(mcp_registry: Registry) -> None:
    receive = mcp_registry.events.open_channel(max_buffer_size=2)
    for i in range(4):
        cancel_running(mcp_registry, i, f"r{i}")
    got = [receive.receive_nowait(), receive.receive_nowait()]
    assert [e.request_id for e in got] == [0, 1]  # type: ignore[union-attr]
    assert mcp_registry.events.dropped == 2
    await receive.aclose()
    cancel_running(mcp_registry, 9, None)  # the hub forgets the closed channel
    assert mcp_registry.events._channels == []


async def test_a_failing_subscriber_is_detached_and_others_still_get_events(
    caplog: pytest.LogCaptureFixture,
    mcp_registry: Registry,
) -> None:
    calls: list[str] = []

    def broken(event: object) -> None:
        calls.append("broken")
        raise ValueError("subscriber bug")

    good = EventRecorder.attach(mcp_registry)
    mcp_registry.events.subscribe(broken)
    with caplog.at_level(logging.ERROR, logger="trio_mcp_cancel"):
        cancel_running(mcp_registry, 1, None)
        cancel_running(mcp_registry, 2, None)
    assert calls == ["broken"]
    assert len(good.events) == 2
    assert "detaching it" in caplog.text


async def test_unsubscribe(mcp_registry: Registry) -> None:
    recorder = EventRecorder()
    unsubscribe = mcp_registry.events.subscribe(recorder)
    cancel_running(mcp_registry, 1, None)
    unsubscribe()
    unsubscribe()
    cancel_running(mcp_registry, 2, None)
    assert len(recorder.events) == 1


async def test_events_are_logged(caplog: pytest.LogCaptureFixture, mcp_registry: Registry) -> None:
    with caplog.at_level(logging.DEBUG, logger="trio_mcp_cancel"):
        async with tracked(1, "session:a", registry=mcp_registry):
            mcp_registry.notify_cancelled("session:a", 1, "evil\nlog line")
        mcp_registry.cleanup()
    messages = [r.getMessage() for r in caplog.records]
    assert any("request.cancelled" in m and "'evil log line'" in m for m in messages)
    assert any(m.startswith("cancellation.cleanup") for m in messages)
    assert all("\n" not in m for m in messages)


@pytest.mark.mcp_registry(grace_period=7)
async def test_advance_past_grace_period_with_autojump(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    start = trio.current_time()
    await advance_past_grace_period(mcp_registry)
    assert 7 < trio.current_time() - start < 7.01


@pytest.mark.mcp_registry(grace_period=3)
async def test_advance_past_grace_period_with_a_hand_driven_clock(
    mock_clock: MockClock, mcp_registry: Registry
) -> None:
    async with trio.open_nursery() as nursery:
        outcome: list[str] = []

        async def tool() -> None:
            try:
                async with tracked(1, "s", registry=mcp_registry):
                    await trio.sleep_forever()
            except RequestCancelled:
                outcome.append("aborted")

        nursery.start_soon(tool)
        await trio.testing.wait_all_tasks_blocked()
        mcp_registry.notify_cancelled("s", 1, None)
        await advance_past_grace_period(mcp_registry, clock=mock_clock)
        assert outcome == ["aborted"]


@pytest.mark.mcp_registry(grace_period=None)
async def test_advance_past_grace_period_refuses_a_registry_that_never_hard_cancels(
    mcp_registry: Registry,
) -> None:
    with pytest.raises(ValueError, match="never hard-cancels"):
        await advance_past_grace_period(mcp_registry)


async def test_assert_no_leaks_reports_what_leaked(mcp_registry: Registry) -> None:
    # An early cancel kept for a session's request that never started.
    assert mcp_registry.notify_cancelled("session:s", 1, None) is CancelOutcome.PENDING
    with pytest.raises(AssertionError, match="1 cancellation rows"):
        assert_no_leaks(mcp_registry)
    request = track(mcp_registry, 2, "s")
    with pytest.raises(AssertionError, match="1 in-flight"):
        assert_no_leaks(mcp_registry)
    untrack(mcp_registry, request)
    mcp_registry.clear(1, "session:s")
    assert_no_leaks(mcp_registry)


class TestAnOverriddenConfig:
    """``mcp_registry_config`` overridden as a project's conftest.py would (here for this
    class only: the module's other tests use the suite's marker-reading override)."""

    @pytest.fixture
    def mcp_registry_config(self) -> RegistryConfig:
        return RegistryConfig(grace_period=1, max_rows_per_namespace=2)

    async def test_registry_fixture_uses_the_overridable_config(
        self, mcp_registry: Registry, mcp_events: EventRecorder
    ) -> None:
        assert mcp_registry.running and mcp_registry.config.max_rows_per_namespace == 2
        mcp_registry.cleanup()
        assert mcp_events.of_type(CleanupEvent) == [CleanupEvent(0, 0)]


@pytest.mark.mcp_registry(max_rows_per_namespace=1)
async def test_warnings_a_client_can_trigger_are_rate_limited_in_the_log(
    caplog: pytest.LogCaptureFixture,
    mcp_registry: Registry,
) -> None:
    recorder = EventRecorder.attach(mcp_registry)
    flood = "session:flood"  # where a client's cancels of unknown ids are kept (early)
    cancel_running(mcp_registry, 0, None, flood)
    with caplog.at_level(logging.WARNING, logger="trio_mcp_cancel"):
        for i in range(1, 1001):
            outcome = mcp_registry.notify_cancelled(flood, i, None)
            assert outcome is CancelOutcome.LIMIT_REACHED
    # Every refusal reaches subscribers; the log gets a burst, not a thousand lines.
    assert len(recorder.names()) == 1 + 1000
    lines = [r for r in caplog.records if "limit_reached" in r.getMessage()]
    assert 1 <= len(lines) <= 20


@pytest.mark.mcp_registry(max_rows_per_namespace=None, max_rows=400)
async def test_eviction_log_line_is_bounded(
    caplog: pytest.LogCaptureFixture, mcp_registry: Registry
) -> None:
    with caplog.at_level(logging.WARNING, logger="trio_mcp_cancel"):
        for i in range(401):
            mcp_registry.notify_cancelled(f"session:{i:04d}-" + "x" * 50, 1, None)
    (line,) = [r.getMessage() for r in caplog.records if "evicted" in r.getMessage()]
    assert "20 rows from 20 namespaces" in line and len(line) < 600
