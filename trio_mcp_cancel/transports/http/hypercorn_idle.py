"""hypercorn's keep-alive idle timeout as one watcher per connection whose deadline moves.

hypercorn 0.17 and 0.18's Trio ``TCPServer`` keeps an idle connection's
timeout in a ``TrioSingleTask``: on every request it is stopped (a lock and
a cancel) and, after the response, restarted: a lock, a cancel, and
``nursery.start()`` of a new task (``_idle_timeout``: ``move_on_after(
keep_alive_timeout)`` around ``context.terminated.wait()``, then a
shielded close), which the connection waits for until it reports started.
That is one task spawned and several scheduling points per keep-alive
request, for a timer that almost never fires.

:class:`IdleTimer` takes the ``TrioSingleTask``'s place (same ``restart``
and ``stop``, so hypercorn's ``run`` and ``protocol_send`` are left as they
are): the first ``restart`` starts one watcher for the connection's life;
after that, going idle moves its cancel scope's deadline to
``keep_alive_timeout`` from now and going busy moves it to ``inf``.
Moving a deadline wakes nobody, so a request costs no task, no lock and no
scheduling point.  What hypercorn does is kept: an idle connection is
closed (shielded) ``keep_alive_timeout`` after it went idle, a busy one
never by the timer; once the worker is shutting down (``context.terminated``)
an idle connection is closed at once and a busy one as soon as it goes
idle.  One thing is better: hypercorn's idle task outlives a connection
whose client closed it while idle, holding the socket (and the
connection's task group) open until the timeout; the watcher ends when the
connection stops reading, as hypercorn's asyncio worker already does (its
``_close`` stops the idle task).

The same change as an upstream patch, with its benchmark:
``docs/upstream/hypercorn-idle-timeout.md``.  :mod:`.hypercorn_compat`
installs it (version-checked, behind its switches) with :func:`apply`;
this module and that one are the only two that know hypercorn's internals.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Final

import trio

__all__ = ["IDLE_CHECKED", "IdleTimer", "applied", "apply", "restore", "why_not"]

#: The hypercorn releases (major, minor; first and last) whose ``TCPServer``
#: idle handling :class:`IdleTimer` was checked against (0.16 had another shape).
IDLE_CHECKED: Final = ((0, 17), (0, 18))

#: Names hypercorn's own ``_idle_timeout`` uses: what :class:`IdleTimer` does instead.
_IDLE_TIMEOUT_NAMES: Final = frozenset(
    {"move_on_after", "keep_alive_timeout", "terminated", "CancelScope", "_initiate_server_close"}
)
#: Per patched class: its own ``__init__`` and ``_read_data``, and the wrappers put in their place.
_APPLIED: dict[type, tuple[Any, Any, Any, Any]] = {}


class IdleTimer:
    """A connection's idle timeout: one watcher task, its deadline moved as the connection
    goes idle and busy (see the module docstring).  In ``TCPServer.idle_task``'s place."""

    __slots__ = ("_busy", "_idle", "_reading", "_server", "_started", "_timeout")

    def __init__(self, server: Any) -> None:
        self._server = server
        self._timeout: float = server.config.keep_alive_timeout
        #: Its deadline is when the connection is closed for idling (``inf`` while busy).
        self._idle = trio.CancelScope()
        #: Cancelled once the connection stops reading: the watcher ends, closing nothing.
        self._reading = trio.CancelScope()
        # Invariant: _busy is True exactly when _idle.deadline is inf because of a request
        # (before the first restart it is False and the deadline inf: not watched yet).
        self._busy = False
        self._started = False

    async def restart(self, task_group: Any, action: object) -> None:
        """The connection went idle: it is closed ``keep_alive_timeout`` from now.

        *action* is hypercorn's ``_idle_timeout``, which the watcher does instead;
        the first call starts the watcher in the connection's task group.
        """
        self._busy = False
        self._idle.deadline = trio.current_time() + self._timeout
        if not self._started:
            self._started = True
            task_group._nursery.start_soon(self._watch)

    async def stop(self) -> None:
        """The connection is busy: the timer does not close it."""
        self._busy = True
        self._idle.deadline = math.inf

    def end(self) -> None:
        """The connection stopped reading: the watcher ends without closing anything.

        Whatever ended the read loop already told the protocol, and the server
        closes the socket when the connection's task group is done.
        """
        self._reading.cancel()

    async def _watch(self) -> None:
        with self._reading:
            with self._idle:
                await self._server.context.terminated.wait()
                # Shutting down: from now on going idle closes at once.
                self._timeout = -math.inf
                if self._busy:
                    await trio.sleep_forever()  # until restart() moves the deadline to -inf
            with trio.CancelScope(shield=True):
                await self._server._initiate_server_close()


def why_not(server_class: type) -> str:
    """Why :class:`IdleTimer` cannot stand in for *server_class*'s idle task (``""``: it can).

    It relies on ``__init__`` setting ``self.idle_task = TrioSingleTask()``, on
    ``_idle_timeout`` doing what the watcher does, and on ``_read_data`` being
    the read loop; anything else is another shape, left to hypercorn.
    """
    init = getattr(server_class, "__init__", None)
    idle_timeout = getattr(server_class, "_idle_timeout", None)
    single_task = getattr(_module_of(server_class), "TrioSingleTask", None)
    if not (
        {"TrioSingleTask", "idle_task"} <= _names(init)
        and _IDLE_TIMEOUT_NAMES <= _names(idle_timeout)
        and callable(getattr(server_class, "_read_data", None))
        and callable(getattr(server_class, "_initiate_server_close", None))
        and callable(getattr(single_task, "restart", None))
        and callable(getattr(single_task, "stop", None))
    ):
        return "hypercorn's trio TCPServer keeps its idle timeout in another shape"
    return ""


def applied(server_class: type) -> bool:
    """Whether :func:`apply` is in effect on *server_class*."""
    entry = _APPLIED.get(server_class)
    cls: Any = server_class
    return entry is not None and cls.__init__ is entry[2]


def apply(server_class: type) -> str:
    """Give each new connection of *server_class* an :class:`IdleTimer` (idempotent).

    Returns why not (``""``: applied); a class of another shape is left alone.
    Connections already open keep hypercorn's idle task.
    """
    if applied(server_class):
        return ""
    why = why_not(server_class)
    if why:
        return why
    cls: Any = server_class
    init: Any = cls.__init__
    read_data: Any = cls._read_data
    single_task = _module_of(server_class).TrioSingleTask

    def idle_timer_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if type(self.idle_task) is single_task:
            self.idle_task = IdleTimer(self)

    async def read_then_end_idle_timer(self: Any) -> None:
        try:
            await read_data(self)
        finally:
            idle = self.idle_task
            if type(idle) is IdleTimer:
                idle.end()

    _APPLIED[server_class] = (init, read_data, idle_timer_init, read_then_end_idle_timer)
    cls.__init__ = idle_timer_init
    cls._read_data = read_then_end_idle_timer
    return ""


def restore(server_class: type) -> None:
    """Undo :func:`apply` (connections opened meanwhile keep their :class:`IdleTimer`)."""
    entry = _APPLIED.pop(server_class, None)
    if entry is None:
        return
    init, read_data, wrapped_init, wrapped_read = entry
    cls: Any = server_class
    if cls.__init__ is wrapped_init:
        cls.__init__ = init
    if getattr(cls, "_read_data", None) is wrapped_read:
        cls._read_data = read_data


def _names(function: object) -> frozenset[str]:
    """The global and attribute names *function*'s code uses (empty: not a plain function)."""
    code = getattr(function, "__code__", None)
    return frozenset(getattr(code, "co_names", ()))


def _module_of(server_class: type) -> Any:
    return sys.modules.get(server_class.__module__)
