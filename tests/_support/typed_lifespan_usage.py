"""A user's typed use of ``McpServer(lifespan=...)``, checked by ``mypy --strict`` in a test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs

from trio_mcp_cancel.server import Context, McpServer


@attrs.define
class Pool:
    size: int


@asynccontextmanager
async def lifespan(server: McpServer) -> AsyncIterator[Pool]:
    yield Pool(4)


server = McpServer("typed", lifespan=lifespan)


@server.tool
async def size(ctx: Context) -> int:
    pool = ctx.lifespan_as(Pool)
    doubled: int = pool.size * 2
    annotated: Pool = ctx.lifespan
    return doubled + annotated.size
