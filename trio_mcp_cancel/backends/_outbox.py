"""Terminal task states this process could not write to the shared store yet.

Why: a task that ends while Redis is down or hung (it completed, failed, or
was cancelled on this worker) would otherwise read ``working`` everywhere
until its TTL, and a completed task's result would be lost.  Its final
state is kept here, bounded, and written once the backend answers again
(by the same atomic settle script, which never overwrites a state that is
already terminal).  Meanwhile this process's own reads of the task show the
kept state (:meth:`Outbox.overlay`).

No I/O here: the Redis task store fills and drains it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import attrs

from .task_records import TaskRecord, TaskStatus, transition

__all__ = ["Outbox", "PendingState"]

logger = logging.getLogger("trio_mcp_cancel.redis")


@attrs.frozen
class PendingState:
    """A terminal state as the task ended (its time included), not yet written."""

    status: TaskStatus
    updated_at: float
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    message: str | None

    def apply(self, record: TaskRecord) -> TaskRecord:
        """*record* (read from the store) as it truly is: settled by the stores' one rule."""
        settled = attrs.evolve(record)
        transition(
            settled,
            self.status,
            self.updated_at,
            result=self.result,
            error=self.error,
            message=self.message,
        )
        return settled


@attrs.define(eq=False)
class Outbox:
    """At most *cap* pending states, oldest first; a full outbox drops its oldest (logged)."""

    cap: int = 1024
    _entries: OrderedDict[str, PendingState] = attrs.field(init=False, factory=OrderedDict)
    dropped: int = attrs.field(init=False, default=0)
    """How many states were dropped because the outbox was full (since it was made)."""

    def __attrs_post_init__(self) -> None:
        if self.cap < 1:
            raise ValueError("the outbox needs room for at least one task state")

    def __len__(self) -> int:
        return len(self._entries)

    def keep(self, task_id: str, state: PendingState) -> None:
        """Hold *state* for *task_id* until it is written (a later state replaces it)."""
        self._entries.pop(task_id, None)
        while len(self._entries) >= self.cap:
            old_id, old = self._entries.popitem(last=False)
            self.dropped += 1
            logger.warning(
                "task %s ended %s during a Redis outage; its state is dropped (outbox full, "
                "%d kept): it reads as before until its TTL",
                old_id[:8],
                old.status,
                self.cap,
            )
        self._entries[task_id] = state

    def get(self, task_id: str) -> PendingState | None:
        return self._entries.get(task_id)

    def overlay(self, record: TaskRecord) -> TaskRecord:
        """*record* with the final state kept for it here, if any (a terminal one stays)."""
        state = self._entries.get(record.task_id)
        return record if state is None else state.apply(record)

    def pending(self) -> list[tuple[str, PendingState]]:
        """What is to be written, oldest first (a snapshot)."""
        return list(self._entries.items())

    def discard(self, task_id: str) -> None:
        """The task's final state was written: nothing is left to write for it."""
        self._entries.pop(task_id, None)

    def done(self, task_id: str, state: PendingState) -> None:
        """*state* was written (or is moot): forget it, unless a newer one replaced it meanwhile."""
        if self._entries.get(task_id) is state:
            del self._entries[task_id]
