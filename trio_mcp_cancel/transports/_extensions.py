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
from collections.abc import AsyncIterator

from .._protocol.dispatcher import Served
from ._services import is_leased, leased, services_served

__all__ = ["extensions_served"]


@contextlib.asynccontextmanager
async def extensions_served(server: Served) -> AsyncIterator[None]:
    """Make sure the server's extension services, and its other services (a mount's
    upstream connections, :mod:`._services`), run for the block (module docstring)."""
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(services_served(server))
        for extension in server.dispatcher.extensions:
            # Shared when another transport of this process leased it; left alone
            # when somebody else runs it (the application, an HTTP lifespan).
            if is_leased(extension) or not extension.running:
                await stack.enter_async_context(leased(extension, [extension.serve]))
        yield
