"""Validation of client-chosen request ids and cancellation reasons.

Both arrive from the network unauthenticated (``notifications/cancelled`` is
reachable by anyone who can POST), so both are checked before they become
dict keys, log lines or event payloads.
"""

from __future__ import annotations

import unicodedata
from typing import Final, NewType, TypeAlias, TypeGuard

from .errors import InvalidRequestId

__all__ = [
    "MAX_ID_BYTES",
    "RequestId",
    "ValidRequestId",
    "is_valid_request_id",
    "sanitize_reason",
    "validate_request_id",
]

#: A JSON-RPC request id as this library accepts it.
RequestId: TypeAlias = int | str

# ``NewType`` needs a class, not a union: one per kind of id.
_ValidInt = NewType("_ValidInt", int)
_ValidStr = NewType("_ValidStr", str)
#: A request id already checked by :func:`is_valid_request_id` (a type, no
#: runtime cost): the id of a classified JSON-RPC request is one, so the
#: layers below the edge (a ``Tracking`` built directly) need not check it again.
ValidRequestId: TypeAlias = _ValidInt | _ValidStr

#: Longest string id accepted, in UTF-8 bytes.  Integer ids are held to the
#: same size: at most this many decimal digits.
MAX_ID_BYTES: Final = 256

_INT_BOUND: Final = 10**MAX_ID_BYTES

# Control, format (bidi overrides, zero-width joiners), separator and
# surrogate code points.  Format characters are included because they are
# how log lines and UIs are spoofed (U+202E turns text around).
_STRIPPED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
_WHITESPACE_CONTROLS: Final = frozenset("\t\n\r\x0b\x0c")


def is_valid_request_id(request_id: object) -> TypeGuard[ValidRequestId]:
    """Return whether *request_id* is an ``int`` (not ``bool``) or a short ``str``."""
    if type(request_id) is int:  # bool and int subclasses are refused
        return -_INT_BOUND < request_id < _INT_BOUND
    if type(request_id) is str:
        # ASCII is the common case and needs no encode; anything else is
        # measured in UTF-8, which also refuses lone surrogates.
        if len(request_id) <= MAX_ID_BYTES and request_id.isascii():
            return True
        if len(request_id) > MAX_ID_BYTES:
            return False
        try:
            return len(request_id.encode("utf-8")) <= MAX_ID_BYTES
        except UnicodeEncodeError:
            return False
    return False


def validate_request_id(request_id: object) -> ValidRequestId:
    """Return *request_id* unchanged, or raise :class:`InvalidRequestId`."""
    if is_valid_request_id(request_id):
        return request_id
    raise InvalidRequestId(
        f"request id must be an int or a str of at most {MAX_ID_BYTES} UTF-8 bytes,"
        f" not {type(request_id).__name__}"
    )


def sanitize_reason(reason: object, max_length: int = 256) -> str | None:
    """Make a client-supplied reason safe to store, log and echo.

    ``None`` stays ``None``.  Anything else is turned into text, stripped of
    control and format characters (tabs and newlines become spaces so words
    stay apart) and cut to *max_length* characters.  The input is cut to a
    multiple of the limit first, so a megabyte reason costs no more than a
    short one.
    """
    if reason is None:
        return None
    text = reason if isinstance(reason, str) else repr(reason)
    text = text[: max_length * 4]
    if text.isascii() and text.isprintable():  # the common case, without a scan in Python
        return text[:max_length].strip()
    out: list[str] = []
    for ch in text:
        if ch in _WHITESPACE_CONTROLS:
            out.append(" ")
        elif unicodedata.category(ch) not in _STRIPPED_CATEGORIES:
            out.append(ch)
    return "".join(out)[:max_length].strip()
