"""The pytest plugin of trio_mcp_cancel: fixtures for code that uses it.

Registered through the ``pytest11`` entry point, so pytest loads it in any
project that has this library installed; the fixtures need the ``testing``
extra (``pip install 'trio-mcp-cancel[testing]'``: pytest and pytest-trio).
Kept apart from :mod:`trio_mcp_cancel.testing` so that importing the plain
test client (``open_test_client``) never needs pytest.

Fixtures:

``mcp_registry_config``
    The :class:`RegistryConfig` used by ``mcp_registry``: the settings of the
    test's ``mcp_registry`` marker, else the defaults.  Override it in your
    ``conftest.py`` to change it for a whole directory.
``mcp_registry``
    A running :class:`Registry` (inside ``open_registry``) for the test.
``mcp_events``
    An :class:`~trio_mcp_cancel.testing.EventRecorder` subscribed to ``mcp_registry``.

Marker:

``@pytest.mark.mcp_registry(**settings)``
    The :class:`RegistryConfig` settings of the test's ``mcp_registry``
    (``grace_period=0.5``, ``early_cancel_ttl=None``, ...), so a test that
    needs other settings still takes the fixture instead of opening its own
    registry; on a module (``pytestmark``) or class it applies to every test
    there, and the closest one wins.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ._core.registry import Registry, RegistryConfig, open_registry
from .testing import EventRecorder

__all__ = ["mcp_events", "mcp_registry", "mcp_registry_config"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "mcp_registry(**settings): the RegistryConfig settings of the mcp_registry fixture",
    )


@pytest.fixture
def mcp_registry_config(request: pytest.FixtureRequest) -> RegistryConfig:
    """The configuration of ``mcp_registry``: the closest ``mcp_registry`` marker's
    settings, else the defaults; override to change it."""
    marker = request.node.get_closest_marker("mcp_registry")
    return RegistryConfig(**marker.kwargs) if marker else RegistryConfig()


@pytest.fixture
async def mcp_registry(mcp_registry_config: RegistryConfig) -> AsyncIterator[Registry]:
    """A running registry for one test."""
    async with open_registry(mcp_registry_config) as registry:
        yield registry


@pytest.fixture
def mcp_events(mcp_registry: Registry) -> EventRecorder:
    """Every event ``mcp_registry`` emits during the test."""
    return EventRecorder.attach(mcp_registry)
