"""Run the server's extension services for as long as a connection transport serves.

An extension may have a service (:meth:`Extension.serve`: the Tasks
extension's task manager, with its nursery for the tasks' work).  The HTTP
app runs them in its ASGI lifespan, on the shared backend.  stdio,
WebSocket and the in-memory transport have no lifespan, so each serves
inside :func:`extensions_served`: services not running yet are started in a
nursery of the transport's own, so a task-capable tool runs as a task
wherever the modern era is served, with nothing for the user to remember.

**Who stops them.**  A service the application (or an HTTP lifespan) runs
is left alone.  Those started here are shared by every transport of the
process serving the same server (a lease, counted), and stopped when the
last of them ends: the first one to start them waits, at its end, for the
others, since Trio cannot move a running service to another nursery.  Run
a service yourself (``await nursery.start(tasks.serve)``) to give it a
lifetime of its own (a backend, say).

What a stopping service does with work still running is the extension's
rule (the Tasks extension cancels its tasks, which settle ``failed``).
Work owned by a connection's own namespace is stopped earlier, with the
two phases, when that connection closes (:meth:`Extension.connection_closed`).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator

import attrs
import trio

from .._protocol.dispatcher import Served
from .._protocol.extension import Extension

__all__ = ["extensions_served"]


@attrs.define(eq=False)
class _Lease:
    holders: int = 1
    started: trio.Event = attrs.field(factory=trio.Event)
    released: trio.Event = attrs.field(factory=trio.Event)

    def release(self) -> None:
        self.holders -= 1
        if self.holders == 0:
            self.released.set()


_leases: weakref.WeakKeyDictionary[Extension, _Lease] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def extensions_served(server: Served) -> AsyncIterator[None]:
    """Make sure the server's extension services run for the block (module docstring)."""
    async with contextlib.AsyncExitStack() as stack:
        for extension in server.dispatcher.extensions:
            await stack.enter_async_context(_served(extension))
        yield


@contextlib.asynccontextmanager
async def _served(extension: Extension) -> AsyncIterator[None]:
    """Make sure *extension*'s service runs for the block."""
    lease = _leases.get(extension)
    if lease is not None:
        # Started by another transport of this process: share it.
        lease.holders += 1
        try:
            await lease.started.wait()
            yield
        finally:
            lease.release()
        return
    if extension.running:
        # Somebody else owns its lifetime (the application, an HTTP lifespan), or
        # it has no service.
        await trio.lowlevel.checkpoint()
        yield
        return
    lease = _Lease()
    _leases[extension] = lease
    try:
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(extension.serve)
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
        if _leases.get(extension) is lease:
            del _leases[extension]
