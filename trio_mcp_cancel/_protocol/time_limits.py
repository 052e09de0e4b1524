"""Per-target time limits: ``@server.tool(time_limit=30)``, and the same on resources and prompts.

A time limit is a server cancel at a fixed time after the work started:
at the limit the request's polled flag is set (kind ``server``), and the
registry's grace period later its hard cancel follows, the two phases of
every server cancel (:meth:`~.._core.registry.Registry.cancel_at`).  The
client gets ``-32800`` whose reason names the limit ("time limit of 30 s
reached"), which telemetry counts under the cause ``time_limit``, as it
does the transports' server-wide ``max_request_time``.  Both apply: the
first to run out cancels, so the effective limit is the smaller.  A task
counts the limit from the start of its run, not of the request that
created it.
"""

from __future__ import annotations

import math

from .._telemetry.names import TIME_LIMIT_REASON

__all__ = ["check_time_limit", "time_limit_reason"]


def check_time_limit(value: object, what: str) -> float | None:
    """*value* as seconds, or ``None``; a ``ValueError``/``TypeError`` naming *what* otherwise.

    Refused at registration, so a typo never becomes a limit that cancels
    every call at once (``0``, a negative) or never (``nan``, ``inf``).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what}: time_limit must be a number of seconds or None, not {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"{what}: time_limit must be a finite number of seconds above 0, not {value!r}"
        )
    return seconds


def time_limit_reason(seconds: float) -> str:
    """The cancel reason the client reads: ``"time limit of 30 s reached"``."""
    return f"{TIME_LIMIT_REASON}{seconds:g} s reached"
