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
refetch that does not produce the key refuses the token.  A failed fetch
is rate-limited the same way: until the interval has passed, tokens that
need a new key are answered ``503`` at once with the failure's reason.  A valid token
with a known key never waits on the network.  At most *max_keys* keys are
kept (the first ones of the set).

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

from .discovery import IssuerMetadata
from .fetch import get_json
from .tokens import AccessToken, AuthServerUnavailable, InvalidToken, scopes_of

__all__ = ["DEFAULT_ALGORITHMS", "JwtVerifier"]

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
        timeout: the bound of each call to the authorization server.
        refresh_interval: the least time between two JWKS fetches.
        max_keys: the most keys kept from the JWKS.
        cache_size: validated tokens remembered (until their ``exp``), so a
            client's next requests skip the signature check.
    """

    issuer: str
    audience: str
    jwks_uri: str | None = None
    algorithms: Sequence[str] = DEFAULT_ALGORITHMS
    leeway: float = 30.0
    timeout: float = 5.0
    refresh_interval: float = 30.0
    max_keys: int = 32
    cache_size: int = 1024
    _metadata: IssuerMetadata = attrs.field(init=False)
    _keys: dict[str | None, _Key] = attrs.field(factory=dict, init=False)
    _fetched_at: float = attrs.field(default=-math.inf, init=False)
    _failure: str | None = attrs.field(default=None, init=False)
    _verified: OrderedDict[bytes, AccessToken] = attrs.field(factory=OrderedDict, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    def __attrs_post_init__(self) -> None:
        unsafe = [a for a in self.algorithms if a.lower() == "none" or a.upper().startswith("HS")]
        if unsafe:
            raise ValueError(f"algorithms {unsafe} are not allowed for access tokens")
        if not self.algorithms:
            raise ValueError("algorithms must name at least one signature algorithm")
        self._metadata = IssuerMetadata(self.issuer, self.timeout)

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
        """The key for *kid*: cached, or after a (rate-limited) refetch of the JWKS."""
        key = self._find(kid)
        if key is not None:
            return key
        async with self._lock:
            key = self._find(kid)  # fetched while we waited for the lock
            if key is not None:
                return key
            if trio.current_time() - self._fetched_at < self.refresh_interval:
                if self._failure is not None:  # the last fetch failed: say so, at once
                    raise AuthServerUnavailable(self._failure)
                raise InvalidToken(f"unknown signing key {kid!r}")
            try:
                await self._refresh()
            except AuthServerUnavailable as exc:
                # Rate-limited like a success: a down server is asked once per interval,
                # not once per waiting request.
                self._fetched_at, self._failure = trio.current_time(), str(exc)
                raise
            self._failure = None
        key = self._find(kid)
        if key is None:
            raise InvalidToken(f"unknown signing key {kid!r}")
        return key

    def _find(self, kid: str | None) -> _Key | None:
        if kid is None:
            # No kid: acceptable only when the issuer has exactly one key.
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _refresh(self) -> None:
        uri = self.jwks_uri or await self._metadata.endpoint("jwks_uri")
        document = await get_json(uri, self.timeout)
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
        self._keys = keys
