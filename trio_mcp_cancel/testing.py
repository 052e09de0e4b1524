"""Pytest helpers for code that uses trio_mcp_cancel.

Installed as a pytest plugin (entry point ``trio_mcp_cancel``), so the
fixtures below are available in any project that depends on this library
and uses pytest-trio.  They are built for ``trio.testing.MockClock``: use
pytest-trio's ``autojump_clock`` fixture and grace periods take no real time.

Fixtures:

``mcp_registry_config``
    The :class:`RegistryConfig` used by ``mcp_registry``; override it in
    your ``conftest.py`` to test with other settings.
``mcp_registry``
    A running :class:`Registry` (inside ``open_registry``) for the test.
``mcp_events``
    An :class:`EventRecorder` subscribed to ``mcp_registry``.

Helpers: :func:`advance_past_grace`, :func:`assert_no_leaks`,
:class:`EventRecorder`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TypeVar

import attrs
import pytest
import trio
import trio.testing

from ._core.events import Event
from ._core.registry import Registry, RegistryConfig, open_registry

__all__ = [
    "EventRecorder",
    "advance_past_grace",
    "assert_no_leaks",
    "mcp_events",
    "mcp_registry",
    "mcp_registry_config",
]

E = TypeVar("E")

#: How far past the grace period the helpers move the clock.
EPSILON = 1e-3


@attrs.define(eq=False)
class EventRecorder:
    """Collects every event a registry emits, in order."""

    events: list[Event] = attrs.field(factory=list)

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    @classmethod
    def attach(cls, registry: Registry) -> EventRecorder:
        recorder = cls()
        registry.subscribe(recorder)
        return recorder

    def names(self) -> list[str]:
        return [event.name for event in self.events]

    def of_type(self, event_type: type[E]) -> list[E]:
        return [event for event in self.events if isinstance(event, event_type)]

    def clear(self) -> None:
        self.events.clear()


async def advance_past_grace(
    registry: Registry,
    grace: float | None = None,
    *,
    clock: trio.testing.MockClock | None = None,
) -> None:
    """Let the grace period (the registry's, or *grace*) run out.

    With pytest-trio's ``autojump_clock`` this is a sleep that the clock
    skips over.  Pass a :class:`~trio.testing.MockClock` without autojump as
    *clock* to jump it by hand; the helper then waits until every task has
    reacted.  Raises :class:`ValueError` when there is no grace period to
    run out (``grace_period=None``).
    """
    if grace is None:
        grace = registry.config.grace_period
    if grace is None:
        raise ValueError("the registry never hard-cancels (grace_period=None)")
    if clock is None:
        await trio.sleep(grace + EPSILON)
    else:
        clock.jump(grace + EPSILON)
        await trio.testing.wait_all_tasks_blocked()


def assert_no_leaks(registry: Registry) -> None:
    """Fail unless the registry holds no in-flight request and no row."""
    leaks: list[str] = []
    if registry.in_flight_count:
        leaks.append(f"{registry.in_flight_count} in-flight: {registry.requests()[:5]!r}")
    if registry.row_count:
        leaks.append(f"{registry.row_count} cancellation rows: {registry.rows()[:5]!r}")
    if leaks:
        raise AssertionError("registry leaked " + "; ".join(leaks))


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
