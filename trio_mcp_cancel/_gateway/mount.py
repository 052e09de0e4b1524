"""``McpServer.mount`` and ``McpServer.proxy``: another server's offer, served on this one.

The public surface is two methods of :class:`~trio_mcp_cancel.server.McpServer`
(``server.mount(target, namespace="up")``, ``McpServer.proxy(target)``);
their bodies are :func:`mount`: check what can be checked at once (the
namespace, the target, a namespace mounted twice), make the
:class:`~.upstream.Upstream`, and add its connection to the server's
services, which every transport starts before it serves.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

from .._protocol.dispatcher import Dispatcher
from .._protocol.registration import Registration
from .names import check_namespace
from .targets import Target, check_target
from .upstream import Upstream, UpstreamOptions

__all__ = ["Gateway", "mount"]


class Gateway(Protocol):
    """What a mount needs of the server it mounts on (an ``McpServer``)."""

    @property
    def registration(self) -> Registration: ...
    @property
    def dispatcher(self) -> Dispatcher: ...


_mounted: weakref.WeakKeyDictionary[Registration, dict[str | None, Upstream]] = (
    weakref.WeakKeyDictionary()
)


def mount(server: Gateway, target: Target, namespace: str | None, **options: Any) -> Upstream:
    """Mount *target* on *server* under *namespace* (``None``: the proxy, no prefix)."""
    check_namespace(namespace)
    check_target(target)
    if target is server:
        raise ValueError("mount: a server cannot mount itself")
    settings = UpstreamOptions(**options)
    mounts = _mounted.setdefault(server.registration, {})
    if namespace in mounts:
        raise ValueError(f"mount: namespace {namespace!r} is mounted already")
    upstream = Upstream(target, namespace, settings, server.registration)
    mounts[namespace] = upstream
    server.dispatcher.runtime.services.append(upstream.run)
    return upstream
