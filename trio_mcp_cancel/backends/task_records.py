"""Task records and their state machine: what every task store keeps and applies.

A *task* (MCP Tasks extension, ``io.modelcontextprotocol/tasks``) is a
durable record of long-running work that outlives the request that started
it.  The record is what ``tasks/get`` answers from, so it must live where
every server process can read it: in memory for one process, in a shared
store (:mod:`trio_mcp_cancel.backends.redis`) for several.  The *work*
itself (a cancel scope, a Trio task) always stays in the process that runs
it; see :mod:`trio_mcp_cancel._tasks.manager`.

**Times are wall-clock** (seconds since the epoch, from the store's
``clock``), never Trio clock readings: records are shared between
processes whose Trio clocks have nothing in common.  Tests pass a clock
derived from ``trio.current_time()`` so that ``MockClock`` still drives
expiry.

**The status machine** (:data:`TRANSITIONS`, asked through
:func:`can_move`; h11's ``_state.py`` style):

============== =========================================== ====================
status         may move to                                 why
============== =========================================== ====================
working        working, input_required, completed,         the run goes on, asks,
               failed, cancelled                           or ends
input_required working, input_required, completed,         answered, asked again,
               failed, cancelled                           or ended meanwhile
completed      nothing (terminal)                          the first end stands
failed         nothing (terminal)                          the first end stands
cancelled      nothing (terminal)                          the first end stands
============== =========================================== ====================

The file's rules:

* A terminal status is final: a client told "failed" is never later handed
  a result (whose side effects it may now repeat).  Two processes settling
  one task race, and the loser's move is *refused*, not an error:
  :func:`transition` returns ``False`` and changes nothing.  A store
  applies the table atomically (memory: in one Trio step; Redis: the
  ``_SETTLE`` script spells the same terminal set, and
  ``tests/tasks/test_task_transitions.py`` runs both stores over every pair).
* A move to the status a task already has is legal while it is live: a
  new ``input_required`` round replaces the pending questions, a
  ``working`` refresh its message.
* A status MCP does not have is a bug in this package: ``ValueError``.
* ``input_required`` carries its pending ``inputRequests``; ``completed``
  its result, ``failed`` its error (:func:`settled_payload`); each status
  keeps only its own payload.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import attrs

from .._wire.names import TASK_STATUSES, TERMINAL_STATUSES, TaskStatus

__all__ = [
    "TRANSITIONS",
    "Clock",
    "TaskRecord",
    "TaskStatus",
    "iso8601",
    "new_task_id",
    "can_move",
    "settled_payload",
    "transition",
]

Clock = Callable[[], float]

_LIVE_TO: Final[frozenset[TaskStatus]] = frozenset(
    {"working", "input_required", "completed", "failed", "cancelled"}
)

#: The legal moves of a task's status (the module docstring's table).
#: Invariant: a status with no way out is terminal, and exactly those are
#: :data:`TERMINAL_STATUSES`; every live status may reach every status.
#: Invariant: the keys are exactly :data:`TASK_STATUSES` (the wire's).
TRANSITIONS: Final[Mapping[str, frozenset[TaskStatus]]] = {
    "working": _LIVE_TO,
    "input_required": _LIVE_TO,
    "completed": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}


def can_move(old: str, new: str) -> bool:
    """Whether a task whose status is *old* may move to *new* (:data:`TRANSITIONS`).

    ``ValueError`` for a status MCP does not have (either side): a bug in
    this package, never a race to settle.
    """
    for status in (old, new):
        if status not in TRANSITIONS:
            raise ValueError(f"unknown task status {status!r}")
    return new in TRANSITIONS[old]


def new_task_id() -> str:
    """An unguessable task id (256 random bits): task ids act as bearer handles."""
    return secrets.token_urlsafe(32)


def iso8601(at: float) -> str:
    """A wall-clock time as the ISO 8601 string MCP uses (UTC, milliseconds)."""
    stamp = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


@attrs.define(eq=False, kw_only=True)
class TaskRecord:
    """One task as stored; :meth:`to_wire` is its ``DetailedTask`` shape."""

    task_id: str
    owner: str
    """Who created it (a principal or client namespace); nobody else may see it."""
    tenant: str = ""
    """Whose quota it counts against (``""``: the owner's).  The principal,
    else the client's address bucket: every connection of one tenant shares
    one quota, while each connection still sees only its own tasks."""
    status: TaskStatus = "working"
    created_at: float
    updated_at: float
    ttl_ms: int | None
    poll_interval_ms: int | None = None
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    cancel_requested: bool = False
    """A ``tasks/cancel`` arrived (maybe at another process); the runner obeys it."""
    instance: str = ""
    """The server process running the work."""
    input_requests: dict[str, Any] | None = None
    """While ``input_required``: the still unanswered ``inputRequests`` (key -> request)."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def quota_key(self) -> str:
        """Who the record counts against for ``max_per_owner``: its tenant, else its owner."""
        return self.tenant or self.owner

    @property
    def expires_at(self) -> float:
        return math.inf if self.ttl_ms is None else self.created_at + self.ttl_ms / 1000

    def to_wire(self) -> dict[str, Any]:
        """The ``Task`` fields, with the status's inlined ``result`` or ``error``."""
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": iso8601(self.created_at),
            "lastUpdatedAt": iso8601(self.updated_at),
            "ttlMs": self.ttl_ms,
        }
        if self.poll_interval_ms is not None:
            out["pollIntervalMs"] = self.poll_interval_ms
        if self.status_message is not None:
            out["statusMessage"] = self.status_message
        if self.status == "completed" and self.result is not None:
            out["result"] = self.result
        if self.status == "failed" and self.error is not None:
            out["error"] = self.error
        if self.status == "input_required" and self.input_requests is not None:
            out["inputRequests"] = self.input_requests
        return out

    def dumps(self) -> str:
        """JSON for a shared store."""
        return json.dumps(attrs.asdict(self), separators=(",", ":"))

    @classmethod
    def loads(cls, text: str | bytes) -> TaskRecord:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("status") not in TASK_STATUSES:
            raise ValueError("not a task record")
        return cls(**data)


def settled_payload(
    status: TaskStatus,
    *,
    result: dict[str, Any] | None,
    error: dict[str, Any] | None,
    input_requests: dict[str, Any] | None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, dict[str, Any] | None]:
    """The ``(result, error, input_requests)`` a record in *status* keeps.

    One rule for every store (memory here, the Redis script's arguments):
    ``completed`` must carry its *result* and ``failed`` its *error*
    (``ValueError`` otherwise), and each status keeps only its own payload,
    so a task that leaves ``input_required`` drops its pending requests.
    """
    if status not in TRANSITIONS:
        raise ValueError(f"unknown task status {status!r}")
    if status == "completed" and result is None:
        raise ValueError("a completed task needs its result")
    if status == "failed" and error is None:
        raise ValueError("a failed task needs its error")
    return (
        result if status == "completed" else None,
        error if status == "failed" else None,
        input_requests if status == "input_required" else None,
    )


def transition(
    record: TaskRecord,
    status: TaskStatus,
    now: float,
    *,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    message: str | None = None,
    input_requests: dict[str, Any] | None = None,
) -> bool:
    """Move *record* to *status* in place; ``False`` (and no change) when the table refuses.

    ``completed`` carries *result*, ``failed`` carries *error* (the JSON-RPC
    error object), ``input_required`` its pending *input_requests*, as the
    extension requires.
    """
    if not can_move(record.status, status):
        return False
    record.result, record.error, record.input_requests = settled_payload(
        status, result=result, error=error, input_requests=input_requests
    )
    record.status = status
    record.updated_at = now
    if message is not None:
        record.status_message = message
    return True
