"""Authentication hooks: turn request headers into a principal id.

A principal gives a caller the ``principal:`` namespace, so clients behind one
address stop sharing a cancellation namespace.  A hook receives the request
headers (names lower-cased) and returns the principal's string id, or
``None`` for "not authenticated" (answered with 401).  It may be sync or
async.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable, Mapping

__all__ = ["Authenticator", "authenticate", "bearer_auth"]

Authenticator = Callable[[Mapping[str, str]], "str | Awaitable[str | None] | None"]


def bearer_auth(tokens: Mapping[str, str]) -> Authenticator:
    """An authenticator for static bearer tokens: ``{token: principal_id}``.

    Tokens are looked up by their SHA-256 digest, so the lookup's timing
    depends on the digest, not on how much of a secret a guess got right.
    """
    by_digest = {hashlib.sha256(t.encode()).digest(): p for t, p in tokens.items()}

    def authenticate(headers: Mapping[str, str]) -> str | None:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        return by_digest.get(hashlib.sha256(token.strip().encode()).digest())

    return authenticate


async def authenticate(hook: Authenticator, headers: Mapping[str, str]) -> str | None:
    """Run *hook*; a non-string principal counts as unauthenticated."""
    principal = hook(headers)
    if inspect.isawaitable(principal):
        principal = await principal
    return principal if isinstance(principal, str) and principal else None
