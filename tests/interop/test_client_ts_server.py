"""Our client against the official TypeScript SDK v2 server (``@modelcontextprotocol/server`` 2.4).

``conformance/ts_server_v2.mjs`` serves both eras from one factory
(``createMcpHandler``: modern per request, legacy through its stateless
fallback) on 127.0.0.1 and prints ``slow aborted`` when its ``slow``
tool's abort signal fires.  Against it: a call with progress, a cancel the
TypeScript handler sees, and (modern) an MRTR elicitation answered by our
client's handler.  The legacy fallback is stateless (a fresh server per
request, no session), so it forgets the capabilities ``initialize``
declared and cannot elicit: that part is the Python SDK's legacy test
(tests/interop/test_client_interop.py).

Node tooling: ``python3 dev.py conformance`` (into ``.tools/``); skipped
locally when missing, installed under ``CI=true``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_mcp_cancel.client import ClientHandlers, open_http_client

from _support.repo_paths import ROOT

sys.path.insert(0, str(ROOT / "conformance"))
import node_tools

pytestmark = [pytest.mark.node, pytest.mark.subprocess]

SCRIPT = ROOT / "conformance" / "ts_server_v2.mjs"
BOUND = 60


class Output:
    """The server's stdout, read as it comes."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.text = ""

    async def wait_for(self, needle: str) -> None:
        while needle not in self.text:
            chunk = await self.stream.receive_some(4096)
            assert chunk, f"the TypeScript server exited before printing {needle!r}: {self.text}"
            self.text += chunk.decode()


@asynccontextmanager
async def ts_server(node: Path) -> AsyncIterator[tuple[str, Output]]:
    # ES modules resolve packages next to the script: run it from .tools/.
    script = shutil.copy(SCRIPT, node_tools.TOOLS / SCRIPT.name)
    async with trio.open_nursery() as nursery:
        run = partial(
            trio.run_process,
            [str(node), str(script)],
            cwd=node_tools.TOOLS,
            env=node_tools.env(),
            stdout=subprocess.PIPE,
            check=False,
        )
        process: trio.Process = await nursery.start(run)
        assert process.stdout is not None
        output = Output(process.stdout)
        await output.wait_for("\n")
        port = int(output.text.split()[1])
        try:
            yield f"http://127.0.0.1:{port}/mcp", output
        finally:
            process.kill()


async def answer_name(params: dict[str, Any]) -> dict[str, Any]:
    assert params["message"] == "Name?"
    return {"action": "accept", "content": {"name": "Ada"}}


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_typescript_v2_server_call_progress_cancel_and_mrtr(node: Path, era: Any) -> None:
    with trio.fail_after(BOUND):
        async with (
            ts_server(node) as (url, output),
            open_http_client(
                url, era=era, handlers=ClientHandlers(elicitation=answer_name)
            ) as client,
        ):
            progress: list[dict[str, Any]] = []
            result = await client.call_tool("echo", {"text": "x"}, progress=progress.append)
            assert result["content"] == [{"type": "text", "text": "x"}]
            assert [(p["progress"], p["message"]) for p in progress] == [(1, "half")]
            if era == "modern":  # MRTR: input_required, answered, the call retried
                result = await client.call_tool("ask")
                assert result["content"] == [{"type": "text", "text": "hi Ada"}]
            started: list[dict[str, Any]] = []
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def slow() -> None:
                    with scope:
                        await client.call_tool("slow", progress=started.append)

                nursery.start_soon(slow)
                while not started:
                    await trio.sleep(0.01)
                scope.cancel()
            await output.wait_for("slow aborted")  # the TypeScript handler saw the cancel
            assert (await client.call_tool("echo", {"text": "y"}))["content"][0]["text"] == "y"
