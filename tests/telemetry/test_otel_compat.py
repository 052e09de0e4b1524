"""The OpenTelemetry internals the provider probe reads are still there, and it can be switched off.

``trio_mcp_cancel._telemetry.otel_compat`` reads the two module globals
``set_tracer_provider`` and ``set_meter_provider`` assign.  An API release
that renames or stops assigning them must fail here (re-check the module,
then widen ``CHECKED``); users meanwhile get the public getters.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import types
from importlib import metadata

import pytest
from opentelemetry import metrics, trace

from trio_mcp_cancel._telemetry import otel_compat
from trio_mcp_cancel._telemetry.otel import load
from trio_mcp_cancel._telemetry.otel_compat import (
    CHECKED,
    ENV,
    global_providers_set,
    is_quiet_provider,
    probe_default,
    provider_probe,
)

SET_LATER = textwrap.dedent(
    """
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import _internal
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from trio_mcp_cancel._telemetry.otel_compat import provider_probe

    assert trace._TRACER_PROVIDER is None and _internal._METER_PROVIDER is None
    probe = provider_probe(trace)
    assert probe is not None and not probe()
    tracer_provider = TracerProvider()
    trace.set_tracer_provider(tracer_provider)
    assert trace._TRACER_PROVIDER is tracer_provider and probe()
    meter_provider = MeterProvider()
    metrics.set_meter_provider(meter_provider)
    assert _internal._METER_PROVIDER is meter_provider
    print("ok")
    """
)


def test_the_installed_api_is_a_release_the_probe_was_written_for() -> None:
    version = metadata.version("opentelemetry-api")
    major_minor = tuple(int(p) for p in version.split(".")[:2])
    first, last = CHECKED
    assert first <= major_minor <= last, f"re-check otel_compat against {version}"
    assert probe_default() == (True, "")


def test_the_globals_it_reads_are_the_ones_the_setters_assign() -> None:
    # In a process of its own: a global provider can be installed once only.
    done = subprocess.run(
        [sys.executable, "-c", SET_LATER], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_api_proxies_record_nothing_and_the_sdk_does() -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    api = load()
    assert api is not None
    assert is_quiet_provider(api, trace.get_tracer_provider())
    assert is_quiet_provider(api, metrics.get_meter_provider())  # the API's meter proxy
    assert not is_quiet_provider(api, MeterProvider())


def test_with_the_probe_off_the_public_getters_answer(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENV, "off")
    with caplog.at_level(logging.DEBUG, logger="trio_mcp_cancel.telemetry"):
        assert provider_probe(trace) is None
    assert f"{ENV} turned it off" in caplog.text
    api = load()
    assert api is not None
    probe = global_providers_set(api)
    assert probe.__name__ == "public" and not probe()


def test_an_unchecked_api_release_gets_the_public_getters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otel_compat, "_version", lambda: "2.0.0")
    why = "opentelemetry-api 2.0.0 is not a release it was checked against"
    assert probe_default() == (False, why)
    assert provider_probe(trace) is None


def test_an_api_that_renamed_its_globals_gets_the_public_getters() -> None:
    renamed = types.ModuleType("opentelemetry.trace")
    assert provider_probe(renamed) is None


@pytest.mark.subprocess
@pytest.mark.parametrize("module", ["trace", "metrics"])
def test_with_the_probe_off_a_provider_installed_later_is_still_used_from_the_next_request(
    module: str,
) -> None:
    from _support.otel import LATE_PROVIDER

    done = subprocess.run(
        [sys.executable, "-c", LATE_PROVIDER.format(module=module)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, ENV: "off"},
    )
    assert done.returncode == 0, done.stderr
    recorded = {"trace": "tools/call echo", "metrics": "mcp.server.operation.duration"}
    assert done.stdout.strip() == recorded[module]  # the call after, not the one before
