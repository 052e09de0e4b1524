"""A token bucket per principal: requests over the rate are refused as too many requests."""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Collection
from typing import Any

import attrs
import trio

from .._protocol.admission import too_many_requests_code
from .._protocol.middleware import CallNext, MiddlewareRequest
from .._wire.jsonrpc import JsonRpcError

__all__ = ["RateLimit"]

#: A key longer than this is stored as its digest, so a bucket's size is bounded
#: whatever the principal (a token's subject, a client's address) is.
MAX_KEY_CHARS = 64


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, not {value!r}")


@attrs.define
class RateLimit:
    """At most *rate* requests a second per caller, in bursts of up to *burst*.

    The caller is the principal (authenticated), else the tenant (HTTP: the
    client's address bucket), else one shared bucket (stdio, in memory).
    *methods*: the methods counted (``None``: every request).  A refusal is
    the server's too-many-requests error, as an admission cap's (``-31429``
    modern, ``-32001`` legacy; ``data``: ``{"limit": "rate", "max": burst,
    "retryAfter": seconds}``), which the modern HTTP transport answers with
    ``429`` and ``Retry-After``.

    At most *max_keys* buckets are kept, least recently used evicted first, and
    each key is at most :data:`MAX_KEY_CHARS` (a longer one is kept as its
    digest), so a flood of distinct principals holds bounded memory; a caller
    whose bucket was evicted starts again with a full one.
    """

    rate: float = attrs.field(validator=_positive)
    burst: int = attrs.field(default=10, validator=_positive)
    max_keys: int = attrs.field(default=10_000, validator=_positive)
    methods: Collection[str] | None = None
    _buckets: OrderedDict[str | None, tuple[float, float]] = attrs.field(
        factory=OrderedDict, init=False, repr=False
    )

    @property
    def keys(self) -> int:
        """Buckets held now (at most *max_keys*)."""
        return len(self._buckets)

    async def __call__(self, request: MiddlewareRequest, call_next: CallNext) -> Any:
        if self.methods is None or request.method in self.methods:
            wait = self._take(_key(request.principal or request.tenant))
            if wait > 0:
                raise JsonRpcError(
                    too_many_requests_code(request.era),
                    "Too many requests",
                    {"limit": "rate", "max": self.burst, "retryAfter": math.ceil(wait)},
                )
        return await call_next()

    def _take(self, key: str | None) -> float:
        """Take one token from *key*'s bucket: 0, or the seconds until one is there."""
        now = trio.current_time()
        buckets = self._buckets
        tokens, at = buckets.pop(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self.rate
        buckets[key] = (tokens, now)  # most recently used last
        while len(buckets) > self.max_keys:
            buckets.popitem(last=False)
        return wait


def _key(key: str | None) -> str | None:
    if key is None or len(key) <= MAX_KEY_CHARS:
        return key
    return "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
