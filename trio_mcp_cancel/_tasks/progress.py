"""Progress inside a task: ``ctx.report_progress`` becomes the task's ``statusMessage``.

A task has no request stream to carry ``notifications/progress`` (SEP-2663),
so what a tool reports is written to its record instead (``"3/10: copying"``),
where ``tasks/get`` shows it and ``notifications/tasks`` carries it to
listeners.  A tool may report thousands of times a second, and each write
goes to the (maybe shared) store, so writes are rate-limited per task: at
most one per ``interval`` seconds, always the latest value, and the last
value is written before the task settles (:meth:`TaskProgress.close`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Final

import attrs
import trio

from ..backends.base import TaskStoreUnavailable

__all__ = ["MAX_STATUS_MESSAGE", "TaskProgress", "progress_message"]

logger = logging.getLogger("trio_mcp_cancel.tasks")

#: Characters of a progress message kept in ``statusMessage`` (the rest is cut).
MAX_STATUS_MESSAGE: Final = 1000


def _number(value: float) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def progress_message(progress: float, total: float | None, message: str | None) -> str:
    """``"3/10: message"``, ``"3/10"``, ``"3: message"`` or ``"3"``, bounded in length."""
    text = _number(progress) if total is None else f"{_number(progress)}/{_number(total)}"
    if message:
        text = f"{text}: {message}"
    if len(text) > MAX_STATUS_MESSAGE:
        text = text[: MAX_STATUS_MESSAGE - 1] + "…"
    return text


@attrs.define(eq=False)
class TaskProgress:
    """The rate-limited ``statusMessage`` writer of one running task.

    :meth:`report` never waits (a tool's progress never blocks on the
    store); :meth:`run` (in the task manager's nursery) writes what was
    reported, at most once per *interval*; :meth:`close` stops it and
    writes the last value if it was not written yet.  Writes hold a lock,
    so an older value never lands after a newer one.
    """

    write: Callable[[str], Awaitable[None]]
    interval: float
    pending: str | None = None
    written_at: float = -math.inf
    _wake: trio.Event = attrs.field(init=False, factory=trio.Event)
    _lock: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    _scope: trio.CancelScope = attrs.field(init=False, factory=trio.CancelScope)

    def report(self, text: str) -> None:
        self.pending = text
        self._wake.set()

    async def run(self) -> None:
        with self._scope:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                await trio.sleep_until(self.written_at + self.interval)
                await self._flush()

    async def _flush(self) -> None:
        async with self._lock:
            text = self.pending
            if text is None:
                return
            self.written_at = trio.current_time()
            try:
                await self.write(text)
            except TaskStoreUnavailable as exc:
                logger.debug("task progress not recorded: %s", exc)
            if self.pending is text:
                self.pending = None

    async def close(self) -> None:
        """Stop the writer; write the last value now if it is still pending."""
        self._scope.cancel()
        await self._flush()
