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
in an LRU table of *cache_size* entries and *cache_bytes* bytes (an
answer's claims are the server's to size, so a count alone bounds
nothing): a valid token costs one
introspection call per lifetime, and its later requests never wait on the
network, whatever the authorization server is going through.  A refused
token is remembered too, briefly (*refusal_ttl* seconds, by digest, at
most *refusal_cache_size* entries and *refusal_cache_bytes* bytes): a
client repeating a dead token does not repeat the call.

**What one address can make it ask.**  Unknown tokens from one client
address (its bucket: IPv4 address, IPv6 ``/64``, as everywhere in the
library) are introspected at most *client_burst* at once and
*client_rate* a second after that (a token bucket), *client_concurrency*
in flight at a time; beyond, that address gets ``429`` with
``Retry-After`` and the authorization server is not asked.  A flood of
made-up tokens from one address thus reaches the server at its budget,
and the calls in flight (*concurrency* in all) stay open to the others.

**When the server pushes back.**  A failed call (down, slow, ``429`` or
``503``) opens a back-off window: *retry_interval* seconds, or the
``Retry-After`` the server sent (up to 60 s).  Meanwhile unknown tokens
are answered ``503`` with the window's ``Retry-After`` at once, instead of
each hammering (or waiting on) the server; cached tokens are unaffected.

**The bound.**  A request waits for introspection (queueing for a slot,
discovery and the call together) at most *timeout* seconds, enforced by one
deadline; then it is answered ``503``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

import attrs
import trio

from .._core.namespace import client_bucket
from .discovery import IssuerMetadata
from .fetch import Transport, post_form
from .tokens import (
    AccessToken,
    AuthServerUnavailable,
    InvalidToken,
    TooManyNewTokens,
    requesting_client,
    scopes_of,
)

__all__ = ["IntrospectionVerifier"]

#: What a remembered refusal costs besides its reason: the digest key (a 32-byte
#: ``bytes``), the dict slot and the (deadline, reason) tuple with its float.
_REFUSAL_OVERHEAD: Final = 200

#: What a remembered active token costs besides its claims: the digest key,
#: the dict slot, the entry tuple and the :class:`AccessToken` itself.
_CACHED_OVERHEAD: Final = 400


def _claims_bytes(answer: Mapping[str, Any]) -> int:
    """About what the claims of *answer* hold in memory: their JSON size."""
    return len(json.dumps(answer, default=str, separators=(",", ":")))


#: Client addresses whose introspection budget is tracked at once (LRU; an
#: evicted address starts again with a full bucket, as a new one would).
_MAX_CLIENTS: Final = 4096


@attrs.define
class _Budget:
    """One client address's introspection allowance: a token bucket and its calls in flight."""

    tokens: float
    at: float
    in_flight: int = 0


@attrs.define(eq=False)
class IntrospectionVerifier:
    """Validates opaque tokens by introspection; see the module docstring.

    Parameters:
        issuer: the authorization server's issuer identifier.
        audience: this resource's canonical URL.
        client_id, client_secret: this resource server's credentials at
            the introspection endpoint.
        endpoint: the introspection endpoint; ``None``: from the issuer's metadata.
        timeout: the longest a request waits for introspection (a slot,
            discovery and the call together).
        cache_size, cache_bytes: the most tokens remembered, and the most
            bytes their answers (claims) may hold together.
        max_ttl: the longest a judgement is kept, whatever ``exp`` says.
        ttl_without_exp: how long a token without ``exp`` is kept.
        concurrency: the most introspection calls in flight at once.
        require_audience: refuse an active token whose answer has no ``aud``.
        retry_interval: after a failed call (without ``Retry-After``),
            seconds during which unknown tokens are answered ``503`` at once.
        refusal_ttl: seconds a refused token is remembered (refused again
            without a call).
        refusal_cache_size, refusal_cache_bytes: the bounds of that memory.
        client_burst, client_rate: unknown tokens one client address may
            have introspected at once, and per second after that.
        client_concurrency: introspection calls in flight for one address.
        transport: the httpx2 transport to the authorization server
            (``None``: the network).
    """

    issuer: str
    audience: str
    client_id: str
    client_secret: str
    endpoint: str | None = None
    timeout: float = 5.0
    cache_size: int = 10_000
    cache_bytes: int = 32 * 1024 * 1024
    max_ttl: float = 3600.0
    ttl_without_exp: float = 60.0
    concurrency: int = 16
    require_audience: bool = True
    retry_interval: float = 5.0
    refusal_ttl: float = 10.0
    refusal_cache_size: int = 10_000
    refusal_cache_bytes: int = 4 * 1024 * 1024
    client_burst: int = 10
    client_rate: float = 1.0
    client_concurrency: int = 4
    transport: Transport | None = None
    _down: tuple[float, str] | None = attrs.field(default=None, init=False)
    _metadata: IssuerMetadata = attrs.field(init=False)
    _cache: OrderedDict[bytes, tuple[float, AccessToken, int]] = attrs.field(
        factory=OrderedDict, init=False
    )
    _cache_held: int = attrs.field(default=0, init=False)
    _refused: OrderedDict[bytes, tuple[float, str]] = attrs.field(factory=OrderedDict, init=False)
    _refused_bytes: int = attrs.field(default=0, init=False)
    _budgets: OrderedDict[str, _Budget] = attrs.field(factory=OrderedDict, init=False)
    _limiter: trio.CapacityLimiter = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if self.cache_size < 0 or self.concurrency < 1:
            raise ValueError("cache_size must be >= 0 and concurrency >= 1")
        if self.client_burst < 1 or self.client_concurrency < 1 or not self.client_rate > 0:
            raise ValueError("client_burst and client_concurrency must be >= 1, client_rate > 0")
        self._metadata = IssuerMetadata(self.issuer, self.timeout, transport=self.transport)
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
            self._forget(digest)
        clock = trio.current_time()
        refused = self._refused.get(digest)
        if refused is not None:
            if clock < refused[0]:
                raise InvalidToken(refused[1])
            self._forget_refusal(digest)
        if self._down is not None and clock < self._down[0]:
            raise AuthServerUnavailable(self._down[1], self._down[0] - clock)
        bucket = client_bucket(requesting_client.get())
        budget = self._take_budget(bucket, clock)
        try:
            answer = await self._introspect(token, clock + self.timeout)
        finally:
            if budget is not None:
                budget.in_flight -= 1
        try:
            access = self._judge(answer)
        except InvalidToken as exc:
            self._remember_refusal(digest, str(exc))
            raise
        until = min(
            now + self.max_ttl,
            access.expires_at if access.expires_at is not None else now + self.ttl_without_exp,
        )
        size = _CACHED_OVERHEAD + _claims_bytes(answer)
        if self.cache_size and size <= self.cache_bytes:
            self._forget(digest)
            self._cache[digest] = (until, access, size)
            self._cache_held += size
            while len(self._cache) > self.cache_size or self._cache_held > self.cache_bytes:
                self._forget(next(iter(self._cache)))
        return access

    def _forget(self, digest: bytes) -> None:
        entry = self._cache.pop(digest, None)
        if entry is not None:
            self._cache_held -= entry[2]

    async def _introspect(self, token: str, deadline: float) -> dict[str, Any]:
        """Ask the server about *token*, all of it (the wait for a slot too) by *deadline*."""
        queued = False
        try:
            self._limiter.acquire_nowait()
        except trio.WouldBlock:
            queued = True
        if queued:
            turn = False
            with trio.move_on_at(deadline):
                await self._limiter.acquire()
                turn = True
            if not turn:
                # Our own queue, not the server: no back-off window, just "not now".
                raise AuthServerUnavailable(
                    f"too many tokens are being introspected; no turn within {self.timeout}s",
                    1.0,
                )
        try:
            with trio.move_on_at(deadline):
                endpoint = self.endpoint or await self._metadata.endpoint("introspection_endpoint")
                return await post_form(
                    endpoint,
                    {"token": token, "token_type_hint": "access_token"},
                    max(0.0, deadline - trio.current_time()),
                    auth=(self.client_id, self.client_secret),
                    transport=self.transport,
                )
            if queued:
                # What the queue left of the bound ran out: not the server's fault alone.
                raise AuthServerUnavailable(
                    f"no introspection answer within {self.timeout}s (queued first)", 1.0
                )
            raise AuthServerUnavailable(
                f"the authorization server did not answer the introspection within {self.timeout}s"
            )
        except AuthServerUnavailable as exc:
            # A call that had the whole bound and failed is the server's doing: back
            # off.  One that ran out of what the queue left of it is not proof of that.
            if not (queued and trio.current_time() >= deadline):
                wait = self.retry_interval if exc.retry_after is None else exc.retry_after
                self._down = (trio.current_time() + wait, str(exc))
                exc.retry_after = wait
            raise
        finally:
            self._limiter.release()

    def _take_budget(self, bucket: str | None, clock: float) -> _Budget | None:
        """Spend one of *bucket*'s introspections, or refuse (:class:`TooManyNewTokens`).

        An unknown address (a Unix socket) has no bucket: only the global
        bounds apply to it.
        """
        if bucket is None:
            return None
        budgets = self._budgets
        budget = budgets.get(bucket)
        if budget is None:
            budget = _Budget(float(self.client_burst), clock)
            budgets[bucket] = budget
            if len(budgets) > _MAX_CLIENTS:
                self._evict_budget()
        else:
            budgets.move_to_end(bucket)
            refill = (clock - budget.at) * self.client_rate
            budget.tokens = min(float(self.client_burst), budget.tokens + refill)
            budget.at = clock
        if budget.in_flight >= self.client_concurrency:
            raise TooManyNewTokens(
                f"{self.client_concurrency} tokens from this address are being checked already",
                1.0,
            )
        if budget.tokens < 1.0:
            raise TooManyNewTokens(
                "this address sent more unknown tokens than can be checked",
                (1.0 - budget.tokens) / self.client_rate,
            )
        budget.tokens -= 1.0
        budget.in_flight += 1
        return budget

    def _evict_budget(self) -> None:
        """Drop the least recently seen address without a call in flight."""
        for bucket, budget in self._budgets.items():
            if budget.in_flight == 0:
                del self._budgets[bucket]
                return

    def _remember_refusal(self, digest: bytes, reason: str) -> None:
        if self.refusal_ttl <= 0 or self.refusal_cache_size <= 0:
            return
        refused = self._refused
        clock = trio.current_time()
        # Same TTL for every entry: insertion order is expiry order.
        while refused and next(iter(refused.values()))[0] <= clock:
            self._forget_refusal(next(iter(refused)))
        self._forget_refusal(digest)
        refused[digest] = (clock + self.refusal_ttl, reason)
        self._refused_bytes += _REFUSAL_OVERHEAD + len(reason)
        while refused and (
            len(refused) > self.refusal_cache_size or self._refused_bytes > self.refusal_cache_bytes
        ):
            self._forget_refusal(next(iter(refused)))

    def _forget_refusal(self, digest: bytes) -> None:
        entry = self._refused.pop(digest, None)
        if entry is not None:
            self._refused_bytes -= _REFUSAL_OVERHEAD + len(entry[1])

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
