"""The server's lifespan: ``McpServer(lifespan=...)``, entered once per process around serving.

``lifespan(server)`` returns an async context manager (the FastMCP and
Starlette shape: an ``@asynccontextmanager`` function); what it yields is
the state every tool, resource and prompt reads as ``ctx.lifespan`` (or,
typed, ``ctx.lifespan_as(State)``): a database pool, a client, a model.

**Who enters it.**  Every transport serves inside :func:`lifespan_served`:
stdio, WebSocket and the in-memory transport (``open_test_client``) around
their connection, the HTTP app in its ASGI lifespan (so ``serve()``,
``app_from_env`` and each worker under ``--workers`` enter their own).  It
is entered once per process however many transports serve the server: the
first to start enters it, the others share what it yielded (waiting until
it has), and the first one, at its end, waits for the others before it
exits the lifespan, since Trio requires a context manager to be left by the
task that entered it.  It is left after serving ended, so after the calls
in flight were answered (or cancelled by the shutdown).

**Failures.**  An exception while entering is :class:`LifespanFailed`, one
sentence naming it (the runner prints it as its one line, HTTP reports it
as ``lifespan.startup.failed``); serving never starts.  Leaving is bounded
by ``McpServer(lifespan_timeout=...)`` seconds, after which it is
cancelled; an exception while leaving is logged, never raised over the
serving's own outcome.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import attrs
import trio

from .._core.errors import CancellationError

__all__ = ["Lifespan", "LifespanFailed", "LifespanState", "lifespan_served"]

logger = logging.getLogger("trio_mcp_cancel.server")

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]
"""``lifespan(server) -> AsyncContextManager[T]``: what ``McpServer(lifespan=...)`` takes."""


class LifespanFailed(CancellationError):
    """The server's lifespan raised while entering: serving does not start.

    Its message is one sentence for the user (the original exception is
    its ``__cause__``).
    """


@attrs.define(eq=False)
class LifespanState:
    """What the lifespan yielded, while it is entered (one per server, on its runtime)."""

    value: Any = None
    entered: bool = False
    """Between the end of the lifespan's startup and the start of its exit."""


class _HasLifespan(Protocol):
    """What :func:`lifespan_served` needs of the served object: its dispatcher."""

    @property
    def dispatcher(self) -> Any: ...


@attrs.define(eq=False)
class _Lease:
    holders: int = 1
    started: trio.Event = attrs.field(factory=trio.Event)
    released: trio.Event = attrs.field(factory=trio.Event)
    failed: BaseException | None = None

    def release(self) -> None:
        self.holders -= 1
        if self.holders == 0:
            self.released.set()


_leases: weakref.WeakKeyDictionary[LifespanState, _Lease] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def lifespan_served(served: _HasLifespan, owner: object = None) -> AsyncIterator[None]:
    """The server's lifespan entered for the block (see the module docstring).

    *owner* is what the lifespan function is called with (default *served*:
    the ``McpServer``; the HTTP app passes the server it serves).
    """
    dispatcher = served.dispatcher
    registration, state = dispatcher.registration, dispatcher.runtime.lifespan
    factory: Lifespan | None = registration.lifespan
    if factory is None:
        yield
        return
    lease = _leases.get(state)
    if lease is not None:
        # Entered by another transport of this process: share it.
        lease.holders += 1
        try:
            await lease.started.wait()
            if lease.failed is not None:
                raise LifespanFailed(str(lease.failed))
            yield
        finally:
            lease.release()
        return
    lease = _Lease()
    _leases[state] = lease
    try:
        with trio.CancelScope() as bound:  # its deadline is set once serving ended
            try:
                manager = factory(served if owner is None else owner)
                entering = manager.__aenter__()
            except Exception as exc:
                lease.failed = _failed(exc)
                raise lease.failed from exc
            try:
                value = await entering
            except Exception as exc:
                lease.failed = _failed(exc)
                raise lease.failed from exc
            finally:
                lease.started.set()
            state.value, state.entered = value, True
            try:
                yield
            finally:
                lease.release()
                try:
                    await lease.released.wait()
                finally:
                    # Left even when cancelled (its clean-up sees the cancel, as Trio's
                    # rule is), and within the bound: this scope's deadline, not a scope
                    # of its own, which the lifespan's own scopes would have to outlive.
                    state.entered = False
                    bound.deadline = trio.current_time() + registration.lifespan_timeout
                    await _leave(manager)
                    state.value = None
        if bound.cancelled_caught:
            logger.warning(
                "the server's lifespan did not finish exiting within %gs; stopped",
                registration.lifespan_timeout,
            )
    finally:
        if _leases.get(state) is lease:
            del _leases[state]


async def _leave(manager: AbstractAsyncContextManager[Any]) -> None:
    """Exit the lifespan; a failure is logged, not raised.

    What served has its own outcome (a clean stop, an error): the
    lifespan's clean-up failing must not replace it.
    """
    try:
        await manager.__aexit__(None, None, None)
    except Exception:
        logger.exception("the server's lifespan failed while exiting")


def _failed(exc: BaseException) -> LifespanFailed:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return LifespanFailed(f"the server's lifespan failed to start: {detail}"[:500])
