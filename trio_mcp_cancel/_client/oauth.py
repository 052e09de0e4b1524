"""OAuth 2.1 client credentials for the MCP client: an ``httpx2.Auth`` that finds its own way.

The MCP authorization specification (``basic/authorization``) lets a
client start from nothing but the server's URL.  A request without a
usable token is answered ``401`` with ``WWW-Authenticate: Bearer
resource_metadata="..."``; from there :class:`ClientCredentialsAuth`

1. fetches the Protected Resource Metadata (RFC 9728; without the
   challenge's URL, the well-known paths of the request's URL) and checks
   that its ``resource`` is the server being called,
2. fetches the authorization server's metadata (RFC 8414, then OpenID
   Connect Discovery) and checks its ``issuer``,
3. asks the token endpoint for a token: ``grant_type=client_credentials``,
   authenticated the way the metadata allows (``client_secret_basic``,
   else ``client_secret_post``), with ``resource`` = the metadata's
   resource (RFC 8707: the token is good for that server only) and
   ``scope`` from the challenge, else the metadata's ``scopes_supported``,
4. sends the request again, once.

The token is kept until shortly before it expires, so later requests
carry it from the start and a new one is fetched before the old one is
refused.  A ``403`` with ``error="insufficient_scope"`` is a step-up: a
new token with the scopes the challenge names (plus those held), and the
request sent again, once.  Every exchange with the authorization server
is bounded (*timeout* for the whole of it, 256 KiB per document); every
failure is :class:`~._client.errors.OAuthError` with the reason, which the
call that needed the token raises.  Nothing loops: each request is sent
at most twice, and what the second attempt gets is its answer.

Client credentials go only to an authorization server reached over
``https`` or on the loopback interface, and (with *issuer*) only to that
one.  Written here rather than taken from a library: the official SDK's
provider needs the whole ``mcp`` package and a token store, and Authlib
speaks httpx, not httpx2.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import AsyncGenerator, Awaitable, Generator, Mapping, Sequence
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit, urlunsplit

import attrs
import httpx2
import trio

from .._wire.names import oauth_metadata_urls
from .errors import OAuthError

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "ClientCredentialsAuth",
    "parse_challenge",
]

T = TypeVar("T")

#: The largest metadata or token document read from an authorization server.
MAX_DOCUMENT_BYTES: Final = 256 * 1024

_PRM_PATH = "/.well-known/oauth-protected-resource"
_PARAM = re.compile(r'([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


def parse_challenge(header: str | None) -> dict[str, str] | None:
    """The auth-params of a ``Bearer`` challenge in a ``WWW-Authenticate`` value, else ``None``."""
    if not header:
        return None
    match = re.search(r"(?i)(?:^|,)\s*bearer(?:\s+|$)", header)
    if match is None:
        return None
    params: dict[str, str] = {}
    for name, quoted, token in _PARAM.findall(header[match.end() :]):
        params.setdefault(name.lower(), re.sub(r"\\(.)", r"\1", quoted) if quoted else token)
    return params


@attrs.frozen
class _Token:
    value: str
    scopes: frozenset[str]
    renew_at: float
    """``trio.current_time()`` after which it is fetched again before use."""


@attrs.frozen
class _Grant:
    """Where tokens for this server come from, learned once from the metadata."""

    resource: str
    token_endpoint: str
    basic: bool
    scopes_supported: tuple[str, ...]


@attrs.define(eq=False)
class ClientCredentialsAuth(httpx2.Auth):
    """OAuth client credentials for one MCP server; see the module docstring.

    Give it to :func:`~trio_mcp_cancel.client.open_http_client` as *auth*.

    Parameters:
        client_id, client_secret: the client's credentials at the
            authorization server.
        scopes: scopes always asked for (besides the challenge's); ``None``:
            the challenge's, else the metadata's ``scopes_supported``.
        issuer: the only authorization server the credentials may go to;
            ``None``: the first one the resource's metadata names.
        timeout: seconds for one whole discovery and token exchange.
        expiry_margin: a token is renewed this many seconds before it
            expires (at most half its lifetime).
        verify: TLS verification for the authorization server (as httpx2
            takes it).
    """

    client_id: str
    client_secret: str = attrs.field(repr=False)
    scopes: Sequence[str] | None = None
    issuer: str | None = None
    timeout: float = 10.0
    expiry_margin: float = 30.0
    verify: Any = True
    _token: _Token | None = attrs.field(default=None, init=False, repr=False)
    _grant: _Grant | None = attrs.field(default=None, init=False, repr=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False, repr=False)

    # -- the flow httpx2 drives -----------------------------------------------

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        grant = self._grant
        if grant is not None and not _covers(grant.resource, _called(request.url)):
            # A token is good for its resource only: never hand it to another server.
            raise OAuthError(
                f"this ClientCredentialsAuth holds tokens for {grant.resource},"
                f" not {_called(request.url)}: use one per server"
            )
        token = self._token
        if token is not None and trio.current_time() >= token.renew_at:
            token = await self._renew(token, token.scopes)  # about to expire: a new one first
        if token is not None:
            request.headers["Authorization"] = f"Bearer {token.value}"
        response = yield request
        challenge = parse_challenge(response.headers.get("www-authenticate"))
        if challenge is None or response.status_code not in (401, 403):
            return
        asked = frozenset(challenge.get("scope", "").split())
        if response.status_code == 403:
            if challenge.get("error") != "insufficient_scope" or token is None:
                return
            if asked <= token.scopes:
                return  # the scopes it names are held: another token cannot help
            token = await self._renew(token, token.scopes | asked)  # step-up
        else:
            if self._grant is None:
                await self._discover(request.url, challenge)
            token = await self._renew(token, asked | (token.scopes if token else frozenset()))
        request.headers["Authorization"] = f"Bearer {token.value}"
        yield request  # once: what this attempt gets is the answer

    def sync_auth_flow(
        self, request: httpx2.Request
    ) -> Generator[httpx2.Request, httpx2.Response, None]:
        raise RuntimeError("ClientCredentialsAuth works with httpx2.AsyncClient only")
        yield request  # pragma: no cover - makes this a generator, as httpx2 expects

    # -- tokens ----------------------------------------------------------------------

    async def _renew(self, stale: _Token | None, scopes: frozenset[str]) -> _Token:
        """A token with *scopes* (and the configured ones) in place of *stale*.

        Under a lock: requests refused at once share one new token, and a
        request whose token was already replaced uses the replacement.
        """
        async with self._lock:
            current = self._token
            wanted = frozenset(scopes) | frozenset(self.scopes or ())
            if (
                current is not None
                and current is not stale
                and wanted <= current.scopes
                and trio.current_time() < current.renew_at
            ):
                return current
            grant = self._grant
            if grant is None:
                raise OAuthError("no authorization server is known for this server yet")
            if not wanted and grant.scopes_supported:
                wanted = frozenset(grant.scopes_supported)
            token = await self._bounded(self._request_token(grant, wanted))
            self._token = token
            return token

    async def _request_token(self, grant: _Grant, scopes: frozenset[str]) -> _Token:
        form = {"grant_type": "client_credentials", "resource": grant.resource}
        if scopes:
            form["scope"] = " ".join(sorted(scopes))
        auth: httpx2.Auth | None = None
        if grant.basic:
            auth = httpx2.BasicAuth(self.client_id, self.client_secret)
        else:
            form |= {"client_id": self.client_id, "client_secret": self.client_secret}
        now = trio.current_time()  # the lifetime counts from the request, to be safe
        status, answer = await self._exchange("POST", grant.token_endpoint, form, auth)
        document = answer or {}
        if status != 200:
            error = document.get("error")
            description = document.get("error_description")
            why = f"{error}: {description}" if description else str(error or "no error given")
            raise OAuthError(
                f"the token endpoint {grant.token_endpoint} refused client {self.client_id!r}"
                f" (HTTP {status}, {why})",
                {"status": status, "error": error},
            )
        value = document.get("access_token")
        kind = document.get("token_type")
        if not isinstance(value, str) or not value or not isinstance(kind, str):
            raise OAuthError(f"the token endpoint {grant.token_endpoint} gave no access token")
        if kind.lower() != "bearer":
            raise OAuthError(f"the token endpoint gave a {kind!r} token, not a bearer token")
        lifetime = document.get("expires_in")
        if isinstance(lifetime, (int, float)) and not isinstance(lifetime, bool) and lifetime > 0:
            renew_at = now + max(lifetime - self.expiry_margin, lifetime / 2)
        else:
            renew_at = float("inf")  # until the server refuses it
        granted = document.get("scope")
        held = frozenset(granted.split()) if isinstance(granted, str) else scopes
        return _Token(value, held, renew_at)

    # -- discovery -----------------------------------------------------------------

    async def _discover(self, url: httpx2.URL, challenge: Mapping[str, str]) -> None:
        """Learn the resource and its authorization server from the metadata."""
        async with self._lock:
            if self._grant is None:  # another request may have learned it meanwhile
                self._grant = await self._bounded(self._find_grant(url, challenge))

    async def _find_grant(self, url: httpx2.URL, challenge: Mapping[str, str]) -> _Grant:
        called = _called(url)
        resource_doc = await self._resource_metadata(called, challenge.get("resource_metadata"))
        resource = resource_doc.get("resource")
        if not isinstance(resource, str) or not _covers(resource, called):
            raise OAuthError(
                f"the protected resource metadata names resource {resource!r},"
                f" which is not the server called ({called})"
            )
        servers = resource_doc.get("authorization_servers")
        if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
            raise OAuthError(f"the metadata of {resource} names no authorization_servers")
        if self.issuer is not None:
            if self.issuer not in servers:
                raise OAuthError(
                    f"{resource} does not name the configured issuer {self.issuer}"
                    f" (it names {servers})"
                )
            issuer = self.issuer
        elif servers:
            issuer = servers[0]
        else:
            raise OAuthError(f"the metadata of {resource} names no authorization_servers")
        server_doc = await self._issuer_metadata(issuer)
        endpoint = server_doc.get("token_endpoint")
        if not isinstance(endpoint, str) or not _may_receive_secrets(endpoint):
            raise OAuthError(
                f"the token endpoint of {issuer} ({endpoint!r}) is not an https URL"
                " (or http on the loopback interface)"
            )
        methods = server_doc.get("token_endpoint_auth_methods_supported")
        if not isinstance(methods, list):
            methods = ["client_secret_basic"]  # RFC 8414's default
        if "client_secret_basic" in methods:
            basic = True
        elif "client_secret_post" in methods:
            basic = False
        else:
            raise OAuthError(
                f"the token endpoint of {issuer} takes neither client_secret_basic"
                f" nor client_secret_post (it takes {methods})"
            )
        supported = resource_doc.get("scopes_supported")
        scopes = (
            tuple(s for s in supported if isinstance(s, str)) if isinstance(supported, list) else ()
        )
        return _Grant(resource, endpoint, basic, scopes)

    async def _resource_metadata(self, called: str, announced: str | None) -> dict[str, Any]:
        if announced is not None:
            if not announced.startswith(("https://", "http://")):
                raise OAuthError(f"the challenge's resource_metadata is not a URL: {announced!r}")
            candidates = [announced]
        else:
            parts = urlsplit(called)
            path = parts.path.rstrip("/")
            candidates = [
                urlunsplit((parts.scheme, parts.netloc, _PRM_PATH + path, "", "")),
                urlunsplit((parts.scheme, parts.netloc, _PRM_PATH, "", "")),
            ]
        return await self._first_document(candidates, "protected resource metadata")

    async def _issuer_metadata(self, issuer: str) -> dict[str, Any]:
        if not issuer.startswith(("https://", "http://")):
            raise OAuthError(f"the authorization server {issuer!r} is not an http(s) URL")
        document = await self._first_document(
            oauth_metadata_urls(issuer), "authorization server metadata"
        )
        if document.get("issuer") != issuer:
            raise OAuthError(
                f"the authorization server metadata names issuer {document.get('issuer')!r},"
                f" not {issuer!r}"
            )
        return document

    async def _first_document(self, urls: list[str], what: str) -> dict[str, Any]:
        reasons = []
        for url in urls:
            status, document = await self._exchange("GET", url)
            if status == 200 and document is not None:
                return document
            reasons.append(f"{url}: HTTP {status}")
        raise OAuthError(f"no {what}: " + "; ".join(reasons))

    # -- HTTP ----------------------------------------------------------------------

    async def _bounded(self, work: Awaitable[T]) -> T:
        """Await *work* within :attr:`timeout`, or :class:`OAuthError`."""
        with trio.move_on_after(self.timeout):
            return await work
        raise OAuthError(f"the authorization server did not answer within {self.timeout}s")

    async def _exchange(
        self,
        method: str,
        url: str,
        form: Mapping[str, str] | None = None,
        auth: httpx2.Auth | None = None,
    ) -> tuple[int, dict[str, Any] | None]:
        """One bounded request: its status and JSON object (``None``: not one)."""
        try:
            async with httpx2.AsyncClient(
                verify=self.verify, follow_redirects=False, trust_env=True
            ) as client:
                request = client.build_request(
                    method,
                    url,
                    data=dict(form) if form is not None else None,
                    headers={"Accept": "application/json"},
                )
                response = await client.send(request, auth=auth, stream=True)
                try:
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_DOCUMENT_BYTES:
                            raise OAuthError(
                                f"{method} {url}: more than {MAX_DOCUMENT_BYTES} bytes"
                            )
                finally:
                    await response.aclose()
        except httpx2.HTTPError as exc:
            raise OAuthError(f"{method} {url} failed: {type(exc).__name__}: {exc}") from None
        try:
            document = json.loads(bytes(body))
        except ValueError:
            document = None
        return response.status_code, document if isinstance(document, dict) else None


def _called(url: httpx2.URL) -> str:
    return str(url.copy_with(query=None, fragment=None))


def _covers(resource: str, called: str) -> bool:
    """Whether *resource* (the metadata's) is the server at *called*: same origin, path prefix."""
    ours, theirs = urlsplit(resource), urlsplit(called)
    if (ours.scheme, ours.netloc.lower()) != (theirs.scheme, theirs.netloc.lower()):
        return False
    prefix = ours.path.rstrip("/")
    return theirs.path == prefix or theirs.path.startswith(prefix + "/") or not prefix


def _may_receive_secrets(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme == "https":
        return True
    if parts.scheme != "http" or parts.hostname is None:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False
