"""What a server offers and how it is configured: the registration the dispatcher serves.

:class:`Registration` holds the tools, resources, prompts and completers an
author registered (through :class:`~.server.McpServer`'s decorators) and the
settings they are served with (the MRTR state signer, the sync-tool thread
limit, caching hints, page size, telemetry).  It imports nothing of the
dispatch path: the :class:`~.dispatcher.Dispatcher` reads it, and
:class:`~.server.McpServer` composes the two, so the layers only ever import
downwards.  Registering or removing anything while the server runs tells
the ``subscriptions/listen`` streams that asked
(``notifications/*/list_changed``) through :attr:`Registration.on_change`,
which the server's runtime (:mod:`.runtime`) points at its subscription hub.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import trio

from .._telemetry.config import Telemetry
from .._telemetry.server import ServerTelemetry, for_server
from .._wire.versions import Era
from .._work.threads import ThreadLimit
from .lifespan import Lifespan
from .limits import ServerLimits
from .metadata import check_icons, check_text, check_website_url, implementation
from .mrtr import StateSigner
from .prompts import PromptSet
from .resources import ResourceSet
from .tools import Tool

__all__ = ["CacheScope", "ChangeSink", "OnCancel", "Registration"]

#: What a request the *client* cancelled is answered with: ``"silent"`` (the
#: default) sends nothing, as MCP requires; ``"error"`` sends ``-32800``
#: "Request cancelled", for clients that wait for an answer regardless.
#: Server-side cancels are always answered ``-32800``.
OnCancel = Literal["silent", "error"]
CacheScope = Literal["public", "private"]
ChangeSink = Callable[[str, Mapping[str, Any] | None], object]
"""Told a ``notifications/*`` method and its params when what the server offers changes."""


class Registration:
    """What one server offers and its serving settings; see the module docstring.

    Made by :class:`~.server.McpServer` from its keywords (they are
    documented there); read by the dispatcher and the handlers at each
    request, so a setting changed here takes effect at the next one.
    """

    on_change: ChangeSink | None
    """Where registration changes go: the runtime's subscription hub, set when the
    server's runtime is made; ``None`` before (nobody listens yet, nothing is lost)."""

    def __init__(
        self,
        name: str,
        version: str,
        *,
        instructions: str | None,
        limits: ServerLimits,
        on_cancel: OnCancel,
        list_ttl_ms: int,
        state_secret: bytes | str | None,
        state_ttl: float,
        state_secret_previous: bytes | str | None,
        resource_ttl_ms: int,
        resource_cache_scope: CacheScope,
        sync_tool_threads: int | trio.CapacityLimiter,
        page_size: int,
        telemetry: bool | Telemetry,
        lax_arguments: bool,
        title: str | None = None,
        description: str | None = None,
        website_url: str | None = None,
        icons: Iterable[Mapping[str, Any]] | None = None,
        lifespan: Lifespan | None = None,
        lifespan_timeout: float = 10.0,
    ) -> None:
        if on_cancel not in ("error", "silent"):
            raise ValueError("on_cancel must be 'silent' or 'error'")
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        if state_secret is None and state_secret_previous is not None:
            raise ValueError("state_secret_previous needs state_secret (the one that seals)")
        if resource_ttl_ms < 0 or resource_cache_scope not in ("public", "private"):
            raise ValueError("resource_ttl_ms must be >= 0, cache scope 'public' or 'private'")
        self.name = name
        self.version = version
        self.instructions = instructions
        self.title = check_text(title, "title", 200)
        """The server's display name (``serverInfo.title``)."""
        self.description = check_text(description, "description", 2000)
        self.website_url = check_website_url(website_url)
        self.icons = check_icons(icons, "the server")
        if lifespan is not None and not callable(lifespan):
            raise TypeError(
                "lifespan must be a function: lifespan(server) -> async context manager"
            )
        if not (isinstance(lifespan_timeout, int | float) and 0 < lifespan_timeout < math.inf):
            raise ValueError("lifespan_timeout must be a positive number of seconds")
        self.lifespan = lifespan
        """``lifespan(server)``: the async context manager entered around serving
        (:mod:`.lifespan`); ``None``: none."""
        self.lifespan_timeout = float(lifespan_timeout)
        """Seconds the lifespan's exit may take before it is cancelled."""
        if not isinstance(limits, ServerLimits):
            raise TypeError("limits must be a ServerLimits")
        self.limits = limits
        """The server-wide admission caps, read at each admission (replace them, they are
        frozen); ``McpServer.limits`` is this attribute."""
        self.on_cancel: OnCancel = on_cancel
        self.list_ttl_ms = list_ttl_ms
        self.lax_arguments = lax_arguments
        """Tools registered from now on convert arguments in pydantic's lax mode."""
        self.page_size = page_size
        """Items per page of the list methods (opaque ``cursor``/``nextCursor``)."""
        self.telemetry: ServerTelemetry | None = for_server(telemetry)
        """Spans and metrics (``None``: off, or ``opentelemetry-api`` is not installed)."""
        self.tools: dict[str, Tool] = {}
        self.tool_scopes: dict[str, frozenset[str]] = {}
        """OAuth scopes a tool's ``tools/call`` needs (``scopes=``; HTTP ``403`` without them)."""
        self.sync_tool_threads = ThreadLimit(sync_tool_threads)
        """The worker threads sync tools share (not Trio's default limiter); see :mod:`.threads`.

        Configuration: each tool binds it when registered; the limiter is made per Trio run."""
        self.resources = ResourceSet()
        self.prompts = PromptSet()
        self.on_change = None
        self.state_signer = (
            StateSigner(ttl=state_ttl, previous=state_secret_previous)
            if state_secret is None
            else StateSigner(state_secret, ttl=state_ttl, previous=state_secret_previous)
        )
        self.resource_ttl_ms = resource_ttl_ms
        self.resource_cache_scope: CacheScope = resource_cache_scope

    @property
    def info(self) -> dict[str, str]:
        """Name and version: the ``serverInfo`` every modern result carries in ``_meta``."""
        return {"name": self.name, "version": self.version}

    @property
    def server_info(self) -> dict[str, Any]:
        """The whole ``Implementation``: what ``initialize`` and ``server/discover`` carry
        (:attr:`info` plus the display metadata that is set, :mod:`.metadata`)."""
        return implementation(
            self.name,
            self.version,
            title=self.title,
            description=self.description,
            website_url=self.website_url,
            icons=self.icons,
        )

    def list_tools(self) -> list[dict[str, Any]]:
        return [tool.describe() for tool in self.tools.values()]

    def capabilities(self, era: Era = "legacy", *, notifications: bool = False) -> dict[str, Any]:
        """*notifications*: a legacy client the transport can notify outside requests
        (the HTTP GET stream); the modern era always can (``subscriptions/listen``).

        ``listChanged``/``subscribe`` are promised only where they can be
        delivered: by ``subscriptions/listen``, or on a legacy HTTP
        session's GET stream.
        """
        listen = era == "modern" or notifications
        capabilities: dict[str, Any] = {"tools": {"listChanged": listen}, "logging": {}}
        if self.resources:
            capabilities["resources"] = {"listChanged": listen, "subscribe": listen}
        if self.prompts.prompts:
            capabilities["prompts"] = {"listChanged": listen}
        if self.prompts.prompts or self.resources.templates:
            capabilities["completions"] = {}
        return capabilities

    def describe(self, result: dict[str, Any]) -> dict[str, Any]:
        """*result* (``initialize``'s or ``server/discover``'s) with the instructions, if any."""
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    # -- change notifications ----------------------------------------------------

    def changed(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Tell the listen streams that asked: *method* (a ``notifications/*``)."""
        on_change = self.on_change
        if on_change is not None:
            on_change(method, params)
