"""An ``McpHttpApp`` that cannot serve refuses to start, saying why.

Given a registry that is not running (closed already, or never opened),
the app used to start and then answer every call with an error; now the
ASGI lifespan's startup fails with the reason, so the server (hypercorn
here) stops at once instead of serving nothing but errors.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.utils import LifespanFailureError

from trio_mcp_cancel import open_registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer


async def lifespan_startup(app: McpHttpApp) -> MutableMapping[str, Any]:
    """Send ``lifespan.startup`` to *app* and return its answer (shutting down if it started)."""
    to_app, app_receive = trio.open_memory_channel[MutableMapping[str, Any]](2)
    app_send, from_app = trio.open_memory_channel[MutableMapping[str, Any]](2)
    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(app, scope, app_receive.receive, app_send.send)
        await to_app.send({"type": "lifespan.startup"})
        with trio.fail_after(5):
            answer = await from_app.receive()
        if answer["type"] == "lifespan.startup.complete":
            await to_app.send({"type": "lifespan.shutdown"})
            assert (await from_app.receive())["type"] == "lifespan.shutdown.complete"
    return answer


async def test_a_closed_registry_fails_the_startup_with_the_reason() -> None:
    async with open_registry() as registry:
        pass
    answer = await lifespan_startup(McpHttpApp(McpServer(), registry))
    assert answer["type"] == "lifespan.startup.failed"
    assert "registry given to McpHttpApp is not running" in answer["message"]


async def test_a_running_registry_starts_and_a_missing_one_is_opened() -> None:
    async with open_registry() as registry:
        answer = await lifespan_startup(McpHttpApp(McpServer(), registry))
        assert answer["type"] == "lifespan.startup.complete"
    answer = await lifespan_startup(McpHttpApp(McpServer()))
    assert answer["type"] == "lifespan.startup.complete"


async def test_hypercorn_stops_at_startup_instead_of_serving_errors() -> None:
    async with open_registry() as registry:
        pass
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    with pytest.RaisesGroup(
        pytest.RaisesExc(LifespanFailureError, match="not running"), flatten_subgroups=True
    ):
        with trio.fail_after(10):
            await serve(McpHttpApp(McpServer(), registry), config)  # type: ignore[arg-type]
