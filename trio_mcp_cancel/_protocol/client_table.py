"""The table of one channel's server-to-client requests waiting for answers, and their errors.

Kept apart from :mod:`.client_requests` (which sends the requests and
waits) so that :class:`~.exchange.Channel`, which holds one table per
legacy session or connection, depends on nothing but this.
"""

from __future__ import annotations

import secrets
from typing import Final

import attrs
import trio

from .._core.errors import CancellationError
from .._wire.jsonrpc import ClientResponse

__all__ = [
    "MAX_PENDING_CLIENT_REQUESTS",
    "ClientRequestError",
    "ClientRequestTimeout",
    "ClientRequests",
]

#: Server-to-client requests one channel (a legacy session, a connection)
#: may have waiting for their answers at once; one more is refused.
MAX_PENDING_CLIENT_REQUESTS: Final = 32


class ClientRequestError(CancellationError):
    """The client could not answer a server-to-client request.

    *code* is the JSON-RPC error code the client answered with (``None``
    when the failure is the server's: a timeout, a capability the client
    did not declare, a transport that cannot carry requests).
    """

    def __init__(self, message: str, code: int | None = None, data: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.data = data


class ClientRequestTimeout(ClientRequestError):
    """The client did not answer within the timeout (it was sent ``notifications/cancelled``)."""


@attrs.define(eq=False)
class _Pending:
    id: str
    wake: trio.Event = attrs.field(factory=trio.Event)
    answer: ClientResponse | None = None


@attrs.define(eq=False)
class ClientRequests:
    """One channel's server-to-client requests waiting for an answer (bounded).

    Ids are ``<random prefix>-<n>``: unique per channel, and never equal to
    another worker's for the same session (a response forwarded between
    workers cannot wake the wrong waiter).  An answer is matched by id
    within the channel, so a response for an unknown id, or sent on another
    session, matches nothing.
    """

    max_pending: int = MAX_PENDING_CLIENT_REQUESTS
    _prefix: str = attrs.field(factory=lambda: "srv-" + secrets.token_hex(6))
    _count: int = 0
    _pending: dict[str, _Pending] = attrs.field(factory=dict)

    def __len__(self) -> int:
        return len(self._pending)

    def open(self) -> _Pending:
        if len(self._pending) >= self.max_pending:
            raise ClientRequestError(
                f"too many requests to the client waiting for answers ({self.max_pending})"
            )
        self._count += 1
        pending = _Pending(f"{self._prefix}-{self._count}")
        self._pending[pending.id] = pending
        return pending

    def close(self, pending: _Pending) -> None:
        self._pending.pop(pending.id, None)

    def resolve(self, response: ClientResponse) -> bool:
        """Hand *response* to its waiter; ``False`` when nothing here waits for its id."""
        key = response.id
        pending = self._pending.pop(key, None) if isinstance(key, str) else None
        if pending is None:
            return False
        pending.answer = response
        pending.wake.set()
        return True
