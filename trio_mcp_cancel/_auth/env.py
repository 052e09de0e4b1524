"""An :class:`~.resource.OAuthResource` from ``MCP_AUTH_*`` environment variables.

``MCP_AUTH_ISSUER`` (the authorization server's issuer; its JWKS and
introspection endpoint are found through its metadata) and
``MCP_AUTH_AUDIENCE`` (this server's URL: the metadata's ``resource`` and
the audience tokens must name) turn authorization on; ``MCP_AUTH_SCOPES``
(space- or comma-separated) are the scopes every request needs.  JWT
access tokens are checked locally (``MCP_AUTH_JWKS_URI`` overrides the
discovered key set); with ``MCP_AUTH_CLIENT_ID`` and
``MCP_AUTH_CLIENT_SECRET`` (this server's credentials at the authorization
server), other tokens are introspected (``MCP_AUTH_INTROSPECTION_URL``
overrides the discovered endpoint).  None of them set: ``None``, nothing
changes.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .introspection import IntrospectionVerifier
from .jwt import JwtVerifier
from .resource import OAuthResource
from .tokens import AccessToken, TokenVerifier

__all__ = ["JwtOrOpaque", "oauth_from_env"]


@attrs.frozen
class JwtOrOpaque:
    """JWT-shaped tokens (three dot-separated parts) to *jwt*, the others to *opaque*.

    A token shaped like a JWT is never sent to introspection: a forged JWT
    is refused locally, without a network call.
    """

    jwt: TokenVerifier
    opaque: TokenVerifier

    async def verify(self, token: str) -> AccessToken:
        """Whichever verifier the token's shape calls for."""
        if token.count(".") == 2:
            return await self.jwt.verify(token)
        return await self.opaque.verify(token)


def oauth_from_env(environ: Mapping[str, str]) -> OAuthResource | None:
    """The configuration the environment asks for, or ``None``; see the module docstring."""
    issuer = environ.get("MCP_AUTH_ISSUER", "").strip()
    audience = environ.get("MCP_AUTH_AUDIENCE", "").strip()
    others = [
        name
        for name in (
            "MCP_AUTH_SCOPES",
            "MCP_AUTH_JWKS_URI",
            "MCP_AUTH_INTROSPECTION_URL",
            "MCP_AUTH_CLIENT_ID",
            "MCP_AUTH_CLIENT_SECRET",
        )
        if environ.get(name, "").strip()
    ]
    if not issuer and not audience and not others:
        return None
    if not issuer or not audience:
        raise ValueError(
            "authorization needs both MCP_AUTH_ISSUER (the authorization server) and"
            " MCP_AUTH_AUDIENCE (this server's URL)"
        )
    scopes = environ.get("MCP_AUTH_SCOPES", "").replace(",", " ").split()
    verifier: TokenVerifier = JwtVerifier(
        issuer, audience, jwks_uri=environ.get("MCP_AUTH_JWKS_URI", "").strip() or None
    )
    client_id = environ.get("MCP_AUTH_CLIENT_ID", "").strip()
    client_secret = environ.get("MCP_AUTH_CLIENT_SECRET", "").strip()
    if bool(client_id) != bool(client_secret):
        raise ValueError("MCP_AUTH_CLIENT_ID and MCP_AUTH_CLIENT_SECRET go together")
    endpoint = environ.get("MCP_AUTH_INTROSPECTION_URL", "").strip() or None
    if endpoint is not None and not client_id:
        raise ValueError("MCP_AUTH_INTROSPECTION_URL needs MCP_AUTH_CLIENT_ID and _SECRET")
    if client_id:
        opaque = IntrospectionVerifier(
            issuer, audience, client_id, client_secret, endpoint=endpoint
        )
        verifier = JwtOrOpaque(verifier, opaque)
    return OAuthResource(audience, [issuer], verifier, required_scopes=frozenset(scopes))
