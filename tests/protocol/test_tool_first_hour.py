"""What a new user's first tools do: argument strictness, rich return types, no docstring.

Arguments are strict by default (the published schema is what passes) and
lax on request (``McpServer(lax_arguments=True)``, pydantic's lax mode as the
official SDK uses); a return annotation pydantic can serialize is sent as its
JSON form (an annotation it cannot is refused at registration, not at the
first call); a tool without a docstring sends no made-up description.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import logging
import pathlib
import uuid
from typing import Any, Literal

import pydantic
import pytest
import trio.testing
from typing_extensions import TypedDict

from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import open_test_client

Era = Literal["modern", "legacy"]
ERAS: list[Era] = ["modern", "legacy"]


class Colour(enum.Enum):
    RED = "red"


class Point(pydantic.BaseModel):
    x: int


@dataclasses.dataclass
class Pair:
    left: datetime.date
    right: uuid.UUID


class Named(TypedDict):
    when: datetime.datetime


WHEN = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def adder(**options: Any) -> McpServer:
    server = McpServer("first-hour", **options)

    @server.tool()
    async def add(ctx: Context, a: int, b: int = 0) -> int:
        """Adds."""
        return a + b

    return server


def text_of(result: dict[str, Any]) -> str:
    assert result["isError"] is False, result
    text: str = result["content"][0]["text"]
    return text


# -- arguments ------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_arguments_are_strict_by_default(
    autojump_clock: trio.testing.MockClock, era: Era
) -> None:
    async with open_test_client(adder(), era=era) as client:
        for arguments in ({"a": "1"}, {"a": 2.0}, {"a": True}):
            refused = await client.call_tool("add", arguments)
            assert refused["isError"] is True
            assert "'a': Input should be a valid integer" in refused["content"][0]["text"]
        assert text_of(await client.call_tool("add", {"a": 1, "b": 2})) == "3"


@pytest.mark.parametrize("era", ERAS)
async def test_lax_arguments_convert_numbers_sent_as_strings_or_whole_floats(
    autojump_clock: trio.testing.MockClock, era: Era
) -> None:
    async with open_test_client(adder(lax_arguments=True), era=era) as client:
        assert text_of(await client.call_tool("add", {"a": "1", "b": 2.0})) == "3"
        assert text_of(await client.call_tool("add", {"a": " 4 "})) == "4"


@pytest.mark.parametrize(
    "bad",
    ["1.5", 2.5, "one", "9" * 5000, "1e400", None, [1], {"a": 1}, "\x00", "\uff11"],
)
async def test_lax_arguments_still_refuse_what_is_not_a_whole_number(
    autojump_clock: trio.testing.MockClock, bad: object
) -> None:
    """Hostile input: lax mode converts, it never guesses, and a huge digit string is refused
    by pydantic's own bound rather than parsed."""
    async with open_test_client(adder(lax_arguments=True)) as client:
        refused = await client.call_tool("add", {"a": bad})
        assert refused["isError"] is True
        assert refused["content"][0]["text"].startswith("Invalid arguments for tool 'add'")
        assert len(refused["content"][0]["text"]) <= 1000


async def test_lax_arguments_leave_the_published_schema_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        open_test_client(adder()) as strict,
        open_test_client(adder(lax_arguments=True)) as lax,
    ):
        assert (await strict.list_tools())[0]["inputSchema"] == (await lax.list_tools())[0][
            "inputSchema"
        ]


# -- return values ----------------------------------------------------------------------


def rich_server() -> McpServer:
    server = McpServer("returns")

    @server.tool()
    async def when(ctx: Context) -> datetime.datetime:
        return WHEN

    @server.tool()
    async def day(ctx: Context) -> datetime.date:
        return WHEN.date()

    @server.tool()
    async def ident(ctx: Context) -> uuid.UUID:
        return uuid.UUID(int=5)

    @server.tool()
    async def money(ctx: Context) -> decimal.Decimal:
        return decimal.Decimal("1.10")

    @server.tool()
    async def where(ctx: Context) -> pathlib.PurePosixPath:
        return pathlib.PurePosixPath("/srv/data")

    @server.tool()
    async def colour(ctx: Context) -> Colour:
        return Colour.RED

    @server.tool()
    async def days(ctx: Context) -> list[datetime.date]:
        return [WHEN.date()]

    @server.tool()
    async def stamps(ctx: Context) -> dict[str, datetime.datetime]:
        return {"at": WHEN}

    @server.tool()
    async def point(ctx: Context) -> Point:
        return Point(x=1)

    @server.tool()
    async def pair(ctx: Context) -> Pair:
        return Pair(WHEN.date(), uuid.UUID(int=1))

    @server.tool()
    async def named(ctx: Context) -> Named:
        return {"when": WHEN}

    return server


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(
    ("tool", "text"),
    [
        ("when", "2026-01-02T03:04:05Z"),
        ("day", "2026-01-02"),
        ("ident", "00000000-0000-0000-0000-000000000005"),
        ("money", "1.10"),
        ("where", "/srv/data"),
        ("colour", "red"),
        ("days", '["2026-01-02"]'),
    ],
)
async def test_a_return_type_pydantic_can_serialize_is_sent_as_its_json_form(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    era: Era,
    tool: str,
    text: str,
) -> None:
    async with open_test_client(rich_server(), era=era) as client:
        assert text_of(await client.call_tool(tool)) == text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("era", ERAS)
async def test_rich_values_inside_structured_results_are_serialized_too(
    autojump_clock: trio.testing.MockClock, era: Era
) -> None:
    async with open_test_client(rich_server(), era=era) as client:
        stamps = await client.call_tool("stamps")
        assert stamps["structuredContent"] == {"at": "2026-01-02T03:04:05Z"}
        assert (await client.call_tool("point"))["structuredContent"] == {"x": 1}
        pair = await client.call_tool("pair")
        assert pair["structuredContent"] == {
            "left": "2026-01-02",
            "right": "00000000-0000-0000-0000-000000000001",
        }
        named = await client.call_tool("named")
        assert named["structuredContent"] == {"when": "2026-01-02T03:04:05Z"}


class Opaque:
    """Nothing pydantic knows how to serialize."""


def test_a_return_type_pydantic_cannot_serialize_is_refused_at_registration() -> None:
    server = McpServer()
    with pytest.raises(TypeError, match=r"tool 'opaque': the return type Opaque cannot be turned"):

        @server.tool()
        async def opaque(ctx: Context) -> Opaque:
            return Opaque()

    assert "opaque" not in server.registration.tools


async def test_a_value_other_than_the_annotation_still_answers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A tool that returns a str where it said ``datetime`` is answered, not failed."""
    server = McpServer()

    @server.tool()
    async def liar(ctx: Context) -> datetime.datetime:
        return "not a date"  # type: ignore[return-value]

    async with open_test_client(server) as client:
        assert text_of(await client.call_tool("liar")) == "not a date"


# -- descriptions -----------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_a_tool_without_a_docstring_has_no_description(
    autojump_clock: trio.testing.MockClock, era: Era
) -> None:
    server = McpServer()

    @server.tool()
    async def bare(ctx: Context) -> str:
        return "x"

    @server.tool()
    async def documented(ctx: Context) -> str:
        """Says x."""
        return "x"

    @server.tool(description="Given.")
    async def given(ctx: Context) -> str:
        return "x"

    async with open_test_client(server, era=era) as client:
        tools = {tool["name"]: tool for tool in await client.list_tools()}
    assert "description" not in tools["bare"]
    assert tools["documented"]["description"] == "Says x."
    assert tools["given"]["description"] == "Given."
