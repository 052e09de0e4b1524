"""Resources: static ones and URI templates (:mod:`.uri_template`), and how a read is answered.

Pure code with no I/O.  A resource's reader is a function (``async def`` or a
plain ``def``, run in a worker thread) taking the template's variables by
name (converted to their annotated types by pydantic: ``{id}`` of
``id: int`` arrives as an ``int``), and the context through the parameter
annotated ``Context`` if it has one; it returns ``str`` (text), ``bytes`` (a blob), or a list of
:class:`ResourceData` for several contents; the dispatcher runs it like a
tool, inside ``tracked()``, so ``resources/read`` is cancellable the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from .._wire.jsonrpc import INVALID_PARAMS, JsonRpcError
from .content import described, resource_contents
from .signature import ArgumentsInvalid, Signature, check_callable, read_signature, with_context
from .uri_template import UnsafeValue, UriTemplate

__all__ = [
    "RESOURCE_NOT_FOUND",
    "Resource",
    "ResourceData",
    "ResourceSet",
    "ResourceTemplate",
    "read_result",
]

#: SEP-2164: an unknown URI is ``-32602`` with the URI in ``data`` (never empty contents).
RESOURCE_NOT_FOUND: Final = INVALID_PARAMS

Reader = Callable[..., Awaitable[Any]]


@attrs.frozen
class ResourceData:
    """One entry of a read's ``contents``: text or bytes, under its own URI and type."""

    uri: str
    content: str | bytes
    mime_type: str | None = None


@attrs.frozen
class Resource:
    """A resource with a fixed URI."""

    uri: str
    name: str
    reader: Reader
    description: str | None = None
    mime_type: str | None = None
    title: str | None = None
    size: int | None = None
    annotations: Mapping[str, Any] | None = None
    time_limit: float | None = None
    """Seconds a read may take (:mod:`.time_limits`); ``None``: the server-wide limit only."""
    icons: tuple[dict[str, Any], ...] = ()
    call: Reader | None = attrs.field(init=False, default=None, eq=False, repr=False)
    """``call(ctx)``: the reader, its context put where it asks for it (set when added)."""

    def prepare(self) -> None:
        """Read the reader's signature (``TypeError`` when it does not fit); done once, at add."""
        what = f"resource {self.uri!r}"
        signature = _reader_signature(self.reader, what, ())
        object.__setattr__(self, "call", with_context(self.reader, signature, what, None))

    def describe(self) -> dict[str, Any]:
        return described(
            {"uri": self.uri, "name": self.name},
            title=self.title,
            description=self.description,
            mime_type=self.mime_type,
            size=self.size,
            annotations=self.annotations,
            icons=self.icons,
        )


@attrs.frozen
class ResourceTemplate:
    """A family of resources: ``test://items/{id}`` matches ``test://items/42`` (``id="42"``).

    ``{name}`` matches one path segment, ``{+name}`` several (never a ``..``),
    ``{?a,b}`` optional query parameters; values are percent-decoded and
    checked so that none escapes the template (see :mod:`.uri_template`).
    A malformed template is a ``ValueError`` here, at registration.
    """

    uri_template: str
    name: str
    reader: Reader
    description: str | None = None
    mime_type: str | None = None
    title: str | None = None
    annotations: Mapping[str, Any] | None = None
    time_limit: float | None = None
    """Seconds a read may take (:mod:`.time_limits`); ``None``: the server-wide limit only."""
    icons: tuple[dict[str, Any], ...] = ()
    parsed: UriTemplate = attrs.field(init=False, eq=False, repr=False)
    variables: tuple[str, ...] = attrs.field(init=False)
    call: Reader | None = attrs.field(init=False, default=None, eq=False, repr=False)
    """``call(ctx, **variables)``: the reader, its context put where it asks for it."""
    signature: Signature | None = attrs.field(init=False, default=None, eq=False, repr=False)
    """Converts the variables (strings) to the reader's parameter types (set when added)."""

    def __attrs_post_init__(self) -> None:
        parsed = UriTemplate.parse(self.uri_template)  # TemplateError (a ValueError)
        object.__setattr__(self, "parsed", parsed)
        object.__setattr__(self, "variables", parsed.variables)

    def prepare(self) -> None:
        """Read the reader's signature (``TypeError`` when it does not fit); done once, at add."""
        what = f"template {self.uri_template!r}"
        signature = _reader_signature(self.reader, what, self.variables)
        object.__setattr__(self, "signature", signature)
        object.__setattr__(self, "call", with_context(self.reader, signature, what, None))

    def match(self, uri: str) -> dict[str, Any] | None:
        """The variables of *uri*, converted; ``None`` when it does not match.

        A variable its parameter's type refuses (``abc`` for ``id: int``),
        or whose value would escape the template (``%2E%2E%2F`` in
        ``{name}``), is ``-32602`` naming it: the reader never runs, and no
        later template is tried.
        """
        try:
            strings = self.parsed.match(uri)
        except UnsafeValue as exc:
            raise JsonRpcError(
                INVALID_PARAMS, f"Invalid params: {exc}", {"uri": uri[:1000]}
            ) from None
        if strings is None:
            return None
        if self.signature is None:
            return strings  # not added to a server: nothing to convert to
        try:
            return self.signature.validate(strings)
        except ArgumentsInvalid as exc:
            raise JsonRpcError(
                INVALID_PARAMS, f"Invalid params: {exc}"[:500], {"uri": uri[:1000]}
            ) from None

    def describe(self) -> dict[str, Any]:
        return described(
            {"uriTemplate": self.uri_template, "name": self.name},
            title=self.title,
            description=self.description,
            mime_type=self.mime_type,
            annotations=self.annotations,
            icons=self.icons,
        )


def _reader_signature(reader: Reader, what: str, variables: Sequence[str]) -> Signature:
    """The reader's parameters: exactly the template's *variables* (others need defaults)."""
    check_callable(reader, f"{what}: the reader")
    signature = read_signature(reader, what, mode="lax")
    missing = sorted(set(variables) - set(signature.names))
    if missing:
        raise TypeError(f"{what}: the reader takes no parameter {missing[0]!r}")
    unfilled = sorted(signature.required - set(variables))
    if unfilled:
        raise TypeError(f"{what}: the reader's parameter {unfilled[0]!r} is not in the URI")
    return signature


@attrs.define
class ResourceSet:
    """The server's resources and templates, in registration order."""

    resources: dict[str, Resource] = attrs.field(factory=dict)
    templates: dict[str, ResourceTemplate] = attrs.field(factory=dict)

    def add(self, resource: Resource) -> None:
        if resource.uri in self.resources:
            raise ValueError(f"resource {resource.uri!r} is already registered")
        resource.prepare()
        self.resources[resource.uri] = resource

    def add_template(self, template: ResourceTemplate) -> None:
        if template.uri_template in self.templates:
            raise ValueError(f"template {template.uri_template!r} is already registered")
        template.prepare()
        self.templates[template.uri_template] = template

    def find(self, uri: object) -> tuple[Reader, dict[str, Any], str | None, float | None]:
        """``call(ctx, **variables)`` for *uri*, its variables, its MIME type and its
        time limit; ``-32602``."""
        if not isinstance(uri, str):
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: uri must be a string")
        resource = self.resources.get(uri)
        if resource is not None:
            assert resource.call is not None  # prepared when added
            return resource.call, {}, resource.mime_type, resource.time_limit
        for template in self.templates.values():
            variables = template.match(uri)
            if variables is not None:
                assert template.call is not None  # prepared when added
                return template.call, variables, template.mime_type, template.time_limit
        raise JsonRpcError(RESOURCE_NOT_FOUND, "Resource not found", {"uri": uri[:1000]})

    def __bool__(self) -> bool:
        return bool(self.resources or self.templates)


def read_result(uri: str, value: object, mime_type: str | None) -> dict[str, Any]:
    """The ``ReadResourceResult`` for a reader's return *value*."""
    if isinstance(value, str | bytes):
        return {"contents": [resource_contents(uri, value, mime_type)]}
    if isinstance(value, ResourceData):
        value = [value]
    if isinstance(value, list) and value and all(isinstance(v, ResourceData) for v in value):
        return {
            "contents": [
                resource_contents(item.uri, item.content, item.mime_type or mime_type)
                for item in value
            ]
        }
    raise TypeError("a resource reader must return str, bytes or a non-empty list of ResourceData")
