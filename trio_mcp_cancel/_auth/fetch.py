"""The resource server's calls to its authorization server: bounded, and failing clearly.

Every call has a total deadline (*seconds* for the whole
exchange, not per read) and a response size bound, so a slow or hostile
authorization server costs one request that long at most.  Every failure
becomes :class:`~.tokens.AuthServerUnavailable` with the reason: a request
waiting on it is answered ``503``, never ``500``.

httpx2 is the project's HTTP client (it runs on Trio through anyio).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import httpx2
import trio

from .tokens import AuthServerUnavailable

__all__ = ["MAX_RESPONSE_BYTES", "get_json", "post_form"]

#: The largest metadata, JWKS or introspection document read.
MAX_RESPONSE_BYTES: Final = 256 * 1024


async def get_json(url: str, seconds: float) -> dict[str, Any]:
    """``GET`` a JSON object from *url*."""
    return await _exchange("GET", url, seconds)


async def post_form(
    url: str, form: Mapping[str, str], seconds: float, auth: tuple[str, str] | None = None
) -> dict[str, Any]:
    """``POST`` a form to *url* (``client_secret_basic`` as *auth*); a JSON object back."""
    return await _exchange("POST", url, seconds, form=form, auth=auth)


async def _exchange(
    method: str,
    url: str,
    seconds: float,
    *,
    form: Mapping[str, str] | None = None,
    auth: tuple[str, str] | None = None,
) -> dict[str, Any]:
    where = f"authorization server ({method} {url})"
    with trio.move_on_after(seconds) as waited:
        try:
            async with httpx2.AsyncClient(
                timeout=httpx2.Timeout(seconds), follow_redirects=False
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
        raise AuthServerUnavailable(f"{where}: HTTP {response.status_code}")
    try:
        document = json.loads(bytes(body))
    except ValueError:
        raise AuthServerUnavailable(f"{where}: not JSON") from None
    if not isinstance(document, dict):
        raise AuthServerUnavailable(f"{where}: not a JSON object")
    return document
