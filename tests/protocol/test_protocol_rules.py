"""Sans-IO rules that several protocol shapes share, checked on each shape.

A listen filter's ``resourceSubscriptions`` and ``taskIds`` are validated,
bounded and granted by one rule; a ``Resource``, a ``ResourceTemplate`` and
a ``ResourceLink`` describe their optional fields by one rule.
"""

from __future__ import annotations

from typing import Any

import pytest

from trio_mcp_cancel._protocol.content import ResourceLink
from trio_mcp_cancel._protocol.resources import Resource, ResourceTemplate
from trio_mcp_cancel._protocol.subscriptions import read_filter
from trio_mcp_cancel._wire.jsonrpc import INVALID_PARAMS, JsonRpcError

EVERYTHING = frozenset({"toolsListChanged", "resourceSubscriptions", "taskIds"})


@pytest.mark.parametrize(
    ("key", "what"), [("resourceSubscriptions", "resource URIs"), ("taskIds", "task ids")]
)
def test_both_id_lists_of_a_listen_filter_are_checked_bounded_and_granted(
    key: str, what: str
) -> None:
    granted = read_filter({"notifications": {key: ["b", "a", "a"]}}, EVERYTHING)
    ids = granted.resource_uris if key == "resourceSubscriptions" else granted.task_ids
    assert ids == {"a", "b"}
    for bad in ("a", [1], [None, "a"], {"a": 1}):
        with pytest.raises(JsonRpcError) as caught:
            read_filter({"notifications": {key: bad}}, EVERYTHING)
        assert caught.value.code == INVALID_PARAMS
        assert caught.value.message == f"Invalid params: {key} must be strings"
    with pytest.raises(JsonRpcError) as caught:
        read_filter({"notifications": {key: [str(i) for i in range(1001)]}}, EVERYTHING)
    assert caught.value.message == f"Invalid params: at most 1000 {what}"
    # Not supported by this server: valid, but not granted.
    ungranted = read_filter({"notifications": {key: ["a"]}}, frozenset({"toolsListChanged"}))
    assert ungranted.resource_uris == ungranted.task_ids == frozenset()


async def _read(ctx: Any) -> str:
    return ""


def test_resources_templates_and_links_describe_only_the_fields_that_are_set() -> None:
    assert Resource("test://a", "a", _read).describe() == {"uri": "test://a", "name": "a"}
    assert ResourceTemplate("test://{id}", "t", _read, annotations={}).describe() == {
        "uriTemplate": "test://{id}",
        "name": "t",
    }
    assert ResourceLink("test://a", "a").to_wire() == {
        "type": "resource_link",
        "uri": "test://a",
        "name": "a",
    }
    fields = {"title": "A", "description": "the a", "mime_type": "text/plain"}
    wire = {"title": "A", "description": "the a", "mimeType": "text/plain"}
    marks = {"audience": ["user"]}
    assert Resource("test://a", "a", _read, size=3, annotations=marks, **fields).describe() == {
        "uri": "test://a", "name": "a", **wire, "size": 3, "annotations": marks,
    }  # fmt: skip
    template = ResourceTemplate("test://{id}", "t", _read, annotations=marks, **fields)
    assert template.describe() == {
        "uriTemplate": "test://{id}", "name": "t", **wire, "annotations": marks,
    }  # fmt: skip
    link = ResourceLink("test://a", "a", size=0, annotations=marks, meta={"m": 1}, **fields)
    assert link.to_wire() == {
        "type": "resource_link", "uri": "test://a", "name": "a", **wire, "size": 0,
        "annotations": marks, "_meta": {"m": 1},
    }  # fmt: skip
