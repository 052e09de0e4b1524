"""Rate-limited logging of repeated failures: a flood of one bad request is one log line.

A server logs an unexpected exception with its traceback, which is what
an operator needs the first time; the thousandth identical one from a
client sending the same bad request in a loop only floods the log (and
the disk).  :class:`RateLimitedLog` logs the first occurrence of a *key*
(what makes two failures "the same": where it was raised and what was
asked), then at most one per *interval*, saying how many it suppressed in
between.  Suppressed occurrences are only counted, never stored.  The
table of keys is bounded (*max_keys*, oldest forgotten first), so distinct
failures cannot grow it without bound either; a forgotten key is logged
again on its next occurrence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from typing import Final

import attrs

__all__ = ["RateLimitedLog", "failure_key"]


@attrs.define(eq=False)
class RateLimitedLog:
    """Logs the first failure of each key, then one per *interval* (seconds) with a count."""

    logger: logging.Logger
    interval: float = 60.0
    max_keys: int = 1024
    now: Callable[[], float] = time.monotonic
    _seen: dict[Hashable, tuple[float, int]] = attrs.field(init=False, factory=dict)
    """key -> (when it may be logged again, occurrences suppressed since it was)."""

    def exception(self, key: Hashable, message: str, *args: object) -> None:
        """``logger.exception(message, *args)`` unless *key* was logged within *interval*.

        Call it from an ``except`` block, like :meth:`logging.Logger.exception`.
        """
        self.log(logging.ERROR, key, message, *args, exc_info=True)

    def log(
        self, level: int, key: Hashable, message: str, *args: object, exc_info: bool = False
    ) -> None:
        """``logger.log(level, message, *args)`` unless *key* was logged within *interval*."""
        suppressed = self._admit(key)
        if suppressed is None:
            return
        if suppressed:
            message += " (%d more like it suppressed in the last %.0f s)"
            args = (*args, suppressed, self.interval)
        self.logger.log(level, message, *args, exc_info=exc_info)

    def _admit(self, key: Hashable) -> int | None:
        """How many occurrences of *key* were suppressed, or ``None``: suppress this one too."""
        now = self.now()
        seen = self._seen.get(key)
        if seen is not None and now < seen[0]:
            self._seen[key] = (seen[0], seen[1] + 1)
            return None
        if seen is None and len(self._seen) >= self.max_keys:
            del self._seen[next(iter(self._seen))]  # the oldest key
        self._seen.pop(key, None)  # re-insert: the table stays ordered by last log
        self._seen[key] = (now + self.interval, 0)
        return 0 if seen is None else seen[1]


_MAX_LABEL: Final = 100


def failure_key(label: str, exc: BaseException) -> Hashable:
    """What makes two failures the same: *label* (what was asked), the exception's
    type and the line that raised it (not its message, which may carry the
    request's own data)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = (tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb is not None else None
    return (label[:_MAX_LABEL], type(exc), where)
