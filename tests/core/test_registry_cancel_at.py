"""``Registry.cancel_at``: a server cancel due later, with no task of its own, bounded in memory."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry, RequestCancelled, checkpoint_cancelled, tracked
from trio_mcp_cancel._core.events import RequestCancelledEvent


@pytest.mark.mcp_registry(grace_period=2)
async def test_a_request_is_flagged_at_its_time_and_hard_cancelled_a_grace_period_later(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    seen: list[tuple[str, float]] = []
    start = trio.current_time()
    with pytest.raises(RequestCancelled) as raised:
        async with tracked(1, registry=mcp_registry) as request:
            mcp_registry.cancel_at(request, start + 10, "time limit of 10 s reached")
            mcp_registry.cancel_at(request, start + 20, "later: ignored")
            request.on_cancelled(lambda: seen.append(("flag", trio.current_time() - start)))
            try:
                await trio.sleep(1000)  # ignores the flag
            except trio.Cancelled:
                seen.append(("hard", trio.current_time() - start))
                raise
    assert [what for what, _ in seen] == ["flag", "hard"]
    assert [at for _, at in seen] == [pytest.approx(10.0), pytest.approx(12.0)]
    assert raised.value.reason == "time limit of 10 s reached"
    assert raised.value.kind == "server"


async def test_an_earlier_time_replaces_a_later_one(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    start = trio.current_time()
    with pytest.raises(RequestCancelled):
        async with tracked(2, registry=mcp_registry) as request:
            mcp_registry.cancel_at(request, start + 20, "later")
            mcp_registry.cancel_at(request, start + 5, "sooner")
            while True:
                await trio.sleep(0.5)
                await checkpoint_cancelled()
    assert trio.current_time() - start == pytest.approx(5.0, abs=0.5)


async def test_finished_requests_leave_a_bounded_heap_and_fire_nothing(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    start = trio.current_time()
    for request_id in range(5000):  # hostile: a flood of short calls with a long limit
        async with tracked(request_id, registry=mcp_registry) as request:
            mcp_registry.cancel_at(request, start + 3600, "time limit of 3600 s reached")
    assert len(mcp_registry._due) == 0
    assert len(mcp_registry._due._heap) <= 64 + 1  # rebuilt at twice the live entries
    events: list[object] = []
    mcp_registry.events.subscribe(events.append)
    await trio.sleep(4000)
    assert [e for e in events if isinstance(e, RequestCancelledEvent)] == []


async def test_a_request_that_left_is_not_scheduled(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with tracked(3, registry=mcp_registry) as request:
        pass
    mcp_registry.cancel_at(request, trio.current_time() + 1, "too late")
    assert len(mcp_registry._due) == 0
