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
from typing import Final

import attrs
import trio

from .otel_compat import provider_probe

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
    :meth:`.server.ServerTelemetry.quiet`), asking this probe each time
    until a provider appears.  The probe reads the API's own "set" markers
    (:mod:`.otel_compat`, the one module that knows the API's internals);
    when those are switched off or not there, it asks the public getters,
    the same answer at the cost of an environment lookup per call.  A
    provider named by ``OTEL_PYTHON_*_PROVIDER`` is loaded here, once, by
    calling the getters.
    """
    tracer = api.trace.get_tracer_provider()
    meter = api.metrics.get_meter_provider()
    if not is_quiet_provider(api, tracer) or not is_quiet_provider(api, meter):
        return lambda: True
    probe = provider_probe(api.trace)
    if probe is not None:
        return probe

    def public() -> bool:
        tracer = api.trace.get_tracer_provider()
        meter = api.metrics.get_meter_provider()
        return not is_quiet_provider(api, tracer) or not is_quiet_provider(api, meter)

    return public


def is_quiet_provider(api: Api, provider: object) -> bool:
    """Whether *provider* records nothing: a no-op, or the API's global proxy (nothing set).

    The API package ships no recording provider (recording is the SDK's),
    so a provider of a class the API's ``trace`` or ``metrics`` package
    defines itself (its no-ops, its proxies) records nothing.  Read from
    the class's module, since the API does not export its meter proxy.
    """
    if isinstance(provider, (api.trace.ProxyTracerProvider, api.trace.NoOpTracerProvider)):
        return True
    if isinstance(provider, api.metrics.NoOpMeterProvider):
        return True
    module = type(provider).__module__
    return any(module == p or module.startswith(p + ".") for p in _API_PACKAGES)


#: The API's packages whose providers record nothing (see :func:`is_quiet_provider`).
_API_PACKAGES: Final = ("opentelemetry.trace", "opentelemetry.metrics")


def wall_ns(at: float) -> int:
    """The wall-clock time (ns since the epoch) of Trio clock time *at*.

    Span and event timestamps are wall-clock; the registry keeps Trio time
    (which tests jump with a mock clock), so times it recorded are placed
    relative to now.
    """
    return time.time_ns() - int((trio.current_time() - at) * 1e9)
