"""The HTTP app's part of authorization: the metadata responses and the per-message scope check.

The token itself is checked from the request head
(:meth:`~..._auth.resource.OAuthResource.authenticate`, before the body is
read); the scopes a message needs are known once the body is parsed: the
method's, and for ``tools/call`` the tool's (``@server.tool(scopes=...)``).
A message the token may not send is answered ``403`` before it reaches
the dispatcher, so it is never admitted, tracked or run.
"""

from __future__ import annotations

import json
from typing import Any

from ..._auth.resource import OAuthResource
from ..._auth.tokens import AccessToken
from ..._protocol.mcp_server import McpServerBase

__all__ = ["check_scopes", "resource_metadata"]

_CORS = [
    # The metadata is public, and browser-based clients read it cross-origin.
    (b"access-control-allow-origin", b"*"),
    (b"access-control-allow-methods", b"GET, OPTIONS"),
    (b"access-control-allow-headers", b"mcp-protocol-version"),
]


def resource_metadata(
    resource: OAuthResource, method: str
) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """The answer to *method* at a Protected Resource Metadata path: status, body, headers."""
    if method in ("GET", "HEAD"):
        body = json.dumps(resource.metadata()).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"cache-control", b"public, max-age=3600"),
            *_CORS,
        ]
        return 200, body if method == "GET" else b"", headers
    if method == "OPTIONS":
        return 204, b"", list(_CORS)
    return 405, b"Method Not Allowed", [(b"allow", b"GET, HEAD, OPTIONS")]


def check_scopes(
    resource: OAuthResource, server: McpServerBase, message: object, access: AccessToken
) -> None:
    """Refuse (:class:`~..._auth.resource.Refusal`, ``403``) a message *access* may not send."""
    if type(message) is not dict:
        return  # a batch or junk: the dispatcher answers it, and it runs no tool
    method = message.get("method")
    if not isinstance(method, str):
        return  # a response to the server's own request
    tool: frozenset[str] = frozenset()
    if method == "tools/call":
        params: Any = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if isinstance(name, str):
            tool = server.tool_scopes.get(name, frozenset())
    resource.check(access, resource.needed(method, tool))
