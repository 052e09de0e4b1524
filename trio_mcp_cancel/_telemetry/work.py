"""Hooks for the work helpers (:func:`~trio_mcp_cancel.run_process`): report to the request's span.

A child process's polite stop signal is sent from the task that cancelled
the request, so the span is captured when the process starts, not looked
up when the signal goes.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

from .active import current_active

__all__ = ["ProcessNote", "process_note"]

ProcessNote = Callable[[bool, int], None]
"""``note(killed, signal)``: the process group was killed (the hard cancel)
or sent its polite stop signal."""


def process_note() -> ProcessNote | None:
    """A recorder bound to the running request's span; ``None`` without telemetry."""
    active = current_active.get()
    if active is None:
        return None
    telemetry, span = active.telemetry, active.span

    def note(killed: bool, sig: int) -> None:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        telemetry.process_event(span, killed, name)

    return note
