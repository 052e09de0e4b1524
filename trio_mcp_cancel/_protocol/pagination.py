"""Opaque cursors for the list methods (``tools/list``, ``resources/list``, ...).

MCP pages lists with an opaque ``cursor`` the server hands out as
``nextCursor``; a client must not parse or make one up, and an invalid one
gets ``-32602``.  Ours is URL-safe base64 of ``{"l": <list>, "o": <offset>}``:
which list it pages (a ``tools/list`` cursor is refused by ``prompts/list``)
and where the next page starts.  It carries no secret and needs none: the
lists are the same for every caller, so a forged offset only reads what
any client may list.  A list that changes between pages may shift under an
offset; the ``list_changed`` notifications tell clients to list again.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

from .._wire.jsonrpc import INVALID_PARAMS, JsonRpcError

__all__ = ["DEFAULT_PAGE_SIZE", "decode_cursor", "encode_cursor", "page"]

#: Items per page by default: large enough that a typical server's lists
#: (and the conformance suite's) fit in one.
DEFAULT_PAGE_SIZE: Final = 1000
_MAX_CURSOR: Final = 200

T = TypeVar("T")


def encode_cursor(listing: str, offset: int) -> str:
    raw = json.dumps({"l": listing, "o": offset}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(listing: str, cursor: object) -> int:
    """The offset *cursor* (one of ours, for *listing*) points at; ``-32602`` otherwise."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > _MAX_CURSOR:
        raise _invalid()
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError):
        raise _invalid() from None
    if not isinstance(value, dict) or value.get("l") != listing:
        raise _invalid()
    offset = value.get("o")
    if type(offset) is not int or offset < 1:
        raise _invalid()
    return offset


def page(
    listing: str, items: Sequence[T], params: Mapping[str, Any], size: int
) -> tuple[Sequence[T], dict[str, Any]]:
    """The page of *items* the request's ``cursor`` asks for, and the result's ``nextCursor``.

    No ``cursor`` (or ``null``) is the first page; the second value is
    ``{"nextCursor": ...}`` while more follow, else ``{}``.
    """
    cursor = params.get("cursor")
    start = 0 if cursor is None else decode_cursor(listing, cursor)
    end = start + size
    more = {"nextCursor": encode_cursor(listing, end)} if end < len(items) else {}
    return items[start:end], more


def _invalid() -> JsonRpcError:
    return JsonRpcError(INVALID_PARAMS, "Invalid params: invalid cursor")
