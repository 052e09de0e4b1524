"""Checks a transport makes before it serves: a failure that belongs at startup.

A registry that is not running cannot track a request, so a transport that
started anyway would answer every call with ``isError`` ("RegistryClosed"):
the server would look up and healthy while nothing works.  Each transport
calls :func:`require_running` before it accepts a connection or a line,
so the mistake is one exception at startup that says how to fix it.
"""

from __future__ import annotations

from .._core.errors import RegistryClosed
from .._core.registry import Registry

__all__ = ["require_running"]


def require_running(registry: Registry, transport: str) -> None:
    """Raise :class:`RegistryClosed` (with the fix) unless *registry* is running."""
    if not registry.running:
        raise RegistryClosed(
            f"{transport}: the registry is not running (never started, or already stopped),"
            " so every call would fail; serve inside `async with open_registry() as registry:`"
            " or start it first with `await nursery.start(registry.run)`"
        )
