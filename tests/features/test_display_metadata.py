"""Display metadata: the server's title, description, websiteUrl and icons; items' titles and icons.

Shown in ``initialize`` (legacy) and ``server/discover`` (modern), and in
the lists; icons are checked at registration (scheme, type, sizes, count,
bytes).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from trio_mcp_cancel import Registry
from trio_mcp_cancel._protocol.metadata import MAX_ICON_SRC_BYTES, MAX_ICONS
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.testing import open_test_client

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
ICON = {"src": "https://example.com/icon.png", "mimeType": "image/png", "sizes": ["48x48"]}
DARK = {"src": PNG, "mimeType": "image/png", "sizes": ["any"], "theme": "dark"}


def make_server() -> McpServer:
    server = McpServer(
        "shop",
        "2.0",
        title="The Shop",
        description="Sells things.",
        website_url="https://shop.example.com/docs",
        icons=[ICON, DARK],
    )

    @server.tool(title="Buy a thing", icons=[ICON])
    async def buy() -> str:
        return "bought"

    @server.resource("shop://catalog", title="Catalog", icons=[DARK])
    async def catalog() -> str:
        return "items"

    @server.resource_template("shop://items/{id}", title="Item", icons=[ICON])
    async def item(id: str) -> str:
        return id

    @server.prompt(title="Greeting", icons=[ICON])
    async def greet() -> str:
        return "hello"

    return server


SERVER_INFO = {
    "name": "shop",
    "version": "2.0",
    "title": "The Shop",
    "description": "Sells things.",
    "websiteUrl": "https://shop.example.com/docs",
    "icons": [ICON, DARK],
}


async def test_legacy_initialize_carries_the_whole_server_info(mcp_registry: Registry) -> None:
    async with open_test_client(make_server(), registry=mcp_registry, era="legacy") as client:
        assert client.initialize_result is not None
        assert client.initialize_result["serverInfo"] == SERVER_INFO


async def test_modern_discover_carries_the_whole_server_info_and_other_results_the_name(
    mcp_registry: Registry,
) -> None:
    async with open_test_client(make_server(), registry=mcp_registry) as client:
        discovered = await client.request("server/discover")
        meta = discovered["_meta"]["io.modelcontextprotocol/serverInfo"]
        assert meta == SERVER_INFO
        listed = await client.request("tools/list")
        assert listed["_meta"]["io.modelcontextprotocol/serverInfo"] == {
            "name": "shop",
            "version": "2.0",
        }


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_the_lists_carry_titles_and_icons(era: Any, mcp_registry: Registry) -> None:
    async with open_test_client(make_server(), registry=mcp_registry, era=era) as client:
        (tool,) = (await client.request("tools/list"))["tools"]
        (resource,) = (await client.request("resources/list"))["resources"]
        (template,) = (await client.request("resources/templates/list"))["resourceTemplates"]
        (prompt,) = (await client.request("prompts/list"))["prompts"]
    assert (tool["title"], tool["icons"]) == ("Buy a thing", [ICON])
    assert (resource["title"], resource["icons"]) == ("Catalog", [DARK])
    assert (template["title"], template["icons"]) == ("Item", [ICON])
    assert (prompt["title"], prompt["icons"]) == ("Greeting", [ICON])


async def test_a_server_without_metadata_sends_only_its_name_and_version(
    mcp_registry: Registry,
) -> None:
    async with open_test_client(McpServer("bare", "1"), registry=mcp_registry, era="legacy") as c:
        assert c.initialize_result is not None
        assert c.initialize_result["serverInfo"] == {"name": "bare", "version": "1"}


HOSTILE_ICONS: list[tuple[object, str]] = [
    ([{"src": "http://example.com/i.png"}], "https"),
    ([{"src": "javascript:alert(1)"}], "https"),
    ([{"src": "file:///etc/passwd"}], "https"),
    ([{"src": "https://user:pw@example.com/i.png"}], "credentials"),
    ([{"src": "https:///no-host"}], "host"),
    ([{"src": "https://example.com/a b.png"}], "whitespace"),
    ([{"src": "data:text/html;base64,PGI+"}], "data:image"),
    ([{"src": "data:image/png;base64,@@@"}], "data:image"),
    ([{"src": "data:image/png;base64,abc"}], "invalid base64"),
    ([{"src": PNG, "mimeType": "image/svg+xml"}], "differs"),
    ([{"src": ICON["src"], "mimeType": "text/html"}], "image/"),
    ([{"src": ICON["src"], "sizes": "48x48"}], "list"),
    ([{"src": ICON["src"], "sizes": ["big"]}], "WxH"),
    ([{"src": ICON["src"], "theme": "neon"}], "theme"),
    ([{"src": ICON["src"], "onclick": "x"}], "unknown icon field"),
    ([{}], "needs 'src'"),
    (["https://example.com/i.png"], "mapping"),
    ({"src": "https://example.com/i.png"}, "list"),
    ([ICON] * (MAX_ICONS + 1), f"at most {MAX_ICONS}"),
    ([{"src": "data:image/png;base64," + "A" * MAX_ICON_SRC_BYTES}], "bytes"),
    ([{"src": "data:image/png;base64," + "A" * (MAX_ICON_SRC_BYTES - 100)}] * 3, "bytes"),
]


@pytest.mark.parametrize(("icons", "says"), HOSTILE_ICONS)
def test_hostile_icons_are_refused_at_registration_with_a_clear_error(
    icons: Any, says: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=says):
        McpServer(icons=icons)
    server = McpServer()
    for register in (
        lambda: server.tool(icons=icons),
        lambda: server.resource("test://x", icons=icons),
        lambda: server.resource_template("test://x/{id}", icons=icons),
        lambda: server.prompt(icons=icons),
    ):
        with pytest.raises((ValueError, TypeError), match=says):
            register()


@pytest.mark.parametrize(
    "url", ["ftp://example.com", "javascript:alert(1)", "https://", "https://a b", 42]
)
def test_a_website_url_that_is_not_an_http_url_is_refused(url: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        McpServer(website_url=url)


def test_an_overlong_title_is_refused() -> None:
    with pytest.raises(ValueError, match="title"):
        McpServer(title="x" * 10_000)
