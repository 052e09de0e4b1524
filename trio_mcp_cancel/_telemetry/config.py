"""The public switch: ``McpServer(telemetry=...)``."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["Telemetry"]


@attrs.frozen(kw_only=True)
class Telemetry:
    """Where a server's spans and metrics go (``McpServer(telemetry=Telemetry(...))``).

    ``McpServer(telemetry=True)`` (the default) is ``Telemetry()``: the
    global tracer and meter providers, whatever the application installed
    (a no-op until it installs one).  Pass providers to keep one server's
    telemetry apart (tests do, so no global state leaks between them);
    ``telemetry=False`` turns it off.  Without ``opentelemetry-api``
    installed it is off whatever is asked.
    """

    tracer_provider: Any = None
    """An ``opentelemetry.trace.TracerProvider``; ``None``: the global one."""
    meter_provider: Any = None
    """An ``opentelemetry.metrics.MeterProvider``; ``None``: the global one."""
