"""This server as an OAuth 2.1 protected resource: metadata, challenges, scope decisions.

The MCP authorization specification (2026-07-28 and 2025-11-25,
``basic/authorization``) asks an HTTP server that authorizes to

* publish Protected Resource Metadata (RFC 9728) at
  ``/.well-known/oauth-protected-resource`` plus the resource's path (and,
  for clients that look there, at the bare well-known path): its
  ``resource`` URL, ``authorization_servers``, ``scopes_supported`` and
  ``bearer_methods_supported`` (``header`` only: tokens never go in URLs);
* answer a request without a usable token ``401`` with
  ``WWW-Authenticate: Bearer resource_metadata="...", scope="..."`` (and
  ``error="invalid_token"`` with a description when a token was sent), so
  a client can discover everything from the challenge alone;
* answer a token without a scope the operation needs ``403`` with
  ``error="insufficient_scope"`` and *all* the scopes the operation needs
  in ``scope`` (one challenge, not one scope at a time).

Scopes needed: *required_scopes* for every request, *method_scopes* for a
JSON-RPC method, and a tool's own (``@server.tool(scopes=[...])``) for its
``tools/call``.  *implied_scopes* is the scope hierarchy the specification
says a server must account for: a granted scope also grants the ones it
implies (``{"files": ["files:read", "files:write"]}``).

This module decides; the transports (HTTP, the WebSocket upgrade) turn a
:class:`Refusal` into their answer.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import attrs

from .tokens import (
    AccessToken,
    AuthServerUnavailable,
    InvalidToken,
    TokenVerifier,
    TooManyNewTokens,
    requesting_client,
)

__all__ = ["METADATA_PATH", "OAuthResource", "Refusal"]

METADATA_PATH = "/.well-known/oauth-protected-resource"

# What an auth-param's quoted string may hold here (RFC 7230 qdtext, minus the backslash).
_UNQUOTABLE = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")


class Refusal(Exception):
    """A request the resource server refuses: the status, and the challenge to send."""

    def __init__(
        self,
        status: int,
        reason: str,
        challenge: str | None,
        missing: Collection[str] = (),
        retry_after: bytes = b"5",
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.challenge = challenge
        self.missing = tuple(sorted(missing))
        """The scopes the token lacks (``403``)."""
        self.retry_after = retry_after
        """``Retry-After`` of a ``503`` or ``429``: whole seconds."""

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The response headers that carry the refusal."""
        headers = []
        if self.challenge is not None:
            headers.append((b"www-authenticate", self.challenge.encode("latin-1")))
        if self.status in (429, 503):
            headers.append((b"retry-after", self.retry_after))
        return headers


def _frozen_scopes(value: Collection[str]) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(value.split())
    return frozenset(value)


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _scope_map(value: Mapping[str, Collection[str]]) -> dict[str, frozenset[str]]:
    return {key: _frozen_scopes(scopes) for key, scopes in value.items()}


@attrs.frozen(eq=False)
class OAuthResource:
    """The resource-server configuration an :class:`~trio_mcp_cancel.http.McpHttpApp` enforces.

    Parameters:
        resource: this server's canonical URL (``https://mcp.example.com/mcp``):
            the metadata's ``resource``, the audience tokens must name.
        authorization_servers: the issuers clients may get tokens from.
        verifier: judges tokens (:class:`~trio_mcp_cancel.oauth.JwtVerifier`,
            :class:`~trio_mcp_cancel.oauth.IntrospectionVerifier`, or your own
            :class:`~trio_mcp_cancel.oauth.TokenVerifier`).
        required_scopes: scopes every request needs.
        method_scopes: scopes a JSON-RPC method needs, by method name.
        implied_scopes: scope hierarchy: a scope -> the scopes it includes.
        scopes_supported: the metadata's ``scopes_supported``; ``None``:
            *required_scopes* (omitted when empty).
        resource_name: the metadata's human-readable ``resource_name``.
        resource_documentation: the metadata's ``resource_documentation`` URL.
    """

    resource: str
    authorization_servers: tuple[str, ...] = attrs.field(converter=_strings)
    verifier: TokenVerifier
    required_scopes: frozenset[str] = attrs.field(default=frozenset(), converter=_frozen_scopes)
    method_scopes: Mapping[str, frozenset[str]] = attrs.field(factory=dict, converter=_scope_map)
    implied_scopes: Mapping[str, frozenset[str]] = attrs.field(factory=dict, converter=_scope_map)
    scopes_supported: Sequence[str] | None = None
    resource_name: str | None = None
    resource_documentation: str | None = None
    metadata_url: str = attrs.field(init=False)
    metadata_paths: frozenset[str] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        parts = urlsplit(self.resource)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment:
            raise ValueError(
                "resource must be an absolute http(s) URL without a fragment,"
                f" not {self.resource!r}"
            )
        if not self.authorization_servers:
            raise ValueError("authorization_servers must name at least one issuer")
        path = parts.path.rstrip("/")
        well_known = METADATA_PATH + path
        object.__setattr__(
            self, "metadata_url", urlunsplit((parts.scheme, parts.netloc, well_known, "", ""))
        )
        object.__setattr__(self, "metadata_paths", frozenset({well_known, METADATA_PATH}))

    # -- the metadata document ------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        """The Protected Resource Metadata document (RFC 9728 section 2)."""
        document: dict[str, Any] = {
            "resource": self.resource,
            "authorization_servers": list(self.authorization_servers),
            "bearer_methods_supported": ["header"],
        }
        supported = (
            sorted(self.required_scopes)
            if self.scopes_supported is None
            else list(self.scopes_supported)
        )
        if supported:
            document["scopes_supported"] = supported
        if self.resource_name is not None:
            document["resource_name"] = self.resource_name
        if self.resource_documentation is not None:
            document["resource_documentation"] = self.resource_documentation
        return document

    # -- tokens ---------------------------------------------------------------

    async def authenticate(self, headers: Mapping[str, str], client: object = None) -> AccessToken:
        """The request's validated token, holding every request's scopes, or a :class:`Refusal`.

        *client* is the caller's address (ASGI ``(host, port)``): the verifier
        sees it as :data:`~.tokens.requesting_client`, so introspection can
        bound what one address makes it ask the authorization server.
        """
        scheme, _, token = headers.get("authorization", "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer":
            raise Refusal(401, "Unauthorized: a bearer token is required", self._challenge())
        if not token or " " in token:
            raise self._invalid("the Authorization header carries no well-formed bearer token")
        bound = requesting_client.set(client)
        try:
            access = await self.verifier.verify(token)
        except InvalidToken as exc:
            raise self._invalid(str(exc)) from None
        except TooManyNewTokens as exc:
            reason = f"Too Many Requests: cannot validate the token now: {exc}"
            raise Refusal(429, reason, None, retry_after=exc.retry_after_header()) from None
        except AuthServerUnavailable as exc:
            reason = f"Service Unavailable: cannot validate the token: {exc}"
            raise Refusal(503, reason, None, retry_after=exc.retry_after_header()) from None
        finally:
            requesting_client.reset(bound)
        self.check(access, self.required_scopes)
        return access

    def needed(self, method: str, tool_scopes: frozenset[str] = frozenset()) -> frozenset[str]:
        """Every scope a *method* call needs (*tool_scopes*: the tool's, for ``tools/call``)."""
        return self.required_scopes | self.method_scopes.get(method, frozenset()) | tool_scopes

    def check(self, access: AccessToken, needed: frozenset[str]) -> None:
        """Refuse (``403 insufficient_scope``) a token that lacks any of *needed*."""
        if not needed or needed <= access.scopes:
            return
        granted = self._with_implied(access.scopes)
        if needed <= granted:
            return
        lacking = needed - granted
        missing = " ".join(sorted(lacking))
        raise Refusal(
            403,
            f"Forbidden: insufficient scope (missing {missing})",
            self._challenge(
                error="insufficient_scope",
                description=f"this operation needs the scope(s): {missing}",
                scope=needed,
            ),
            lacking,
        )

    def _with_implied(self, scopes: frozenset[str]) -> frozenset[str]:
        granted = set(scopes)
        pending = list(scopes)
        while pending:
            for implied in self.implied_scopes.get(pending.pop(), ()):
                if implied not in granted:
                    granted.add(implied)
                    pending.append(implied)
        return frozenset(granted)

    def _invalid(self, description: str) -> Refusal:
        return Refusal(
            401,
            f"Unauthorized: {description}",
            self._challenge(error="invalid_token", description=description),
        )

    def _challenge(
        self,
        *,
        error: str | None = None,
        description: str | None = None,
        scope: frozenset[str] | None = None,
    ) -> str:
        params = []
        if error is not None:
            params.append(f'error="{error}"')
        if description is not None:
            params.append(f'error_description="{_UNQUOTABLE.sub("?", description)[:300]}"')
        scope = self.required_scopes if scope is None else scope
        if scope:
            params.append(f'scope="{_UNQUOTABLE.sub("?", " ".join(sorted(scope)))}"')
        params.append(f'resource_metadata="{self.metadata_url}"')
        return "Bearer " + ", ".join(params)
