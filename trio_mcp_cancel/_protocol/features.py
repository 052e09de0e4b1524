"""What a server offers besides tools: resources, prompts, completion, the MRTR state signer.

:class:`ServerFeatures` is the registration half of
:class:`~.mcp_server.McpServer` (its decorators and the state they fill);
the methods that serve them are in :mod:`.surface`.  Registering or removing
anything while the server runs tells the ``subscriptions/listen`` streams
that asked (``notifications/*/list_changed``), through ``on_change``, which
the server's runtime (:mod:`.runtime`) points at its subscription hub.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, overload

from .mrtr import StateSigner
from .prompts import PromptSet, make_prompt
from .resources import Resource, ResourceSet, ResourceTemplate

__all__ = ["CacheScope", "ChangeSink", "ServerFeatures"]

F = TypeVar("F", bound=Callable[..., Any])  # async def, or a plain def (run in a thread)
CacheScope = Literal["public", "private"]
ChangeSink = Callable[[str, Mapping[str, Any] | None], object]
"""Told a ``notifications/*`` method and its params when what the server offers changes."""


class ServerFeatures:
    """Resources, prompts, completers, the MRTR state signer, and who hears of changes."""

    resources: ResourceSet
    prompts: PromptSet
    state_signer: StateSigner
    on_change: ChangeSink | None
    """Where registration changes go: the runtime's subscription hub, set when the
    server's dispatcher is made; ``None`` before (nobody listens yet, nothing is lost)."""
    resource_ttl_ms: int
    resource_cache_scope: CacheScope

    def _init_features(
        self,
        state_secret: bytes | str | None,
        state_secret_previous: bytes | str | None,
        state_ttl: float,
        resource_ttl_ms: int,
        resource_cache_scope: CacheScope,
    ) -> None:
        self.resources = ResourceSet()
        self.prompts = PromptSet()
        self.on_change = None
        if state_secret is None and state_secret_previous is not None:
            raise ValueError("state_secret_previous needs state_secret (the one that seals)")
        self.state_signer = (
            StateSigner(ttl=state_ttl, previous=state_secret_previous)
            if state_secret is None
            else StateSigner(state_secret, ttl=state_ttl, previous=state_secret_previous)
        )
        if resource_ttl_ms < 0 or resource_cache_scope not in ("public", "private"):
            raise ValueError("resource_ttl_ms must be >= 0, cache scope 'public' or 'private'")
        self.resource_ttl_ms = resource_ttl_ms
        self.resource_cache_scope = resource_cache_scope

    # -- resources -----------------------------------------------------------

    def resource(
        self,
        uri: str,
        *,
        name: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        title: str | None = None,
        size: int | None = None,
        annotations: Mapping[str, Any] | None = None,
    ) -> Callable[[F], F]:
        """Register ``async def read() -> str | bytes | list[ResourceData]`` for *uri*.

        ``str`` is text content, ``bytes`` a blob (base64 on the wire).  The
        read runs like a tool: cancellable, with progress and logging; a
        parameter annotated ``ToolContext`` receives the context, and a
        plain ``def`` runs in a worker thread.
        """
        _needs_uri(uri, "resource")

        def register(fn: F) -> F:
            doc = description if description is not None else _first_line(fn)
            self.resources.add(
                Resource(uri, name or fn.__name__, fn, doc, mime_type, title, size, annotations)
            )
            self.resources_changed()
            return fn

        return register

    def resource_template(
        self,
        uri_template: str,
        *,
        name: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        title: str | None = None,
        annotations: Mapping[str, Any] | None = None,
    ) -> Callable[[F], F]:
        """Register ``async def read(**variables)`` for a URI template.

        ``"test://items/{id}"`` makes ``resources/read`` of
        ``test://items/42`` call ``read(id="42")`` (``read(id=42)`` when the
        parameter is ``id: int``); a parameter annotated ``ToolContext``
        receives the context.
        """
        _needs_uri(uri_template, "resource_template")

        def register(fn: F) -> F:
            doc = description if description is not None else _first_line(fn)
            self.resources.add_template(
                ResourceTemplate(
                    uri_template, name or fn.__name__, fn, doc, mime_type, title, annotations
                )
            )
            self.resources_changed()
            return fn

        return register

    # -- prompts and completion ----------------------------------------------

    @overload
    def prompt(self, name: F, /) -> F: ...

    @overload
    def prompt(
        self, name: str | None = None, *, description: str | None = None, title: str | None = None
    ) -> Callable[[F], F]: ...

    def prompt(
        self,
        name: str | F | None = None,
        *,
        description: str | None = None,
        title: str | None = None,
    ) -> Callable[[F], F] | F:
        """Register a function as a prompt: ``@server.prompt``, ``@server.prompt()`` or ``(name)``.

        Its named parameters are the prompt's arguments (strings on the
        wire, converted to the annotated type; required unless they have a
        default; ``Annotated[str, "..."]`` describes one); a parameter
        annotated ``ToolContext`` receives the context.  It returns a
        ``str``, a content object, or a list of those and
        :class:`~trio_mcp_cancel.server.PromptMessage`.
        """
        if callable(name):
            return self.prompt()(name)  # bare @server.prompt
        given: str | None = name

        def register(fn: F) -> F:
            self.prompts.add(make_prompt(fn, given or fn.__name__, description, title))
            self.prompts_changed()
            return fn

        return register

    def completion(
        self, ref: Literal["prompt", "resource"], name: str, argument: str
    ) -> Callable[[F], F]:
        """Register ``async def fn(ctx, value, context) -> list[str]`` completing one argument.

        *ref* is ``"prompt"`` (then *name* is the prompt's name) or
        ``"resource"`` (*name* is a URI template); *context* holds the
        arguments the client already filled in.
        """
        kind = {"prompt": "ref/prompt", "resource": "ref/resource"}[ref]

        def register(fn: F) -> F:
            key = (kind, name, argument)
            if key in self.prompts.completers:
                raise ValueError(f"a completer for {key} is already registered")
            self.prompts.completers[key] = fn
            return fn

        return register

    # -- change notifications ----------------------------------------------------

    def _changed(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        on_change = self.on_change
        if on_change is not None:
            on_change(method, params)

    def tools_changed(self) -> None:
        """Tell listen streams that asked: ``notifications/tools/list_changed``."""
        self._changed("notifications/tools/list_changed")

    def prompts_changed(self) -> None:
        self._changed("notifications/prompts/list_changed")

    def resources_changed(self) -> None:
        self._changed("notifications/resources/list_changed")

    def resource_updated(self, uri: str) -> None:
        """Tell listen streams subscribed to *uri*: ``notifications/resources/updated``."""
        self._changed("notifications/resources/updated", {"uri": uri})

    def remove_prompt(self, name: str) -> None:
        del self.prompts.prompts[name]
        self.prompts_changed()

    def feature_capabilities(self, modern: bool) -> dict[str, Any]:
        """The ``capabilities`` entries of the registered features.

        ``listChanged``/``subscribe`` are promised only where they can be
        delivered (*modern*): by ``subscriptions/listen``, or on a legacy
        HTTP session's GET stream.
        """
        capabilities: dict[str, Any] = {}
        if self.resources:
            capabilities["resources"] = {"listChanged": modern, "subscribe": modern}
        if self.prompts.prompts:
            capabilities["prompts"] = {"listChanged": modern}
        if self.prompts.prompts or self.resources.templates:
            capabilities["completions"] = {}
        return capabilities


def _needs_uri(uri: object, decorator: str) -> None:
    """A bare ``@server.resource`` would silently register nothing: say what is missing."""
    if not isinstance(uri, str):
        raise TypeError(f"{decorator}() takes the URI first: @server.{decorator}('scheme://...')")


def _first_line(fn: Callable[..., Any]) -> str | None:
    doc = fn.__doc__
    return doc.strip().splitlines()[0] if doc and doc.strip() else None
