"""An official MCP Python SDK server (``mcp`` 2.x) for the client's interop tests.

``echo`` reports progress; ``slow`` waits until cancelled and records it
(in *seen*, and on stderr when run as a stdio server); ``ask`` needs a
name, which the SDK elicits from the client: as an MRTR ``input_required``
round in the modern era, as an ``elicitation/create`` request to the
client in the legacy era.  ``python -m _support.sdk_server_app`` (from ``tests/``)
serves it on stdio.
Used by ``tests/interop/test_client_interop.py``.
"""

from __future__ import annotations

import sys
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from pydantic import BaseModel


class Name(BaseModel):
    name: str


def who() -> Elicit[Name]:
    return Elicit("Name?", Name)


def make(seen: list[str]) -> MCPServer:
    mcp = MCPServer("sdk")

    @mcp.tool()
    async def echo(text: str, ctx: Context) -> str:
        await ctx.report_progress(1, 2, "half")
        return text

    @mcp.tool()
    async def slow(ctx: Context) -> str:
        await ctx.report_progress(1, 10, "started")
        try:
            await anyio.sleep(600)
        except anyio.get_cancelled_exc_class():
            seen.append("slow cancelled")
            print("slow cancelled", file=sys.stderr, flush=True)
            raise
        return "not cancelled"

    @mcp.tool()
    async def ask(name: Annotated[Name, Resolve(who)]) -> str:
        return f"hi {name.name}"

    return mcp


if __name__ == "__main__":
    make([]).run("stdio")
