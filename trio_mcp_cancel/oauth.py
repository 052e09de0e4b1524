"""Authorization for HTTP servers: the MCP authorization specification's resource-server side.

Give :class:`~trio_mcp_cancel.http.McpHttpApp` an :class:`OAuthResource` as
``auth=`` (or set ``MCP_AUTH_ISSUER`` and ``MCP_AUTH_AUDIENCE`` for
``app_from_env``): it publishes Protected Resource Metadata (RFC 9728),
answers ``401`` with the challenge clients follow to the authorization
server, validates tokens (:class:`JwtVerifier`: JWTs against the issuer's
JWKS; :class:`IntrospectionVerifier`: opaque tokens, RFC 7662; or your own
:class:`TokenVerifier`), and refuses a token without a needed scope
``403 insufficient_scope``.  The validated token's issuer and subject are
the request's principal: its cancellation namespace, tasks, sessions and
quotas.  Needs the ``auth`` extra: ``pip install 'trio-mcp-cancel[auth]'``.
"""

from __future__ import annotations

from ._public import fixup_module_metadata, missing_extra

try:  # the `auth` extra's libraries, checked first so the error names the fix
    import httpx2  # noqa: F401
    import jwt  # noqa: F401
except ImportError as exc:
    raise missing_extra("trio_mcp_cancel.oauth", "auth", exc) from exc

from ._auth.env import JwtOrOpaque, oauth_from_env
from ._auth.introspection import IntrospectionVerifier
from ._auth.jwt import JwtVerifier
from ._auth.resource import OAuthResource
from ._auth.tokens import (
    AccessToken,
    AuthServerUnavailable,
    InvalidToken,
    TokenVerifier,
    TooManyNewTokens,
    requesting_client,
)

__all__ = [
    "AccessToken",
    "AuthServerUnavailable",
    "IntrospectionVerifier",
    "InvalidToken",
    "JwtOrOpaque",
    "JwtVerifier",
    "OAuthResource",
    "TokenVerifier",
    "TooManyNewTokens",
    "oauth_from_env",
    "requesting_client",
]

fixup_module_metadata(__name__, __all__, globals())
