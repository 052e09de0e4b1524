"""The Extension API: what an extension adds to a server, and the few places it may step in.

An MCP extension (the Tasks extension, ``io.modelcontextprotocol/tasks``,
is the first) adds methods, declares itself in the server's capabilities
under ``capabilities.extensions``, and may change how ``tools/call`` runs.
A server takes its extensions as ``McpServer(extensions=[...])``; the
server's :class:`~.dispatcher.Dispatcher` binds each one once.

**What an extension sees.**  Never the server: each hook gets what that
step needs, the request (:class:`~.calls.HandlerInput`) or the connection
that ended, and :meth:`Extension.bind` hands it an :class:`ExtensionHost`
with the one thing the server shares with it (publishing a notification
to the listen streams that asked for it).  So an extension cannot reach
the registration to change it while the server serves, and the server
never depends on what an extension keeps.

**Its hooks**, each with a default that does nothing:

* :meth:`~Extension.methods`: the methods it answers (each a
  :class:`~.calls.Method`, its handler taking a ``HandlerInput``), added to
  the dispatcher's method table; a name the core already serves is refused;
* :meth:`~Extension.capability`: its settings under
  ``capabilities.extensions[name]`` in ``server/discover`` (``None``: not
  advertised, for a server that has nothing for it to do);
* :meth:`~Extension.call_tool`: wraps every ``tools/call`` after the
  arguments are bound and the context made, in the order the extensions
  were given, around the call itself (``call_next``); an extension that
  does not override it adds nothing to a call's path;
* :meth:`~Extension.grant_listen`: narrows what a ``subscriptions/listen``
  asked of it (the Tasks extension grants only the caller's own tasks);
* a lifetime, run by the transports: :meth:`~Extension.serve` (a service,
  started with ``nursery.start`` by the HTTP app's lifespan or for as long
  as a stdio/WebSocket/in-memory transport serves; ``running`` says
  whether somebody runs it already), :meth:`~Extension.shutdown` (the
  server stops: flag what still runs, with the shutdown's grace) and
  :meth:`~Extension.connection_closed` (a stdio or WebSocket connection
  ended: stop what only it could still reach).

Everything here is I/O-free; an extension that needs a nursery opens it
in :meth:`~Extension.serve`, which a transport runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._core.events import CancelKind
from .._core.ratelog import RateLimitedLog
from .._core.registry import USE_CONFIG, UseConfig
from .._wire.versions import Era
from .calls import HandlerInput, Method
from .registration import Registration
from .subscriptions import Filter

if TYPE_CHECKING:
    from ..backends.base import Backend
    from .context import Context
    from .tools import Tool

__all__ = ["Extension", "ExtensionHost", "ToolCall"]


@attrs.frozen
class ExtensionHost:
    """What a server shares with its extensions (and nothing else of it)."""

    publish: Callable[[str, Mapping[str, Any]], object]
    """Send a notification (method, params) to the listen streams (and legacy
    GET streams) that asked for it."""
    failures: RateLimitedLog
    """Where unexpected failures are logged, once per kind and interval."""


@attrs.define(eq=False, slots=True)
class ToolCall:
    """One ``tools/call`` as the extensions see it: the tool, its bound arguments, its context.

    An extension may replace ``arguments`` before ``call_next`` runs the call.
    """

    tool: Tool
    arguments: dict[str, Any]
    ctx: Context


#: What :meth:`Extension.call_tool` calls to go on (the next extension, then the call).
CallNext = Callable[[], Awaitable[dict[str, Any]]]


class Extension:
    """An MCP extension; subclass it and override the hooks you need (module docstring).

    ``name`` is the extension's identifier, its key under
    ``capabilities.extensions`` (for example ``"io.modelcontextprotocol/tasks"``).
    """

    name: str = ""

    def methods(self) -> Mapping[str, Method]:
        """The methods this extension answers (added to the method table)."""
        return {}

    def capability(self, registration: Registration, era: Era) -> Mapping[str, Any] | None:
        """Its settings under ``capabilities.extensions[name]``; ``None``: not advertised."""
        return None

    def bind(self, host: ExtensionHost) -> None:
        """Called once, when a server's dispatcher takes the extension."""

    async def call_tool(self, h: HandlerInput, call: ToolCall, call_next: CallNext) -> Any:
        """Wrap a ``tools/call``; the default goes straight on."""
        return await call_next()

    async def grant_listen(self, h: HandlerInput, granted: Filter) -> Filter:
        """Narrow what a ``subscriptions/listen`` is granted; the default grants it all."""
        return granted

    @property
    def running(self) -> bool:
        """Whether its service runs (an extension without one: always)."""
        return True

    async def serve(
        self,
        backend: Backend | None = None,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run the extension's service until cancelled (*backend*: the shared one, if any).

        The default has no service: it reports started and returns.
        """
        task_status.started()

    def shutdown(self, reason: str, grace_period: float | UseConfig | None = USE_CONFIG) -> int:
        """The server is shutting down: flag what still runs (how many)."""
        return 0

    async def connection_closed(
        self,
        owner: str,
        reason: str,
        *,
        kind: CancelKind = "disconnect",
        grace_period: float | UseConfig | None = USE_CONFIG,
    ) -> None:
        """A stdio/WebSocket/in-memory connection of namespace *owner* ended."""

    def wraps_tool_calls(self) -> bool:
        """Whether :meth:`call_tool` is overridden (only those join a call's path)."""
        return type(self).call_tool is not Extension.call_tool

    def grants_listens(self) -> bool:
        return type(self).grant_listen is not Extension.grant_listen
