"""The pytest plugin's ``mcp_registry`` marker configures the ``mcp_registry`` fixture.

Nothing in ``tests/conftest.py`` touches these fixtures: what runs here is the
plugin as a user's project gets it through the ``pytest11`` entry point.
"""

from __future__ import annotations

import pytest

from trio_mcp_cancel import Registry, RegistryConfig, RequestCancelledEvent, tracked
from trio_mcp_cancel.testing import EventRecorder

pytestmark = pytest.mark.mcp_registry(grace_period=7.0)


def test_the_marker_is_registered(pytestconfig: pytest.Config) -> None:
    markers = pytestconfig.getini("markers")
    assert any(line.startswith("mcp_registry(**settings):") for line in markers), markers


async def test_a_module_marker_configures_every_test_of_the_module(mcp_registry: Registry) -> None:
    assert mcp_registry.running
    assert mcp_registry.config == RegistryConfig(grace_period=7.0)


@pytest.mark.mcp_registry(grace_period=None, early_cancel_ttl=None)
async def test_the_closest_marker_wins(mcp_registry: Registry) -> None:
    assert mcp_registry.config == RegistryConfig(grace_period=None, early_cancel_ttl=None)


@pytest.mark.parametrize("mcp_registry_config", [RegistryConfig(max_rows=3)])
async def test_a_parametrized_config_wins_over_the_markers(mcp_registry: Registry) -> None:
    assert mcp_registry.config == RegistryConfig(max_rows=3)


async def test_mcp_events_records_what_the_fixtures_registry_emits(
    mcp_registry: Registry, mcp_events: EventRecorder
) -> None:
    async with tracked(1, "session:a", registry=mcp_registry) as request:
        mcp_registry.notify_cancelled("session:a", 1, "stop")
        assert request.cancelled
    [event] = mcp_events.of_type(RequestCancelledEvent)
    assert (event.request_id, event.namespace, event.reason) == (1, "session:a", "stop")
