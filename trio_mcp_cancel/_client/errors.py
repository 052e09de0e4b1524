"""What the client raises, and its message type: one module every client module imports."""

from __future__ import annotations

from typing import Any

__all__ = ["McpError", "McpTransportError", "Message", "OAuthError"]

Message = dict[str, Any]


class McpError(Exception):
    """A JSON-RPC error answer (``-32800`` for a cancelled request, say)."""

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data


class McpTransportError(McpError):
    """No answer can come: the connection broke, or the server answered
    something that is not JSON-RPC (an HTTP error page, say).  ``code`` is 0
    (there is no JSON-RPC code); ``data`` holds the HTTP status, if any."""

    def __init__(self, message: str, data: object = None) -> None:
        super().__init__(0, message, data)


class OAuthError(McpTransportError):
    """The client could not get an access token (``ClientCredentialsAuth``): the
    metadata or the token endpoint failed, refused, or did not answer in time.
    The call that needed the token raises it; ``data`` holds the token
    endpoint's HTTP status and OAuth ``error`` when it refused."""
