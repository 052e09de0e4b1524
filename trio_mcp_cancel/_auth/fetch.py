"""The resource server's calls to its authorization server: bounded, and failing clearly.

Every call has a total deadline (*seconds* for the whole
exchange, not per read) and a response size bound, so a slow or hostile
authorization server costs one request that long at most.  Every failure
becomes :class:`~.tokens.AuthServerUnavailable` with the reason: a request
waiting on it is answered ``503``, never ``500``.  A ``429`` or ``503``
with ``Retry-After`` carries it (seconds, at most :data:`MAX_RETRY_AFTER`)
as the failure's ``retry_after``: the verifiers do not ask again before.

*transport* is the httpx2 transport to use (``None``: the network); tests
pass ``httpx2.ASGITransport(app)`` to talk to an authorization server in
the same process, under a mock clock.

httpx2 is the project's HTTP client (it runs on Trio through anyio).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any, Final

import httpx2
import trio

from .tokens import AuthServerUnavailable

__all__ = ["MAX_RESPONSE_BYTES", "MAX_RETRY_AFTER", "Transport", "get_json", "post_form"]

#: The largest metadata, JWKS or introspection document read.
MAX_RESPONSE_BYTES: Final = 256 * 1024

#: The longest ``Retry-After`` honoured: a server asking for more is asked again then.
MAX_RETRY_AFTER: Final = 60.0

Transport = httpx2.AsyncBaseTransport


async def get_json(url: str, seconds: float, transport: Transport | None = None) -> dict[str, Any]:
    """``GET`` a JSON object from *url*."""
    return await _exchange("GET", url, seconds, transport=transport)


async def post_form(
    url: str,
    form: Mapping[str, str],
    seconds: float,
    auth: tuple[str, str] | None = None,
    transport: Transport | None = None,
) -> dict[str, Any]:
    """``POST`` a form to *url* (``client_secret_basic`` as *auth*); a JSON object back."""
    return await _exchange("POST", url, seconds, form=form, auth=auth, transport=transport)


def retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (delta-seconds or an HTTP date), capped at
    :data:`MAX_RETRY_AFTER`; ``None`` when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    seconds: float
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


async def _exchange(
    method: str,
    url: str,
    seconds: float,
    *,
    form: Mapping[str, str] | None = None,
    auth: tuple[str, str] | None = None,
    transport: Transport | None = None,
) -> dict[str, Any]:
    where = f"authorization server ({method} {url})"
    with trio.move_on_after(seconds) as waited:
        try:
            async with httpx2.AsyncClient(
                timeout=httpx2.Timeout(seconds), follow_redirects=False, transport=transport
            ) as client:
                request = client.build_request(
                    method,
                    url,
                    data=dict(form) if form is not None else None,
                    headers={"accept": "application/json"},
                )
                basic = httpx2.BasicAuth(*auth) if auth is not None else None
                response = await client.send(request, auth=basic, stream=True)
                try:
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_RESPONSE_BYTES:
                            raise AuthServerUnavailable(f"{where}: response too large")
                finally:
                    await response.aclose()
        except httpx2.HTTPError as exc:
            raise AuthServerUnavailable(f"{where}: {type(exc).__name__}: {exc}") from None
    if waited.cancelled_caught:
        raise AuthServerUnavailable(f"{where}: no answer within {seconds}s")
    if response.status_code != 200:
        later = None
        if response.status_code in (429, 503):
            later = retry_after(response.headers.get("retry-after"))
        raise AuthServerUnavailable(f"{where}: HTTP {response.status_code}", later)
    try:
        document = json.loads(bytes(body))
    except ValueError:
        raise AuthServerUnavailable(f"{where}: not JSON") from None
    if not isinstance(document, dict):
        raise AuthServerUnavailable(f"{where}: not a JSON object")
    return document
