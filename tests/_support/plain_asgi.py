"""The HTTP app as plain ASGI: hypercorn's shortcuts off, for tests that run both ways.

Every use of hypercorn's internals sits in
:mod:`trio_mcp_cancel.transports.http.hypercorn_compat` behind an off switch
(``MCP_HYPERCORN_FAST_PATHS=off``, or ``McpHttpApp(hypercorn_fast_paths=False)``),
so the app must serve correctly with only what ASGI promises.  A real-socket
behaviour test marked :data:`ALSO_PLAIN_ASGI` runs twice: as configured, and
with the switch off and every shortcut failing the test if it is reached anyway
(``tests/transports/http/test_http_plain_asgi.py`` says which tests, and why).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from trio_mcp_cancel.transports.http import hypercorn_compat

__all__ = ["ALSO_PLAIN_ASGI", "asgi_paths", "fast_paths_off"]

#: Runs a test as configured and again as plain ASGI (the module imports ``asgi_paths``).
ALSO_PLAIN_ASGI = pytest.mark.usefixtures("asgi_paths")


def _unreachable(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a hypercorn shortcut was used with the fast paths off")


def fast_paths_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn the fast paths off by the switch, and make every shortcut fail the test."""
    monkeypatch.setenv(hypercorn_compat.FAST_PATHS_ENV, "off")
    for shortcut in ("receive_now", "can_write_now", "write_now", "head_blocked"):
        monkeypatch.setattr(hypercorn_compat.HypercornSink, shortcut, _unreachable)


@pytest.fixture(params=["as configured", "plain ASGI"])
def asgi_paths(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The app as configured, then as plain ASGI (:func:`fast_paths_off`)."""
    if request.param == "plain ASGI":
        fast_paths_off(monkeypatch)
    yield
