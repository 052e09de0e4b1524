"""The one method table: every MCP method this server answers, and the eras it exists in.

Assembled from the core handlers (:mod:`.handlers`: lifecycle, logging,
discovery, tools, the Tasks extension) and the features beyond tools
(:mod:`.surface`: resources, prompts, completion, subscriptions).  Each
:class:`~.dispatcher.Dispatcher` starts from a copy, so a test may add a
method to one server's table without touching another's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from . import handlers, surface
from .calls import LEGACY_ONLY, MODERN_ONLY, Method, Target

__all__ = ["METHODS", "TARGETS"]

METHODS: Final[Mapping[str, Method]] = {
    "initialize": Method(handlers.initialize, LEGACY_ONLY, ordered=True),
    "ping": Method(handlers.empty, LEGACY_ONLY),
    "logging/setLevel": Method(handlers.set_level, LEGACY_ONLY, ordered=True),
    "server/discover": Method(handlers.discover),
    "tools/list": Method(handlers.list_tools),
    "tools/call": Method(handlers.call_tool),
    # The Tasks extension (SEP-2663); tasks/result and tasks/list do not exist there.
    "tasks/get": Method(handlers.tasks_get, MODERN_ONLY),
    "tasks/cancel": Method(handlers.tasks_cancel, MODERN_ONLY),
    "tasks/update": Method(handlers.tasks_update, MODERN_ONLY),
    **surface.METHODS,
}

#: The methods besides ``tools/call`` that run tracked work, and how to find it.
TARGETS: Final[Mapping[str, Target]] = surface.TARGETS
