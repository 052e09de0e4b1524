"""What a validated bearer token grants, and the protocol that decides it.

A :class:`TokenVerifier` turns the token a request carries into an
:class:`AccessToken` or refuses it: :class:`InvalidToken` (the client gets
``401`` with ``error="invalid_token"``) or :class:`AuthServerUnavailable`
(``503``: the authorization server could not be asked; the token may be
fine).  The library ships :class:`~.jwt.JwtVerifier` and
:class:`~.introspection.IntrospectionVerifier`; anything with an async
``verify(token)`` plugs in the same way.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from ..backends.base import BackendError

__all__ = [
    "AccessToken",
    "AuthServerUnavailable",
    "InvalidToken",
    "TokenVerifier",
    "TooManyNewTokens",
    "requesting_client",
]

#: The address of the client whose token is being verified (an ASGI ``(host, port)``
#: pair, or ``None``): set by :meth:`~.resource.OAuthResource.authenticate` around
#: ``verify``, so a verifier that calls out (introspection) can bound what one
#: address may make it do without the :class:`TokenVerifier` protocol changing.
requesting_client: ContextVar[object] = ContextVar("requesting_client", default=None)

#: The longest principal used as is (the namespace module's component bound).
_MAX_PRINCIPAL: Final = 256


@attrs.frozen
class AccessToken:
    """A validated access token: who it speaks for and what it allows.

    The :attr:`principal` (the issuer and the subject together) is the
    caller's ``principal:`` namespace: its cancellations, tasks, sessions,
    MRTR state and quotas are its own.  The issuer is part of it because a
    subject is unique only within the issuer that assigned it.
    """

    subject: str
    """The ``sub`` claim (or, for an introspected token without one, its ``client_id``)."""
    issuer: str
    """The authorization server that issued the token (its ``iss``)."""
    scopes: frozenset[str] = frozenset()
    """The scopes granted (``scope``, space-separated, or ``scp``)."""
    expires_at: float | None = None
    """The ``exp`` claim, Unix time; ``None`` when the token has no expiry."""
    client_id: str | None = None
    """The OAuth client the token was issued to, when the token says."""
    claims: Mapping[str, Any] = attrs.field(factory=dict, repr=False)
    """Every claim (JWT) or introspection member, as received."""

    @property
    def principal(self) -> str:
        """``<issuer>#<subject>``: an issuer has no fragment (RFC 8414), so ``#`` is unambiguous.

        One longer than a namespace component may be (256 characters) is
        replaced by ``sha256:<hex digest>`` of it: a principal too long to
        be a namespace would otherwise fall back to the client's address
        bucket, shared with strangers.
        """
        principal = f"{self.issuer}#{self.subject}"
        if len(principal) <= _MAX_PRINCIPAL:
            return principal
        return "sha256:" + hashlib.sha256(principal.encode()).hexdigest()


class InvalidToken(BackendError):
    """The token is refused (expired, forged, for another resource...): ``401 invalid_token``.

    A :class:`~trio_mcp_cancel.backends.BackendError`: a token verifier is a
    backend the resource server calls through a protocol, and these are
    what its author raises.

    The message is the ``error_description`` the client sees; it says what
    is wrong with the token, never anything secret.
    """


class AuthServerUnavailable(BackendError):
    """The authorization server could not be reached or answered nonsense: ``503``.

    The token was not judged, so the client may retry; the message is the reason,
    and *retry_after* (seconds, when known) when to try again: the client's
    ``Retry-After``.
    """

    status = 503

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after

    def retry_after_header(self) -> bytes:
        """``Retry-After``'s value: whole seconds, at least 1 (5 when nothing is known)."""
        if self.retry_after is None or not math.isfinite(self.retry_after):
            return b"5"
        return str(max(1, math.ceil(self.retry_after))).encode()


class TooManyNewTokens(AuthServerUnavailable):
    """One client address sent more unknown tokens than it may have checked: ``429``.

    The token was not judged (it may be fine); the address retries after
    *retry_after* seconds.  Other addresses are not affected.
    """

    status = 429


@runtime_checkable
class TokenVerifier(Protocol):
    """Judges bearer tokens: return the :class:`AccessToken`, or raise.

    Raise :class:`InvalidToken` for a token that is not good for this
    resource, :class:`AuthServerUnavailable` when it could not be judged.
    Any network call must be bounded in time: the request waits for it.
    """

    async def verify(self, token: str) -> AccessToken:
        """The access token *token* stands for."""
        ...


def scopes_of(claims: Mapping[str, Any]) -> frozenset[str]:
    """The scopes a token's claims grant: ``scope`` (RFC 9068, RFC 7662) or ``scp`` (a list)."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return frozenset(scope.split())
    scp = claims.get("scp")
    if isinstance(scp, str):
        return frozenset(scp.split())
    if isinstance(scp, list):
        return frozenset(s for s in scp if isinstance(s, str))
    return frozenset()
