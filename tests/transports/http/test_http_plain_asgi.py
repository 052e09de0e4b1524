"""The HTTP app as plain ASGI: hypercorn's shortcuts off, the same behaviour.

Every use of hypercorn's internals sits in
:mod:`trio_mcp_cancel.transports.http.hypercorn_compat` behind an off switch
(``MCP_HYPERCORN_FAST_PATHS=off``, or ``McpHttpApp(hypercorn_fast_paths=False)``),
so the app must serve correctly with only what ASGI promises: every body
awaited, every response through a writer task, nothing reached through
``send.__self__``.  This module turns the switch off, makes every shortcut
fail the test if it is reached anyway, and runs a representative set of
the real-socket HTTP behaviour tests again under it: both eras, cancel by
notification and by disconnect, sessions, JSON mode, bad input, a slow
reader disconnected, pipelined requests to a client that never reads,
slow bodies, the admission caps.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

# The behaviour tests run again here (pytest collects what a module imports),
# with their fixtures (hostile/ by its folder: tests/ is on the path, the folders are
# namespace packages).
from hostile.test_hostile_sockets import (  # noqa: F401
    test_pipelined_requests_to_a_client_that_never_reads,
    test_server_cap_on_calls_in_flight,
    test_slow_bodies_get_408_while_others_are_served,
    test_slow_reader_is_disconnected_and_others_are_served,
)
from test_http import (  # noqa: F401
    client,
    serve_app,
    test_bad_input_gets_clear_errors_and_the_server_keeps_serving,
    test_cancel_by_disconnect,
    test_cancel_by_notification,
    test_delete_session_cancels_its_requests,
    test_disconnect_hard_cancels_a_stubborn_tool,
    test_initialize_list_and_call,
    test_json_response_mode,
    test_max_request_time_cancels_from_the_server,
    test_principals_scope_cancels_without_sessions,
    test_sessions_are_required_and_can_end,
    test_silent_cancel_ends_the_stream_without_a_response,
)

from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.transports.http import hypercorn_compat
from trio_mcp_cancel.transports.http.writer import AsgiSink


def _unreachable(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a hypercorn shortcut was used with the fast paths off")


@pytest.fixture(autouse=True)
def fast_paths_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(hypercorn_compat.FAST_PATHS_ENV, "off")
    for shortcut in ("receive_now", "can_write_now", "write_now", "head_blocked"):
        monkeypatch.setattr(hypercorn_compat.HypercornSink, shortcut, _unreachable)
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
