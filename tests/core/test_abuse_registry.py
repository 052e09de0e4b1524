"""Abuse of the registry: floods, chaos, and random operation sequences.

Three angles, none of them timed in real seconds (the mock clock carries the
grace periods):

* cancellation floods from many namespaces must not deny another tenant its
  own cancellations;
* a thousand concurrent requests, with duplicate ids, cancelled in every
  way the registry offers, must each end in a way consistent with what was
  done to it, and leave nothing behind;
* random operation sequences, hostile ids included, must raise only the
  documented errors and keep every bound.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, rule
from trio.testing import MockClock

from trio_mcp_cancel import (
    EvictionEvent,
    LimitReachedEvent,
    Registry,
    RegistryConfig,
    RequestCancelled,
    RequestId,
    checkpoint_cancelled,
    open_registry,
    tracked,
)
from trio_mcp_cancel._core.registry import USE_CONFIG
from trio_mcp_cancel._core.validation import is_valid_request_id
from trio_mcp_cancel.lowlevel import CancelOutcome, InvalidRequestId, TrackedRequest, track, untrack
from trio_mcp_cancel.testing import EventRecorder, assert_no_leaks

# ---------------------------------------------------------------------------
# Floods across namespaces: no cross-tenant denial
# ---------------------------------------------------------------------------

QUOTA = 16
CAP = 400
GRACE = 5.0


async def park(
    reg: Registry,
    request_id: RequestId,
    namespace: str,
    outcome: list[object],
    *,
    task_status: trio.TaskStatus[TrackedRequest] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A tool that never finishes by itself; records how it ended."""
    try:
        async with tracked(request_id, namespace, registry=reg) as request:
            task_status.started(request)
            await trio.sleep_forever()
    except RequestCancelled as exc:
        outcome.append(exc)
        return
    outcome.append("finished")  # pragma: no cover - sleep_forever never returns


def cancel_early(reg: Registry, request_id: RequestId, reason: str, namespace: str) -> bool:
    """A client's cancel of a request not started (yet): kept, unless its quota refuses it.

    The rows an attacker can make: cancels of requests that do not run are
    kept only in a session (or principal) namespace, for ``early_cancel_ttl``.
    """
    outcome = reg.notify_cancelled(namespace, request_id, reason)
    assert outcome in (CancelOutcome.PENDING, CancelOutcome.LIMIT_REACHED)
    return outcome is CancelOutcome.PENDING


def flood(reg: Registry, shape: str, round_: int, rng: random.Random) -> int:
    """Fill the table from attacker sessions; return how many inserts were refused.

    ``deep``: 50 namespaces each pushed past its quota (800 rows asked, cap 400).
    ``wide``: 600 namespaces of one row each, so every row is the same size and
    eviction goes purely by age.
    """
    refused = 0
    if shape == "deep":
        for s in range(50):
            namespace = f"session:flood:{round_}:{s}"
            for _ in range(QUOTA + 4):
                if not cancel_early(reg, rng.randrange(2**31), "flood", namespace):
                    refused += 1
    else:
        for s in range(600):
            cancel_early(reg, rng.randrange(2**31), "flood", f"session:flood:{round_}:{s}")
    assert reg.row_count <= CAP
    return refused


def refill(reg: Registry, namespace: str, round_: int) -> bool:
    """Cancel new ids in *namespace* until its quota refuses one; return whether it did.

    At the cap, a namespace that is the largest evicts its own rows as it
    inserts, so it may never get there: a flooder mostly churns itself.
    """
    for i in range(4 * QUOTA):
        if not cancel_early(reg, f"a-{round_}-{i}", "a", namespace):
            return True
        assert reg.namespace_row_count(namespace) <= QUOTA
    return False


@pytest.mark.mcp_registry(
    max_rows_per_namespace=QUOTA, max_rows=CAP, grace_period=GRACE, early_cancel_ttl=3600
)
@pytest.mark.parametrize("shape", ["deep", "wide"])
async def test_cancel_floods_deny_no_other_tenant(
    autojump_clock: MockClock, shape: str, mcp_registry: Registry
) -> None:
    rng = random.Random(f"flood-{shape}")
    async with (
        trio.open_nursery() as nursery,
    ):
        events = EventRecorder.attach(mcp_registry)
        # Tenant A fills its quota and is refused from then on.
        for i in range(QUOTA):
            assert cancel_early(mcp_registry, f"a-{i}", "a", "session:a")
        assert not cancel_early(mcp_registry, "a-extra", "a", "session:a")
        a_outcome: list[object] = []
        a_request = await nursery.start(park, mcp_registry, "a-live", "session:a", a_outcome)
        # A at its quota cannot even cancel its own request: the quota binds
        # the namespace that owns it.
        assert (
            mcp_registry.notify_cancelled("session:a", "a-live", "x") is CancelOutcome.LIMIT_REACHED
        )

        refused = 0
        for round_ in range(12):
            refused += flood(mcp_registry, shape, round_, rng)
            # B cancels ahead of time (no request in flight yet) ...
            assert cancel_early(mcp_registry, f"b-pre-{round_}", "early", "session:b")
            # ... and has a request in flight that it cancels mid-flood.
            outcome: list[object] = []
            request = await nursery.start(park, mcp_registry, f"b-{round_}", "session:b", outcome)
            refused += flood(mcp_registry, shape, round_ + 100, rng)
            # The cap evicts the largest namespaces first, A's among them: A
            # floods again, up to its quota if it can get there.
            if refill(mcp_registry, "session:a", round_):
                assert mcp_registry.namespace_row_count("session:a") == QUOTA
                assert (
                    mcp_registry.notify_cancelled("session:a", "a-live", "x")
                    is CancelOutcome.LIMIT_REACHED
                )
            assert (
                mcp_registry.notify_cancelled("session:b", f"b-{round_}", f"stop {round_}")
                is CancelOutcome.CANCELLED
            )
            assert request.cancelled and request.cancellation is not None
            assert request.cancellation.kind == "client"
            assert not a_request.cancelled
            # More flood: B's row may be evicted, its request's flag may not.
            refused += flood(mcp_registry, shape, round_ + 200, rng)
            assert mcp_registry.client_cancelled(f"b-{round_}", "session:b")
            assert mcp_registry.client_reason(f"b-{round_}", "session:b") == f"stop {round_}"
            assert mcp_registry.in_flight(f"b-{round_}", "session:b") and outcome == []
            # The grace period runs out: B's request is hard-cancelled.
            await trio.sleep(GRACE + 0.01)
            assert len(outcome) == 1
            exc = outcome[0]
            assert isinstance(exc, RequestCancelled)
            assert exc.kind == "client" and exc.reason == f"stop {round_}"
            assert not mcp_registry.in_flight(f"b-{round_}", "session:b")
            # B's early cancel was never refused; the largest namespaces pay for
            # the cap first, so in the deep flood it is even still there.
            if shape == "deep":
                assert mcp_registry.client_cancelled(f"b-pre-{round_}", "session:b")
            mcp_registry.clear(f"b-pre-{round_}", "session:b")
            assert mcp_registry.namespace_row_count("session:b") == 0
            assert mcp_registry.row_count <= CAP

        # The cap was hit, attackers were refused at their own quotas, and
        # nobody's quota was ever charged to B.
        assert events.of_type(EvictionEvent)
        assert shape == "wide" or refused > 0
        limited = {limit.namespace for limit in events.of_type(LimitReachedEvent)}
        assert "session:b" not in limited and "session:a" in limited
        assert not a_request.cancelled and a_outcome == []
        nursery.cancel_scope.cancel()


# ---------------------------------------------------------------------------
# A thousand concurrent requests, cancelled every which way
# ---------------------------------------------------------------------------

Tool = Literal["finish", "poll", "forever"]
Action = Literal["none", "notify", "disconnect"]
POLL_INTERVAL = 0.25
SWEEP_AT = 80.0


@dataclass(eq=False)
class Req:
    index: int
    namespace: str
    request_id: RequestId
    tool: Tool
    start: float
    duration: float
    action: Action
    action_at: float
    grace: float | None
    handle: TrackedRequest | None = None
    entered: bool = False
    exited: bool = False
    outcome: object = None
    ended_at: float = math.nan
    # What the test did to it (the model), independent of the registry's state.
    first_kind: str | None = None
    flagged_at: float = math.nan
    hard_deadline: float = math.inf


@dataclass
class Model:
    """What the registry should hold, recomputed from what the test did."""

    config_grace: float | None
    members: dict[tuple[str, RequestId], set[Req]] = field(default_factory=dict)
    row_at: dict[tuple[str, RequestId], float] = field(default_factory=dict)
    most_siblings: int = 0

    def flag(self, req: Req, kind: str, at: float, grace: float | None) -> None:
        now = trio.current_time()
        if req.first_kind is None:
            req.first_kind = kind
            req.flagged_at = now
        if grace is not None:
            req.hard_deadline = min(req.hard_deadline, at + grace)

    def enter(self, req: Req) -> None:
        key = (req.namespace, req.request_id)
        members = self.members.setdefault(key, set())
        members.add(req)
        self.most_siblings = max(self.most_siblings, len(members))
        req.entered = True
        # A key with a row makes every new request on it start out cancelled,
        # the grace counted from the row's time.
        if key in self.row_at:
            self.flag(req, "client", self.row_at[key], self.config_grace)

    def exit(self, req: Req) -> None:
        key = (req.namespace, req.request_id)
        members = self.members[key]
        members.discard(req)
        req.exited = True
        if not members:
            # The last request on a key takes its row with it.
            del self.members[key]
            self.row_at.pop(key, None)

    def notify(self, namespace: str, request_id: RequestId) -> CancelOutcome:
        key = (namespace, request_id)
        if key not in self.members:
            return CancelOutcome.NOT_IN_FLIGHT
        if key not in self.row_at:  # a repeated cancel changes nothing
            now = trio.current_time()
            self.row_at[key] = now
            for req in self.members[key]:
                self.flag(req, "client", now, self.config_grace)
        return CancelOutcome.CANCELLED


def make_requests(rng: random.Random, count: int) -> list[Req]:
    namespaces = [f"session:{s}" for s in range(20)]
    ids: list[RequestId] = [*range(25), *(f"r{i}" for i in range(8))]
    tools: list[Tool] = ["finish", "poll", "forever"]
    actions: list[Action] = ["none", "notify", "disconnect"]
    graces = [0.0, 0.5, 3.0, None]
    requests = []
    for index in range(count):
        start = rng.uniform(0, 20)
        requests.append(
            Req(
                index=index,
                namespace=rng.choice(namespaces),
                request_id=rng.choice(ids),
                tool=rng.choice(tools),
                start=start,
                duration=rng.uniform(0, 20),
                action=rng.choice(actions),
                action_at=start + rng.uniform(0.01, 25),
                grace=rng.choice(graces),
            )
        )
    return requests


async def run_request(reg: Registry, model: Model, req: Req) -> None:
    await trio.sleep(req.start)
    try:
        async with tracked(req.request_id, req.namespace, registry=reg) as handle:
            req.handle = handle
            model.enter(req)
            if req.tool == "finish":
                await trio.sleep(req.duration)
            elif req.tool == "poll":
                for _ in range(int(req.duration / POLL_INTERVAL) + 1):
                    await checkpoint_cancelled()
                    await trio.sleep(POLL_INTERVAL)
            else:
                await trio.sleep_forever()
        req.outcome = "finished"
    except RequestCancelled as exc:
        req.outcome = exc
    finally:
        # No checkpoint since the registry untracked it: model and registry
        # change together, as far as every other task can tell.
        if req.entered:
            model.exit(req)
        req.ended_at = trio.current_time()


async def act(reg: Registry, model: Model, req: Req) -> None:
    await trio.sleep(req.action_at)
    if req.action == "notify":
        expected = model.notify(req.namespace, req.request_id)
        assert reg.notify_cancelled(req.namespace, req.request_id, f"stop {req.index}") is expected
    else:
        in_flight = req.entered and not req.exited
        assert req.handle is not None  # action_at is after the start
        done = reg.cancel_request(
            req.handle, "stream dropped", kind="disconnect", grace_period=req.grace
        )
        assert done is in_flight
        if done:
            model.flag(req, "disconnect", trio.current_time(), req.grace)


async def sweep(reg: Registry, model: Model, requests: list[Req]) -> None:
    """Hard-cancel whatever is still running: only tools that never end by themselves."""
    await trio.sleep(SWEEP_AT)
    for req in requests:
        if req.entered and not req.exited:
            assert req.tool == "forever", req
            assert req.handle is not None
            assert reg.cancel_request(req.handle, "shutdown", kind="server", grace_period=0)
            model.flag(req, "server", trio.current_time(), 0)


def check_outcome(req: Req) -> str:
    """Assert *req* ended consistently with what was done to it; name how it ended."""
    assert req.entered and req.exited and req.handle is not None, req
    cancellation = req.handle.cancellation
    if req.first_kind is None:
        # Never cancelled: it finished normally, untouched.
        assert req.outcome == "finished", req
        assert cancellation is None and req.tool != "forever"
        return "finished"
    assert cancellation is not None and cancellation.kind == req.first_kind, req
    if req.outcome == "finished":
        # Cancelled, but it finished before the grace period ran out.
        assert req.tool != "forever"
        assert req.ended_at <= req.hard_deadline, req
        return "finished before grace"
    exc = req.outcome
    assert isinstance(exc, RequestCancelled), req
    assert exc.kind == req.first_kind
    if req.tool == "poll":
        # It saw the flag at its next poll, or the hard cancel if that came first.
        hard_at = max(req.hard_deadline, req.flagged_at)
        assert req.ended_at <= min(req.flagged_at + POLL_INTERVAL, hard_at) + 1e-9, req
        return f"polled {exc.kind}"
    # A tool that never polls can only have been hard-cancelled, right at the
    # deadline (or at once, when the deadline had passed when it was flagged).
    assert req.ended_at == pytest.approx(max(req.hard_deadline, req.flagged_at)), req
    return f"hard {exc.kind}"


@pytest.mark.parametrize(("seed", "config_grace"), [(1, 2.0), (2, 0.0), (3, None)])
async def test_a_thousand_concurrent_requests_end_consistently_and_leave_nothing(
    autojump_clock: MockClock, seed: int, config_grace: float | None
) -> None:
    rng = random.Random(seed)
    requests = make_requests(rng, 1000)
    model = Model(config_grace)
    # The model knows no early cancels (ids are reused here at random): keep none.
    async with open_registry(
        grace_period=config_grace, ttl=10_000.0, cleanup_interval=30.0, early_cancel_ttl=None
    ) as reg:
        async with trio.open_nursery() as nursery:
            for req in requests:
                nursery.start_soon(run_request, reg, model, req)
                if req.action != "none":
                    nursery.start_soon(act, reg, model, req)
            nursery.start_soon(sweep, reg, model, requests)
        assert_no_leaks(reg)
    assert model.members == {} and model.row_at == {}
    assert model.most_siblings >= 2  # duplicate ids really were in flight together
    seen = {check_outcome(req) for req in requests}
    # Not a vacuous pass: every way of ending happened.
    assert {
        "finished",
        "finished before grace",
        "polled client",
        "polled disconnect",
        "hard server",
        "hard disconnect",
    } <= seen, seen
    assert "hard client" in seen, seen


# ---------------------------------------------------------------------------
# Random operation sequences (hypothesis)
# ---------------------------------------------------------------------------

# Private namespaces: cancels of requests that do not run are kept there (early).
SCOPES = ["session:a", "session:b", "principal:c"]

# Most ids come from a small pool, so that operations meet each other.
COMMON_IDS: list[RequestId] = [0, 1, 2, "a"]
common_ids = st.sampled_from(COMMON_IDS)
hostile_hashable_ids = st.one_of(
    st.integers(),
    st.sampled_from([10**255, 10**256, -(10**300), 2**63]),
    st.text(max_size=3),
    st.sampled_from(["x" * 256, "x" * 257, "é" * 128, "é" * 129, "\ud800", "\u202e1"]),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.tuples(st.integers(0, 3)),
)
hostile_ids = st.one_of(
    hostile_hashable_ids,
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.text(max_size=1), st.integers(0, 1), max_size=1),
)
hashable_ids = st.one_of(common_ids, common_ids, hostile_hashable_ids)
any_ids = st.one_of(common_ids, common_ids, hostile_ids)
reasons = st.one_of(
    st.none(),
    st.text(max_size=12),
    st.sampled_from(["\x00\u202e\n\tbidi", "é" * 300]),
    st.builds(lambda size: "y" * size, st.sampled_from([5_000, 100_000])),
    st.integers(),
    st.binary(max_size=4),
)
namespaces = st.sampled_from(SCOPES)
graces = st.sampled_from([USE_CONFIG, None, 0.0, 1.0])
kinds = st.sampled_from(["server", "disconnect", "client"])

configs = st.builds(
    RegistryConfig,
    grace_period=st.sampled_from([None, 0.0, 1.0]),
    max_rows_per_namespace=st.sampled_from([2, 1, 4, None]),
    max_rows=st.sampled_from([5, 1, 10, None]),
    max_reason_length=st.sampled_from([0, 5, 256]),
    ttl=st.sampled_from([0.0, 1.0, 100.0]),
    cleanup_interval=st.sampled_from([None, 1.0]),
)


def check_invariants(reg: Registry, live: list[TrackedRequest]) -> None:
    config = reg.config
    if config.max_rows is not None:
        assert reg.row_count <= config.max_rows
    for namespace in SCOPES:
        if config.max_rows_per_namespace is not None:
            assert reg.namespace_row_count(namespace) <= config.max_rows_per_namespace
    assert sum(reg.namespace_row_count(namespace) for namespace in SCOPES) == reg.row_count
    assert reg.in_flight_count == len(live)
    live_keys = {(request.namespace, request.request_id) for request in live}
    for namespace in SCOPES:
        for request_id in COMMON_IDS:
            assert reg.in_flight(request_id, namespace) is ((namespace, request_id) in live_keys)
    for row in reg.rows():
        assert is_valid_request_id(row.request_id)
        assert row.reason is None or len(row.reason) <= config.max_reason_length
    for request in reg.requests():
        assert is_valid_request_id(request.request_id)
        reason = request.reason
        assert reason is None or len(reason) <= config.max_reason_length


async def apply_operations(config: RegistryConfig, ops: list[tuple[Any, ...]]) -> None:
    async with open_registry(config) as reg:
        live: list[TrackedRequest] = []
        handles: list[TrackedRequest] = []
        fresh = itertools.count()
        for op in ops:
            name = op[0]
            if name == "track":
                _, namespace, request_id = op
                try:
                    request = track(reg, request_id, namespace)
                except InvalidRequestId:
                    event("track refused an invalid id")
                    assert not is_valid_request_id(request_id)
                else:
                    assert is_valid_request_id(request_id)
                    live.append(request)
                    handles.append(request)
            elif name == "untrack":
                if handles:
                    request = handles[op[1] % len(handles)]
                    untrack(reg, request)  # idempotent
                    if request in live:
                        live.remove(request)
            elif name == "notify":
                _, namespace, request_id, reason = op
                outcome = reg.notify_cancelled(namespace, request_id, reason)
                event(f"notify: {outcome.value}")
                if not is_valid_request_id(request_id):
                    assert outcome is CancelOutcome.INVALID_REQUEST_ID
                elif outcome is CancelOutcome.CANCELLED:
                    assert reg.in_flight(request_id, namespace)
                    assert reg.client_cancelled(request_id, namespace)
            elif name == "cancel":  # as an ordered transport cancels: nothing kept early
                _, namespace, request_id, reason = op
                outcome = reg.notify_cancelled(namespace, request_id, reason, keep_early=False)
                event(f"cancel: {outcome.value}")
                if not is_valid_request_id(request_id):
                    assert outcome is CancelOutcome.INVALID_REQUEST_ID
                elif outcome is CancelOutcome.LIMIT_REACHED:
                    assert reg.namespace_row_count(namespace) == config.max_rows_per_namespace
                elif outcome is CancelOutcome.CANCELLED:
                    assert reg.client_cancelled(request_id, namespace)
                else:
                    assert outcome is CancelOutcome.NOT_IN_FLIGHT
                    assert not reg.in_flight(request_id, namespace)
            elif name == "flood":
                _, namespace, count = op
                for _ in range(count):
                    flood_id = f"flood-{next(fresh)}"
                    outcome = reg.notify_cancelled(namespace, flood_id, "flood")
                    if outcome is CancelOutcome.LIMIT_REACHED:
                        event("flood refused by the quota")
                        assert reg.namespace_row_count(namespace) == config.max_rows_per_namespace
                    else:
                        assert outcome is CancelOutcome.PENDING
                        assert reg.client_cancelled(flood_id, namespace)
                    if config.max_rows is not None:
                        assert reg.row_count <= config.max_rows
            elif name == "cancel_request":
                _, index, reason, kind, grace = op
                if handles:
                    request = handles[index % len(handles)]
                    done = reg.cancel_request(request, reason, kind=kind, grace_period=grace)
                    assert done is (request in live)
                    assert not done or request.cancelled
            elif name == "clear":
                _, namespace, request_id = op
                reg.clear(request_id, namespace)
            elif name == "query":
                _, namespace, request_id = op
                reg.client_cancelled(request_id, namespace)
                reg.client_reason(request_id, namespace)
                reg.in_flight(request_id, namespace)
            elif name == "cleanup":
                reg.cleanup(op[1])
            else:
                await trio.sleep(op[1])
            check_invariants(reg, live)
        # Tear down: untrack everything, let every row expire, and the
        # registry is empty again.
        for request in handles:
            untrack(reg, request)
        await trio.sleep(1)
        reg.cleanup(0)
        assert_no_leaks(reg)


class RandomOperations(RuleBasedStateMachine):
    """Builds a random operation sequence; teardown runs it in one ``trio.run``.

    The registry lives inside ``trio.run``, so the rules only record what
    to do.  Valid keys go through a bundle so that later operations reuse
    them (a notification for a request that is in flight, a clear of a row
    that exists); hostile ids are drawn fresh.
    """

    keys = Bundle("keys")

    def __init__(self) -> None:
        super().__init__()
        self.config = RegistryConfig()
        self.ops: list[tuple[Any, ...]] = []

    @initialize(config=configs)
    def configure(self, config: RegistryConfig) -> None:
        self.config = config

    @rule(target=keys, namespace=namespaces, request_id=common_ids)
    def track(self, namespace: str, request_id: RequestId) -> tuple[str, RequestId]:
        self.ops.append(("track", namespace, request_id))
        return (namespace, request_id)

    @rule(key=keys)
    def track_again(self, key: tuple[str, RequestId]) -> None:
        self.ops.append(("track", *key))

    @rule(namespace=namespaces, request_id=hostile_ids)
    def track_hostile(self, namespace: str, request_id: object) -> None:
        self.ops.append(("track", namespace, request_id))

    @rule(index=st.integers(0, 50))
    def untrack(self, index: int) -> None:
        self.ops.append(("untrack", index))

    @rule(key=keys, reason=reasons)
    def notify(self, key: tuple[str, RequestId], reason: object) -> None:
        self.ops.append(("notify", *key, reason))

    @rule(namespace=namespaces, request_id=hostile_ids, reason=reasons)
    def notify_hostile(self, namespace: str, request_id: object, reason: object) -> None:
        self.ops.append(("notify", namespace, request_id, reason))

    @rule(key=keys, reason=reasons)
    def cancel(self, key: tuple[str, RequestId], reason: object) -> None:
        self.ops.append(("cancel", *key, reason))

    @rule(namespace=namespaces, request_id=hostile_ids, reason=reasons)
    def cancel_hostile(self, namespace: str, request_id: object, reason: object) -> None:
        self.ops.append(("cancel", namespace, request_id, reason))

    @rule(namespace=namespaces, count=st.integers(1, 12))
    def flood(self, namespace: str, count: int) -> None:
        self.ops.append(("flood", namespace, count))

    @rule(index=st.integers(0, 50), reason=reasons, kind=kinds, grace=graces)
    def cancel_request(self, index: int, reason: object, kind: str, grace: object) -> None:
        self.ops.append(("cancel_request", index, reason, kind, grace))

    @rule(key=keys)
    def clear(self, key: tuple[str, RequestId]) -> None:
        self.ops.append(("clear", *key))

    @rule(namespace=namespaces, request_id=hostile_hashable_ids)
    def clear_hostile(self, namespace: str, request_id: object) -> None:
        self.ops.append(("clear", namespace, request_id))

    @rule(namespace=namespaces, request_id=hashable_ids)
    def query(self, namespace: str, request_id: object) -> None:
        self.ops.append(("query", namespace, request_id))

    @rule(ttl=st.sampled_from([None, 0.0, 1.0, 50.0]))
    def cleanup(self, ttl: float | None) -> None:
        self.ops.append(("cleanup", ttl))

    @rule(seconds=st.sampled_from([0.0, 0.5, 2.0, 30.0]))
    def sleep(self, seconds: float) -> None:
        self.ops.append(("sleep", seconds))

    def teardown(self) -> None:
        trio.run(
            partial(apply_operations, self.config, self.ops),
            clock=MockClock(autojump_threshold=0),
        )


RandomOperations.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_random_operations_raise_only_documented_errors_and_keep_bounds = RandomOperations.TestCase
