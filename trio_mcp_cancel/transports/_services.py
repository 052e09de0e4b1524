"""Run a server's services (``runtime.services``) for as long as a transport serves it.

A service is something the server needs beside its requests for its whole
serving lifetime: a mount's upstream connections
(:mod:`trio_mcp_cancel._gateway`), each ``async def run(task_status)``.
Every transport enters :func:`services_served` around its serving (stdio,
WebSocket and the in-memory transport through ``extensions_served``; the HTTP
app in its lifespan), so a gateway connects to its upstreams on whichever
transport it is served, before it accepts its first request.

**Once per process.**  Several transports may serve one server at once (a
test client and an HTTP app, two WebSocket connections): the first starts
the services in a nursery of its own and the others share them (a lease,
counted); the first waits at its end for the last, since Trio cannot move
a running task to another nursery, and then stops them.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import attrs
import trio

from .._protocol.dispatcher import Served

__all__ = ["Service", "is_leased", "leased", "services_served"]


@attrs.define(eq=False)
class _Lease:
    holders: int = 1
    started: trio.Event = attrs.field(factory=trio.Event)
    released: trio.Event = attrs.field(factory=trio.Event)

    def release(self) -> None:
        self.holders -= 1
        if self.holders == 0:
            self.released.set()


Service = Callable[..., Awaitable[None]]
"""A service: ``async def run(*, task_status)``, started with ``nursery.start``."""

_leases: weakref.WeakKeyDictionary[object, _Lease] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def services_served(server: Served) -> AsyncIterator[None]:
    """Make sure the server's services run for the block; see the module docstring."""
    runtime = server.dispatcher.runtime
    if not runtime.services:
        yield  # the common case: nothing to run, no nursery, no scheduling point
        return
    async with leased(runtime, list(runtime.services)):
        yield


def is_leased(owner: object) -> bool:
    """Whether *owner*'s services run under a lease of this module now."""
    return owner in _leases


@contextlib.asynccontextmanager
async def leased(owner: object, services: Sequence[Service]) -> AsyncIterator[None]:
    """Run *services* for the block, once per process for *owner* (module docstring).

    The first block to enter starts them in a nursery of its own; the others
    share them (a lease, counted); the first waits at its end for the last.
    """
    lease = _leases.get(owner)
    if lease is not None:
        lease.holders += 1
        try:
            await lease.started.wait()
            yield
        finally:
            lease.release()
        return
    lease = _Lease()
    _leases[owner] = lease
    try:
        async with trio.open_nursery() as nursery:
            try:
                for service in services:
                    await nursery.start(service)
            finally:
                lease.started.set()  # joiners go on (as ordinary calls, if it failed)
            try:
                yield
            finally:
                lease.release()
                await lease.released.wait()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The nursery is ours: what the block raised comes out as itself.
        if len(group.exceptions) != 1:
            raise
        raise group.exceptions[0] from None
    finally:
        if _leases.get(owner) is lease:
            del _leases[owner]
