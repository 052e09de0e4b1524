"""The task status machine as a table, and both stores applying that one table.

The expected moves are spelled out here independently of
:data:`~trio_mcp_cancel.backends.task_records.TRANSITIONS`, so a change to
the table is a change to this file too.  The stores are driven over every
(from, to) pair: memory in process, Redis against a real redis-server
(its ``_SETTLE`` script enforces "terminal is final" in Lua).
"""

from __future__ import annotations

import itertools
import re
import secrets
from typing import Any

import pytest

from trio_mcp_cancel.backends import MemoryTaskStore, TaskStore, task_records
from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.backends.task_records import TRANSITIONS, TaskRecord, can_move

from _support.deploy import RedisServer
from _support.redis import prefix, record, redis, running

__all__ = ["prefix", "redis"]  # the fixtures, for pytest

STATUSES = ("working", "input_required", "completed", "failed", "cancelled")
LIVE = {"working", "input_required"}

#: Every pair and its verdict: a live task may move anywhere (itself
#: included: a new input round, a refreshed message); a terminal one nowhere.
EXPECTED: dict[tuple[str, str], bool] = {
    (old, new): old in LIVE for old, new in itertools.product(STATUSES, STATUSES)
}

#: What each status carries when a task is settled into it.
PAYLOAD: dict[str, dict[str, Any]] = {
    "working": {},
    "input_required": {"input_requests": {"ctx-0": {"method": "elicitation/create"}}},
    "completed": {"result": {"content": [{"type": "text", "text": "done"}]}},
    "failed": {"error": {"code": -32603, "message": "boom"}},
    "cancelled": {},
}


@pytest.mark.parametrize(("old", "new"), sorted(EXPECTED))
def test_the_table_allows_exactly_the_expected_moves(old: str, new: str) -> None:
    assert can_move(old, new) is EXPECTED[(old, new)]


def test_the_table_covers_the_wire_statuses_and_its_dead_ends_are_the_terminal_ones() -> None:
    assert set(TRANSITIONS) == set(STATUSES) == task_records.TASK_STATUSES
    dead_ends = {status for status, moves in TRANSITIONS.items() if not moves}
    assert dead_ends == task_records.TERMINAL_STATUSES


@pytest.mark.parametrize("bogus", ["", "done", "WORKING", "cancelled ", "x" * 10_000])
def test_a_status_mcp_does_not_have_is_refused_on_either_side(bogus: str) -> None:
    with pytest.raises(ValueError, match="unknown task status"):
        can_move("working", bogus)
    with pytest.raises(ValueError, match="unknown task status"):
        can_move(bogus, "working")


async def _in_status(store: TaskStore, status: str) -> str:
    """A new task in *status* (settled there from ``working``); its id."""
    task_id = secrets.token_hex(8)
    await store.create(record(task_id, now=store.clock()))
    if status != "working":
        settled = await store.settle(task_id, status, **PAYLOAD[status])  # type: ignore[arg-type]
        assert settled is not None and settled.status == status
    return task_id


async def _outcomes(store: TaskStore) -> dict[tuple[str, str], tuple[str, TaskRecord]]:
    """Each pair's status after trying the move, and the record."""
    seen: dict[tuple[str, str], tuple[str, TaskRecord]] = {}
    for old, new in sorted(EXPECTED):
        task_id = await _in_status(store, old)
        await store.settle(task_id, new, **PAYLOAD[new])  # type: ignore[arg-type]
        after = await store.get(task_id)
        assert after is not None
        seen[(old, new)] = (after.status, after)
    return seen


def _check(outcomes: dict[tuple[str, str], tuple[str, TaskRecord]]) -> None:
    for (old, new), (status, after) in outcomes.items():
        assert status == (new if EXPECTED[(old, new)] else old), (old, new)
        if old == "completed":  # a refused move keeps the first end's payload
            assert after.result == PAYLOAD["completed"]["result"]
        if old == "failed":
            assert after.error == PAYLOAD["failed"]["error"]


async def _refuses_unknown(store: TaskStore) -> None:
    for old in ("working", "completed"):
        task_id = await _in_status(store, old)
        with pytest.raises(ValueError, match="unknown task status"):
            await store.settle(task_id, "finished")  # type: ignore[arg-type]
        after = await store.get(task_id)
        assert after is not None and after.status == old


async def test_the_memory_store_applies_the_table_to_every_pair() -> None:
    _check(await _outcomes(MemoryTaskStore()))


async def test_the_memory_store_refuses_an_unknown_status_and_keeps_the_record() -> None:
    await _refuses_unknown(MemoryTaskStore())


async def test_the_redis_store_applies_the_same_table_to_every_pair(
    redis: RedisServer, prefix: str
) -> None:
    memory = await _outcomes(MemoryTaskStore())
    async with running(RedisBackend(redis.url, prefix=prefix)) as backend:
        shared = await _outcomes(backend.tasks)
    _check(shared)
    assert {pair: seen[0] for pair, seen in shared.items()} == {
        pair: seen[0] for pair, seen in memory.items()
    }


async def test_the_redis_store_refuses_an_unknown_status_and_keeps_the_record(
    redis: RedisServer, prefix: str
) -> None:
    async with running(RedisBackend(redis.url, prefix=prefix)) as backend:
        await _refuses_unknown(backend.tasks)


def test_every_redis_script_that_guards_a_terminal_task_names_the_tables_terminal_set() -> None:
    """The Lua scripts cannot import the table: each spells the terminal set, checked here."""
    from trio_mcp_cancel.backends import redis as redis_backend

    dead_ends = {status for status, moves in TRANSITIONS.items() if not moves}
    for name in ("_SETTLE", "_REQUEST_CANCEL", "_SET_MESSAGE", "_FAIL_OF"):
        script = getattr(redis_backend, name)
        guarded = set(re.findall(r"status [~=]= '(\w+)'", script))
        assert guarded == dead_ends, name
