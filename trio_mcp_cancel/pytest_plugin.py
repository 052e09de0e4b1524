"""The pytest plugin of trio_mcp_cancel: fixtures for code that uses it.

Registered through the ``pytest11`` entry point, so pytest loads it in any
project that has this library installed; the fixtures need the ``testing``
extra (``pip install 'trio-mcp-cancel[testing]'``: pytest and pytest-trio).
Kept apart from :mod:`trio_mcp_cancel.testing` so that importing the plain
test client (``open_test_client``) never needs pytest.

Fixtures:

``mcp_registry_config``
    The :class:`RegistryConfig` used by ``mcp_registry``; override it in
    your ``conftest.py`` to test with other settings.
``mcp_registry``
    A running :class:`Registry` (inside ``open_registry``) for the test.
``mcp_events``
    An :class:`~trio_mcp_cancel.testing.EventRecorder` subscribed to ``mcp_registry``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ._core.registry import Registry, RegistryConfig, open_registry
from .testing import EventRecorder

__all__ = ["mcp_events", "mcp_registry", "mcp_registry_config"]


@pytest.fixture
def mcp_registry_config() -> RegistryConfig:
    """The configuration of ``mcp_registry``; override to change it."""
    return RegistryConfig()


@pytest.fixture
async def mcp_registry(mcp_registry_config: RegistryConfig) -> AsyncIterator[Registry]:
    """A running registry for one test."""
    async with open_registry(mcp_registry_config) as registry:
        yield registry


@pytest.fixture
def mcp_events(mcp_registry: Registry) -> EventRecorder:
    """Every event ``mcp_registry`` emits during the test."""
    return EventRecorder.attach(mcp_registry)
