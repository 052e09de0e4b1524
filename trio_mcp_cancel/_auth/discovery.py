"""Authorization server metadata (RFC 8414, OpenID Connect Discovery), found once and kept.

The issuer's metadata names its ``jwks_uri`` and ``introspection_endpoint``.
It is fetched at the first token that needs it, under a lock (concurrent
requests share one fetch), and kept for the life of the process: the
endpoints of an issuer do not move.  A failed discovery is retried after a
back-off that starts at *retry_backoff* seconds and doubles with each
failure in a row, up to *retry_interval* (a ``Retry-After`` from the server
lengthens it); meanwhile requests are answered ``503`` at once, with the
wait left as ``Retry-After``, instead of each waiting on a server that is
down.  A failure at first use thus costs a second, not a long lockout.

The candidate URLs follow RFC 8414 section 3.1 (the well-known segment
goes between the host and the issuer's path) and then OpenID Connect
Discovery (both placements), as the MCP specification lists them.  The
document's ``issuer`` must be the configured issuer exactly (RFC 8414
section 3.3), or it is refused: metadata for another issuer would let it
choose our keys.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import trio

from .._wire.names import oauth_metadata_urls
from .fetch import Transport, get_json
from .tokens import AuthServerUnavailable

__all__ = ["BackOff", "IssuerMetadata", "backoff"]


def backoff(first: float, cap: float, failures: int, asked: float | None) -> float:
    """Seconds to wait after *failures* failures in a row: *first* doubling up to *cap*,
    and never less than the server *asked* (its ``Retry-After``)."""
    cap = cap if math.isfinite(cap) else 0.0
    wait = min(first * 2.0 ** min(failures - 1, 30), cap)
    return max(wait, asked or 0.0)


@attrs.define(eq=False)
class BackOff:
    """Failures in a row of one fetch from the authorization server, and until when to wait.

    A down server is asked again after *first*, then twice as long, up to a
    cap (see :func:`backoff`), not once per waiting request; while backing
    off, a request is answered at once with the wait left.
    """

    failures: int = 0
    _until: tuple[float, str] | None = None
    """Until when fetching is backed off, and why (the last fetch failed)."""

    def check(self) -> None:
        """Raise :class:`AuthServerUnavailable` with the wait left, while backing off."""
        if self._until is not None:
            left = self._until[0] - trio.current_time()
            if left > 0:
                raise AuthServerUnavailable(self._until[1], left)

    def failed(self, exc: AuthServerUnavailable, first: float, cap: float) -> None:
        """Count the failure *exc*, and set its ``retry_after`` to the wait it starts."""
        self.failures += 1
        wait = backoff(first, cap, self.failures, exc.retry_after)
        self._until = (trio.current_time() + wait, str(exc))
        exc.retry_after = wait

    def succeeded(self) -> None:
        self._until, self.failures = None, 0


@attrs.define(eq=False)
class IssuerMetadata:
    """One issuer's metadata document, discovered on first use; see the module docstring."""

    issuer: str
    timeout: float = 5.0
    retry_interval: float = 10.0
    retry_backoff: float = 1.0
    transport: Transport | None = None
    _document: dict[str, Any] | None = attrs.field(default=None, init=False)
    _backoff: BackOff = attrs.field(factory=BackOff, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    async def get(self) -> dict[str, Any]:
        """The metadata document (fetched the first time), or :class:`AuthServerUnavailable`."""
        if self._document is not None:
            return self._document
        async with self._lock:
            if self._document is not None:
                return self._document
            self._backoff.check()
            try:
                self._document = await self._discover()
            except AuthServerUnavailable as exc:
                self._backoff.failed(exc, self.retry_backoff, self.retry_interval)
                raise
            self._backoff.succeeded()
            return self._document

    async def endpoint(self, name: str) -> str:
        """A URL member of the metadata (``jwks_uri``, ...), or why there is none."""
        value = (await self.get()).get(name)
        if not isinstance(value, str) or not value:
            raise AuthServerUnavailable(f"the metadata of {self.issuer} has no {name}")
        return value

    async def _discover(self) -> dict[str, Any]:
        """Try the candidate URLs, all within one *timeout*."""
        with trio.move_on_after(self.timeout):
            return await self._try_each()
        raise AuthServerUnavailable(
            f"no authorization server metadata for {self.issuer} within {self.timeout}s"
        )

    async def _try_each(self) -> dict[str, Any]:
        reasons = []
        asked: float | None = None
        for url in oauth_metadata_urls(self.issuer):
            try:
                document = await get_json(url, self.timeout, self.transport)
            except AuthServerUnavailable as exc:
                reasons.append(str(exc))
                if exc.retry_after is not None:
                    asked = max(asked or 0.0, exc.retry_after)
                continue
            if document.get("issuer") != self.issuer:
                raise AuthServerUnavailable(
                    f"the metadata at {url} names issuer {document.get('issuer')!r},"
                    f" not {self.issuer!r}"
                )
            return document
        raise AuthServerUnavailable(
            f"no authorization server metadata for {self.issuer}: " + "; ".join(reasons), asked
        )
