"""A stdio server that is gone fails every later call at once instead of leaving it waiting."""

from __future__ import annotations

import sys

import pytest
import trio

from trio_mcp_cancel.client import McpTransportError, open_stdio_client

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(60)]


async def test_calls_sent_after_a_stdio_server_exited_fail_instead_of_waiting_forever() -> None:
    # The child exits at once: whichever request finds the stream already
    # ended (read to its end, or a write refused) used to wait forever, as
    # only the calls waiting at that moment were failed.
    async with open_stdio_client([sys.executable, "-c", "pass"], era="modern") as client:
        for _ in range(3):
            with trio.fail_after(10), pytest.raises(McpTransportError):
                await client.request("tools/list")
            await trio.sleep(0.2)


async def test_auto_era_against_a_stdio_server_that_exits_fails_with_the_transport_error() -> None:
    for _ in range(3):  # the exit races the first request: each order must end
        with trio.fail_after(10), pytest.raises(McpTransportError):
            async with open_stdio_client([sys.executable, "-c", "pass"], era="auto"):
                pass
