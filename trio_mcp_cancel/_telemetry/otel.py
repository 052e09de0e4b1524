"""The one place ``opentelemetry``'s API is imported: lazily, once, and optionally.

``opentelemetry-api`` is an optional dependency (the ``otel`` extra), never
the SDK: which provider and exporter run is the application's choice.
:func:`load` imports the API the first time a server (or the client)
asks for it and remembers the answer, so a process without it pays one
failed import, once.  Its internals are read in :mod:`.otel_compat` only.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Final

import attrs
import trio

__all__ = ["Api", "load", "wall_ns"]


@attrs.frozen
class Api:
    """The API modules the package uses."""

    trace: ModuleType
    metrics: ModuleType
    propagate: ModuleType
    context: ModuleType


_NOT_LOADED: Final = object()
_api: object = _NOT_LOADED


def load() -> Api | None:
    """The OpenTelemetry API, or ``None`` when ``opentelemetry-api`` is not installed."""
    global _api
    if _api is _NOT_LOADED:
        try:
            from opentelemetry import context, metrics, propagate, trace
        except ImportError:
            _api = None
        else:
            _api = Api(trace, metrics, propagate, context)
    return _api if isinstance(_api, Api) else None


def wall_ns(at: float) -> int:
    """The wall-clock time (ns since the epoch) of Trio clock time *at*.

    Span and event timestamps are wall-clock; the registry keeps Trio time
    (which tests jump with a mock clock), so times it recorded are placed
    relative to now.
    """
    return time.time_ns() - int((trio.current_time() - at) * 1e9)
