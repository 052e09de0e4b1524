"""The decorators for resources, resource templates, prompts and completers.

A base of :class:`~.server.McpServer` (which also has the tool decorator
and the settings): what each registers is described there and in
``docs/reference.md``.  *time_limit* (seconds, :mod:`.time_limits`) bounds one
read or ``prompts/get``; *icons* and *title* are display metadata
(:mod:`.metadata`), checked when the decorator is called.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, overload

from .metadata import check_icons
from .prompts import make_prompt
from .registration import Registration
from .resources import Resource, ResourceTemplate
from .time_limits import check_time_limit

__all__ = ["Offerings"]

F = TypeVar("F", bound=Callable[..., Any])


class Offerings:
    """Resources, templates, prompts and completers: the decorators of :class:`McpServer`."""

    registration: Registration

    def resources_changed(self) -> None:
        """Tell listen streams that asked: ``notifications/resources/list_changed``."""
        self.registration.changed("notifications/resources/list_changed")

    def prompts_changed(self) -> None:
        """Tell listen streams that asked: ``notifications/prompts/list_changed``."""
        self.registration.changed("notifications/prompts/list_changed")

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
        time_limit: float | None = None,
        icons: Iterable[Mapping[str, Any]] | None = None,
    ) -> Callable[[F], F]:
        """Register ``async def read() -> str | bytes | list[ResourceData]`` for *uri*.

        ``str`` is text content, ``bytes`` a blob (base64 on the wire).  The
        read runs like a tool: cancellable, with progress and logging; a
        parameter annotated ``Context`` receives the context, and a
        plain ``def`` runs in a worker thread.
        """
        _needs_uri(uri, "resource")
        what = f"resource {uri!r}"
        limit, shown = check_time_limit(time_limit, what), check_icons(icons, what)

        def register(fn: F) -> F:
            doc = description if description is not None else _first_line(fn)
            self.registration.resources.add(
                Resource(
                    uri,
                    name or fn.__name__,
                    fn,
                    doc,
                    mime_type,
                    title,
                    size,
                    annotations,
                    time_limit=limit,
                    icons=shown,
                )
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
        time_limit: float | None = None,
        icons: Iterable[Mapping[str, Any]] | None = None,
    ) -> Callable[[F], F]:
        """Register ``async def read(**variables)`` for a URI template.

        ``"test://items/{id}"`` makes ``resources/read`` of
        ``test://items/42`` call ``read(id="42")`` (``read(id=42)`` when the
        parameter is ``id: int``); a parameter annotated ``Context``
        receives the context.
        """
        _needs_uri(uri_template, "resource_template")
        what = f"template {uri_template!r}"
        limit, shown = check_time_limit(time_limit, what), check_icons(icons, what)

        def register(fn: F) -> F:
            doc = description if description is not None else _first_line(fn)
            self.registration.resources.add_template(
                ResourceTemplate(
                    uri_template,
                    name or fn.__name__,
                    fn,
                    doc,
                    mime_type,
                    title,
                    annotations,
                    time_limit=limit,
                    icons=shown,
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
        self,
        name: str | None = None,
        *,
        description: str | None = None,
        title: str | None = None,
        time_limit: float | None = None,
        icons: Iterable[Mapping[str, Any]] | None = None,
    ) -> Callable[[F], F]: ...

    def prompt(
        self,
        name: str | F | None = None,
        *,
        description: str | None = None,
        title: str | None = None,
        time_limit: float | None = None,
        icons: Iterable[Mapping[str, Any]] | None = None,
    ) -> Callable[[F], F] | F:
        """Register a function as a prompt: ``@server.prompt``, ``@server.prompt()`` or ``(name)``.

        Its named parameters are the prompt's arguments (strings on the
        wire, converted to the annotated type; required unless they have a
        default; ``Annotated[str, "..."]`` describes one); a parameter
        annotated ``Context`` receives the context.  It returns a
        ``str``, a content object, or a list of those and
        :class:`~trio_mcp_cancel.server.PromptMessage`.
        """
        if callable(name):
            return self.prompt()(name)  # bare @server.prompt
        given: str | None = name
        what = f"prompt {name!r}" if name else "a prompt"
        limit, shown = check_time_limit(time_limit, what), check_icons(icons, what)

        def register(fn: F) -> F:
            prompt = make_prompt(
                fn, given or fn.__name__, description, title, time_limit=limit, icons=shown
            )
            self.registration.prompts.add(prompt)
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
            if key in self.registration.prompts.completers:
                raise ValueError(f"a completer for {key} is already registered")
            self.registration.prompts.completers[key] = fn
            return fn

        return register


def _needs_uri(uri: object, decorator: str) -> None:
    """A bare ``@server.resource`` would silently register nothing: say what is missing."""
    if not isinstance(uri, str):
        raise TypeError(f"{decorator}() takes the URI first: @server.{decorator}('scheme://...')")


def _first_line(fn: Callable[..., Any]) -> str | None:
    doc = fn.__doc__
    return doc.strip().splitlines()[0] if doc and doc.strip() else None
