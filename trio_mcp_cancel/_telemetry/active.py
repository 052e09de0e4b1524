"""Which server telemetry and span the running request reports to (no ``opentelemetry`` here).

Set by :meth:`.server.ServerTelemetry.serve` around a request's work and
inherited by the tasks it starts, so helpers deep in the work (a child
process, a worker thread) find the request's span with one context-variable
lookup, and find ``None`` (and do nothing) when telemetry is off.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Protocol

import attrs

__all__ = ["Active", "Reporter", "current_active"]


class Reporter(Protocol):
    """What a helper reports through (:class:`.server.ServerTelemetry`)."""

    def process_event(self, span: Any, killed: bool, signal_name: str) -> None: ...


@attrs.frozen
class Active:
    """The telemetry of the running request, and its span."""

    telemetry: Reporter
    span: Any


current_active: ContextVar[Active | None] = ContextVar("trio_mcp_cancel.telemetry", default=None)
