"""A real OpenTelemetry SDK per test (see :mod:`otel_harness`).

The providers are handed to the server (``McpServer(telemetry=Telemetry(...))``),
never installed globally, so nothing leaks from one test to the next.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from otel_harness import Otel, make_otel


@pytest.fixture
def otel() -> Iterator[Otel]:
    recorded = make_otel()
    yield recorded
    recorded.tracer_provider.shutdown()
    recorded.meter_provider.shutdown()
