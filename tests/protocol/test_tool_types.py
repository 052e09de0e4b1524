"""Tool parameters and results from type hints (pydantic): exact schemas, validation, conversion.

The module under test (tests/_support/tool_types_module.py) is written the way a
FastMCP user writes one: no context parameter, bare ``@server.tool``,
``Optional``, ``list[str]``, ``Literal``, an enum, a dataclass, a pydantic
model, a ``datetime`` and a model return.  It is served in memory, over HTTP
(the ASGI app, modern era) and over stdio (memory streams), and every
transport must show the same schemas and the same validation.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import pathlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, NamedTuple

import pytest
import trio
import trio.testing
from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # what pydantic validates on Python < 3.12

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import open_test_client

from _support import tool_types_module as typed
from _support.asgi import headers_of, modern_request, served

BOOK_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "person": {"$ref": "#/$defs/Person"},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "color": {"$ref": "#/$defs/Color"},
        "where": {"$ref": "#/$defs/Point"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "seats": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10,
            "description": "how many seats",
            "default": 1,
        },
    },
    "additionalProperties": False,
    "required": ["person", "at", "tags", "mode", "color", "where"],
    "$defs": {
        "Color": {"title": "Color", "type": "string", "enum": ["red", "green"]},
        "Person": {
            "title": "Person",
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
            "required": ["name", "age"],
        },
        "Point": {
            "title": "Point",
            "type": "object",
            "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
            "required": ["x"],
        },
    },
}
BOOK_OUTPUT: dict[str, Any] = {
    "title": "Booking",
    "type": "object",
    "properties": {
        "who": {"type": "string"},
        "at": {"type": "string", "format": "date-time"},
        "seats": {"type": "integer"},
    },
    "required": ["who", "at", "seats"],
}
GOOD: dict[str, Any] = {
    "person": {"name": "Ada", "age": 36},
    "at": "2026-12-03T17:00:00Z",
    "tags": ["window"],
    "mode": "fast",
    "color": "green",
    "where": {"x": 3},
    "seats": 2,
}
BAD: dict[str, Any] = {
    "person": {"name": "Ada", "age": -1},
    "at": "tomorrow",
    "tags": ["window", 7],
    "mode": "sideways",
    "color": "blue",
    "where": {"x": "3"},
}
#: Each field of BAD, by its location, as the isError text names it.
BAD_FIELDS = ("'person.age'", "'at'", "'tags.1'", "'mode'", "'color'", "'where.x'")

Send = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@asynccontextmanager
async def over_http(registry: Registry, server: McpServer) -> AsyncIterator[Send]:
    async with served(McpHttpApp(server, registry)) as client:

        async def send(message: dict[str, Any]) -> dict[str, Any]:
            answer = (await client.post(headers_of(message), message)).answer()
            assert isinstance(answer, dict)
            return answer

        yield send


@asynccontextmanager
async def over_stdio(registry: Registry, server: McpServer) -> AsyncIterator[Send]:
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_mcp_stdio(
                server, registry, stdin=server_end, stdout=server_end, task_status=task_status
            )
        )
        buffer = bytearray()

        async def send(message: dict[str, Any]) -> dict[str, Any]:
            await client_end.send_all(json.dumps(message).encode() + b"\n")
            while b"\n" not in buffer:
                buffer.extend(await client_end.receive_some())
            line, _, rest = bytes(buffer).partition(b"\n")
            buffer[:] = rest
            answer = json.loads(line)
            assert answer["id"] == message["id"]
            return answer  # type: ignore[no-any-return]

        yield send
        await client_end.send_eof()


@asynccontextmanager
async def in_memory(registry: Registry, server: McpServer) -> AsyncIterator[Send]:
    async with open_test_client(server, registry=registry) as client:

        async def send(message: dict[str, Any]) -> dict[str, Any]:
            params = {k: v for k, v in message["params"].items() if k != "_meta"}
            return {"result": await client.request(message["method"], params)}

        yield send


TRANSPORTS = {"memory": in_memory, "http": over_http, "stdio": over_stdio}


@pytest.mark.mcp_registry(grace_period=2)
@pytest.mark.parametrize("transport", list(TRANSPORTS))
async def test_a_fastmcp_style_module_is_listed_validated_and_converted_on_every_transport(
    transport: str, mcp_registry: Registry
) -> None:
    typed.RECEIVED.clear()
    async with TRANSPORTS[transport](mcp_registry, typed.server) as send:
        listed = await send(modern_request(1, "tools/list"))
        wrong = await send(modern_request(2, "tools/call", {"name": "book", "arguments": BAD}))
        right = await send(modern_request(3, "tools/call", {"name": "book", "arguments": GOOD}))
    (book,) = listed["result"]["tools"]
    assert book == {
        "name": "book",
        "description": "Book seats for a person.",
        "inputSchema": BOOK_INPUT,
        "outputSchema": BOOK_OUTPUT,
    }
    # Wrong arguments: a tool result with isError (SEP-1303) naming every field.
    assert wrong["result"]["isError"] is True
    text = wrong["result"]["content"][0]["text"]
    assert text.startswith("Invalid arguments for tool 'book': ")
    for field in BAD_FIELDS:
        assert field in text, (field, text)
    # The right ones arrive converted; the model return is the structured content.
    assert right["result"]["isError"] is False
    (received,) = typed.RECEIVED
    assert received == {
        "person": typed.Person(name="Ada", age=36),
        "at": datetime.datetime(2026, 12, 3, 17, 0, tzinfo=datetime.UTC),
        "tags": ["window"],
        "mode": "fast",
        "color": typed.Color.GREEN,
        "where": typed.Point(3, 0),
        "note": None,
        "seats": 2,
    }
    assert isinstance(received["person"], typed.Person)
    structured = {"who": "Ada", "at": "2026-12-03T17:00:00Z", "seats": 2}
    assert right["result"]["structuredContent"] == structured
    assert json.loads(right["result"]["content"][0]["text"]) == structured


# -- schema rules, one type at a time ------------------------------------------------


class Window(TypedDict):
    width: int
    height: int


class Size(NamedTuple):
    width: int
    height: int


def schema_of(fn: Callable[..., Any]) -> dict[str, Any]:
    server = McpServer()
    server.tool(fn)
    (tool,) = server.registration.list_tools()
    return tool["inputSchema"]  # type: ignore[no-any-return]


def test_unions_tuples_dicts_uuids_paths_dates_and_typeddicts_get_their_schemas() -> None:
    def many(
        a: int | str,
        b: tuple[int, str],
        c: dict[str, int],
        d: uuid.UUID,
        e: pathlib.Path,
        f: datetime.date,
        g: Window,
        h: Size,
    ) -> None:
        pass

    properties = schema_of(many)["properties"]
    assert properties["a"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert properties["b"] == {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "minItems": 2,
        "maxItems": 2,
    }
    assert properties["c"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert properties["d"] == {"type": "string", "format": "uuid"}
    assert properties["e"] == {"type": "string", "format": "path"}
    assert properties["f"] == {"type": "string", "format": "date"}
    assert properties["g"] == {"$ref": "#/$defs/Window"}
    assert properties["h"] == {"$ref": "#/$defs/Size"}


def test_descriptions_come_from_annotated_text_field_or_the_docstring() -> None:
    def described(
        a: Annotated[str, "the a"],
        b: Annotated[int, Field(description="the b", ge=2)],
        c: float,
        d: int = Field(default=4, description="the d"),
    ) -> None:
        """Do it.

        Args:
            c: the c, from the docstring
        """

    properties = schema_of(described)["properties"]
    assert properties["a"] == {"type": "string", "description": "the a"}
    assert properties["b"] == {"type": "integer", "minimum": 2, "description": "the b"}
    assert properties["c"] == {"type": "number", "description": "the c, from the docstring"}
    assert properties["d"] == {"type": "integer", "description": "the d", "default": 4}


async def test_a_field_default_is_applied_when_the_argument_is_left_out() -> None:
    server = McpServer()

    @server.tool
    async def count(n: int = Field(default=4, ge=0)) -> str:
        return f"n={n!r}"

    async with open_test_client(server) as client:
        assert (await client.call_tool("count"))["content"][0]["text"] == "n=4"
        assert (await client.call_tool("count", {"n": 7}))["content"][0]["text"] == "n=7"
        below = await client.call_tool("count", {"n": -1})
    assert (
        below["isError"]
        and "'n': Input should be greater than or equal to 0" in (below["content"][0]["text"])
    )


class Opaque:
    """A class pydantic knows nothing about."""


# Annotations are resolved in the module's namespace (like get_type_hints): a type a
# tool names must be importable there, not only local to a function.


def test_a_parameter_type_pydantic_cannot_express_fails_at_registration() -> None:
    server = McpServer()

    async def takes(thing: Opaque) -> str:
        return "never"

    with pytest.raises(TypeError, match=r"tool 'takes': parameter 'thing'"):
        server.tool(takes)
    assert "takes" not in server.registration.tools


@dataclasses.dataclass
class Holder:
    thing: Opaque


def test_a_return_type_that_cannot_be_described_fails_at_registration() -> None:
    server = McpServer()

    async def gives() -> Holder:
        return Holder(Opaque())

    with pytest.raises(TypeError, match="return type"):
        server.tool(gives)


class Reading(TypedDict):
    celsius: float


async def test_dataclass_and_typeddict_returns_are_structured_and_checked() -> None:
    server = McpServer()

    @server.tool
    async def weather(ok: bool) -> Reading:
        return {"celsius": 21.5} if ok else {"fahrenheit": 70}  # type: ignore[typeddict-unknown-key]

    async with open_test_client(server) as client:
        (tool,) = (await client.request("tools/list"))["tools"]
        good = await client.call_tool("weather", {"ok": True})
        bad = await client.call_tool("weather", {"ok": False})
    assert tool["outputSchema"] == {
        "title": "Reading",
        "type": "object",
        "properties": {"celsius": {"type": "number"}},
        "required": ["celsius"],
    }
    assert good["structuredContent"] == {"celsius": 21.5}
    assert bad["isError"] is True
    assert "output schema" in bad["content"][0]["text"]
    assert "'celsius'" in bad["content"][0]["text"]


async def test_plain_returns_keep_their_plain_results() -> None:
    server = McpServer()

    @server.tool
    async def number() -> int:
        return 5

    async with open_test_client(server) as client:
        (tool,) = (await client.request("tools/list"))["tools"]
        result = await client.call_tool("number")
    assert "outputSchema" not in tool
    assert result["content"] == [{"type": "text", "text": "5"}]
    assert "structuredContent" not in result


async def test_arguments_are_strict_json_not_coerced() -> None:
    server = McpServer()

    @server.tool
    async def flags(on: bool, n: int, x: float) -> str:
        return repr((on, n, x))

    async with open_test_client(server) as client:
        ok = await client.call_tool("flags", {"on": True, "n": 2, "x": 1})
        loose = await client.call_tool("flags", {"on": 1, "n": "2", "x": "1.5"})
        extra = await client.call_tool("flags", {"on": True, "n": 2, "x": 1.0, "y": 0})
        not_object = await client.request("tools/call", {"name": "flags", "arguments": [1]})
    assert ok["content"][0]["text"] == "(True, 2, 1.0)"
    text = loose["content"][0]["text"]
    assert loose["isError"] and all(f"'{name}':" in text for name in ("on", "n", "x"))
    assert extra["isError"] and "unknown argument 'y'" in extra["content"][0]["text"]
    assert (
        not_object["isError"]
        and "arguments must be an object" in (not_object["content"][0]["text"])
    )


class Query(BaseModel):
    text: str
    limit: int = 10


async def test_a_hand_written_input_schema_is_sent_as_written_and_skips_pydantic() -> None:
    server = McpServer()
    schema = {"type": "object", "properties": {"q": {"type": "object"}}, "required": ["q"]}

    @server.tool(input_schema=schema)
    async def search(ctx: Context, q: Query) -> str:
        return type(q).__name__  # no conversion on this path: what the client sent

    async with open_test_client(server) as client:
        (tool,) = (await client.request("tools/list"))["tools"]
        result = await client.call_tool("search", {"q": {"text": "x"}})
    assert tool["inputSchema"] == schema
    assert result["content"][0]["text"] == "dict"


async def test_a_tool_declared_to_return_str_that_returns_none_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = McpServer()

    @server.tool
    async def forgetful() -> str:
        pass  # type: ignore[empty-body]

    @server.tool
    async def maybe() -> str | None:
        return None

    with caplog.at_level(logging.WARNING, logger="trio_mcp_cancel.tools"):
        async with open_test_client(server) as client:
            first = await client.call_tool("forgetful")
            await client.call_tool("forgetful")
            await client.call_tool("maybe")
    assert first["content"] == [] and first["isError"] is False
    warnings = [r for r in caplog.records if r.name == "trio_mcp_cancel.tools"]
    assert len(warnings) == 1
    assert "'forgetful' returned None" in warnings[0].getMessage()


def test_a_routing_header_can_be_declared_on_a_typed_parameter() -> None:
    def routed(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        return region

    assert schema_of(routed)["properties"]["region"] == {
        "type": "string",
        "x-mcp-header": "Region",
    }

    def badly(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "a b"})]) -> str:
        return region

    with pytest.raises(ValueError, match="x-mcp-header"):
        schema_of(badly)


async def test_a_model_is_sent_as_json_with_or_without_a_structured_annotation() -> None:
    server = McpServer()
    given = {"type": "object", "properties": {"text": {"type": "string"}}}

    @server.tool(output_schema=given)
    async def explicit() -> Query:
        return Query(text="q")

    @server.tool
    async def loose() -> Any:
        return Query(text="l", limit=1)

    async with open_test_client(server) as client:
        tools = {t["name"]: t for t in (await client.request("tools/list"))["tools"]}
        first = await client.call_tool("explicit")
        second = await client.call_tool("loose")
    assert tools["explicit"]["outputSchema"] == given  # as written: it wins
    assert first["structuredContent"] == {"text": "q", "limit": 10}
    assert json.loads(second["content"][0]["text"]) == {"text": "l", "limit": 1}
