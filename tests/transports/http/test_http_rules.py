"""The Streamable HTTP rules as pure functions: eras, envelope checks, statuses, headers.

Nothing here does I/O: every rule the ASGI app applies to a request's
headers and body is checked directly, with the spec's error ordering.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from trio_mcp_cancel._wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    JsonRpcError,
)
from trio_mcp_cancel._wire.versions import (
    HEADER_MISMATCH,
    MISSING_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
    Envelope,
)
from trio_mcp_cancel.transports.http import rules
from trio_mcp_cancel.transports.http.rules import HttpError

MODERN = "2026-07-28"
PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
INFO = "io.modelcontextprotocol/clientInfo"
LEVEL = "io.modelcontextprotocol/logLevel"


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def meta(version: object = MODERN, caps: object = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {PV: version, CAPS: {} if caps is None else caps}
    out.update(extra)
    return out


def message(method: str, params: dict[str, Any] | None = None, request_id: object = 1) -> Any:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    return body


def headers_for(
    method: str | None, version: str | None = MODERN, name: str | None = None
) -> dict[str, str]:
    out: dict[str, str] = {}
    if version is not None:
        out["mcp-protocol-version"] = version
    if method is not None:
        out["mcp-method"] = method
    if name is not None:
        out["mcp-name"] = name
    return out


def code_of(excinfo: pytest.ExceptionInfo[JsonRpcError]) -> int:
    return excinfo.value.code


# -- select_era ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "body", "era"),
    [
        ({"mcp-protocol-version": MODERN}, None, "modern"),
        # An unknown version is modern, so the client learns -32022 and what we serve.
        ({"mcp-protocol-version": "2099-01-01"}, None, "modern"),
        ({"mcp-protocol-version": "2025-11-25"}, None, "legacy"),
        ({"mcp-protocol-version": "2025-06-18"}, None, "legacy"),
        ({"mcp-protocol-version": "2024-11-05"}, None, "legacy"),
        ({}, None, "legacy"),
        ({}, message("initialize", {"protocolVersion": "2025-06-18"}), "legacy"),
        ({}, message("tools/list", {"_meta": {PV: MODERN, CAPS: {}}}), "modern"),
        # Either required key is enough to claim the era (and then be told what is missing).
        ({}, message("tools/list", {"_meta": {PV: MODERN}}), "modern"),
        ({}, message("tools/list", {"_meta": {CAPS: {}}}), "modern"),
        # A progress token alone is not the modern envelope.
        ({}, message("tools/call", {"_meta": {"progressToken": 1}}), "legacy"),
        # A legacy header on a modern body: modern (and a -32020 later).
        ({"mcp-protocol-version": "2025-06-18"}, message("x", {"_meta": meta()}), "modern"),
        ({}, message("tools/list", {"_meta": "not an object"}), "legacy"),
        ({}, [message("tools/list")], "legacy"),
        ({}, "garbage", "legacy"),
    ],
)
def test_select_era(headers: dict[str, str], body: object, era: str) -> None:
    assert rules.select_era(headers, body) == era


# -- modern_envelope: the spec's order is -32602, then -32020, then -32022 ------


def test_modern_envelope_reads_every_field() -> None:
    params = {
        "_meta": meta(caps={"elicitation": {}}, **{INFO: {"name": "c", "version": "1"}}),
    }
    params["_meta"][LEVEL] = "warning"
    envelope = rules.modern_envelope(headers_for("tools/list"), message("tools/list", params))
    assert envelope == Envelope(
        MODERN, {"elicitation": {}}, {"name": "c", "version": "1"}, "warning"
    )


def test_modern_envelope_optional_fields_default_to_none() -> None:
    envelope = rules.modern_envelope(
        headers_for("server/discover"), message("server/discover", {"_meta": meta()})
    )
    assert envelope.client_info is None
    assert envelope.log_level is None


@pytest.mark.parametrize(
    "params",
    [
        None,
        {},
        {"_meta": {}},
        {"_meta": {PV: MODERN}},  # clientCapabilities missing
        {"_meta": {CAPS: {}}},  # protocolVersion missing
        {"_meta": {PV: 20260728, CAPS: {}}},
        {"_meta": {PV: MODERN, CAPS: []}},
        {"_meta": meta(**{LEVEL: "loud"})},
    ],
)
def test_modern_envelope_malformed_is_invalid_params(params: dict[str, Any] | None) -> None:
    with pytest.raises(JsonRpcError) as excinfo:
        rules.modern_envelope(headers_for("tools/list"), message("tools/list", params))
    assert code_of(excinfo) == INVALID_PARAMS


def test_missing_meta_comes_before_header_mismatch() -> None:
    # No headers at all and a broken envelope: -32602 wins.
    with pytest.raises(JsonRpcError) as excinfo:
        rules.modern_envelope({}, message("tools/list", {"_meta": {PV: MODERN}}))
    assert code_of(excinfo) == INVALID_PARAMS


@pytest.mark.parametrize(
    ("headers", "method", "params"),
    [
        # MCP-Protocol-Version missing, or not the body's.
        (headers_for("tools/list", version=None), "tools/list", {"_meta": meta()}),
        (headers_for("tools/list", version="2025-06-18"), "tools/list", {"_meta": meta()}),
        # Mcp-Method missing, wrong, or differently cased (values are case-sensitive).
        (headers_for(None), "tools/list", {"_meta": meta()}),
        (headers_for("tools/call", name="x"), "tools/list", {"_meta": meta()}),
        (headers_for("Tools/List"), "tools/list", {"_meta": meta()}),
        # Mcp-Name missing or wrong on a name-bearing method.
        (headers_for("tools/call"), "tools/call", {"name": "echo", "_meta": meta()}),
        (headers_for("tools/call", name="ECHO"), "tools/call", {"name": "echo", "_meta": meta()}),
        (
            headers_for("tools/call", name=b64("other")),
            "tools/call",
            {"name": "echo", "_meta": meta()},
        ),
        (headers_for("prompts/get"), "prompts/get", {"name": "p", "_meta": meta()}),
        (
            headers_for("resources/read", name="a://b"),
            "resources/read",
            {"uri": "a://c", "_meta": meta()},
        ),
        # A malformed base64 value matches nothing.
        (
            headers_for("tools/call", name="=?base64?ZWNobw?="),
            "tools/call",
            {"name": "echo", "_meta": meta()},
        ),
    ],
)
def test_header_mismatch(headers: dict[str, str], method: str, params: dict[str, Any]) -> None:
    with pytest.raises(JsonRpcError) as excinfo:
        rules.modern_envelope(headers, message(method, params))
    assert code_of(excinfo) == HEADER_MISMATCH


@pytest.mark.parametrize(
    ("method", "params", "name"),
    [
        ("tools/call", {"name": "echo"}, "echo"),
        ("tools/call", {"name": "echo"}, b64("echo")),
        ("tools/call", {"name": "héllo wörld"}, b64("héllo wörld")),
        ("prompts/get", {"name": "greet"}, "greet"),
        ("resources/read", {"uri": "file:///tmp/x"}, "file:///tmp/x"),
        # Methods that bear no name need no Mcp-Name, and one sent is not checked.
        ("tools/list", {}, None),
        ("tools/list", {}, "anything"),
    ],
)
def test_matching_headers_pass(method: str, params: dict[str, Any], name: str | None) -> None:
    body = message(method, {**params, "_meta": meta()})
    envelope = rules.modern_envelope(headers_for(method, name=name), body)
    assert envelope.protocol_version == MODERN


def test_unsupported_version_has_supported_and_requested() -> None:
    body = message("tools/list", {"_meta": meta("2099-01-01")})
    with pytest.raises(JsonRpcError) as excinfo:
        rules.modern_envelope(headers_for("tools/list", version="2099-01-01"), body)
    assert code_of(excinfo) == UNSUPPORTED_PROTOCOL_VERSION
    assert excinfo.value.data == {"supported": [MODERN], "requested": "2099-01-01"}


def test_a_legacy_version_in_meta_is_unsupported_in_the_modern_era() -> None:
    body = message("tools/list", {"_meta": meta("2025-06-18")})
    with pytest.raises(JsonRpcError) as excinfo:
        rules.modern_envelope(headers_for("tools/list", version="2025-06-18"), body)
    assert code_of(excinfo) == UNSUPPORTED_PROTOCOL_VERSION
    assert excinfo.value.data["requested"] == "2025-06-18"


def test_header_mismatch_comes_before_unsupported_version() -> None:
    body = message("tools/list", {"_meta": meta("2099-01-01")})
    # The header disagrees with the body: the client is told that first.
    with pytest.raises(JsonRpcError) as excinfo:
        rules.modern_envelope(headers_for("tools/list", version=MODERN), body)
    assert code_of(excinfo) == HEADER_MISMATCH
    # Versions agree but Mcp-Method is missing: still -32020 before -32022.
    with pytest.raises(JsonRpcError) as excinfo:
        rules.modern_envelope(headers_for(None, version="2099-01-01"), body)
    assert code_of(excinfo) == HEADER_MISMATCH


def test_malformed_envelope_comes_before_unsupported_version() -> None:
    body = message("tools/list", {"_meta": {PV: "2099-01-01"}})
    with pytest.raises(JsonRpcError) as excinfo:
        rules.modern_envelope(headers_for("tools/list", version="2099-01-01"), body)
    assert code_of(excinfo) == INVALID_PARAMS


def test_unsupported_version_requested_is_truncated() -> None:
    long = "9" * 500
    body = message("tools/list", {"_meta": meta(long)})
    with pytest.raises(JsonRpcError) as excinfo:
        rules.modern_envelope(headers_for("tools/list", version=long), body)
    assert code_of(excinfo) == UNSUPPORTED_PROTOCOL_VERSION
    assert len(excinfo.value.data["requested"]) <= 64


# -- decode_header_value -------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "decoded"),
    [
        (None, None),
        ("plain", "plain"),
        ("", ""),
        (b64("Hello"), "Hello"),
        (b64("日本語"), "日本語"),
        (b64(""), ""),
        # Not the whole value: verbatim.
        ("x" + b64("Hello"), "x" + b64("Hello")),
        (b64("Hello") + " ", b64("Hello") + " "),
        # Bad padding and bytes that are not UTF-8 decode to nothing.
        ("=?base64?SGVsbG8?=", None),
        ("=?base64?" + base64.b64encode(b"\xff\xfe").decode() + "?=", None),
    ],
)
def test_decode_header_value(value: str | None, decoded: str | None) -> None:
    assert rules.decode_header_value(value) == decoded


# -- status_for ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (PARSE_ERROR, 400),
        (INVALID_REQUEST, 400),
        (INVALID_PARAMS, 400),
        (HEADER_MISMATCH, 400),
        (MISSING_CLIENT_CAPABILITY, 400),
        (UNSUPPORTED_PROTOCOL_VERSION, 400),
        (METHOD_NOT_FOUND, 404),
        (INTERNAL_ERROR, 200),
        (-32800, 200),
        (-32001, 200),
    ],
)
def test_status_for_modern(code: int, status: int) -> None:
    assert rules.status_for(code, "modern") == status


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (PARSE_ERROR, 400),
        (INVALID_REQUEST, 400),
        # A legacy server answers protocol errors inside a 200.
        (INVALID_PARAMS, 200),
        (METHOD_NOT_FOUND, 200),
        (INTERNAL_ERROR, 200),
        (-32800, 200),
        (HEADER_MISMATCH, 200),
    ],
)
def test_status_for_legacy(code: int, status: int) -> None:
    assert rules.status_for(code, "legacy") == status


# -- check_origin --------------------------------------------------------------


@pytest.mark.parametrize(
    "origin",
    [
        None,
        "http://localhost",
        "http://localhost:3000",
        "https://127.0.0.1:8443",
        "http://[::1]:80",
    ],
)
def test_origin_default_allows_none_or_localhost(origin: str | None) -> None:
    headers = {} if origin is None else {"origin": origin}
    rules.check_origin(headers, None)


@pytest.mark.parametrize(
    "origin",
    [
        "https://evil.example",
        "http://localhost.evil.example",
        "http://127.0.0.1.nip.io",
        "null",
        "",
        "http://[::1",  # urlsplit raises ValueError
    ],
)
def test_origin_default_refuses_others(origin: str) -> None:
    with pytest.raises(HttpError) as excinfo:
        rules.check_origin({"origin": origin}, None)
    assert excinfo.value.status == 403


def test_origin_explicit_allow_list() -> None:
    allowed = frozenset({"https://app.example"})
    rules.check_origin({"origin": "https://app.example"}, allowed)
    rules.check_origin({}, allowed)
    for origin in ("https://app.example:444", "http://localhost", "https://APP.example/"):
        with pytest.raises(HttpError) as excinfo:
            rules.check_origin({"origin": origin}, allowed)
        assert excinfo.value.status == 403


# -- Accept, Content-Type, Content-Length ------------------------------------------


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, (False, False)),
        ("application/json", (True, False)),
        ("text/event-stream", (False, True)),
        ("application/json, text/event-stream", (True, True)),
        ("Text/Event-Stream;q=0.5, APPLICATION/JSON", (True, True)),
        ("*/*", (True, True)),
        ("text/html", (False, False)),
    ],
)
def test_accepts(accept: str | None, expected: tuple[bool, bool]) -> None:
    headers = {} if accept is None else {"accept": accept}
    assert rules.accepts(headers) == expected


@pytest.mark.parametrize("accept", [None, "application/json", "text/event-stream", "text/html"])
def test_check_accept_requires_both(accept: str | None) -> None:
    headers = {} if accept is None else {"accept": accept}
    with pytest.raises(HttpError) as excinfo:
        rules.check_accept(headers)
    assert excinfo.value.status == 406


def test_check_accept_passes_with_both() -> None:
    rules.check_accept({"accept": "application/json, text/event-stream"})
    rules.check_accept({"accept": "*/*"})


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON "]
)
def test_check_content_type_accepts_json(content_type: str) -> None:
    rules.check_content_type({"content-type": content_type})


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/jsonx", "multipart/form"]
)
def test_check_content_type_refuses_others(content_type: str | None) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    with pytest.raises(HttpError) as excinfo:
        rules.check_content_type(headers)
    assert excinfo.value.status == 415


def test_check_content_length() -> None:
    rules.check_content_length({}, 10)
    rules.check_content_length({"content-length": "10"}, 10)
    for length in ("11", "-1", "1e3", "ten", ""):
        with pytest.raises(HttpError) as excinfo:
            rules.check_content_length({"content-length": length}, 10)
        assert excinfo.value.status == 413


# -- message shapes and the pre-dispatch error body --------------------------------


def test_is_notification_and_is_initialize() -> None:
    assert rules.is_notification({"jsonrpc": "2.0", "method": "notifications/cancelled"})
    assert not rules.is_notification(message("tools/list"))
    assert not rules.is_notification({"jsonrpc": "2.0", "id": 1, "result": {}})
    assert not rules.is_notification([{"method": "x"}])
    assert rules.is_initialize(message("initialize", {}))
    assert not rules.is_initialize({"jsonrpc": "2.0", "method": "initialize"})
    assert not rules.is_initialize(message("tools/list"))


def test_http_error_body_is_a_json_rpc_error() -> None:
    error = HttpError(406, "Not Acceptable", headers=[(b"x", b"y")])
    assert error.status == 406
    assert error.headers == [(b"x", b"y")]
    body = json.loads(error.body())
    assert body == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": INVALID_REQUEST, "message": "Not Acceptable"},
    }


def test_request_headers_share_repeated_strings_but_never_keep_a_session_id() -> None:
    raw = [
        (b"accept", b"application/json, text/event-stream"),
        (b"Content-Type", b"application/json"),
        (b"mcp-session-id", b"abc123"),
    ]
    first, second = rules.request_headers(raw), rules.request_headers(list(raw))
    assert (
        first
        == second
        == {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-session-id": "abc123",
        }
    )
    # Names and repeating values are one string for every request; a session id is not kept.
    for name in ("accept", "content-type"):
        (key,) = [k for k in second if k == name]
        assert key is next(k for k in first if k == name)
        assert first[name] is second[name]
    assert first["mcp-session-id"] is not second["mcp-session-id"]
    assert b"abc123" not in rules._VALUES


def test_the_shared_header_strings_are_bounded() -> None:
    for i in range(2 * rules._DECODED_MAX):
        headers = rules.request_headers([(b"x-h%d" % i, b"v"), (b"user-agent", b"agent %d" % i)])
        assert headers == {f"x-h{i}": "v", "user-agent": f"agent {i}"}
    assert len(rules._NAMES) <= rules._DECODED_MAX
    assert len(rules._VALUES) <= rules._DECODED_MAX


def test_the_shared_header_strings_are_bounded_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Large distinct values (each under the head's limit) are decoded per request, not
    # kept: what the caches hold stays small whatever the clients send.  Empty caches,
    # so that room in them is not what keeps a value out.
    monkeypatch.setattr(rules, "_NAMES", {})
    monkeypatch.setattr(rules, "_VALUES", {})
    long_agent = b"a" * (rules._DECODED_BYTES + 1)
    long_name = b"x-" + b"n" * rules._DECODED_BYTES
    headers = rules.request_headers([(b"user-agent", long_agent), (long_name, b"v")])
    assert headers == {"user-agent": long_agent.decode(), long_name.decode(): "v"}
    assert long_agent not in rules._VALUES and long_name not in rules._NAMES
    for i in range(2 * rules._DECODED_MAX):
        rules.request_headers([(b"user-agent", b"%04d" % i + b"b" * 4000)])
    held = sum(len(k) + len(v) for cache in (rules._NAMES, rules._VALUES) for k, v in cache.items())
    assert held <= 2 * rules._DECODED_MAX * 2 * rules._DECODED_BYTES
