"""A real OpenTelemetry SDK per test (see :mod:`_support.otel`).

The providers are handed to the server (``McpServer(telemetry=Telemetry(...))``),
never installed globally, so nothing leaks from one test to the next.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest


def _sdk_installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.sdk") is not None
    except ModuleNotFoundError:  # no opentelemetry at all
        return False


if not _sdk_installed():
    # The library runs without OpenTelemetry; only these tests need the SDK.
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture
def otel() -> Iterator[Any]:
    from _support.otel import make_otel

    recorded = make_otel()
    yield recorded
    recorded.tracer_provider.shutdown()
    recorded.meter_provider.shutdown()
