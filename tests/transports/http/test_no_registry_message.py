""" "no registry" is said only when there never was one.

An app served without a lifespan, given no registry and inside no
``open_registry()`` cannot work: it answers 503 and logs how to fix it.
An app whose lifespan ran has had its registry: a request that reaches it
as (or after) the lifespan ends is shutdown, not a misconfiguration, and
must not log the misleading advice.
"""

from __future__ import annotations

import logging

import pytest
import trio

from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer

from _support.asgi import AsgiClient, initialize_message, legacy_headers

NO_REGISTRY = "no registry: run the app under an ASGI server with lifespan support"


def make_app() -> McpHttpApp:
    server = McpServer("registry-check")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    return McpHttpApp(server)


async def test_an_app_served_without_lifespan_or_registry_logs_it_and_answers_503(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app()
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        with caplog.at_level(logging.DEBUG, logger="trio_mcp_cancel.http"):
            reply = await client.post(legacy_headers(version=None), initialize_message())
    assert reply.status == 503
    assert b"no registry" in reply.content
    assert any(NO_REGISTRY in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


async def test_a_request_reaching_an_app_whose_lifespan_ended_logs_no_registry_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app()
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        async with client.lifespan():
            served = await client.post(legacy_headers(version=None), initialize_message())
            assert served.status == 200
        with caplog.at_level(logging.DEBUG, logger="trio_mcp_cancel.http"):
            late = await client.post(legacy_headers(version=None), initialize_message())
    assert late.status == 503
    assert b"no registry" not in late.content
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not any("no registry" in message for message in errors), errors
