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

Nothing here is imported or read at import: :func:`provider_probe` runs
when a server's telemetry is built.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from importlib import metadata
from types import ModuleType
from typing import Final

__all__ = ["CHECKED", "ENV", "probe_default", "provider_probe"]

logger = logging.getLogger("trio_mcp_cancel.telemetry")

#: The environment variable that turns the probe off (``off``, ``0``, ``false``, ``no``).
ENV: Final = "MCP_OTEL_PROVIDER_PROBE"
#: The ``opentelemetry-api`` releases (major, minor; first and last) this
#: module was written for: the ``otel`` extra's floor to the newest tested.
CHECKED: Final = ((1, 27), (1, 45))
_OFF: Final = frozenset({"0", "off", "false", "no"})


def _version() -> str | None:
    try:
        return metadata.version("opentelemetry-api")
    except metadata.PackageNotFoundError:
        return None


def _parse(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts)


def probe_default() -> tuple[bool, str]:
    """Whether the private probe may be used here, and why not."""
    if os.environ.get(ENV, "").strip().lower() in _OFF:
        return False, f"{ENV} turned it off"
    version = _version()
    if version is None:
        return False, "opentelemetry-api is not installed"
    first, last = CHECKED
    if not first <= _parse(version) <= last:
        return False, f"opentelemetry-api {version} is not a release it was written for"
    return True, ""


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
