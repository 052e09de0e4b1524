"""Middleware that watches: one structured log line per request, and each request's duration."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
import trio

from .._protocol.middleware import CallNext, MiddlewareRequest

__all__ = ["RequestLog", "Timing"]

_LOGGER = logging.getLogger("trio_mcp_cancel.requests")


@attrs.define
class RequestLog:
    """One log line per request, when it ends: method, target, id, outcome, duration, cancel.

    The line's fields are also on the record as ``record.mcp`` (a dict), for a
    structured (JSON) log formatter.  Logged in ``finally``, so a request
    hard-cancelled, or cut off by the transport closing, is logged too.
    """

    logger: logging.Logger = _LOGGER
    level: int = logging.INFO

    async def __call__(self, request: MiddlewareRequest, call_next: CallNext) -> Any:
        started = trio.current_time()
        try:
            return await call_next()
        finally:
            self._log(request, trio.current_time() - started)

    def _log(self, request: MiddlewareRequest, duration: float) -> None:
        if not self.logger.isEnabledFor(self.level):
            return
        outcome = request.outcome
        fields: dict[str, Any] = {
            "method": request.method,
            "target": request.target,
            "id": request.request_id,
            "outcome": None if outcome is None else outcome.status,
            "duration": round(duration, 6),
        }
        if outcome is not None and outcome.status == "error":
            fields["error_code"] = outcome.error_code
        if outcome is not None and outcome.status == "cancelled":
            fields.update(cancel_kind=outcome.cancel_kind, cancel_cause=outcome.cancel_cause)
        # Values are %r-formatted: a client's id or tool name cannot forge a log line.
        text = " ".join(f"{key}=%r" for key in fields)
        self.logger.log(self.level, text, *fields.values(), extra={"mcp": fields})


@attrs.define
class Timing:
    """Each request's duration in seconds: into ``request.state[key]``, and to *on_duration*.

    Put it outermost to time everything inside it (the other middleware too).
    The duration is recorded in ``finally``, for a cancelled request as well.
    """

    on_duration: Callable[[MiddlewareRequest, float], object] | None = None
    key: str = "duration"

    async def __call__(self, request: MiddlewareRequest, call_next: CallNext) -> Any:
        started = trio.current_time()
        try:
            return await call_next()
        finally:
            duration = trio.current_time() - started
            request.state[self.key] = duration
            if self.on_duration is not None:
                self.on_duration(request, duration)
