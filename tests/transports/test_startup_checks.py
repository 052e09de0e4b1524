"""A transport given a registry that is not running refuses to start, with the fix.

Without the check it would start and answer every call with ``isError``
("RegistryClosed"): a server that looks healthy while nothing works.  The
HTTP app's lifespan check is tested with the HTTP app; these are stdio,
WebSocket and the in-memory transport (and so ``open_test_client``).
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry, RegistryClosed, open_registry
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import open_test_client
from trio_mcp_cancel.transports.memory import memory_transport_pair, serve_mcp_memory
from trio_mcp_cancel.websocket import serve_mcp_websocket

from _support.cancellation_tools import probe_server

SERVER = probe_server("startup-checks")


async def stopped_registry() -> Registry:
    """A registry that ran and has stopped since."""
    async with open_registry() as registry:
        pass
    assert not registry.running
    return registry


@pytest.fixture(params=["never started", "stopped"])
async def idle_registry(request: pytest.FixtureRequest) -> Registry:
    return Registry() if request.param == "never started" else await stopped_registry()


async def test_stdio_refuses_to_start_without_a_running_registry(idle_registry: Registry) -> None:
    stdin_send, stdin = trio.testing.memory_stream_one_way_pair()
    stdout, stdout_receive = trio.testing.memory_stream_one_way_pair()
    await stdin_send.send_all(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
    with trio.fail_after(5), pytest.raises(RegistryClosed, match="open_registry") as raised:
        await serve_mcp_stdio(SERVER, idle_registry, stdin=stdin, stdout=stdout)
    assert "serve_mcp_stdio" in str(raised.value)
    # It never read the line, nor answered it.
    assert await stdin.receive_some() == b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n'
    await stdout.aclose()
    assert await stdout_receive.receive_some() == b""


async def test_websocket_refuses_to_start_without_a_running_registry(
    idle_registry: Registry,
) -> None:
    async with trio.open_nursery() as nursery:
        with trio.fail_after(5), pytest.raises(RegistryClosed, match="not running"):
            await nursery.start(serve_mcp_websocket, SERVER, idle_registry, "127.0.0.1", 0)


async def test_the_memory_transport_refuses_to_start_without_a_running_registry(
    idle_registry: Registry,
) -> None:
    _, server_end = memory_transport_pair()
    with trio.fail_after(5), pytest.raises(RegistryClosed, match="serve_mcp_memory"):
        await serve_mcp_memory(SERVER, server_end, idle_registry)


async def test_open_test_client_with_a_registry_not_running_fails_at_once(
    idle_registry: Registry,
) -> None:
    with trio.fail_after(5), pytest.raises(RegistryClosed, match="registry is not running"):
        async with open_test_client(SERVER, registry=idle_registry):
            raise AssertionError("the block must not run")


async def test_the_same_transports_serve_once_the_registry_runs(mcp_registry: Registry) -> None:
    async with open_test_client(SERVER, registry=mcp_registry) as client:
        result = await client.call_tool("echo", {"text": "up"})
    assert result["content"][0]["text"] == "up"
