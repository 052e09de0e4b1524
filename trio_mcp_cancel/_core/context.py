"""The current request, found through a context variable.

Tool code should not have to thread a handle through every call just to ask
"was I cancelled?", so :func:`tracked` publishes the request in a
:class:`contextvars.ContextVar`.  Trio copies the spawning task's context
into each new task, so helpers started from inside ``tracked()`` see the
same request too.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol, overload

import trio

from .errors import RequestCancelled
from .request import TrackedRequest
from .validation import RequestId

__all__ = [
    "RequestLike",
    "cancelled",
    "checkpoint_cancelled",
    "current_request",
    "reason",
]

#: The running request (package-internal: the registry sets it, ``tracked()`` reads it).
current_request_var: ContextVar[TrackedRequest] = ContextVar("trio_mcp_cancel.request")
_get_request = current_request_var.get


class RequestLike(Protocol):
    """Anything that names a request: a transport's tool context, for instance."""

    @property
    def request_id(self) -> RequestId: ...

    @property
    def namespace(self) -> str: ...


_MISSING = object()


@overload
def current_request() -> TrackedRequest: ...
@overload
def current_request(default: None) -> TrackedRequest | None: ...
def current_request(default: object = _MISSING) -> TrackedRequest | None:
    """Return the request of the innermost enclosing :func:`tracked` block.

    Raises :class:`RuntimeError` outside one, unless a *default* is given:
    asking whether nothing was cancelled is almost always a bug (a tool run
    outside the server, or a task spawned outside the request).
    """
    request = current_request_var.get(None)
    if request is None:
        if default is _MISSING:
            raise RuntimeError("not inside a tracked() request")
        return None
    return request


def cancelled() -> bool:
    """Return whether the current request has been cancelled (any kind).

    This is the polled flag: cheap enough to call in a tight loop, and it
    never yields.  Use :func:`checkpoint_cancelled` in ``async`` loops.
    """
    # The hot path of every polling loop: one context lookup, no call.
    request = _get_request(None)
    if request is None:
        current_request()  # raises the helpful error
    return request.cancellation is not None  # type: ignore[union-attr]


def reason() -> str | None:
    """Return the current request's cancellation reason, if it has one."""
    cancellation = current_request().cancellation
    return None if cancellation is None else cancellation.reason


async def checkpoint_cancelled() -> None:
    """A Trio checkpoint that raises :class:`RequestCancelled` once the flag is set.

    It first executes a full checkpoint (so it may raise ``trio.Cancelled``
    if the grace period already ran out, and it lets other tasks run), then
    looks at the flag, so a cancellation delivered during the checkpoint is
    seen at once.  Loops that call it stop cooperatively, with time to tidy
    up, before the grace period forces them to.
    """
    request = current_request()
    await trio.lowlevel.checkpoint()
    cancellation = request.cancellation
    if cancellation is not None:
        raise RequestCancelled(cancellation.reason, cancellation.kind)
