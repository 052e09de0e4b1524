"""Opaque cursors on the list methods, both eras (MCP pagination).

Every list (``tools/list``, ``resources/list``, ``resources/templates/list``,
``prompts/list``) is paged by ``McpServer(page_size=)``: ``nextCursor``
while more follow, the same items in order when a client follows it, and
``-32602`` for a cursor the server did not hand out for that list.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import McpError, McpTestClient, open_test_client

LISTS = {
    "tools/list": ("tools", "name"),
    "resources/list": ("resources", "uri"),
    "resources/templates/list": ("resourceTemplates", "uriTemplate"),
    "prompts/list": ("prompts", "name"),
}


def build(n: int, **options: Any) -> McpServer:
    server = McpServer("paging", "1.0", **options)
    for i in range(n):

        async def tool(ctx: Context) -> str:
            return "ok"

        async def resource(ctx: Context) -> str:
            return "text"

        async def template(ctx: Context, id: str) -> str:
            return id

        async def prompt(ctx: Context) -> str:
            return "hello"

        server.tool(f"tool{i}")(tool)
        server.resource(f"test://r/{i}", name=f"r{i}")(resource)
        server.resource_template(f"test://t{i}/{{id}}", name=f"t{i}")(template)
        server.prompt(f"prompt{i}")(prompt)
    return server


async def every_page(client: McpTestClient, method: str) -> list[list[str]]:
    key, field = LISTS[method]
    pages: list[list[str]] = []
    params: dict[str, Any] = {}
    while True:
        result = await client.request(method, params)
        pages.append([item[field] for item in result[key]])
        cursor = result.get("nextCursor")
        if cursor is None:
            return pages
        assert isinstance(cursor, str)
        params = {"cursor": cursor}


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_every_list_pages_through_in_order(
    era: str, autojump_clock: trio.testing.MockClock
) -> None:
    server = build(5, page_size=2)
    async with open_test_client(server, era=era) as client:  # type: ignore[arg-type]
        assert await every_page(client, "tools/list") == [
            ["tool0", "tool1"],
            ["tool2", "tool3"],
            ["tool4"],
        ]
        assert await every_page(client, "resources/list") == [
            ["test://r/0", "test://r/1"],
            ["test://r/2", "test://r/3"],
            ["test://r/4"],
        ]
        templates = await every_page(client, "resources/templates/list")
        assert [len(p) for p in templates] == [2, 2, 1]
        assert templates[2] == ["test://t4/{id}"]
        prompts = await every_page(client, "prompts/list")
        assert [name for p in prompts for name in p] == [f"prompt{i}" for i in range(5)]
        # Our own client follows the cursors.
        assert [t["name"] for t in await client.list_tools()] == [f"tool{i}" for i in range(5)]


async def test_a_list_that_fits_is_one_page(autojump_clock: trio.testing.MockClock) -> None:
    server = build(50)  # the default page size holds any reasonable server
    async with open_test_client(server) as client:
        for method in LISTS:
            assert [len(p) for p in await every_page(client, method)] == [50]
    with pytest.raises(ValueError):
        McpServer(page_size=0)


def forged(payload: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_invalid_cursors_are_invalid_params(
    era: str, autojump_clock: trio.testing.MockClock
) -> None:
    server = build(3, page_size=1)
    async with open_test_client(server, era=era) as client:  # type: ignore[arg-type]
        tools_cursor = (await client.request("tools/list", {}))["nextCursor"]
        bad: list[tuple[str, object]] = [
            ("tools/list", "not a cursor!"),
            ("tools/list", ""),
            ("tools/list", 7),
            ("tools/list", "x" * 1000),
            ("tools/list", forged({"l": "tools", "o": -1})),
            ("tools/list", forged({"l": "tools", "o": 0})),
            ("tools/list", forged({"l": "tools", "o": "1"})),
            ("tools/list", forged(["tools", 1])),
            ("prompts/list", tools_cursor),  # another list's cursor
            ("resources/list", tools_cursor),
            ("resources/templates/list", tools_cursor),
        ]
        for method, cursor in bad:
            with pytest.raises(McpError) as refused:
                await client.request(method, {"cursor": cursor})
            assert refused.value.code == -32602, (method, cursor)
        # A cursor past the end (the list shrank) is an empty last page.
        past = await client.request("tools/list", {"cursor": forged({"l": "tools", "o": 9})})
        assert past["tools"] == [] and "nextCursor" not in past
        # null is the first page.
        first = await client.request("tools/list", {"cursor": None})
        assert [t["name"] for t in first["tools"]] == ["tool0"]
