"""A test authorization server, and an MCP server it protects, on 127.0.0.1 random ports.

:class:`AuthServer` is a small ASGI app served by hypercorn: RFC 8414
metadata, a JWKS whose keys the test rotates, a ``client_credentials``
token endpoint (``client_secret_basic`` or ``_post``; the RFC 8707
``resource`` becomes the token's ``aud``), and RFC 7662 introspection for
the opaque tokens it hands out.  Tests also mint tokens directly
(:meth:`AuthServer.mint`), wrong on purpose.  Its ``down`` flag makes every
endpoint answer ``503``, ``throttle`` ``429`` with that ``Retry-After``, and
``delay`` makes every answer that slow; ``calls`` counts requests by path.

:func:`in_process_auth_server` gives one reached through
``httpx2.ASGITransport`` instead of a socket (the verifiers' ``transport``),
so a test runs under a mock clock.
"""

from __future__ import annotations

import base64
import json
import secrets
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any
from urllib.parse import parse_qs

import attrs
import httpx2
import jwt
import trio
from cryptography.hazmat.primitives.asymmetric import ec
from hypercorn.config import Config
from hypercorn.trio import serve

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

CLIENTS = {"client-a": "secret-a", "client-b": "secret-b", "resource-server": "rs-secret"}


@attrs.define(eq=False)
class AuthServer:
    """See the module docstring; ``issuer`` is set once it listens."""

    issuer: str = ""
    keys: list[tuple[str, ec.EllipticCurvePrivateKey]] = attrs.field(factory=list)
    opaque: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    opaque_clients: set[str] = attrs.field(factory=set)
    """Clients whose tokens from /token are opaque (introspected) instead of JWTs."""
    down: bool = False
    throttle: int | None = None
    """Answer every request ``429`` with this ``Retry-After`` (seconds)."""
    delay: float = 0.0
    """Seconds every answer takes."""
    calls: Counter[str] = attrs.field(factory=Counter)
    token_lifetime: int = 300
    """Seconds the tokens from /token live (their ``exp`` and ``expires_in``)."""

    def __attrs_post_init__(self) -> None:
        self.rotate()

    def rotate(self, keep_old: bool = False) -> str:
        """A new signing key (first in the JWKS); the old ones dropped unless *keep_old*."""
        kid = f"key-{secrets.token_hex(4)}"
        pair = (kid, ec.generate_private_key(ec.SECP256R1()))
        self.keys = [pair, *self.keys] if keep_old else [pair]
        return kid

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, private in self.keys:
            jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(private.public_key()))
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": "ES256"})
        return {"keys": keys}

    def mint(
        self,
        sub: str = "client-a",
        aud: str | list[str] | None = None,
        scope: str = "",
        *,
        expires_in: float = 300,
        iss: str | None = None,
        kid: str | None = None,
        key: ec.EllipticCurvePrivateKey | None = None,
        nbf: float | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """A signed ES256 JWT access token (by the current key unless told otherwise)."""
        now = time.time()
        claims: dict[str, Any] = {
            "iss": self.issuer if iss is None else iss,
            "sub": sub,
            "aud": aud,
            "iat": int(now),
            "exp": int(now + expires_in),
            "client_id": sub,
            "jti": secrets.token_hex(8),
        }
        if aud is None:
            del claims["aud"]
        if scope:
            claims["scope"] = scope
        if nbf is not None:
            claims["nbf"] = int(nbf)
        claims.update(extra or {})
        current_kid, current_key = self.keys[0]
        return jwt.encode(
            claims,
            current_key if key is None else key,
            algorithm="ES256",
            headers={"kid": current_kid if kid is None else kid},
        )

    def mint_opaque(
        self, sub: str, aud: str | None, scope: str = "", expires_in: float = 300
    ) -> str:
        token = secrets.token_urlsafe(24)
        record: dict[str, Any] = {
            "active": True,
            "iss": self.issuer,
            "sub": sub,
            "client_id": sub,
            "scope": scope,
            "exp": int(time.time() + expires_in),
            "token_type": "Bearer",
        }
        if aud is not None:
            record["aud"] = aud
        self.opaque[token] = record
        return token

    # -- the ASGI app ---------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        self.calls[path] += 1
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if self.delay:
            await trio.sleep(self.delay)
        if self.down:
            await _answer(send, 503, {"error": "temporarily_unavailable"})
            return
        if self.throttle is not None:
            later = [(b"retry-after", str(self.throttle).encode())]
            await _answer(send, 429, {"error": "slow_down"}, later)
            return
        if path == "/.well-known/oauth-authorization-server":
            await _answer(send, 200, self.metadata())
        elif path == "/jwks":
            await _answer(send, 200, self.jwks())
        elif path == "/token" and scope["method"] == "POST":
            await _answer(send, *self._token(headers, parse_qs(body.decode())))
        elif path == "/introspect" and scope["method"] == "POST":
            await _answer(send, *self._introspect(headers, parse_qs(body.decode())))
        else:
            await _answer(send, 404, {"error": "not_found"})

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "introspection_endpoint": f"{self.issuer}/introspect",
            "authorization_endpoint": f"{self.issuer}/authorize",
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
        }

    def _client(self, headers: dict[str, str], form: dict[str, list[str]]) -> str | None:
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "basic":
            client_id, _, secret = base64.b64decode(value).decode().partition(":")
        else:
            client_id = form.get("client_id", [""])[0]
            secret = form.get("client_secret", [""])[0]
        return client_id if CLIENTS.get(client_id) == secret else None

    def _token(
        self, headers: dict[str, str], form: dict[str, list[str]]
    ) -> tuple[int, dict[str, Any]]:
        client = self._client(headers, form)
        if client is None:
            return 401, {"error": "invalid_client"}
        if form.get("grant_type", [""])[0] != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        resource = form.get("resource", [None])[0]
        scope = form.get("scope", [""])[0]
        lifetime = self.token_lifetime
        if client in self.opaque_clients:
            token = self.mint_opaque(client, resource, scope, lifetime)
        else:
            token = self.mint(client, resource, scope, expires_in=lifetime)
        answer = {"access_token": token, "token_type": "Bearer", "expires_in": lifetime}
        if scope:
            answer["scope"] = scope
        return 200, answer

    def _introspect(
        self, headers: dict[str, str], form: dict[str, list[str]]
    ) -> tuple[int, dict[str, Any]]:
        if self._client(headers, form) != "resource-server":
            return 401, {"error": "invalid_client"}
        record = self.opaque.get(form.get("token", [""])[0])
        if record is None or record["exp"] <= time.time():
            return 200, {"active": False}
        return 200, record


async def _answer(
    send: Send,
    status: int,
    document: dict[str, Any],
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps(document).encode()
    headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, *(extra or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


def listening_socket() -> tuple[socket.socket, int]:
    """A bound, listening 127.0.0.1 socket and its port: the URL is known before serving."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock, sock.getsockname()[1]


@asynccontextmanager
async def serving_asgi(app: Any, sock: socket.socket) -> AsyncIterator[None]:
    """Serve *app* with hypercorn (Trio) on *sock* until the block ends."""
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.errorlog = None
    config.accesslog = None
    config.graceful_timeout = 0.5
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve, app, config))
        try:
            yield
        finally:
            nursery.cancel_scope.cancel()
    sock.detach()  # hypercorn closed the descriptor it was given


@asynccontextmanager
async def running_auth_server() -> AsyncIterator[AuthServer]:
    """An :class:`AuthServer` listening on 127.0.0.1 (its ``issuer`` set)."""
    server = AuthServer()
    sock, port = listening_socket()
    server.issuer = f"http://127.0.0.1:{port}"
    async with serving_asgi(server, sock):
        yield server


def in_process_auth_server(
    issuer: str = "http://as.test",
) -> tuple[AuthServer, httpx2.ASGITransport]:
    """An :class:`AuthServer` and the transport that reaches it in this process (no socket)."""
    server = AuthServer(issuer=issuer)
    return server, httpx2.ASGITransport(app=server)
