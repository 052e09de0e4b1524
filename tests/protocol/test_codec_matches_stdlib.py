"""The wire codec: a fast parser in front, the stdlib's answer whenever they could differ.

``jsonrpc.decode`` parses with ``pydantic_core.from_json`` and falls back to
the stdlib for anything it refuses, so every input decodes to exactly what
``json.loads`` makes of it (or fails as the stdlib fails); ``encode`` is
the stdlib's strict, compact, ASCII JSON.
"""

from __future__ import annotations

import json

import pytest

from trio_mcp_cancel._wire import jsonrpc
from trio_mcp_cancel._wire.jsonrpc import MAX_NESTING, JsonRpcError
from trio_mcp_cancel._wire.names import INVALID_PARAMS, PARSE_ERROR

ACCEPTED = [
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}',
    b'{"a":"\\ud800"}',  # a lone surrogate escape: valid JSON the fast parser refuses
    b'{"a":"\\udc00\\ud800x"}',
    b"[1e400, -1e400]",  # out of range: the stdlib makes infinities of them
    b'{"a":1,"a":2}',  # duplicate keys: the last wins
    b"123456789012345678901234567890123",
    b"-0",
    b'"caf\xc3\xa9 \\u00e9"',
    b"[0.1, 1.5e-7, 2.5E+3]",
    b" \n\t[] ",
]

REFUSED = [
    b"[NaN]",
    b"[Infinity]",
    b"[-Infinity]",
    b'"\xff"',  # not UTF-8
    b"\xef\xbb\xbf{}",  # a byte order mark
    b'"a\x01b"',  # a raw control character in a string
    b"{",
    b"",
    b"[1] x",
]


@pytest.mark.parametrize("body", ACCEPTED)
def test_every_accepted_body_decodes_to_exactly_what_the_stdlib_makes(body: bytes) -> None:
    expected = json.loads(body.decode("utf-8"))
    for given in (body, body.decode("utf-8")):
        decoded = jsonrpc.decode(given)
        assert decoded == expected or (decoded != decoded and expected != expected)
        assert repr(decoded) == repr(expected)  # types too: int stays int, -0 is 0


@pytest.mark.parametrize("body", REFUSED)
def test_every_body_the_stdlib_refuses_is_a_parse_error(body: bytes) -> None:
    with pytest.raises(JsonRpcError) as refused:
        jsonrpc.decode(body)
    assert refused.value.code == PARSE_ERROR


def test_a_message_nested_too_deep_is_refused_from_bytes_as_from_text() -> None:
    deep = "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)
    body = '{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":' + deep + "}}"
    for given in (body, body.encode()):
        with pytest.raises(JsonRpcError) as refused:
            jsonrpc.decode(given)
        assert refused.value.code == INVALID_PARAMS
        assert refused.value.request_id == 7


def test_encode_is_compact_strict_ascii_json_as_before() -> None:
    message = {"id": 1, "result": {"text": "é\ud800", "n": [1, 2.5, None, True]}}
    assert jsonrpc.encode(message) == (
        b'{"id":1,"result":{"text":"\\u00e9\\ud800","n":[1,2.5,null,true]}}'
    )
    with pytest.raises(ValueError):
        jsonrpc.encode({"x": float("nan")})
    with pytest.raises(TypeError):
        jsonrpc.encode({"x": {1, 2}})  # not JSON: a set is refused, never turned into a list
    with pytest.raises(ValueError):  # a failed encode leaves no state behind
        looped: list[object] = []
        looped.append(looped)
        jsonrpc.encode(looped)
    assert jsonrpc.encode([[], {}]) == b"[[],{}]"
