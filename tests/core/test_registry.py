"""The registry: tracking, the polled flag, the grace period, bounds, races."""

from __future__ import annotations

import math
from functools import partial

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from trio_mcp_cancel import (
    CancellationLimitReached,
    CancelOutcome,
    InvalidRequestId,
    Registry,
    RegistryClosed,
    RegistryConfig,
    RequestCancelled,
    RequestCancelledEvent,
    TrackedRequest,
    cancelled,
    checkpoint_cancelled,
    current_request,
    open_registry,
    reason,
)
from trio_mcp_cancel.testing import EventRecorder, advance_past_grace, assert_no_leaks


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
        async with reg.tracked(request_id, namespace) as request:  # type: ignore[arg-type]
            task_status.started(request)
            await trio.sleep_forever()
    except RequestCancelled as exc:
        if outcome is not None:
            outcome.append(exc)
        return
    if outcome is not None:
        outcome.append("finished")


async def test_tracked_tracks_and_untracks(autojump_clock: MockClock) -> None:
    async with open_registry() as reg:
        assert not reg.in_flight(1, "s")
        async with reg.tracked(1, "s") as request:
            assert reg.in_flight(1, "s")
            assert current_request() is request
            assert not cancelled() and reason() is None
        assert not reg.in_flight(1, "s")
        assert current_request(None) is None
        assert_no_leaks(reg)


async def test_untracked_when_the_body_raises(autojump_clock: MockClock) -> None:
    async with open_registry() as reg:
        with pytest.raises(KeyError):
            async with reg.tracked("x", "s"):
                raise KeyError("boom")
        assert_no_leaks(reg)


async def test_outer_cancellation_propagates_as_cancelled_and_untracks(
    autojump_clock: MockClock,
) -> None:
    async with open_registry() as reg:
        with trio.move_on_after(1) as outer:
            async with reg.tracked(1, "s"):
                reg.notify_cancelled("s", 1, "client gave up")
                await trio.sleep_forever()
        # The outer deadline (1 s) came before the grace period (5 s): the
        # outer namespace caught its own Cancelled, nothing turned it into
        # RequestCancelled, and the request is gone.
        assert outer.cancelled_caught
        assert_no_leaks(reg)


async def test_outer_cancellation_wins_even_when_both_scopes_are_cancelled(
    autojump_clock: MockClock,
) -> None:
    async with open_registry(grace_period=0) as reg:
        with trio.CancelScope() as outer:
            async with reg.tracked(1, "s"):
                outer.cancel()
                reg.notify_cancelled("s", 1, None)
                await trio.sleep_forever()
        assert outer.cancelled_caught
        assert_no_leaks(reg)


async def test_notify_ignores_requests_not_in_flight(autojump_clock: MockClock) -> None:
    async with open_registry() as reg:
        events = EventRecorder.attach(reg)
        assert reg.notify_cancelled("s", 1, "nope") is CancelOutcome.NOT_IN_FLIGHT
        async with reg.tracked(1, "s"):
            pass
        assert reg.notify_cancelled("s", 1, "too late") is CancelOutcome.NOT_IN_FLIGHT
        assert reg.row_count == 0 and events.events == []


async def test_notify_rejects_invalid_ids_without_raising(autojump_clock: MockClock) -> None:
    async with open_registry() as reg:
        for bad in (None, True, 1.5, [1], "x" * 300, {"a": 1}):
            assert reg.notify_cancelled("s", bad, "r") is CancelOutcome.INVALID_REQUEST_ID
        assert reg.row_count == 0


async def test_flag_first_then_hard_cancel_after_grace(autojump_clock: MockClock) -> None:
    async with open_registry(grace_period=5) as reg, trio.open_nursery() as nursery:
        outcome: list[object] = []
        request = await nursery.start(partial(park, reg, 1, "s", outcome=outcome))
        start = trio.current_time()
        assert reg.notify_cancelled("s", 1, "user pressed stop") is CancelOutcome.CANCELLED
        assert request.cancelled and request.reason == "user pressed stop"
        assert request.cancellation.kind == "client"
        assert reg.cancelled(1, "s") and reg.reason(1, "s") == "user pressed stop"
        await trio.sleep(4.9)
        assert outcome == [] and reg.in_flight(1, "s")
        await trio.sleep(0.2)
        assert len(outcome) == 1
        exc = outcome[0]
        assert isinstance(exc, RequestCancelled)
        assert exc.reason == "user pressed stop" and exc.kind == "client"
        assert request.cancel_scope.deadline == pytest.approx(start + 5)
        assert_no_leaks(reg)


async def test_grace_zero_cancels_at_once(autojump_clock: MockClock) -> None:
    async with open_registry(grace_period=0) as reg, trio.open_nursery() as nursery:
        outcome: list[object] = []
        await nursery.start(partial(park, reg, 1, "s", outcome=outcome))
        start = trio.current_time()
        reg.notify_cancelled("s", 1, None)
        await trio.testing.wait_all_tasks_blocked()
        assert len(outcome) == 1 and trio.current_time() == start


async def test_grace_none_never_hard_cancels(autojump_clock: MockClock) -> None:
    async with open_registry(grace_period=None) as reg:
        async with reg.tracked(1, "s") as request:
            reg.notify_cancelled("s", 1, "please stop")
            await trio.sleep(10_000)  # ignores the flag, and nobody forces it
            assert request.cancelled
        assert request.cancel_scope.deadline == math.inf
        assert_no_leaks(reg)


async def test_checkpoint_cancelled_stops_a_loop_before_the_grace_period(
    autojump_clock: MockClock,
) -> None:
    async with open_registry(grace_period=30) as reg, trio.open_nursery() as nursery:
        steps: list[int] = []
        stopped: list[RequestCancelled] = []

        start = trio.current_time()

        async def tool() -> None:
            async with reg.tracked(7, "s"):
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
        reg.notify_cancelled("s", 7, "enough")
        await trio.sleep(1)
        assert steps == [0, 1, 2, 3]
        assert [e.reason for e in stopped] == ["enough"]
        assert str(stopped[0]) == "enough"
        assert_no_leaks(reg)


async def test_checkpoint_cancelled_is_a_checkpoint(autojump_clock: MockClock) -> None:
    async with open_registry() as reg:
        async with reg.tracked(1, "s"):
            with trio.CancelScope() as namespace:
                namespace.cancel()
                await checkpoint_cancelled()  # raises Cancelled, caught by namespace
                pytest.fail("checkpoint_cancelled did not checkpoint")
            assert namespace.cancelled_caught


async def test_tool_that_finishes_despite_the_flag_returns_normally(
    autojump_clock: MockClock,
) -> None:
    async with open_registry(grace_period=5) as reg:
        async with reg.tracked(1, "s") as request:
            reg.notify_cancelled("s", 1, "late")
            await trio.sleep(1)
            result = "done"
        assert result == "done" and request.cancelled
        assert_no_leaks(reg)


async def test_same_id_in_two_scopes_is_two_requests(autojump_clock: MockClock) -> None:
    async with open_registry(grace_period=0) as reg, trio.open_nursery() as nursery:
        a_out: list[object] = []
        b_out: list[object] = []
        a = await nursery.start(partial(park, reg, 1, "session:a", outcome=a_out))
        b = await nursery.start(partial(park, reg, 1, "session:b", outcome=b_out))
        assert reg.notify_cancelled("session:a", 1, "a only") is CancelOutcome.CANCELLED
        await trio.testing.wait_all_tasks_blocked()
        assert a.cancelled and not b.cancelled
        assert len(a_out) == 1 and b_out == []
        assert not reg.cancelled(1, "session:b")
        b.cancel_scope.cancel()


async def test_same_id_twice_in_one_scope(autojump_clock: MockClock) -> None:
    async with open_registry(grace_period=0) as reg, trio.open_nursery() as nursery:
        first_done = trio.Event()

        async def quick(*, task_status: trio.TaskStatus[TrackedRequest]) -> None:
            async with reg.tracked(1, "s") as request:
                task_status.started(request)
                await first_done.wait()

        outcome: list[object] = []
        first = await nursery.start(quick)
        second = await nursery.start(partial(park, reg, 1, "s", outcome=outcome))
        assert first is not second and reg.requests() == [first, second]
        first_done.set()
        await trio.testing.wait_all_tasks_blocked()
        # One finishing leaves the other in flight and cancellable.
        assert reg.in_flight(1, "s")
        assert reg.notify_cancelled("s", 1, "second one") is CancelOutcome.CANCELLED
        await trio.testing.wait_all_tasks_blocked()
        assert second.reason == "second one" and len(outcome) == 1
        assert_no_leaks(reg)


async def test_a_cancel_hits_every_request_sharing_the_key(autojump_clock: MockClock) -> None:
    async with open_registry(grace_period=0) as reg, trio.open_nursery() as nursery:
        outcome: list[object] = []
        for _ in range(3):
            await nursery.start(partial(park, reg, "dup", "s", outcome=outcome))
        reg.notify_cancelled("s", "dup", None)
        await trio.testing.wait_all_tasks_blocked()
        assert len(outcome) == 3
        assert_no_leaks(reg)


async def test_row_survives_until_the_last_duplicate_leaves(autojump_clock: MockClock) -> None:
    async with open_registry(grace_period=None) as reg:
        async with reg.tracked(1, "s") as outer_request:
            async with reg.tracked(1, "s"):
                reg.notify_cancelled("s", 1, "both")
            assert reg.row_count == 1 and reg.reason(1, "s") == "both"
            assert outer_request.cancelled
        assert_no_leaks(reg)


async def test_cancel_racing_completion_is_ignored_and_leaves_nothing(
    autojump_clock: MockClock,
) -> None:
    async with open_registry(grace_period=0) as reg, trio.open_nursery() as nursery:
        results: list[object] = []

        async def tool() -> None:
            try:
                async with reg.tracked(1, "s"):
                    await trio.sleep(1)
            except RequestCancelled:
                results.append("aborted")
            else:
                results.append("finished")

        async def canceller() -> None:
            await trio.sleep(1)  # wakes in the same tick as the tool
            results.append(reg.notify_cancelled("s", 1, "race"))

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
    assert_no_leaks(reg)


async def test_cancel_after_the_body_returned_but_before_exit_does_not_leak(
    autojump_clock: MockClock,
) -> None:
    async with open_registry(grace_period=0) as reg:
        tracking = reg.tracked(1, "s")
        await tracking.__aenter__()
        reg.notify_cancelled("s", 1, "between")  # cancels the namespace we are leaving
        # The body finished without a checkpoint, so nothing was interrupted.
        assert await tracking.__aexit__(None, None, None) is False
        assert_no_leaks(reg)


async def test_server_cancel_is_keyed_to_the_private_token(autojump_clock: MockClock) -> None:
    async with open_registry(grace_period=0) as reg, trio.open_nursery() as nursery:
        mine: list[object] = []
        theirs: list[object] = []
        a = await nursery.start(partial(park, reg, 1, "ip:192.0.2.1", outcome=mine))
        b = await nursery.start(partial(park, reg, 1, "ip:192.0.2.1", outcome=theirs))
        assert a.token != b.token
        assert reg.cancel_request(a, "stream lifetime", kind="server")
        await trio.testing.wait_all_tasks_blocked()
        assert a.cancelled and not b.cancelled
        assert not reg.cancelled(1, "ip:192.0.2.1")  # no client row was written
        assert reg.row_count == 0
        exc = mine[0]
        assert isinstance(exc, RequestCancelled) and exc.kind == "server"
        assert reg.cancel_request(a, "again") is False  # no longer in flight
        assert reg.cancel_request(b.token, "by token", kind="disconnect")
        await trio.testing.wait_all_tasks_blocked()
        assert isinstance(theirs[0], RequestCancelled) and theirs[0].kind == "disconnect"
        assert_no_leaks(reg)


async def test_server_cancel_with_its_own_grace(autojump_clock: MockClock) -> None:
    async with open_registry(grace_period=100) as reg, trio.open_nursery() as nursery:
        outcome: list[object] = []
        request = await nursery.start(partial(park, reg, 1, "s", outcome=outcome))
        reg.cancel_request(request, "client went away", kind="disconnect", grace=2)
        assert request.cancelled
        await trio.sleep(1.9)
        assert outcome == []
        await trio.sleep(0.2)
        assert len(outcome) == 1


async def test_cancelled_counts_client_and_server_cancellations(autojump_clock: MockClock) -> None:
    async with open_registry(grace_period=None) as reg:
        async with reg.tracked(1, "s"):
            assert not cancelled()
            reg.cancel_request(current_request(), "server says")
            assert cancelled() and reason() == "server says"
        async with reg.tracked(2, "s"):
            reg.notify_cancelled("s", 2, "client says")
            assert cancelled() and reason() == "client says"


async def test_first_cancellation_wins_but_a_shorter_grace_applies(
    autojump_clock: MockClock,
) -> None:
    async with open_registry(grace_period=50) as reg, trio.open_nursery() as nursery:
        outcome: list[object] = []
        request = await nursery.start(partial(park, reg, 1, "s", outcome=outcome))
        reg.notify_cancelled("s", 1, "client first")
        reg.cancel_request(request, "disconnect second", kind="disconnect", grace=1)
        await trio.sleep(1.1)
        assert request.reason == "client first"
        assert len(outcome) == 1


async def test_direct_cancel_records_even_when_not_in_flight(autojump_clock: MockClock) -> None:
    async with open_registry(grace_period=3) as reg, trio.open_nursery() as nursery:
        reg.cancel(5, "pre-emptive", "s")
        assert reg.cancelled(5, "s") and reg.row_count == 1
        await trio.sleep(1)
        outcome: list[object] = []
        request = await nursery.start(partial(park, reg, 5, "s", outcome=outcome))
        assert request.cancelled and request.reason == "pre-emptive"
        # The grace period counts from the cancellation, not from the start.
        await trio.sleep(2.1)
        assert len(outcome) == 1
        assert_no_leaks(reg)  # the row went with the request


async def test_direct_cancel_is_idempotent_and_validates(autojump_clock: MockClock) -> None:
    async with open_registry() as reg:
        events = EventRecorder.attach(reg)
        reg.cancel(1, "first", "s")
        reg.cancel(1, "second", "s")
        assert reg.reason(1, "s") == "first"
        assert events.names() == ["request.cancelled"]
        with pytest.raises(InvalidRequestId):
            reg.cancel(1.5, "x", "s")  # type: ignore[arg-type]
        reg.clear(1, "s")
        reg.clear(1, "s")
        assert_no_leaks(reg)


async def test_reason_is_sanitised(autojump_clock: MockClock) -> None:
    async with open_registry(max_reason_length=10) as reg:
        async with reg.tracked(1, "s"):
            reg.notify_cancelled("s", 1, "\x1b[31mred\nalert and much more")
            assert reason() == "[31mred al"


async def test_quota_is_the_only_rejection(autojump_clock: MockClock) -> None:
    async with open_registry(max_rows_per_namespace=3, max_rows=None) as reg:
        events = EventRecorder.attach(reg)
        for i in range(3):
            reg.cancel(i, None, "greedy")
        with pytest.raises(CancellationLimitReached):
            reg.cancel(99, None, "greedy")
        assert events.names()[-1] == "cancellation.limit_reached"
        reg.cancel(99, None, "polite")
        async with reg.tracked(100, "greedy") as request:
            assert reg.notify_cancelled("greedy", 100, None) is CancelOutcome.LIMIT_REACHED
            assert not request.cancelled
        async with reg.tracked(100, "polite") as request:
            assert reg.notify_cancelled("polite", 100, None) is CancelOutcome.CANCELLED


async def test_global_cap_never_rejects_and_evicts_the_flooder(autojump_clock: MockClock) -> None:
    async with open_registry(max_rows_per_namespace=256, max_rows=1000) as reg:
        events = EventRecorder.attach(reg)
        for namespace in range(4):
            for i in range(256):
                reg.cancel(i, None, f"flood{namespace}")
        assert reg.row_count == 1000 - 50 + 24  # one eviction happened
        reg.cancel(1, "mine", "victim")  # under its own quota: always served
        assert reg.cancelled(1, "victim")
        evictions = [e for e in events.events if e.name == "cancellation.evicted"]
        assert evictions and all("victim" not in e.namespaces for e in evictions)  # type: ignore[union-attr]
        assert reg.row_count <= 1000


async def test_eviction_never_unflags_a_running_request(autojump_clock: MockClock) -> None:
    async with open_registry(max_rows_per_namespace=None, max_rows=20, grace_period=None) as reg:
        async with reg.tracked(1, "me") as request:
            reg.notify_cancelled("me", 1, "stop")
            for i in range(100):
                reg.cancel(i, None, "flooder")
            assert request.cancelled
            assert reg.cancelled(1, "me") and reg.reason(1, "me") == "stop"


async def test_cleanup_expires_rows_by_ttl(autojump_clock: MockClock) -> None:
    async with open_registry(ttl=10, cleanup_interval=None) as reg:
        events = EventRecorder.attach(reg)
        reg.cancel(1, None, "s")
        await trio.sleep(6)
        reg.cancel(2, None, "s")
        await trio.sleep(5)
        assert reg.cleanup() == 1
        assert [r.request_id for r in reg.rows()] == [2]
        assert reg.cleanup(ttl=0) == 1
        assert [(e.removed, e.in_flight_removed) for e in events.events[-2:]] == [(1, 0), (1, 0)]  # type: ignore[union-attr]


async def test_cleanup_removes_requests_of_dead_tasks(autojump_clock: MockClock) -> None:
    async with open_registry(cleanup_interval=None) as reg:

        async def sloppy() -> None:
            reg.track("leaky", "s")  # low-level API, never untracked

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sloppy)
        assert reg.in_flight("leaky", "s")
        alive = reg.track("alive", "s")
        events = EventRecorder.attach(reg)
        reg.cleanup()
        assert not reg.in_flight("leaky", "s")
        assert reg.in_flight("alive", "s")
        assert events.events[-1].in_flight_removed == 1  # type: ignore[union-attr]
        reg.untrack(alive)
        reg.untrack(alive)  # idempotent
        assert_no_leaks(reg)


async def test_janitor_runs_every_cleanup_interval(autojump_clock: MockClock) -> None:
    async with open_registry(ttl=5, cleanup_interval=30) as reg:
        reg.cancel(1, None, "s")
        events = EventRecorder.attach(reg)
        await trio.sleep(29)
        assert events.names() == [] and reg.row_count == 1
        await trio.sleep(2)
        assert events.names() == ["cancellation.cleanup"] and reg.row_count == 0
        await trio.sleep(30)
        assert events.names() == ["cancellation.cleanup"] * 2


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
        reg.track(1, "s")


async def test_track_needs_a_running_registry(autojump_clock: MockClock) -> None:
    reg = Registry()
    with pytest.raises(RegistryClosed):
        async with reg.tracked(1, "s"):
            pass


async def test_track_refuses_invalid_ids(autojump_clock: MockClock) -> None:
    async with open_registry() as reg:
        with pytest.raises(InvalidRequestId):
            async with reg.tracked(None, "s"):  # type: ignore[arg-type]
                pass
        assert_no_leaks(reg)


async def test_tracking_cannot_be_entered_twice(autojump_clock: MockClock) -> None:
    async with open_registry() as reg:
        tracking = reg.tracked(1, "s")
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


async def test_ten_thousand_concurrent_requests_all_cancelled_leave_nothing(
    autojump_clock: MockClock,
) -> None:
    n, namespaces = 10_000, 100
    async with open_registry(grace_period=1) as reg:
        outcome: list[object] = []
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(
                    partial(
                        park, reg, i // namespaces, f"session:{i % namespaces}", outcome=outcome
                    )
                )
            await trio.testing.wait_all_tasks_blocked()
            assert reg.in_flight_count == n
            results = [
                reg.notify_cancelled(f"session:{i % namespaces}", i // namespaces, "bulk")
                for i in range(n)
            ]
            assert set(results) == {CancelOutcome.CANCELLED}
            assert reg.row_count == n
            await advance_past_grace(reg)
        assert len(outcome) == n
        assert all(isinstance(o, RequestCancelled) for o in outcome)
        assert_no_leaks(reg)


async def test_lookups_with_invalid_ids_match_nothing(autojump_clock: MockClock) -> None:
    async with open_registry() as reg:
        reg.cancel(1, "one", "s")
        async with reg.tracked(1, "s") as request:
            for bad in (True, 1.0, None, [1], {"a": 1}):
                assert not reg.in_flight(bad, "s")  # type: ignore[arg-type]
                assert not reg.cancelled(bad, "s")  # type: ignore[arg-type]
                assert reg.reason(bad, "s") is None  # type: ignore[arg-type]
                reg.clear(bad, "s")  # type: ignore[arg-type]
            assert reg.cancelled(1, "s") and reg.row_count == 1
            assert reg.cancel_request(True, "bool is not a token") is False  # type: ignore[arg-type]
            assert reg.cancel_request("1", "nor is a str") is False  # type: ignore[arg-type]
            assert request.reason == "one"
        assert_no_leaks(reg)


async def test_a_refused_cancel_does_no_work_on_its_reason(autojump_clock: MockClock) -> None:
    class Expensive:
        def __repr__(self) -> str:
            raise AssertionError("the reason was rendered")

    async with open_registry(max_rows_per_namespace=1) as reg:
        reg.cancel(1, "first", "s")
        reg.cancel(1, Expensive(), "s")  # a repeat: first reason wins, nothing rendered
        with pytest.raises(CancellationLimitReached):
            reg.cancel(2, Expensive(), "s")
        assert reg.reason(1, "s") == "first"


async def test_many_requests_sharing_one_key_untrack_independently(
    autojump_clock: MockClock,
) -> None:
    async with open_registry(grace_period=None) as reg:
        requests = [reg.track("same", "s") for _ in range(2000)]
        for request in requests[::2]:
            reg.untrack(request)
        assert reg.in_flight_count == 1000 and reg.in_flight("same", "s")
        reg.notify_cancelled("s", "same", "all of them")
        assert all(r.cancelled for r in requests[1::2])
        assert not any(r.cancelled for r in requests[::2])
        for request in requests[1::2]:
            reg.untrack(request)
        assert_no_leaks(reg)


# -- early cancels ----------------------------------------------------------


async def test_an_early_cancel_in_a_session_is_kept_and_applied_when_the_request_starts(
    autojump_clock: MockClock,
) -> None:
    async with open_registry(grace_period=1.0, early_cancel_ttl=5.0) as reg:
        events = EventRecorder.attach(reg)
        # The cancel's POST overtook its call's: nothing runs yet.
        assert reg.notify_cancelled("session:a", 7, "too slow") is CancelOutcome.PENDING
        assert events.events == []  # announced only if it cancels something
        await trio.sleep(0.5)  # within the grace, counted from the cancel
        outcome: list[object] = []
        async with reg.tracked(7, "session:a") as request:
            assert request.cancelled and request.reason == "too slow"
            try:
                await checkpoint_cancelled()
            except RequestCancelled as exc:
                outcome.append(exc.reason)
        assert outcome == ["too slow"]
        [event] = events.of_type(RequestCancelledEvent)
        assert (event.request_id, event.namespace, event.kind) == (7, "session:a", "client")
        # Applied once: the row went with the request, a new call with the id is not cancelled.
        async with reg.tracked(7, "session:a") as again:
            assert not again.cancelled
        assert_no_leaks(reg)


async def test_an_early_cancel_expires_unused(autojump_clock: MockClock) -> None:
    async with open_registry(early_cancel_ttl=5.0) as reg:
        assert reg.notify_cancelled("principal:bob", "x", None) is CancelOutcome.PENDING
        assert reg.row_count == 1
        await trio.sleep(5.0)
        async with reg.tracked("x", "principal:bob") as request:
            assert not request.cancelled
        assert_no_leaks(reg)
        # Expiry without a request starting: the janitor's pass drops it.
        reg.notify_cancelled("principal:bob", "y", None)
        await trio.sleep(5.0)
        reg.cleanup()
        assert_no_leaks(reg)


@pytest.mark.parametrize(
    ("namespace", "ttl"),
    [("ip:192.0.2.1", 5.0), ("global", 5.0), ("session:a", None)],
)
async def test_early_cancels_are_kept_only_in_private_namespaces(
    namespace: str, ttl: float | None
) -> None:
    # An address or the global namespace may be shared by strangers: nothing
    # is kept there on a client's word alone.
    async with open_registry(early_cancel_ttl=ttl) as reg:
        assert reg.notify_cancelled(namespace, 1, None) is CancelOutcome.NOT_IN_FLIGHT
        assert_no_leaks(reg)


async def test_early_cancels_count_against_the_namespace_quota() -> None:
    async with open_registry(max_rows_per_namespace=3) as reg:
        outcomes = [reg.notify_cancelled("session:a", i, None) for i in range(5)]
        assert outcomes == [CancelOutcome.PENDING] * 3 + [CancelOutcome.LIMIT_REACHED] * 2
        assert reg.notify_cancelled("session:b", 1, None) is CancelOutcome.PENDING
