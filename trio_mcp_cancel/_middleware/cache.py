"""A response cache for read-only tools, bounded in entries, bytes and time."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import attrs
import trio

from .._protocol.middleware import CallNext, MiddlewareRequest
from .._wire import jsonrpc

__all__ = ["ResponseCache"]


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, not {value!r}")


@attrs.define
class ResponseCache:
    """Results of ``tools/call`` for tools annotated ``readOnlyHint: true``, kept *ttl* seconds.

    The key is the tool's name, its arguments as canonical JSON and the
    principal, so one caller never reads another's result.  Only a result
    that ended ``"ok"`` and is not ``isError`` is kept (never an error, a
    cancelled call, or a result a client cancel silenced).  An entry is kept
    as its JSON bytes (each hit decodes a fresh copy: the dispatcher and the
    other middleware may change the dict they get), and counted by its
    key's and value's bytes: an entry over *max_entry_bytes* is never kept,
    and the least recently used go while over *max_entries* or *max_bytes*.
    """

    ttl: float = attrs.field(default=60.0, validator=_positive)
    max_entries: int = attrs.field(default=1000, validator=_positive)
    max_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=_positive)
    max_entry_bytes: int = attrs.field(default=1024 * 1024, validator=_positive)
    hits: int = attrs.field(default=0, init=False)
    misses: int = attrs.field(default=0, init=False)
    _entries: OrderedDict[bytes, tuple[bytes, float]] = attrs.field(
        factory=OrderedDict, init=False, repr=False
    )
    _bytes: int = attrs.field(default=0, init=False)

    @property
    def entries(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """Bytes held (keys and values)."""
        return self._bytes

    async def __call__(self, request: MiddlewareRequest, call_next: CallNext) -> Any:
        if not request.read_only:
            return await call_next()
        key = _key(request)
        if key is None or len(key) > self.max_entry_bytes:
            return await call_next()
        now = trio.current_time()
        found = self._entries.get(key)
        if found is not None:
            value, expires = found
            if now < expires:
                self._entries.move_to_end(key)
                self.hits += 1
                return json.loads(value)
            self._drop(key)
        self.misses += 1
        result = await call_next()
        outcome = request.outcome
        if outcome is not None and outcome.status == "ok" and not outcome.tool_error:
            try:
                value = jsonrpc.encode(result)
            except (TypeError, ValueError):
                return result  # not JSON: the dispatcher fails it, nothing to keep
            self._keep(key, value, trio.current_time() + self.ttl)
        return result

    def _keep(self, key: bytes, value: bytes, expires: float) -> None:
        size = len(key) + len(value)
        if size > self.max_entry_bytes:
            return
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (value, expires)
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: bytes) -> None:
        value, _ = self._entries.pop(key)
        self._bytes -= len(key) + len(value)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


def _key(request: MiddlewareRequest) -> bytes | None:
    params = request.params
    name, arguments = params.get("name"), params.get("arguments") or {}
    if not isinstance(name, str):
        return None
    canonical = [name, arguments, request.principal]
    try:
        return json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    except (TypeError, ValueError):
        return None
