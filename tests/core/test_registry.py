"""The registry: tracking, the polled flag, the grace period, bounds, races."""

from __future__ import annotations

import math
from functools import partial

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from trio_mcp_cancel import (
    Registry,
    RegistryClosed,
    RegistryConfig,
    RequestCancelled,
    RequestCancelledEvent,
    cancelled,
    checkpoint_cancelled,
    tracked,
)
from trio_mcp_cancel._core.context import reason
from trio_mcp_cancel.lowlevel import (
    CancelOutcome,
    InvalidRequestId,
    TrackedRequest,
    current_request,
    track,
    untrack,
)
from trio_mcp_cancel.testing import EventRecorder, advance_past_grace_period, assert_no_leaks


async def park(
    reg: Registry,
    request_id: object,
    namespace: str,
    *,
    task_status: trio.TaskStatus[TrackedRequest] = trio.TASK_STATUS_IGNORED,
    outcome: list[object] | None = None,
) -> None:
    """A tool that never finishes by itself: it waits to be hard-cancelled."""
    try:
        async with tracked(request_id, namespace, registry=reg) as request:  # type: ignore[arg-type]
            task_status.started(request)
            await trio.sleep_forever()
    except RequestCancelled as exc:
        if outcome is not None:
            outcome.append(exc)
        return
    if outcome is not None:
        outcome.append("finished")


async def parked(
    nursery: trio.Nursery, reg: Registry, request_id: object, namespace: str
) -> tuple[TrackedRequest, list[object]]:
    """Start :func:`park` in *nursery*: its tracked request, and the list its end lands in."""
    outcome: list[object] = []
    request = await nursery.start(partial(park, reg, request_id, namespace, outcome=outcome))
    return request, outcome


async def test_tracked_tracks_and_untracks(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    assert not mcp_registry.in_flight(1, "s")
    async with tracked(1, "s", registry=mcp_registry) as request:
        assert mcp_registry.in_flight(1, "s")
        assert current_request() is request
        assert not cancelled() and reason() is None
    assert not mcp_registry.in_flight(1, "s")
    assert current_request(None) is None
    assert_no_leaks(mcp_registry)


async def test_untracked_when_the_body_raises(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    with pytest.raises(KeyError):
        async with tracked("x", "s", registry=mcp_registry):
            raise KeyError("boom")
    assert_no_leaks(mcp_registry)


async def test_outer_cancellation_propagates_as_cancelled_and_untracks(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    with trio.move_on_after(1) as outer:
        async with tracked(1, "s", registry=mcp_registry):
            mcp_registry.notify_cancelled("s", 1, "client gave up")
            await trio.sleep_forever()
    # The outer deadline (1 s) came before the grace period (5 s): the
    # outer namespace caught its own Cancelled, nothing turned it into
    # RequestCancelled, and the request is gone.
    assert outer.cancelled_caught
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=0)
async def test_outer_cancellation_wins_even_when_both_scopes_are_cancelled(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    with trio.CancelScope() as outer:
        async with tracked(1, "s", registry=mcp_registry):
            outer.cancel()
            mcp_registry.notify_cancelled("s", 1, None)
            await trio.sleep_forever()
    assert outer.cancelled_caught
    assert_no_leaks(mcp_registry)


async def test_notify_ignores_requests_not_in_flight(
    autojump_clock: MockClock, mcp_registry: Registry, mcp_events: EventRecorder
) -> None:
    assert mcp_registry.notify_cancelled("s", 1, "nope") is CancelOutcome.NOT_IN_FLIGHT
    async with tracked(1, "s", registry=mcp_registry):
        pass
    assert mcp_registry.notify_cancelled("s", 1, "too late") is CancelOutcome.NOT_IN_FLIGHT
    assert mcp_registry.row_count == 0 and mcp_events.events == []


async def test_notify_rejects_invalid_ids_without_raising(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    for bad in (None, True, 1.5, [1], "x" * 300, {"a": 1}):
        assert mcp_registry.notify_cancelled("s", bad, "r") is CancelOutcome.INVALID_REQUEST_ID
    assert mcp_registry.row_count == 0


@pytest.mark.mcp_registry(grace_period=5)
async def test_flag_first_then_hard_cancel_after_grace(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with trio.open_nursery() as nursery:
        request, outcome = await parked(nursery, mcp_registry, 1, "s")
        start = trio.current_time()
        assert mcp_registry.notify_cancelled("s", 1, "user pressed stop") is CancelOutcome.CANCELLED
        assert request.cancelled and request.reason == "user pressed stop"
        assert request.cancellation.kind == "client"
        assert (
            mcp_registry.client_cancelled(1, "s")
            and mcp_registry.client_reason(1, "s") == "user pressed stop"
        )
        await trio.sleep(4.9)
        assert outcome == [] and mcp_registry.in_flight(1, "s")
        await trio.sleep(0.2)
        assert len(outcome) == 1
        exc = outcome[0]
        assert isinstance(exc, RequestCancelled)
        assert exc.reason == "user pressed stop" and exc.kind == "client"
        assert request.cancel_scope.deadline == pytest.approx(start + 5)
        assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=0)
async def test_grace_zero_cancels_at_once(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with trio.open_nursery() as nursery:
        _, outcome = await parked(nursery, mcp_registry, 1, "s")
        start = trio.current_time()
        mcp_registry.notify_cancelled("s", 1, None)
        await trio.testing.wait_all_tasks_blocked()
        assert len(outcome) == 1 and trio.current_time() == start


@pytest.mark.mcp_registry(grace_period=None)
async def test_grace_none_never_hard_cancels(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with tracked(1, "s", registry=mcp_registry) as request:
        mcp_registry.notify_cancelled("s", 1, "please stop")
        await trio.sleep(10_000)  # ignores the flag, and nobody forces it
        assert request.cancelled
    assert request.cancel_scope.deadline == math.inf
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=30)
async def test_checkpoint_cancelled_stops_a_loop_before_the_grace_period(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    async with trio.open_nursery() as nursery:
        steps: list[int] = []
        stopped: list[RequestCancelled] = []

        start = trio.current_time()

        async def tool() -> None:
            async with tracked(7, "s", registry=mcp_registry):
                try:
                    for i in range(1000):
                        await checkpoint_cancelled()
                        steps.append(i)
                        await trio.sleep(1)
                except RequestCancelled as exc:
                    stopped.append(exc)
                    assert trio.current_time() - start < 30

        nursery.start_soon(tool)
        await trio.sleep(3.5)
        mcp_registry.notify_cancelled("s", 7, "enough")
        await trio.sleep(1)
        assert steps == [0, 1, 2, 3]
        assert [e.reason for e in stopped] == ["enough"]
        assert str(stopped[0]) == "enough"
        assert_no_leaks(mcp_registry)


async def test_checkpoint_cancelled_is_a_checkpoint(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with tracked(1, "s", registry=mcp_registry):
        with trio.CancelScope() as namespace:
            namespace.cancel()
            await checkpoint_cancelled()  # raises Cancelled, caught by namespace
            pytest.fail("checkpoint_cancelled did not checkpoint")
        assert namespace.cancelled_caught


@pytest.mark.mcp_registry(grace_period=5)
async def test_tool_that_finishes_despite_the_flag_returns_normally(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    async with tracked(1, "s", registry=mcp_registry) as request:
        mcp_registry.notify_cancelled("s", 1, "late")
        await trio.sleep(1)
        result = "done"
    assert result == "done" and request.cancelled
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=0)
async def test_same_id_in_two_scopes_is_two_requests(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with trio.open_nursery() as nursery:
        a, a_out = await parked(nursery, mcp_registry, 1, "session:a")
        b, b_out = await parked(nursery, mcp_registry, 1, "session:b")
        assert mcp_registry.notify_cancelled("session:a", 1, "a only") is CancelOutcome.CANCELLED
        await trio.testing.wait_all_tasks_blocked()
        assert a.cancelled and not b.cancelled
        assert len(a_out) == 1 and b_out == []
        assert not mcp_registry.client_cancelled(1, "session:b")
        b.cancel_scope.cancel()


@pytest.mark.mcp_registry(grace_period=0)
async def test_same_id_twice_in_one_scope(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with trio.open_nursery() as nursery:
        first_done = trio.Event()

        async def quick(*, task_status: trio.TaskStatus[TrackedRequest]) -> None:
            async with tracked(1, "s", registry=mcp_registry) as request:
                task_status.started(request)
                await first_done.wait()

        first = await nursery.start(quick)
        second, outcome = await parked(nursery, mcp_registry, 1, "s")
        assert first is not second and mcp_registry.requests() == [first, second]
        first_done.set()
        await trio.testing.wait_all_tasks_blocked()
        # One finishing leaves the other in flight and cancellable.
        assert mcp_registry.in_flight(1, "s")
        assert mcp_registry.notify_cancelled("s", 1, "second one") is CancelOutcome.CANCELLED
        await trio.testing.wait_all_tasks_blocked()
        assert second.reason == "second one" and len(outcome) == 1
        assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=0)
async def test_a_cancel_hits_every_request_sharing_the_key(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with trio.open_nursery() as nursery:
        outcome: list[object] = []
        for _ in range(3):
            await nursery.start(partial(park, mcp_registry, "dup", "s", outcome=outcome))
        mcp_registry.notify_cancelled("s", "dup", None)
        await trio.testing.wait_all_tasks_blocked()
        assert len(outcome) == 3
        assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=None)
async def test_row_survives_until_the_last_duplicate_leaves(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with tracked(1, "s", registry=mcp_registry) as outer_request:
        async with tracked(1, "s", registry=mcp_registry):
            mcp_registry.notify_cancelled("s", 1, "both")
        assert mcp_registry.row_count == 1 and mcp_registry.client_reason(1, "s") == "both"
        assert outer_request.cancelled
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=0)
async def test_cancel_racing_completion_is_ignored_and_leaves_nothing(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with trio.open_nursery() as nursery:
        results: list[object] = []

        async def tool() -> None:
            try:
                async with tracked(1, "s", registry=mcp_registry):
                    await trio.sleep(1)
            except RequestCancelled:
                results.append("aborted")
            else:
                results.append("finished")

        async def canceller() -> None:
            await trio.sleep(1)  # wakes in the same tick as the tool
            results.append(mcp_registry.notify_cancelled("s", 1, "race"))

        nursery.start_soon(tool)
        nursery.start_soon(canceller)
    # Whichever ran first, the registry is empty and the outcome is consistent:
    # a cancel that found the request in flight aborted it (or lost to its
    # completion); one that came second was ignored.
    assert results in (
        ["finished", CancelOutcome.NOT_IN_FLIGHT],
        [CancelOutcome.CANCELLED, "finished"],
        [CancelOutcome.CANCELLED, "aborted"],
    )
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=0)
async def test_cancel_after_the_body_returned_but_before_exit_does_not_leak(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    tracking = tracked(1, "s", registry=mcp_registry)
    await tracking.__aenter__()
    mcp_registry.notify_cancelled("s", 1, "between")  # cancels the namespace we are leaving
    # The body finished without a checkpoint, so nothing was interrupted.
    assert await tracking.__aexit__(None, None, None) is False
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=0)
async def test_server_cancel_is_keyed_to_the_private_token(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with trio.open_nursery() as nursery:
        a, mine = await parked(nursery, mcp_registry, 1, "ip:192.0.2.1")
        b, theirs = await parked(nursery, mcp_registry, 1, "ip:192.0.2.1")
        assert a.token != b.token
        assert mcp_registry.cancel_request(a, "stream lifetime", kind="server")
        await trio.testing.wait_all_tasks_blocked()
        assert a.cancelled and not b.cancelled
        assert not mcp_registry.client_cancelled(1, "ip:192.0.2.1")  # no client row was written
        assert mcp_registry.row_count == 0
        exc = mine[0]
        assert isinstance(exc, RequestCancelled) and exc.kind == "server"
        assert mcp_registry.cancel_request(a, "again") is False  # no longer in flight
        assert mcp_registry.cancel_request(b.token, "by token", kind="disconnect")
        await trio.testing.wait_all_tasks_blocked()
        assert isinstance(theirs[0], RequestCancelled) and theirs[0].kind == "disconnect"
        assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=100)
async def test_server_cancel_with_its_own_grace(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with trio.open_nursery() as nursery:
        request, outcome = await parked(nursery, mcp_registry, 1, "s")
        mcp_registry.cancel_request(request, "client went away", kind="disconnect", grace_period=2)
        assert request.cancelled
        await trio.sleep(1.9)
        assert outcome == []
        await trio.sleep(0.2)
        assert len(outcome) == 1


@pytest.mark.mcp_registry(grace_period=None)
async def test_cancelled_counts_client_and_server_cancellations(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with tracked(1, "s", registry=mcp_registry):
        assert not cancelled()
        mcp_registry.cancel_request(current_request(), "server says")
        assert cancelled() and reason() == "server says"
    async with tracked(2, "s", registry=mcp_registry):
        mcp_registry.notify_cancelled("s", 2, "client says")
        assert cancelled() and reason() == "client says"


@pytest.mark.mcp_registry(grace_period=50)
async def test_first_cancellation_wins_but_a_shorter_grace_applies(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    async with trio.open_nursery() as nursery:
        request, outcome = await parked(nursery, mcp_registry, 1, "s")
        mcp_registry.notify_cancelled("s", 1, "client first")
        mcp_registry.cancel_request(request, "disconnect second", kind="disconnect", grace_period=1)
        await trio.sleep(1.1)
        assert request.reason == "client first"
        assert len(outcome) == 1


@pytest.mark.mcp_registry(grace_period=3)
async def test_an_early_cancel_in_a_session_cancels_the_request_that_starts_in_time(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with trio.open_nursery() as nursery:
        outcome_of = mcp_registry.notify_cancelled("session:s", 5, "pre-emptive")
        assert outcome_of is CancelOutcome.PENDING
        assert mcp_registry.client_cancelled(5, "session:s") and mcp_registry.row_count == 1
        await trio.sleep(1)
        request, outcome = await parked(nursery, mcp_registry, 5, "session:s")
        assert request.cancelled and request.reason == "pre-emptive"
        # The grace period counts from the cancellation, not from the start.
        await trio.sleep(2.1)
        assert len(outcome) == 1
        assert_no_leaks(mcp_registry)  # the row went with the request


async def test_a_repeated_cancel_keeps_the_first_reason_and_a_bad_id_is_an_outcome(
    autojump_clock: MockClock, mcp_registry: Registry, mcp_events: EventRecorder
) -> None:
    async with tracked(1, "s", registry=mcp_registry):
        assert mcp_registry.notify_cancelled("s", 1, "first") is CancelOutcome.CANCELLED
        assert mcp_registry.notify_cancelled("s", 1, "second") is CancelOutcome.CANCELLED
        assert mcp_registry.client_reason(1, "s") == "first" and reason() == "first"
        assert mcp_events.names() == ["request.cancelled"]
        outcome = mcp_registry.notify_cancelled("s", 1.5, "x")
        assert outcome is CancelOutcome.INVALID_REQUEST_ID
        mcp_registry.clear(1, "s")
        mcp_registry.clear(1, "s")
        assert mcp_registry.row_count == 0 and cancelled()  # a flag is never taken back
    assert_no_leaks(mcp_registry)


async def test_a_cancel_of_an_unknown_or_finished_request_leaves_nothing_behind(
    autojump_clock: MockClock, mcp_registry: Registry, mcp_events: EventRecorder
) -> None:
    async with tracked(1, "ip:192.0.2.1", registry=mcp_registry):
        pass
    for namespace in ("ip:192.0.2.1", "global", "session:s"):
        outcome = mcp_registry.notify_cancelled(namespace, 1, "late", keep_early=False)
        assert outcome is CancelOutcome.NOT_IN_FLIGHT
    # A shared namespace keeps nothing on a client's word, even when asked to.
    assert mcp_registry.notify_cancelled("ip:192.0.2.1", 2, "early") is CancelOutcome.NOT_IN_FLIGHT
    assert mcp_events.names() == [] and mcp_registry.row_count == 0
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(max_reason_length=10)
async def test_reason_is_sanitised(autojump_clock: MockClock, mcp_registry: Registry) -> None:
    async with tracked(1, "s", registry=mcp_registry):
        mcp_registry.notify_cancelled("s", 1, "\x1b[31mred\nalert and much more")
        assert reason() == "[31mred al"


@pytest.mark.mcp_registry(max_rows_per_namespace=3, max_rows=None)
async def test_quota_is_the_only_rejection(
    autojump_clock: MockClock, mcp_registry: Registry, mcp_events: EventRecorder
) -> None:
    greedy, polite = "session:greedy", "session:polite"
    for i in range(3):
        assert mcp_registry.notify_cancelled(greedy, i, None) is CancelOutcome.PENDING
    assert mcp_registry.notify_cancelled(greedy, 99, None) is CancelOutcome.LIMIT_REACHED
    assert mcp_events.names()[-1] == "cancellation.limit_reached"
    assert mcp_registry.notify_cancelled(polite, 99, None) is CancelOutcome.PENDING
    async with tracked(100, greedy, registry=mcp_registry) as request:
        assert mcp_registry.notify_cancelled(greedy, 100, None) is CancelOutcome.LIMIT_REACHED
        assert not request.cancelled
    async with tracked(100, polite, registry=mcp_registry) as request:
        assert mcp_registry.notify_cancelled(polite, 100, None) is CancelOutcome.CANCELLED


@pytest.mark.mcp_registry(max_rows_per_namespace=256, max_rows=1000)
async def test_global_cap_never_rejects_and_evicts_the_flooder(
    autojump_clock: MockClock, mcp_registry: Registry, mcp_events: EventRecorder
) -> None:
    for namespace in range(4):
        for i in range(256):
            mcp_registry.notify_cancelled(f"session:flood{namespace}", i, None)
    assert mcp_registry.row_count == 1000 - 50 + 24  # one eviction happened
    # Under its own quota: always served.
    assert mcp_registry.notify_cancelled("session:victim", 1, "mine") is CancelOutcome.PENDING
    assert mcp_registry.client_cancelled(1, "session:victim")
    evictions = [e for e in mcp_events.events if e.name == "cancellation.evicted"]
    assert evictions and all("session:victim" not in e.namespaces for e in evictions)  # type: ignore[union-attr]
    assert mcp_registry.row_count <= 1000


@pytest.mark.mcp_registry(max_rows_per_namespace=None, max_rows=20, grace_period=None)
async def test_eviction_never_unflags_a_running_request(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with tracked(1, "me", registry=mcp_registry) as request:
        mcp_registry.notify_cancelled("me", 1, "stop")
        for i in range(100):
            mcp_registry.notify_cancelled("session:flooder", i, None)
        assert request.cancelled
        assert (
            mcp_registry.client_cancelled(1, "me") and mcp_registry.client_reason(1, "me") == "stop"
        )


@pytest.mark.mcp_registry(ttl=10, cleanup_interval=None, grace_period=None)
async def test_cleanup_expires_rows_by_ttl(
    autojump_clock: MockClock, mcp_registry: Registry, mcp_events: EventRecorder
) -> None:
    # Two long requests (low-level track: no block), cancelled 6s apart.
    first, second = track(mcp_registry, 1, "s"), track(mcp_registry, 2, "s")
    mcp_registry.notify_cancelled("s", 1, None)
    await trio.sleep(6)
    mcp_registry.notify_cancelled("s", 2, None)
    await trio.sleep(5)
    assert mcp_registry.cleanup() == 1
    assert [r.request_id for r in mcp_registry.rows()] == [2]
    assert mcp_registry.cleanup(ttl=0) == 1
    assert [(e.removed, e.in_flight_removed) for e in mcp_events.events[-2:]] == [(1, 0), (1, 0)]  # type: ignore[union-attr]
    assert first.cancelled and second.cancelled  # the flags stay
    untrack(mcp_registry, first)
    untrack(mcp_registry, second)


@pytest.mark.mcp_registry(cleanup_interval=None)
async def test_cleanup_removes_requests_of_dead_tasks(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async def sloppy() -> None:
        track(mcp_registry, "leaky", "s")  # low-level API, never untracked

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sloppy)
    assert mcp_registry.in_flight("leaky", "s")
    alive = track(mcp_registry, "alive", "s")
    events = EventRecorder.attach(mcp_registry)
    mcp_registry.cleanup()
    assert not mcp_registry.in_flight("leaky", "s")
    assert mcp_registry.in_flight("alive", "s")
    assert events.events[-1].in_flight_removed == 1  # type: ignore[union-attr]
    untrack(mcp_registry, alive)
    untrack(mcp_registry, alive)  # idempotent
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(ttl=5, cleanup_interval=30, grace_period=None)
async def test_janitor_runs_every_cleanup_interval(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    request = track(mcp_registry, 1, "s")
    mcp_registry.notify_cancelled("s", 1, None)
    events = EventRecorder.attach(mcp_registry)
    await trio.sleep(29)
    assert events.names() == [] and mcp_registry.row_count == 1
    await trio.sleep(2)
    assert events.names() == ["cancellation.cleanup"] and mcp_registry.row_count == 0
    await trio.sleep(30)
    assert events.names() == ["cancellation.cleanup"] * 2
    untrack(mcp_registry, request)


async def test_janitor_stops_with_the_registry(autojump_clock: MockClock) -> None:
    reg = Registry(cleanup_interval=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(reg.run)
        assert reg.running
        with pytest.raises(RuntimeError, match="already running"):
            await reg.run()
        nursery.cancel_scope.cancel()
    assert not reg.running
    with pytest.raises(RegistryClosed):
        track(reg, 1, "s")


async def test_track_needs_a_running_registry(autojump_clock: MockClock) -> None:
    reg = Registry()
    with pytest.raises(RegistryClosed):
        async with tracked(1, "s", registry=reg):
            pass


async def test_track_refuses_invalid_ids(autojump_clock: MockClock, mcp_registry: Registry) -> None:
    with pytest.raises(InvalidRequestId):
        async with tracked(None, "s", registry=mcp_registry):  # type: ignore[arg-type]
            pass
    assert_no_leaks(mcp_registry)


async def test_tracking_cannot_be_entered_twice(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    tracking = tracked(1, "s", registry=mcp_registry)
    async with tracking:
        with pytest.raises(RuntimeError, match="twice"):
            await tracking.__aenter__()


async def test_config_validation_and_overrides(autojump_clock: MockClock) -> None:
    with pytest.raises(ValueError, match="grace_period"):
        RegistryConfig(grace_period=-1)
    with pytest.raises(ValueError, match="max_rows"):
        RegistryConfig(max_rows=0)
    with pytest.raises(ValueError, match="grace_period"):
        RegistryConfig(grace_period=float("nan"))
    base = RegistryConfig(grace_period=1)
    assert Registry(base, ttl=7).config == RegistryConfig(grace_period=1, ttl=7)


@pytest.mark.slow
@pytest.mark.mcp_registry(grace_period=1)
async def test_ten_thousand_concurrent_requests_all_cancelled_leave_nothing(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    n, namespaces = 10_000, 100
    outcome: list[object] = []
    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(
                partial(
                    park,
                    mcp_registry,
                    i // namespaces,
                    f"session:{i % namespaces}",
                    outcome=outcome,
                )
            )
        await trio.testing.wait_all_tasks_blocked()
        assert mcp_registry.in_flight_count == n
        results = [
            mcp_registry.notify_cancelled(f"session:{i % namespaces}", i // namespaces, "bulk")
            for i in range(n)
        ]
        assert set(results) == {CancelOutcome.CANCELLED}
        assert mcp_registry.row_count == n
        await advance_past_grace_period(mcp_registry)
    assert len(outcome) == n
    assert all(isinstance(o, RequestCancelled) for o in outcome)
    assert_no_leaks(mcp_registry)


async def test_lookups_with_invalid_ids_match_nothing(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    async with tracked(1, "s", registry=mcp_registry) as request:
        mcp_registry.notify_cancelled("s", 1, "one")
        for bad in (True, 1.0, None, [1], {"a": 1}):
            assert not mcp_registry.in_flight(bad, "s")  # type: ignore[arg-type]
            assert not mcp_registry.client_cancelled(bad, "s")  # type: ignore[arg-type]
            assert mcp_registry.client_reason(bad, "s") is None  # type: ignore[arg-type]
            mcp_registry.clear(bad, "s")  # type: ignore[arg-type]
        assert mcp_registry.client_cancelled(1, "s") and mcp_registry.row_count == 1
        assert mcp_registry.cancel_request(True, "bool is not a token") is False  # type: ignore[arg-type]
        assert mcp_registry.cancel_request("1", "nor is a str") is False  # type: ignore[arg-type]
        assert request.reason == "one"
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(max_rows_per_namespace=1)
async def test_a_refused_cancel_does_no_work_on_its_reason(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    class Expensive:
        def __repr__(self) -> str:
            raise AssertionError("the reason was rendered")

    session = "session:s"
    assert mcp_registry.notify_cancelled(session, 1, "first") is CancelOutcome.PENDING
    # A repeat: the first reason wins, nothing rendered.
    assert mcp_registry.notify_cancelled(session, 1, Expensive()) is CancelOutcome.PENDING
    outcome = mcp_registry.notify_cancelled(session, 2, Expensive())
    assert outcome is CancelOutcome.LIMIT_REACHED
    assert mcp_registry.client_reason(1, session) == "first"


@pytest.mark.mcp_registry(grace_period=None)
async def test_many_requests_sharing_one_key_untrack_independently(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    requests = [track(mcp_registry, "same", "s") for _ in range(2000)]
    for request in requests[::2]:
        untrack(mcp_registry, request)
    assert mcp_registry.in_flight_count == 1000 and mcp_registry.in_flight("same", "s")
    mcp_registry.notify_cancelled("s", "same", "all of them")
    assert all(r.cancelled for r in requests[1::2])
    assert not any(r.cancelled for r in requests[::2])
    for request in requests[1::2]:
        untrack(mcp_registry, request)
    assert_no_leaks(mcp_registry)


# -- early cancels ----------------------------------------------------------


@pytest.mark.mcp_registry(grace_period=1.0, early_cancel_ttl=5.0)
async def test_an_early_cancel_in_a_session_is_kept_and_applied_when_the_request_starts(
    autojump_clock: MockClock,
    mcp_registry: Registry,
    mcp_events: EventRecorder,
) -> None:
    # The cancel's POST overtook its call's: nothing runs yet.
    assert mcp_registry.notify_cancelled("session:a", 7, "too slow") is CancelOutcome.PENDING
    assert mcp_events.events == []  # announced only if it cancels something
    await trio.sleep(0.5)  # within the grace, counted from the cancel
    outcome: list[object] = []
    async with tracked(7, "session:a", registry=mcp_registry) as request:
        assert request.cancelled and request.reason == "too slow"
        try:
            await checkpoint_cancelled()
        except RequestCancelled as exc:
            outcome.append(exc.reason)
    assert outcome == ["too slow"]
    [event] = mcp_events.of_type(RequestCancelledEvent)
    assert (event.request_id, event.namespace, event.kind) == (7, "session:a", "client")
    # Applied once: the row went with the request, a new call with the id is not cancelled.
    async with tracked(7, "session:a", registry=mcp_registry) as again:
        assert not again.cancelled
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(early_cancel_ttl=5.0)
async def test_an_early_cancel_expires_unused(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    assert mcp_registry.notify_cancelled("principal:bob", "x", None) is CancelOutcome.PENDING
    assert mcp_registry.row_count == 1
    await trio.sleep(5.0)
    async with tracked("x", "principal:bob", registry=mcp_registry) as request:
        assert not request.cancelled
    assert_no_leaks(mcp_registry)
    # Expiry without a request starting: the janitor's pass drops it.
    mcp_registry.notify_cancelled("principal:bob", "y", None)
    await trio.sleep(5.0)
    mcp_registry.cleanup()
    assert_no_leaks(mcp_registry)


@pytest.mark.parametrize(
    ("namespace", "mcp_registry_config"),
    [
        ("ip:192.0.2.1", RegistryConfig(early_cancel_ttl=5.0)),
        ("global", RegistryConfig(early_cancel_ttl=5.0)),
        ("session:a", RegistryConfig(early_cancel_ttl=None)),
    ],
)
async def test_early_cancels_are_kept_only_in_private_namespaces(
    namespace: str, mcp_registry: Registry
) -> None:
    # An address or the global namespace may be shared by strangers: nothing
    # is kept there on a client's word alone.
    assert mcp_registry.notify_cancelled(namespace, 1, None) is CancelOutcome.NOT_IN_FLIGHT
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(max_rows_per_namespace=3)
async def test_early_cancels_count_against_the_namespace_quota(mcp_registry: Registry) -> None:
    outcomes = [mcp_registry.notify_cancelled("session:a", i, None) for i in range(5)]
    assert outcomes == [CancelOutcome.PENDING] * 3 + [CancelOutcome.LIMIT_REACHED] * 2
    assert mcp_registry.notify_cancelled("session:b", 1, None) is CancelOutcome.PENDING


@pytest.mark.mcp_registry(grace_period=0)
async def test_a_key_its_first_request_left_still_reaches_every_later_duplicate(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    # One request per key is held without a dict of its own; duplicates get one.
    # The first leaving, and another arriving, must keep every one reachable.
    async with trio.open_nursery() as nursery:
        first_done = trio.Event()

        async def first(*, task_status: trio.TaskStatus[None]) -> None:
            async with tracked(1, "s", registry=mcp_registry):
                task_status.started()
                await first_done.wait()

        await nursery.start(first)
        second, second_outcome = await parked(nursery, mcp_registry, 1, "s")
        first_done.set()
        await trio.testing.wait_all_tasks_blocked()
        third, third_outcome = await parked(nursery, mcp_registry, 1, "s")
        assert mcp_registry.requests() == [second, third]
        assert mcp_registry.notify_cancelled("s", 1, "both") is CancelOutcome.CANCELLED
        await trio.testing.wait_all_tasks_blocked()
        assert second.reason == third.reason == "both"
        assert len(second_outcome) == len(third_outcome) == 1
    assert not mcp_registry.in_flight(1, "s")
    assert_no_leaks(mcp_registry)
