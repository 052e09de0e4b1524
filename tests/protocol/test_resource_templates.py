"""URI templates (RFC 6570 as MCP hosts use it) cannot be escaped (issue 36, item 3).

A template variable is matched, percent-decoded and checked before any
reader runs: a simple ``{name}`` never yields ``/``, ``\\``, ``.`` or
``..``, a ``{+path}`` never a ``..`` segment or an absolute path, however
the characters are encoded (``%2E%2E``, ``%2e%2E``, ``%252F``).  A refused
URI is ``-32602`` naming the variable, and the reader never runs.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from trio_mcp_cancel._protocol.uri_template import UnsafeValue, UriTemplate
from trio_mcp_cancel.client import McpError
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.testing import open_test_client

ESCAPES = [
    # encoded ".." and "/" in a simple variable: the report
    ("file:///docs/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", "'name'"),
    ("file:///docs/%2e%2E", "'name'"),  # mixed case, a bare ".."
    ("file:///docs/..", "'name'"),
    ("file:///docs/a%2Fb", "'name'"),  # encoded "/"
    ("file:///docs/..%252F..%252Fetc%252Fpasswd", "'name'"),  # double encoding
    ("file:///docs/a%5Cb", "'name'"),  # encoded backslash
    ("file:///docs/a%00b", "'name'"),  # NUL
    ("file:///docs/%FF", "'name'"),  # not UTF-8
    ("file:///tree/a/../../etc/passwd", "'path'"),
    ("file:///tree/a/%2e%2E/%2E%2e/etc", "'path'"),
    ("file:///tree/a/%252e%252e/etc", "'path'"),  # double-encoded dots
    ("file:///tree/..", "'path'"),
    ("file:///tree/a\\..\\..\\etc", "'path'"),  # backslashes
    ("file:///tree/a%5C..%5Cetc", "'path'"),
    ("file:///tree//etc/passwd", "'path'"),  # an absolute path replaces the base
    ("file:///tree/%2Fetc/passwd", "'path'"),
    ("search://docs?q=../../etc", "'q'"),
]


def docs_server(ran: list[tuple[str, Any]]) -> McpServer:
    server = McpServer()

    @server.resource_template("file:///docs/{name}")
    async def doc(name: str) -> str:
        ran.append(("doc", name))
        return f"doc {name}"

    @server.resource_template("file:///tree/{+path}")
    async def tree(path: str) -> str:
        ran.append(("tree", path))
        return f"tree {path}"

    @server.resource_template("search://{index}{?q,limit}")
    async def search(index: str, q: str = "", limit: int = 10) -> str:
        ran.append(("search", (index, q, limit)))
        return f"{index}: {q!r} x{limit}"

    @server.resource_template("file:///docs/{+rest}")
    async def anything(rest: str) -> str:  # looser, after {name}: a refusal never falls to it
        ran.append(("any", rest))
        return f"any {rest}"

    return server


async def read(client: Any, uri: str) -> str:
    result = await client.request("resources/read", {"uri": uri})
    return str(result["contents"][0]["text"])


@pytest.mark.parametrize(("uri", "variable"), ESCAPES)
async def test_an_escaping_uri_is_refused_naming_the_variable_and_the_reader_never_runs(
    uri: str, variable: str
) -> None:
    ran: list[tuple[str, Any]] = []
    async with open_test_client(docs_server(ran)) as client:
        with pytest.raises(McpError) as refused:
            await client.request("resources/read", {"uri": uri})
    assert refused.value.code == -32602
    assert f"template variable {variable}" in refused.value.message
    assert refused.value.data == {"uri": uri}
    assert ran == []


async def test_a_reserved_variable_spans_path_segments_and_a_simple_one_decodes() -> None:
    ran: list[tuple[str, Any]] = []
    async with open_test_client(docs_server(ran)) as client:
        assert await read(client, "file:///tree/a/b/c.txt") == "tree a/b/c.txt"
        assert await read(client, "file:///tree/v1..2/x.y") == "tree v1..2/x.y"
        assert await read(client, "file:///docs/read%20me.txt") == "doc read me.txt"
        assert await read(client, "file:///docs/..hidden") == "doc ..hidden"
        # A literal "/" never enters {name}: the next template matches it.
        assert await read(client, "file:///docs/a/b") == "any a/b"
        with pytest.raises(McpError) as unmatched:
            await read(client, "file:///tree/a?q=1")  # no {?...}: "?" is not in a value
    assert unmatched.value.message == "Resource not found"
    assert ran == [
        ("tree", "a/b/c.txt"),
        ("tree", "v1..2/x.y"),
        ("doc", "read me.txt"),
        ("doc", "..hidden"),
        ("any", "a/b"),
    ]


async def test_query_parameters_are_optional_order_free_and_converted() -> None:
    ran: list[tuple[str, Any]] = []
    async with open_test_client(docs_server(ran)) as client:
        assert await read(client, "search://books") == "books: '' x10"
        assert await read(client, "search://books?q=trio") == "books: 'trio' x10"
        assert await read(client, "search://books?limit=3&q=a%20b&utm=x") == "books: 'a b' x3"
        assert await read(client, "search://books?q=a/b&q=second") == "books: 'a/b' x10"
        with pytest.raises(McpError) as wrong:
            await read(client, "search://books?limit=many")
    assert wrong.value.code == -32602 and "'limit'" in wrong.value.message
    assert [args for _, args in ran] == [
        ("books", "", 10),
        ("books", "trio", 10),
        ("books", "a b", 3),
        ("books", "a/b", 10),
    ]


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("file:///docs/{name", "unmatched '{'"),
        ("file:///docs/name}", "unmatched '}'"),
        ("file:///docs/{path*}", "is not a variable name"),
        ("file:///docs/{name:3}", "is not a variable name"),
        ("file:///docs/{.ext}", "operator '.' is not supported"),
        ("file:///docs/{#frag}", "operator '#' is not supported"),
        ("file:///docs/{a,b}", "one variable per expression"),
        ("file:///docs/{a}{b}", "nothing between them"),
        ("file:///{+a}/{+b}", "at most one {+name}"),
        ("file:///docs/{a}/{a}", "repeats the variable 'a'"),
        ("file:///docs{?q}/{name}", "{?...} must come last"),
        ("file:///docs?x=1{?q}", "literal '?'"),
        ("file:///docs/{}", "'' is not a variable name"),
    ],
)
def test_a_malformed_template_is_refused_at_registration_saying_why(
    template: str, why: str
) -> None:
    server = McpServer()

    async def read(**variables: str) -> str:
        return "never"

    with pytest.raises(ValueError, match="URI template") as refused:
        server.resource_template(template)(read)
    assert why in str(refused.value)
    assert not server.registration.resources.templates


@given(st.text(min_size=1, max_size=40))
@example("%2E%2E")
@example("%252E%252E")
@example(".%2e")
@example("%2F")
@example("%25252F")
@example("%5c")
def test_no_simple_variable_ever_yields_a_slash_or_a_dot_dot(raw: str) -> None:
    """Whatever follows the template's prefix (raw, or encoded once, or twice)."""
    template = UriTemplate.parse("file:///docs/{name}")
    for tail in (raw, quote(raw, safe="%"), quote(quote(raw, safe=""), safe="")):
        try:
            found = template.match("file:///docs/" + tail)
        except UnsafeValue:
            continue
        if found is not None:
            assert "/" not in found["name"] and "\\" not in found["name"]
            assert found["name"] not in (".", "..")


@given(
    st.lists(st.sampled_from(["a", "..", ".", "%2e%2E", "%2F", "%5C", "b%252F..", "x"]), min_size=1)
)
def test_no_reserved_variable_ever_yields_a_dot_dot_segment(segments: list[str]) -> None:
    template = UriTemplate.parse("file:///tree/{+path}")
    try:
        found = template.match("file:///tree/" + "/".join(segments))
    except UnsafeValue:
        return
    assert found is not None
    path = found["path"]
    assert ".." not in path.replace("\\", "/").split("/") and not path.startswith("/")


def test_matching_does_not_backtrack_whatever_the_uri() -> None:
    """URIs a backtracking regex takes hours over (a minute at 3,000 characters for the
    first: three variables split by one literal); the scan is linear, so this returns."""
    hostile = [
        ("t://{a}-{b}-{c}", "t://" + "-" * 200_000 + "/"),
        ("t://{+p}x{a}", "t://" + "x" * 200_000 + "/"),
        ("t://{a}-{b}/{+p}.z", "t://" + "-" * 200_000 + "/" + "a" * 200_000),
    ]
    for template, uri in hostile:
        assert UriTemplate.parse(template).match(uri) is None


def test_a_segment_variable_is_a_slash_and_a_checked_simple_value() -> None:
    template = UriTemplate.parse("api://v{/version}{/item}{?fields}")
    assert template.match("api://v/2/abc?fields=a,b") == {
        "version": "2",
        "item": "abc",
        "fields": "a,b",
    }
    assert template.match("api://v/2") is None  # both segments are required
    with pytest.raises(UnsafeValue, match="'item'"):
        template.match("api://v/2/..%2Fsecret")
    assert UriTemplate.parse("api://status{?verbose}").match("api://status") == {}
