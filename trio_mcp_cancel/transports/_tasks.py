"""Run the server's task manager for as long as a connection transport serves.

The HTTP app runs the server's
:class:`~trio_mcp_cancel._protocol.tasks.TaskManager` (its runtime's,
``server.dispatcher.runtime.tasks``) in its ASGI lifespan.  stdio,
WebSocket and the in-memory transport have no lifespan, so each serves
inside :func:`tasks_served`: when the manager is not running yet it is
started in a nursery of the transport's own, so a task-capable tool runs as
a task wherever the modern era is served, with no
``await nursery.start(runtime.tasks.run)`` for the user to remember.

**Who stops it.**  A manager the application (or an HTTP lifespan) runs is
left alone.  One started here is shared by every transport of the process
serving the same server (a lease, counted), and stopped when the last of
them ends: the first one to start it waits, at its end, for the others,
since Trio cannot move a running manager to another nursery.  Run the
manager yourself (``await nursery.start(runtime.tasks.run)``) to give it a
lifetime of its own (a backend, say).

What a stopping manager does to tasks still running is the manager's rule:
they are cancelled and settle ``failed``.  Tasks owned by a connection's
own namespace are stopped earlier, with the two phases, when that
connection closes (see :meth:`TaskManager.end_owner`).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator

import attrs
import trio

from .._protocol.dispatcher import Served
from .._protocol.tasks import TaskManager
from ._services import services_served

__all__ = ["tasks_served"]


@attrs.define(eq=False)
class _Lease:
    holders: int = 1
    started: trio.Event = attrs.field(factory=trio.Event)
    released: trio.Event = attrs.field(factory=trio.Event)

    def release(self) -> None:
        self.holders -= 1
        if self.holders == 0:
            self.released.set()


_leases: weakref.WeakKeyDictionary[TaskManager, _Lease] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def tasks_served(server: Served) -> AsyncIterator[None]:
    """Make sure the server's task manager, and its services (a mount's upstream
    connections, :mod:`._services`), run for the block; see the module docstring."""
    async with services_served(server), _manager_served(server):
        yield


@contextlib.asynccontextmanager
async def _manager_served(server: Served) -> AsyncIterator[None]:
    manager = server.dispatcher.runtime.tasks
    lease = _leases.get(manager)
    if lease is not None:
        # Started by another transport of this process: share it.
        lease.holders += 1
        try:
            await lease.started.wait()
            yield
        finally:
            lease.release()
        return
    if manager.running:
        # Somebody else owns its lifetime (the application, an HTTP lifespan).
        await trio.lowlevel.checkpoint()
        yield
        return
    lease = _Lease()
    _leases[manager] = lease
    try:
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(manager.run)
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
        if _leases.get(manager) is lease:
            del _leases[manager]
