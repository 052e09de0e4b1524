"""``McpServer.mount`` and ``McpServer.proxy``: the public surface of the gateway.

A mixin of :class:`~.server.McpServer`, so the server class keeps to
registration; the bodies live in :mod:`trio_mcp_cancel._gateway`, imported
when first called (the gateway needs the client and its transports, which a
server that mounts nothing never loads).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

from .dispatcher import Dispatcher, Served
from .registration import Registration

if TYPE_CHECKING:
    from .._gateway.upstream import Upstream

__all__ = ["Mounting"]


class Mounting:
    """Serving other MCP servers' offer on this one; see the module docstring."""

    registration: Registration
    dispatcher: Dispatcher

    def mount(
        self, target: Served | str | Sequence[str], namespace: str = "up", **options: Any
    ) -> Upstream:
        """Serve another MCP server's tools, resources and prompts under *namespace*.

        *target*: an ``McpServer`` (served in this process), an ``http(s)://``
        or ``ws(s)://`` URL, or a stdio command (a list of arguments).  Its
        tool ``search`` is ``up_search`` here, its prompts likewise, its
        resource ``file:///x`` is ``file://up//x`` (FastMCP's conventions).
        A cancel of a call in any form reaches the upstream request at once,
        in the form the upstream's era needs; progress, logs and the
        upstream's questions are relayed to the caller.  The connection is
        opened when the server starts serving (on any transport) and
        reopened with backoff when lost; while it is down, that namespace's
        calls answer an error naming it.  *options*: ``era`` (``"auto"``),
        ``connect_timeout``, ``ping_interval``, ``reconnect_initial``,
        ``reconnect_max``, ``max_items``, ``max_listing_bytes``,
        ``client_options`` (see ``docs/reference.md``).  Returns the
        :class:`~trio_mcp_cancel._gateway.upstream.Upstream` (its ``error``,
        ``connected``).
        """
        from .._gateway.mount import mount

        return mount(self, target, namespace, **options)

    @classmethod
    def proxy(
        cls, target: Served | str | Sequence[str], *, name: str = "proxy", **options: Any
    ) -> Self:
        """A server that serves one upstream as a whole, names unprefixed (see :meth:`mount`)."""
        from .._gateway.mount import mount

        server = cls(name)  # type: ignore[call-arg]
        mount(server, target, None, **options)
        return server
