"""Streamable HTTP rules as pure functions: no sockets, no ASGI, no awaits.

Everything the HTTP app decides from a request's headers and body (which
era it speaks, which status answers which JSON-RPC error, whether the
modern routing headers agree with the body) lives here, so it is tested
directly and the ASGI app stays a thin shell (the sans-IO shape of h11).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from ..._wire import jsonrpc
from ..._wire.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    JsonRpcError,
)
from ..._wire.names import (
    HEADER_METHOD,
    HEADER_NAME,
    HEADER_PARAM_PREFIX,
    HEADER_PROTOCOL_VERSION,
    HEADER_SESSION_ID,
    META_PROTOCOL_VERSION,
    NAME_BEARING,
    TOO_MANY_REQUESTS,
    decode_header_value,
    header_form,
)
from ..._wire.versions import (
    HEADER_MISMATCH,
    LEGACY_VERSIONS,
    MISSING_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
    Envelope,
    Era,
    has_modern_meta,
    read_envelope,
)

__all__ = [
    "CLOSE",
    "HttpError",
    "accepts",
    "check_accept",
    "check_content_length",
    "check_content_type",
    "check_origin",
    "check_param_headers",
    "decode_header_value",
    "is_initialize",
    "is_notification",
    "modern_envelope",
    "request_headers",
    "select_era",
    "status_for",
]

LOCAL_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})

# The modern era's table: which JSON-RPC error codes are which HTTP status.
_MODERN_STATUS: Final = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
    # An admission refusal found while answering (a task over its quota): as at admission.
    TOO_MANY_REQUESTS: 429,
}
# The wire's header names as the server reads them: ASGI gives names lower-cased.
SESSION_ID: Final = HEADER_SESSION_ID.lower()
PROTOCOL_VERSION: Final = HEADER_PROTOCOL_VERSION.lower()
METHOD: Final = HEADER_METHOD.lower()
NAME: Final = HEADER_NAME.lower()
PARAM_PREFIX: Final = HEADER_PARAM_PREFIX.lower()
#: Headers a request may carry once: each decides routing, authentication or
#: how the body is read, and two copies let a gateway that reads the first
#: and a server that reads the last see two different requests.
SINGLETON_HEADERS: Final = frozenset(
    {
        METHOD,
        NAME,
        PROTOCOL_VERSION,
        SESSION_ID,
        "authorization",
        "content-type",
        "content-length",
        "origin",
    }
)
#: Default bound of a request's head (:func:`request_headers`), as ``server_config()``'s.
MAX_HEAD_BYTES: Final = 16 * 1024


#: A response sent before its request's body was read whole: the connection
#: cannot carry another request, and the client must not try (RFC 9112 9.6).
CLOSE: Final[tuple[tuple[bytes, bytes], ...]] = ((b"connection", b"close"),)


class HttpError(Exception):
    """An answer decided before any JSON-RPC dispatch: a status and an error body."""

    def __init__(
        self,
        status: int,
        message: str,
        code: int = INVALID_REQUEST,
        headers: Collection[tuple[bytes, bytes]] = (),
        data: object = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = list(headers)
        self.data = data

    @classmethod
    def refusal(cls, refused: JsonRpcError, headers: Collection[tuple[bytes, bytes]]) -> HttpError:
        """``429`` carrying an admission refusal (its code and ``data.limit``) before dispatch."""
        return cls(429, refused.message, refused.code, headers, refused.data)

    def body(self) -> bytes:
        return jsonrpc.encode(JsonRpcError(self.code, str(self), self.data).to_message())


#: Header names, and the values of :data:`_REPEATED_VALUES`, decoded once and then
#: shared by every request: a call in flight keeps its request's headers, and each
#: string of its own is 50 to 80 bytes of it.  Bounded in count (:data:`_DECODED_MAX`
#: each, never evicted: past it a string is decoded per request, as before) and in bytes
#: (only a name or value of at most :data:`_DECODED_BYTES` is kept, so a client sending
#: large distinct values cannot make the caches hold megabytes for the process's life); a
#: session id or a token is never kept here.
_NAMES: dict[bytes, str] = {}
_VALUES: dict[bytes, str] = {}
_DECODED_MAX: Final = 256
_DECODED_BYTES: Final = 128
#: Headers whose values repeat from request to request (a client's Accept, its content
#: type, its protocol version, the host it asks for, the method and tool it names).
_REPEATED_VALUES: Final = frozenset(
    {
        "accept",
        "accept-encoding",
        "connection",
        "content-type",
        "host",
        "mcp-method",
        "mcp-name",
        "mcp-protocol-version",
        "user-agent",
    }
)


def _decoded(cache: dict[bytes, str], raw: bytes, text: str) -> str:
    """*text*, kept in *cache* as the decoding of *raw* while the cache has room and
    *raw* is short."""
    if len(cache) < _DECODED_MAX and len(raw) <= _DECODED_BYTES:
        cache[raw] = text
    return text


def request_headers(
    raw: Sequence[tuple[bytes, bytes]], max_bytes: int = MAX_HEAD_BYTES, target: int = 0
) -> dict[str, str]:
    """A request's headers by lower-cased name, or the ``431``/``400`` that refuses them.

    One pass over the list, about as cheap as building the mapping alone.
    The head's size (*target*, the request target's length, plus each
    header as it is written on an HTTP/1.1 wire: name, ``": "``, value,
    CRLF) is held to *max_bytes* however its bytes arrived: hypercorn's
    HTTP/1.1 bound applies only while a head is incomplete, so one that
    arrives in a single read is otherwise accepted whatever its size.  A
    header of :data:`SINGLETON_HEADERS` (or any ``Mcp-Param-*``) sent twice
    is a ``400``; other repeated headers are combined as RFC 9110 section
    5.3 says (``", "``; ``"; "`` for ``Cookie``), so two ``Accept`` lines
    mean both.
    """
    headers: dict[str, str] = {}
    size = target + 4 * len(raw)
    names, values = _NAMES, _VALUES
    for name, value in raw:
        key = names.get(name)
        if key is None:
            key = _decoded(names, name, name.decode("latin-1").lower())
        text = values.get(value) if key in _REPEATED_VALUES else None
        if text is None:
            text = value.decode("latin-1")
            if key in _REPEATED_VALUES:
                _decoded(values, value, text)
        headers[key] = text
        size += len(name) + len(value)
    if size > max_bytes:
        raise HttpError(431, f"Request Header Fields Too Large: over {max_bytes} bytes")
    if len(headers) != len(raw):
        return _combined(raw)  # some name came twice: rare, so checked apart
    return headers


def _combined(raw: Sequence[tuple[bytes, bytes]]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in raw:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        first = headers.get(key)
        if first is None:
            headers[key] = text
        elif key in SINGLETON_HEADERS or key.startswith(PARAM_PREFIX):  # Mcp-Param-*: arguments
            raise HttpError(400, f"Bad Request: the {key} header is repeated")
        else:
            headers[key] = f"{first}{'; ' if key == 'cookie' else ', '}{text}"
    return headers


def check_origin(headers: Mapping[str, str], allowed: Collection[str] | None) -> None:
    """403 for an ``Origin`` that is not allowed (MCP's DNS-rebinding guard).

    ``allowed=None`` accepts no ``Origin`` at all, or a localhost one.
    """
    origin = headers.get("origin")
    if origin is None:
        return
    if allowed is not None:
        ok = origin in allowed
    else:
        try:
            ok = (urlsplit(origin).hostname or "") in LOCAL_HOSTS
        except ValueError:
            ok = False
    if not ok:
        raise HttpError(403, "Forbidden: Origin not allowed")


def accepts(headers: Mapping[str, str]) -> tuple[bool, bool]:
    """``(json, sse)``: which response types the client's ``Accept`` allows."""
    accept = headers.get("accept", "").lower()
    if "*/*" in accept:
        return True, True
    return "application/json" in accept, "text/event-stream" in accept


def check_accept(headers: Mapping[str, str]) -> None:
    """406 unless the client accepts both response types, as MCP requires of it."""
    json_ok, sse_ok = accepts(headers)
    if not (json_ok and sse_ok):
        why = "is missing" if "accept" not in headers else "must list"
        raise HttpError(
            406, f"Not Acceptable: the Accept header {why} application/json and text/event-stream"
        )


def check_content_type(headers: Mapping[str, str]) -> None:
    if "content-type" not in headers:
        raise HttpError(415, "Unsupported Media Type: the Content-Type header is missing")
    content_type = headers["content-type"].split(";", 1)[0].strip().lower()
    if content_type != "application/json":
        raise HttpError(415, "Unsupported Media Type: expected application/json")


def check_content_length(headers: Mapping[str, str], limit: int) -> None:
    length = headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise too_large(limit)


def too_large(limit: int) -> HttpError:
    """413 naming the limit and the setting that raises it (the client's author reads it)."""
    return HttpError(
        413,
        f"Payload Too Large: the body is over {limit} bytes (ConnectionLimits.max_message_size)",
        headers=CLOSE,
    )


def _params(message: object) -> Mapping[str, Any] | None:
    if isinstance(message, dict):
        params = message.get("params")
        if isinstance(params, dict):
            return params
    return None


def select_era(headers: Mapping[str, str], message: object) -> Era:
    """Which era serves this POST.

    Any ``MCP-Protocol-Version`` that is not a legacy version selects the
    modern era (an unknown one then gets ``-32022``, which tells a probing
    client exactly what we serve), and so does a body carrying the modern
    ``_meta`` envelope.  Everything else is legacy: ``initialize``, and
    requests of a legacy session.
    """
    version = headers.get(PROTOCOL_VERSION)
    if version is not None and version not in LEGACY_VERSIONS:
        return "modern"
    params = _params(message)
    if params is not None and has_modern_meta(params):
        return "modern"
    return "legacy"


def is_notification(message: object) -> bool:
    return isinstance(message, dict) and "method" in message and "id" not in message


def is_initialize(message: object) -> bool:
    return isinstance(message, dict) and message.get("method") == "initialize" and "id" in message


def modern_envelope(headers: Mapping[str, str], message: Mapping[str, Any]) -> Envelope:
    """Check a modern request's envelope and routing headers, in the spec's order.

    ``-32602`` for a missing envelope, then ``-32020`` when
    ``MCP-Protocol-Version``, ``Mcp-Method`` or ``Mcp-Name`` is missing or
    disagrees with the body (a client that disagrees with itself is told
    so first), then ``-32022`` for a version we do not serve.
    """
    params = _params(message) or {}
    unsupported: JsonRpcError | None = None
    try:
        envelope: Envelope | None = read_envelope(params)
    except JsonRpcError as exc:
        if exc.code != UNSUPPORTED_PROTOCOL_VERSION:
            raise
        envelope, unsupported = None, exc
    meta = params["_meta"]
    method = message.get("method")
    version = headers.get(PROTOCOL_VERSION)
    if version != meta.get(META_PROTOCOL_VERSION):
        raise _header_error(HEADER_PROTOCOL_VERSION, version, "_meta")
    if headers.get(METHOD) != method:
        raise _header_error(HEADER_METHOD, headers.get(METHOD), "the method")
    name_key = NAME_BEARING.get(method) if isinstance(method, str) else None
    if name_key is not None:
        expected = params.get(name_key)
        sent = headers.get(NAME)
        if decode_header_value(sent) != expected:
            raise _header_error(HEADER_NAME, sent, repr(name_key))
    if unsupported is not None:
        raise unsupported
    assert envelope is not None
    return envelope


def check_param_headers(
    headers: Mapping[str, str], input_schema: Mapping[str, Any], arguments: object
) -> None:
    """``-32020`` unless every ``x-mcp-header`` argument is mirrored in its header (SEP-2243).

    A tool parameter annotated ``"x-mcp-header": "Region"`` in its input
    schema travels in ``Mcp-Param-Region`` too (verbatim, or as
    ``=?base64?...?=``), so intermediaries can route on it without reading
    the body.  The two must agree: a missing header for an argument that is
    present, a header for an argument that is absent, a malformed Base64
    value, or a different value are all refused, so a proxy and the server
    never act on different values.
    """
    properties = input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return
    given = arguments if isinstance(arguments, Mapping) else {}
    for name, spec in properties.items():
        header = spec.get("x-mcp-header") if isinstance(spec, Mapping) else None
        if not isinstance(header, str):
            continue
        sent = headers.get(PARAM_PREFIX + header.lower())
        if name not in given:
            if sent is not None:
                raise JsonRpcError(HEADER_MISMATCH, f"Mcp-Param-{header} sent without {name!r}")
            continue
        expected = header_form(given[name])
        if expected is None:
            continue
        if sent is None or decode_header_value(sent.strip()) != expected:
            raise _header_error(f"Mcp-Param-{header}", sent, f"argument {name!r}")


def _header_error(header: str, sent: str | None, what: str) -> JsonRpcError:
    """``-32020`` saying whether *header* was missing or disagrees with *what* in the body.

    A client author debugging a 400 needs to know which of the two it is:
    a header their HTTP stack never sent reads very differently from a
    value it encoded wrongly.
    """
    if sent is None:
        return JsonRpcError(HEADER_MISMATCH, f"{header} header is missing (it must match {what})")
    return JsonRpcError(HEADER_MISMATCH, f"{header} header does not match {what}")


def status_for(code: int, era: Era) -> int:
    """The HTTP status of a JSON response carrying JSON-RPC error *code*.

    The modern era maps protocol errors to 400/404 (clients tell a modern
    server from a legacy one by them); the legacy era answers 400 only for
    messages it could not read at all, and 200 otherwise.
    """
    if era == "modern":
        return _MODERN_STATUS.get(code, 200)
    return 400 if code in (PARSE_ERROR, INVALID_REQUEST) else 200
