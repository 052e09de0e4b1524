"""The JSON-RPC errors of the Tasks extension, one home for the task manager's pieces.

Each piece (admission, the runner, the ``tasks/*`` requests) refuses with
the same few errors; building them here keeps their codes and wording the
same wherever a task is refused.
"""

from __future__ import annotations

import logging

from .._protocol.admission import over_limit
from .._wire.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, JsonRpcError
from .._wire.names import TASKS_EXTENSION
from .._wire.versions import MISSING_CLIENT_CAPABILITY

__all__ = [
    "TasksUnavailable",
    "require_tasks_extension",
    "store_unavailable",
    "task_not_found",
    "tasks_not_served",
    "too_many_tasks",
]

logger = logging.getLogger("trio_mcp_cancel.tasks")


def require_tasks_extension() -> JsonRpcError:
    """``-32021`` naming the extension, as SEP-2663 requires."""
    return JsonRpcError(
        MISSING_CLIENT_CAPABILITY,
        "Missing required client capability",
        {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


class TasksUnavailable(JsonRpcError):
    """``-32603``: the task store (a shared backend) cannot be reached."""

    def __init__(self) -> None:
        super().__init__(INTERNAL_ERROR, "Internal error: the task store is unavailable")


def store_unavailable(exc: Exception) -> JsonRpcError:
    """:class:`TasksUnavailable` for *exc* (logged at debug: the client sees the code)."""
    logger.debug("task store unavailable: %s", exc)
    return TasksUnavailable()


def task_not_found() -> JsonRpcError:
    """Unknown, expired, or somebody else's: the caller cannot tell which."""
    return JsonRpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found")


def tasks_not_served() -> JsonRpcError:
    """The task manager is not running here."""
    return JsonRpcError(INTERNAL_ERROR, "Internal error: tasks are not being served")


def too_many_tasks(message: str, limit: str, cap: int | None) -> JsonRpcError:
    """An admission refusal like every other; ``data`` names the *limit* and its *cap*.

    Tasks exist in the modern era only (SEP-2663), so the modern code.
    """
    return over_limit("modern", message, limit, cap)
