"""Opaque access tokens, judged by the authorization server (RFC 7662 token introspection).

A token the resource server cannot read itself is posted to the
introspection endpoint (given, or the issuer metadata's
``introspection_endpoint``), authenticated as this resource's client
(``client_secret_basic``).  An ``active`` answer is checked like a JWT's
claims: ``iss`` (when present) is the issuer, ``aud`` contains this
resource (RFC 8707; a token without ``aud`` is refused unless
*require_audience* is off), ``exp`` not past.

**Cache.**  A judged token is kept until its ``exp`` (at most *max_ttl*
seconds; *ttl_without_exp* when it has none), keyed by its SHA-256 digest,
in an LRU table of *cache_size* entries: a valid token costs one
introspection call per lifetime, and its later requests never wait on the
network.  Refused tokens are not cached (a token may become active); the
calls in flight at once are bounded by *concurrency*, so a flood of
made-up tokens queues here instead of multiplying connections; after a
failed call, uncached tokens get ``503`` at once for *retry_interval*
seconds rather than each waiting out the timeout on a server that is down.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from typing import Any

import attrs
import trio

from .discovery import IssuerMetadata
from .fetch import post_form
from .tokens import AccessToken, AuthServerUnavailable, InvalidToken, scopes_of

__all__ = ["IntrospectionVerifier"]


@attrs.define(eq=False)
class IntrospectionVerifier:
    """Validates opaque tokens by introspection; see the module docstring.

    Parameters:
        issuer: the authorization server's issuer identifier.
        audience: this resource's canonical URL.
        client_id, client_secret: this resource server's credentials at
            the introspection endpoint.
        endpoint: the introspection endpoint; ``None``: from the issuer's metadata.
        timeout: the bound of each introspection call.
        cache_size: the most tokens remembered.
        max_ttl: the longest a judgement is kept, whatever ``exp`` says.
        ttl_without_exp: how long a token without ``exp`` is kept.
        concurrency: the most introspection calls in flight at once.
        require_audience: refuse an active token whose answer has no ``aud``.
        retry_interval: after a failed call, seconds during which uncached
            tokens are answered ``503`` at once instead of each waiting.
    """

    issuer: str
    audience: str
    client_id: str
    client_secret: str
    endpoint: str | None = None
    timeout: float = 5.0
    cache_size: int = 10_000
    max_ttl: float = 3600.0
    ttl_without_exp: float = 60.0
    concurrency: int = 16
    require_audience: bool = True
    retry_interval: float = 5.0
    _down: tuple[float, str] | None = attrs.field(default=None, init=False)
    _metadata: IssuerMetadata = attrs.field(init=False)
    _cache: OrderedDict[bytes, tuple[float, AccessToken]] = attrs.field(
        factory=OrderedDict, init=False
    )
    _limiter: trio.CapacityLimiter = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if self.cache_size < 0 or self.concurrency < 1:
            raise ValueError("cache_size must be >= 0 and concurrency >= 1")
        self._metadata = IssuerMetadata(self.issuer, self.timeout)
        self._limiter = trio.CapacityLimiter(self.concurrency)

    async def verify(self, token: str) -> AccessToken:
        """The :class:`AccessToken` *token* stands for, asking the server once per lifetime."""
        digest = hashlib.sha256(token.encode()).digest()
        cached = self._cache.get(digest)
        now = time.time()
        if cached is not None:
            if now < cached[0]:
                self._cache.move_to_end(digest)
                return cached[1]
            del self._cache[digest]
        if self._down is not None and trio.current_time() < self._down[0]:
            raise AuthServerUnavailable(self._down[1])
        async with self._limiter:
            try:
                endpoint = self.endpoint or await self._metadata.endpoint("introspection_endpoint")
                answer = await post_form(
                    endpoint,
                    {"token": token, "token_type_hint": "access_token"},
                    self.timeout,
                    auth=(self.client_id, self.client_secret),
                )
            except AuthServerUnavailable as exc:
                self._down = (trio.current_time() + self.retry_interval, str(exc))
                raise
        access = self._judge(answer)
        until = min(
            now + self.max_ttl,
            access.expires_at if access.expires_at is not None else now + self.ttl_without_exp,
        )
        if self.cache_size:
            self._cache[digest] = (until, access)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return access

    def _judge(self, answer: dict[str, Any]) -> AccessToken:
        if answer.get("active") is not True:
            raise InvalidToken("the token is not active")
        issuer = answer.get("iss", self.issuer)
        if issuer != self.issuer:
            raise InvalidToken(f"the token was not issued by {self.issuer}")
        audience = answer.get("aud")
        audiences = [audience] if isinstance(audience, str) else audience
        if audiences is None and self.require_audience:
            raise InvalidToken("the introspected token names no audience")
        if audiences is not None and (
            not isinstance(audiences, list) or self.audience not in audiences
        ):
            raise InvalidToken(f"the token is not for this resource ({self.audience})")
        exp = answer.get("exp")
        if exp is not None and (not isinstance(exp, (int, float)) or exp <= time.time()):
            raise InvalidToken("the token has expired")
        client_id = answer.get("client_id")
        subject = answer.get("sub", client_id)
        if not isinstance(subject, str) or not subject:
            raise InvalidToken("the introspected token names no subject")
        return AccessToken(
            subject=subject,
            issuer=self.issuer,
            scopes=scopes_of(answer),
            expires_at=float(exp) if exp is not None else None,
            client_id=client_id if isinstance(client_id, str) else None,
            claims=answer,
        )
