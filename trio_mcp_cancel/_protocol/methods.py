"""The one method table: every MCP method this server answers, and the eras it exists in.

Assembled from the core handlers (:mod:`.handlers`: lifecycle, logging,
discovery, tools) and the features beyond tools (:mod:`.surface`:
resources, prompts, completion, subscriptions), then each server's
extensions (:mod:`.extension`): their methods join the table, and the
three core methods extensions reach into (``tools/call``,
``server/discover``, ``subscriptions/listen``) are bound to the
extensions that take part.  Each :class:`~.dispatcher.Dispatcher` makes
its own table (:func:`method_table`), so a test may add a method to one
server's table without touching another's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Final

from . import handlers, surface
from .calls import LEGACY_ONLY, Method, Target
from .extension import Extension

__all__ = ["METHODS", "TARGETS", "method_table"]

METHODS: Final[Mapping[str, Method]] = {
    "initialize": Method(handlers.initialize, LEGACY_ONLY, ordered=True),
    "ping": Method(handlers.empty, LEGACY_ONLY),
    "logging/setLevel": Method(handlers.set_level, LEGACY_ONLY, ordered=True),
    "server/discover": Method(handlers.discover),
    "tools/list": Method(handlers.list_tools),
    "tools/call": Method(handlers.call_tool),
    **surface.METHODS,
}
"""The core's methods, for a server without extensions."""

#: The methods besides ``tools/call`` that run tracked work, and how to find it.
TARGETS: Final[Mapping[str, Target]] = surface.TARGETS


def method_table(extensions: Sequence[Extension]) -> dict[str, Method]:
    """The method table of a server with *extensions* (a new dict).

    An extension may add methods but never replace one: a name already in
    the table (the core's, or an earlier extension's) is a ``ValueError``.
    """
    table = dict(METHODS)
    if not extensions:
        return table
    for extension in extensions:
        for name, method in extension.methods().items():
            if name in table:
                raise ValueError(f"extension {extension.name!r} redefines the method {name!r}")
            table[name] = method
    table["server/discover"] = Method(partial(handlers.discover, extensions=tuple(extensions)))
    wrappers = tuple(e for e in extensions if e.wraps_tool_calls())
    if wrappers:
        table["tools/call"] = Method(partial(handlers.call_tool, wrappers=wrappers))
    grants = tuple(e for e in extensions if e.grants_listens())
    if grants:
        listen = table["subscriptions/listen"]
        table["subscriptions/listen"] = Method(
            partial(surface.listen, grants=grants), listen.eras, ordered=listen.ordered
        )
    return table
