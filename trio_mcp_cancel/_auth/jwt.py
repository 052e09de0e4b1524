"""JWT access tokens (RFC 9068) checked against the issuer's JWKS, with PyJWT.

PyJWT (``pyjwt[crypto]``) is the JOSE library: the most widely deployed
one in Python, small, typed, maintained, already what the official MCP
Python SDK depends on, and strict where it matters here: ``decode`` takes
the algorithm allow-list explicitly (``none`` and the HMAC algorithms are
not on ours, so neither an unsigned token nor one "signed" with the public
key as an HMAC secret gets through), and checks ``exp``, ``nbf``, ``iss``
and ``aud`` with a leeway.

**Keys.**  The JWKS (its URL given, or the issuer metadata's ``jwks_uri``)
is fetched at the first token and kept.  A token naming a ``kid`` the
cached set lacks (the issuer rotated its keys) refetches it, at most once
every *refresh_interval* seconds whatever the tokens say, so forged
``kid`` values cannot turn requests into a flood of JWKS fetches; a
refetch that does not produce the key refuses the token.  Besides that
general slot, a ``kid`` never asked for before may refetch on its own
small budget (*new_kid_refetches* a minute; a ``kid`` a refetch did not
find does not spend it again), so the new key of a rotation is fetched at
once even right after someone spent the general slot with made-up kids.
A failed fetch (metadata or keys) is retried after a short back-off:
*retry_backoff* seconds, doubling with each failure in a row up to
*refresh_interval* (longer if the server's ``Retry-After`` asks); until
then tokens that need a key are answered ``503`` at once with the reason
and the wait left as ``Retry-After``.  A request waits for keys at most
*timeout* seconds in all.  A valid token with a known key never waits on
the network.  At most *max_keys* keys are kept (the first ones of the set).

**Claims.**  ``iss`` must be the issuer, ``aud`` must contain this
resource's URL (RFC 8707: a token minted for another resource is refused,
so it is never passed through), ``exp`` must be present and not past,
``nbf`` not in the future (both with *leeway* seconds), ``sub`` present.
A validated token is remembered (by its SHA-256 digest, in an LRU table of
*cache_size*) until its ``exp``: a client's later requests cost a hash,
not a signature check.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

import attrs
import jwt
import trio

from .discovery import BackOff, IssuerMetadata
from .fetch import Transport, get_json
from .tokens import AccessToken, AuthServerUnavailable, InvalidToken, scopes_of

__all__ = ["DEFAULT_ALGORITHMS", "JwtVerifier"]

#: The window *new_kid_refetches* counts refetches over (seconds).
_NEW_KID_WINDOW: Final = 60.0

#: Kids a refetch did not find, remembered (by digest) so they spend the new-kid
#: budget once: 32-byte keys, so this many cost well under 100 KiB.
_MAX_UNFOUND_KIDS: Final = 1024

#: A JWKS key and the ``alg`` it is restricted to (``None``: any of its type).
_Key = tuple[jwt.PyJWK, str | None]

#: Asymmetric signature algorithms only: never ``none``, never HMAC.
DEFAULT_ALGORITHMS: Final = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)


@attrs.define(eq=False)
class JwtVerifier:
    """Validates JWT access tokens; see the module docstring.

    Parameters:
        issuer: the authorization server's issuer identifier (``iss``).
        audience: this resource's canonical URL (``aud`` must contain it).
        jwks_uri: where the keys are; ``None``: from the issuer's metadata.
        algorithms: the signature algorithms accepted (``none`` and ``HS*``
            are refused even if listed).
        leeway: seconds of clock skew allowed on ``exp`` and ``nbf``.
        timeout: the longest a request waits for keys (discovery and the
            JWKS fetch together).
        refresh_interval: the least time between two JWKS fetches for
            unknown kids (the general slot), and the longest back-off.
        new_kid_refetches: further refetches a minute for kids never asked
            for before (a key rotation's new kid).
        retry_backoff: the first wait after a failed fetch; it doubles with
            each failure in a row, up to *refresh_interval*.
        max_keys: the most keys kept from the JWKS.
        cache_size: validated tokens remembered (until their ``exp``), so a
            client's next requests skip the signature check.
        transport: the httpx2 transport to the authorization server
            (``None``: the network).
    """

    issuer: str
    audience: str
    jwks_uri: str | None = None
    algorithms: Sequence[str] = DEFAULT_ALGORITHMS
    leeway: float = 30.0
    timeout: float = 5.0
    refresh_interval: float = 30.0
    new_kid_refetches: int = 3
    retry_backoff: float = 1.0
    max_keys: int = 32
    cache_size: int = 1024
    transport: Transport | None = None
    _metadata: IssuerMetadata = attrs.field(init=False)
    _keys: dict[str | None, _Key] = attrs.field(factory=dict, init=False)
    _fetched_at: float = attrs.field(default=-math.inf, init=False)
    _backoff: BackOff = attrs.field(factory=BackOff, init=False)
    _new_kid_fetches: list[float] = attrs.field(factory=list, init=False)
    _unfound: OrderedDict[bytes, None] = attrs.field(factory=OrderedDict, init=False)
    _verified: OrderedDict[bytes, AccessToken] = attrs.field(factory=OrderedDict, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    def __attrs_post_init__(self) -> None:
        unsafe = [a for a in self.algorithms if a.lower() == "none" or a.upper().startswith("HS")]
        if unsafe:
            raise ValueError(f"algorithms {unsafe} are not allowed for access tokens")
        if not self.algorithms:
            raise ValueError("algorithms must name at least one signature algorithm")
        self._metadata = IssuerMetadata(
            self.issuer,
            self.timeout,
            retry_backoff=self.retry_backoff,
            transport=self.transport,
        )

    async def verify(self, token: str) -> AccessToken:
        """The :class:`AccessToken` *token* carries, or :class:`InvalidToken` saying why not."""
        digest = hashlib.sha256(token.encode()).digest()
        known = self._verified.get(digest)
        if known is not None:
            if known.expires_at is not None and time.time() <= known.expires_at + self.leeway:
                self._verified.move_to_end(digest)
                return known
            del self._verified[digest]
        access = await self._verify(token)
        if self.cache_size > 0:
            self._verified[digest] = access
            while len(self._verified) > self.cache_size:
                self._verified.popitem(last=False)
        return access

    async def _verify(self, token: str) -> AccessToken:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("the token is not a well-formed JWT") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise InvalidToken(f"the token's algorithm {alg!r} is not accepted")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken("the token's kid is not a string")
        key, key_alg = await self._key(kid)
        if key_alg is not None and key_alg != alg:
            raise InvalidToken(f"key {kid!r} is for {key_alg}, not {alg}")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise InvalidToken("the token is not valid yet (nbf)") from None
        except jwt.InvalidAudienceError:
            raise InvalidToken(f"the token is not for this resource ({self.audience})") from None
        except jwt.InvalidIssuerError:
            raise InvalidToken(f"the token was not issued by {self.issuer}") from None
        except jwt.MissingRequiredClaimError as exc:
            raise InvalidToken(f"the token has no {exc.claim} claim") from None
        except jwt.InvalidSignatureError:
            raise InvalidToken("the token's signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"the token is invalid: {exc}") from None
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            raise InvalidToken("the token's sub is not a string")
        client_id = claims.get("client_id", claims.get("azp"))
        exp = claims.get("exp")
        return AccessToken(
            subject=subject,
            issuer=self.issuer,
            scopes=scopes_of(claims),
            expires_at=float(exp) if isinstance(exp, (int, float)) else None,
            client_id=client_id if isinstance(client_id, str) else None,
            claims=claims,
        )

    async def _key(self, kid: str | None) -> _Key:
        """The key for *kid*: cached, or after a (rate-limited) refetch of the JWKS,
        all within *timeout* (the wait for another request's fetch too)."""
        key = self._find(kid)
        if key is not None:
            return key
        with trio.move_on_after(self.timeout):
            async with self._lock:
                return await self._fetch_key(kid)
        raise AuthServerUnavailable(
            f"the signing keys of {self.issuer} could not be fetched within {self.timeout}s", 1.0
        )

    async def _fetch_key(self, kid: str | None) -> _Key:
        key = self._find(kid)  # fetched while we waited for the lock
        if key is not None:
            return key
        now = trio.current_time()
        self._backoff.check()  # backing off after a failure: said at once, with the wait left
        if not self._may_refetch(kid, now):
            raise InvalidToken(f"unknown signing key {kid!r}")
        try:
            with trio.move_on_after(self.timeout):
                await self._refresh()
                self._backoff.succeeded()
                key = self._find(kid)
                if key is None:
                    self._unfound_kid(kid)
                    raise InvalidToken(f"unknown signing key {kid!r}")
                return key
            raise AuthServerUnavailable(
                f"the JWKS of {self.issuer}: no answer within {self.timeout}s"
            )
        except AuthServerUnavailable as exc:
            # Backed off, not retried per waiting request: a down server is asked
            # after 1, 2, 4... seconds (up to refresh_interval), not hammered.
            self._backoff.failed(exc, self.retry_backoff, self.refresh_interval)
            raise

    def _may_refetch(self, kid: str | None, now: float) -> bool:
        """Whether a token naming the unknown *kid* may refetch the JWKS now (and spend it)."""
        if self._backoff.failures or now - self._fetched_at >= self.refresh_interval:
            return True  # the general slot (a retry after a back-off is one too)
        if kid is None or _kid_digest(kid) in self._unfound:
            return False
        recent = [t for t in self._new_kid_fetches if now - t < _NEW_KID_WINDOW]
        if len(recent) >= self.new_kid_refetches:
            self._new_kid_fetches = recent
            return False
        recent.append(now)
        self._new_kid_fetches = recent
        return True

    def _unfound_kid(self, kid: str | None) -> None:
        if kid is None:
            return
        self._unfound[_kid_digest(kid)] = None
        while len(self._unfound) > _MAX_UNFOUND_KIDS:
            self._unfound.popitem(last=False)

    def _find(self, kid: str | None) -> _Key | None:
        if kid is None:
            # No kid: acceptable only when the issuer has exactly one key.
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _refresh(self) -> None:
        uri = self.jwks_uri or await self._metadata.endpoint("jwks_uri")
        document = await get_json(uri, self.timeout, self.transport)
        self._fetched_at = trio.current_time()
        found = document.get("keys")
        if not isinstance(found, list):
            raise AuthServerUnavailable(f"the JWKS at {uri} has no keys list")
        keys: dict[str | None, _Key] = {}
        for jwk in found[: self.max_keys]:
            if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK(jwk)
            except jwt.PyJWTError:
                continue  # a key type or curve we do not support: not ours to use
            kid, alg = jwk.get("kid"), jwk.get("alg")
            restricted = alg if isinstance(alg, str) else None
            keys[kid if isinstance(kid, str) else None] = (key, restricted)
        # ``_unfound`` is kept: a kid a refetch did not find may still come back
        # through the general slot, but not through the new-kid budget again.
        self._keys = keys


def _kid_digest(kid: str) -> bytes:
    return hashlib.sha256(kid.encode()).digest()
