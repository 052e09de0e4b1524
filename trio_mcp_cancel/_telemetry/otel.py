"""The one place ``opentelemetry`` is imported: lazily, once, and optionally.

``opentelemetry-api`` is an optional dependency (the ``otel`` extra), never
the SDK: which provider and exporter run is the application's choice.
:func:`load` imports the API the first time a server (or the client)
asks for it and remembers the answer, so a process without it pays one
failed import, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

import attrs
import trio

__all__ = ["Api", "global_providers_set", "is_quiet_provider", "load", "wall_ns"]


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


def global_providers_set(api: Api) -> Callable[[], bool]:
    """A cheap probe: has the application installed a global tracer or meter provider?

    Until it does, the API's global providers are proxies with nothing
    behind them, and a server using them records nothing: the dispatcher
    then skips the span work per request (see
    :meth:`.server.ServerTelemetry.quiet`).  The public getters consult
    ``os.environ`` on every call (~1 µs), so the probe reads the API's own
    "set" markers, the module globals ``set_tracer_provider`` and
    ``set_meter_provider`` assign (~15 ns); an API without them gets the
    public getters.  A provider named by ``OTEL_PYTHON_*_PROVIDER`` is loaded
    here, once, by calling the getters.
    """
    tracer = api.trace.get_tracer_provider()
    meter = api.metrics.get_meter_provider()
    if not is_quiet_provider(api, tracer) or not is_quiet_provider(api, meter):
        return lambda: True
    try:
        from opentelemetry.metrics import _internal
    except ImportError:  # pragma: no cover - an API that moved its internals
        metrics_internal: Any = None
    else:
        metrics_internal = _internal
    trace_module: Any = api.trace
    if (
        metrics_internal is None
        or getattr(trace_module, "_TRACER_PROVIDER", _MISSING) is not None
        or getattr(metrics_internal, "_METER_PROVIDER", _MISSING) is not None
    ):  # pragma: no cover - not the API's layout this was written against

        def public() -> bool:
            tracer = api.trace.get_tracer_provider()
            meter = api.metrics.get_meter_provider()
            return not is_quiet_provider(api, tracer) or not is_quiet_provider(api, meter)

        return public

    def marker() -> bool:
        return (
            trace_module._TRACER_PROVIDER is not None
            or metrics_internal._METER_PROVIDER is not None
        )

    return marker


def is_quiet_provider(api: Api, provider: object) -> bool:
    """Whether *provider* records nothing: a no-op, or the API's global proxy (nothing set)."""
    if isinstance(provider, (api.trace.ProxyTracerProvider, api.trace.NoOpTracerProvider)):
        return True
    if isinstance(provider, api.metrics.NoOpMeterProvider):
        return True
    return type(provider).__name__ == "_ProxyMeterProvider"


_MISSING: Final = object()


def wall_ns(at: float) -> int:
    """The wall-clock time (ns since the epoch) of Trio clock time *at*.

    Span and event timestamps are wall-clock; the registry keeps Trio time
    (which tests jump with a mock clock), so times it recorded are placed
    relative to now.
    """
    return time.time_ns() - int((trio.current_time() - at) * 1e9)
