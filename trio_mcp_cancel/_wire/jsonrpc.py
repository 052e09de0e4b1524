"""JSON-RPC 2.0 framing: decode, classify and build messages, never crash.

Everything here runs on untrusted bytes before any MCP logic sees them, so
every failure is turned into a :class:`JsonRpcError` carrying the right
code.  That includes the failures the standard :mod:`json` module reports
with unexpected exception types: ``RecursionError`` for deeply nested
arrays and ``ValueError`` for integers longer than Python's digit limit.

A message may nest arrays and objects :data:`MAX_NESTING` levels deep: the
parser itself stops near Python's recursion limit, but everything after it
that walks the arguments recursively (sealing a ``requestState``,
validating against a schema, serialising a result that echoes them) would
fail far from here, with a traceback per request.  Checked once, here,
with a scan that only runs when the text has more brackets than the bound.
"""

from __future__ import annotations

import json
from typing import Any, Final

import attrs
from pydantic_core import from_json

from .._core.errors import CancellationError
from .._core.validation import RequestId, ValidRequestId, is_valid_request_id
from .names import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR

__all__ = [
    "INTERNAL_ERROR",
    "MAX_NESTING",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "ClientResponse",
    "JsonRpcError",
    "Notification",
    "Request",
    "classify",
    "decode",
    "encode",
    "error_code",
    "error_message",
    "message_too_large",
    "not_a_request",
    "request_id_of",
    "notification_message",
    "result_message",
]


Message = dict[str, Any]

#: How deeply arrays and objects may nest in one message (the message itself
#: is level 1, its ``params`` level 2, a tool's ``arguments`` level 3).
MAX_NESTING: Final = 64


class JsonRpcError(CancellationError):
    """A failure that becomes a JSON-RPC error response (a handler may raise one)."""

    def __init__(
        self,
        code: int,
        message: str,
        data: object = None,
        *,
        request_id: RequestId | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.request_id = request_id

    def to_message(self) -> Message:
        return error_message(self.request_id, self.code, self.message, self.data)


@attrs.frozen
class Request:
    """A call that expects a response."""

    id: ValidRequestId
    """Checked once, by :func:`classify`: the layers below need not check it again."""
    method: str
    params: dict[str, Any]


@attrs.frozen
class Notification:
    """A one-way message (no ``id``); never answered."""

    method: str
    params: dict[str, Any]


@attrs.frozen
class ClientResponse:
    """A response the client sent to a server-initiated request."""

    id: object
    result: object = None
    error: object = None


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


#: The stdlib codec, built once: ``json.loads``/``json.dumps`` with keyword
#: arguments construct a decoder or encoder on every call, and every message
#: is decoded and encoded once.
_DECODER: Final = json.JSONDecoder(parse_constant=_refuse_constant)
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def decode(body: bytes | str) -> object:
    """Parse JSON text, raising :class:`JsonRpcError` (``-32700``) on any failure.

    A message nested deeper than :data:`MAX_NESTING` is ``-32602`` (its
    ``params`` are where depth is allowed at all), with the request's id.

    pydantic's JSON parser (``pydantic_core.from_json``, a dependency
    already) reads a request in a third of the stdlib's time, straight from
    bytes.  It is stricter than the stdlib in places (a lone surrogate
    escape such as ``"\\ud800"`` is valid JSON it refuses, and it nests
    less deep), so whatever it refuses is parsed again by the stdlib, whose
    answer (the value, or the error) is the one that counts: the result is
    exactly the stdlib's.
    """
    try:
        message = from_json(body, allow_inf_nan=False)
    except ValueError:
        message = _stdlib_decode(body)
    # Nesting N levels takes N brackets: most messages never need the scan.
    if isinstance(body, bytes):
        brackets = body.count(b"{") + body.count(b"[")
    else:
        brackets = body.count("{") + body.count("[")
    if brackets > MAX_NESTING and _too_deep(message):
        raise _nested_too_deep(message)
    return message


def _stdlib_decode(body: bytes | str) -> object:
    try:
        if isinstance(body, bytes):
            body = body.decode("utf-8")
        return _DECODER.decode(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise JsonRpcError(PARSE_ERROR, "Parse error", str(exc)[:200]) from None


def _too_deep(value: object) -> bool:
    """Whether *value* nests arrays/objects deeper than :data:`MAX_NESTING`.

    One level at a time, no recursion; ``json.loads`` makes exact ``dict``
    and ``list`` objects only, hence the cheap ``type() is`` tests.
    """
    if type(value) is not dict and type(value) is not list:
        return False
    level: list[Any] = [value]
    for _ in range(MAX_NESTING):
        level = [
            child
            for item in level
            for child in (item.values() if type(item) is dict else item)
            if type(child) is dict or type(child) is list
        ]
        if not level:
            return False
    return True


def _nested_too_deep(message: object) -> JsonRpcError:
    why = f"nested deeper than {MAX_NESTING} levels"
    if not isinstance(message, dict):
        return JsonRpcError(INVALID_REQUEST, f"Invalid Request: {why}")
    return JsonRpcError(INVALID_PARAMS, f"Invalid params: {why}", request_id=request_id_of(message))


def request_id_of(message: object) -> ValidRequestId | None:
    """The id of *message* when it is a valid request id, else ``None``.

    For a message refused before (or instead of) :func:`classify`: its error
    still names the request when it can.
    """
    raw_id = message.get("id") if isinstance(message, dict) else None
    return raw_id if is_valid_request_id(raw_id) else None


def not_a_request(message: object) -> JsonRpcError:
    """``-32600`` for a message that had to be a request (a modern POST) and is not."""
    return JsonRpcError(
        INVALID_REQUEST, "Invalid Request: expected a request", request_id=request_id_of(message)
    )


def message_too_large(max_size: int) -> Message:
    """The answer to a message longer than the transport's ``max_message_size`` (never read)."""
    return error_message(
        None, INVALID_REQUEST, "Invalid Request: message too large", {"maxMessageSize": max_size}
    )


def encode(message: object) -> bytes:
    """Serialise a message compactly as strict JSON.

    The output is ASCII (``\\uXXXX`` escapes), because text decoded from
    JSON may hold lone surrogates (``"\\ud800"`` is valid JSON) that UTF-8
    cannot encode, and an error echoing a hostile method name must not fail
    to serialise.  ``NaN`` and infinities are refused (``ValueError``): they
    are not JSON, and a client would fail to parse them.
    """
    return _ENCODER.encode(message).encode("ascii")


def error_message(request_id: object, code: int, message: str, data: object = None) -> Message:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def error_code(message: Message) -> int | None:
    """The code of an error response (one this library built), ``None`` for a result."""
    error = message.get("error")
    return None if error is None else error["code"]


def notification_message(method: str, params: dict[str, Any]) -> Message:
    """A server notification (``notifications/tools/list_changed`` for a GET stream...)."""
    return {"jsonrpc": "2.0", "method": method, "params": params}


def result_message(request_id: RequestId, result: object) -> Message:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def classify(message: object) -> Request | Notification | ClientResponse:
    """Check the JSON-RPC 2.0 shape of one decoded message.

    Raises :class:`JsonRpcError` with ``-32600`` (bad shape, bad id) or
    ``-32602`` (params that are not an object: every MCP method takes named
    params).  The error carries the request's id when that id was valid, so
    the client can match the error to its call.
    """
    if isinstance(message, list):
        raise JsonRpcError(INVALID_REQUEST, "Batch requests are not supported")
    if not isinstance(message, dict):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: expected a JSON object")
    has_id = "id" in message
    raw_id = message.get("id")
    valid_id: ValidRequestId | None = raw_id if is_valid_request_id(raw_id) else None
    if message.get("jsonrpc") != "2.0":
        raise JsonRpcError(
            INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', request_id=valid_id
        )
    method = message.get("method")
    if method is None:
        if has_id and ("result" in message or "error" in message):
            return ClientResponse(raw_id, message.get("result"), message.get("error"))
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: no method", request_id=valid_id)
    if not isinstance(method, str):
        raise JsonRpcError(
            INVALID_REQUEST, 'Invalid Request: "method" must be a string', request_id=valid_id
        )
    if has_id and valid_id is None:
        raise JsonRpcError(
            INVALID_REQUEST,
            "Invalid Request: id must be an integer or a string of at most 256 bytes",
        )
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise JsonRpcError(
            INVALID_PARAMS, "Invalid params: expected an object", request_id=valid_id
        )
    if valid_id is None:
        return Notification(method, params)
    return Request(valid_id, method, params)
