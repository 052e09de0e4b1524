"""The HTTP app as plain ASGI: hypercorn's shortcuts off, the same behaviour.

Every use of hypercorn's internals sits in
:mod:`trio_mcp_cancel.transports.http.hypercorn_compat` behind an off switch
(``MCP_HYPERCORN_FAST_PATHS=off``, or ``McpHttpApp(hypercorn_fast_paths=False)``),
so the app must serve correctly with only what ASGI promises: every body
awaited, every response through a writer task, nothing reached through
``send.__self__``.  The tests here check the switch and the option
themselves, with the switch off.  A representative set of the real-socket
HTTP behaviour tests runs again with it off and every shortcut failing the
test if it is reached anyway (:mod:`_support.plain_asgi`), marked
``ALSO_PLAIN_ASGI`` where they live (``test_http.py``, and
``tests/hostile/test_hostile_sockets.py``): both eras, cancel by
notification and by disconnect, sessions, JSON mode, bad input, a slow
reader disconnected, pipelined requests to a client that never reads,
slow bodies, the admission caps.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.transports.http import hypercorn_compat
from trio_mcp_cancel.transports.http.writer import AsgiSink

from _support.plain_asgi import fast_paths_off


@pytest.fixture(autouse=True)
def _fast_paths_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    fast_paths_off(monkeypatch)
    yield


def test_the_switch_and_the_option_turn_the_fast_paths_off() -> None:
    assert hypercorn_compat.fast_paths_default() == (
        False,
        f"{hypercorn_compat.FAST_PATHS_ENV} turned it off",
    )
    assert not McpHttpApp(McpServer()).hypercorn_fast_paths
    assert type(McpHttpApp(McpServer()).sink) is AsgiSink
    assert McpHttpApp(McpServer(), hypercorn_fast_paths=True).hypercorn_fast_paths
    assert isinstance(
        McpHttpApp(McpServer(), hypercorn_fast_paths=True).sink, hypercorn_compat.HypercornSink
    )


def test_fast_paths_are_on_only_for_hypercorn_releases_they_were_checked_against(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(hypercorn_compat.FAST_PATHS_ENV)
    first, last = hypercorn_compat.FAST_PATHS_CHECKED
    for version, on in (
        (f"{first[0]}.{first[1]}.0", True),
        (f"{last[0]}.{last[1]}.9", True),
        (f"{last[0]}.{last[1] + 1}.0", False),
        ("1.0.0", False),
        (None, False),
    ):
        monkeypatch.setattr(hypercorn_compat, "_version", lambda v=version: v)
        enabled, why = hypercorn_compat.fast_paths_default()
        assert enabled is on, (version, why)
        assert McpHttpApp(McpServer()).hypercorn_fast_paths is on
        assert on or why
