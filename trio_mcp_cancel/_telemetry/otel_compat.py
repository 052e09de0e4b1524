"""OpenTelemetry's internals in one module, with a version check and an off switch.

**What it is for: a cheap "has a global provider been installed?" probe.**
A server built on the API's global providers (``telemetry=True``) skips the
span work of a request while nothing would record it (see
:meth:`.server.ServerTelemetry.quiet`), and must record from the first
request after the application calls ``set_tracer_provider`` or
``set_meter_provider``, which it may do after the server was built.  So the
question is asked on every request until a provider appears.  The public
API answers it too: ``get_tracer_provider()`` / ``get_meter_provider()``
return the API's proxy until a provider is set, but each call looks
``OTEL_PYTHON_*_PROVIDER`` up in ``os.environ`` while none is, a cost on
every request of every quiet server.  The API has no public "is a provider
set" call, so :func:`provider_probe` reads the two module globals
``set_tracer_provider`` and ``set_meter_provider`` assign
(``opentelemetry.trace._TRACER_PROVIDER`` and
``opentelemetry.metrics._internal._METER_PROVIDER``): a read of two names.

**The version check and the off switch.**  :func:`provider_probe` returns
``None``, and the caller asks the public getters instead, when
``MCP_OTEL_PROVIDER_PROBE=off`` (or ``0``/``false``/``no``) is in the
environment when the server's telemetry is built, when the installed
``opentelemetry-api`` is not a release it was written for
(:data:`CHECKED`), or when the globals are not there.  The behaviour is
the same either way (the first request after a provider is installed
records); only the cost of a quiet request differs.  ``tests/telemetry/
test_otel_compat.py`` pins the names read here, so an API release that
renames them fails there first.

Nothing here is read at import: :func:`global_providers_set` runs when a
server's or a client's telemetry is built.
:func:`is_quiet_provider` uses the public API only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType
from typing import Final

from .._compat import installed, why_off
from .otel import Api

__all__ = [
    "CHECKED",
    "ENV",
    "global_providers_set",
    "is_quiet_provider",
    "probe_default",
    "provider_probe",
]

logger = logging.getLogger("trio_mcp_cancel.telemetry")

#: The environment variable that turns the probe off (``off``, ``0``, ``false``, ``no``).
ENV: Final = "MCP_OTEL_PROVIDER_PROBE"
#: The ``opentelemetry-api`` releases (major, minor; first and last) this
#: module was written for: the ``otel`` extra's floor to the newest tested.
CHECKED: Final = ((1, 27), (1, 45))


def _version() -> str | None:
    return installed("opentelemetry-api")


def probe_default() -> tuple[bool, str]:
    """Whether the private probe may be used here, and why not."""
    why = why_off(ENV, "opentelemetry-api", _version(), CHECKED)
    return not why, why


def provider_probe(trace: ModuleType) -> Callable[[], bool] | None:
    """``() -> bool``: has a global tracer or meter provider been set?  ``None``: ask the getters.

    *trace* is the ``opentelemetry.trace`` module already imported.
    """
    usable, reason = probe_default()
    if not usable:
        logger.debug("OpenTelemetry's provider globals are not read: %s", reason)
        return None
    try:
        from opentelemetry.metrics import _internal as metrics_internal
    except ImportError:
        return None
    missing = object()
    if (
        getattr(trace, "_TRACER_PROVIDER", missing) is not None
        or getattr(metrics_internal, "_METER_PROVIDER", missing) is not None
    ):
        # Not there (renamed), or set already: the caller asked the public
        # getters first, so a set provider is never seen here.
        return None
    tracer_module: ModuleType = trace
    meter_module: ModuleType = metrics_internal

    def probe() -> bool:
        return (
            tracer_module._TRACER_PROVIDER is not None or meter_module._METER_PROVIDER is not None
        )

    return probe


def global_providers_set(api: Api) -> Callable[[], bool]:
    """A cheap probe: has the application installed a global tracer or meter provider?

    Until it does, the API's global providers are proxies with nothing
    behind them, and a server using them records nothing: the dispatcher
    then skips the span work per request (see
    :meth:`.server.ServerTelemetry.quiet`), asking this probe each time
    until a provider appears.  The probe reads the API's own "set" markers
    (:func:`provider_probe`); when those are switched off or not there, it
    asks the public getters, the same answer at the cost of an environment
    lookup per call.  A provider named by ``OTEL_PYTHON_*_PROVIDER`` is
    loaded here, once, by calling the getters.
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
