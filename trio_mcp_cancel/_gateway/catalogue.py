"""An upstream's tools, resources, templates and prompts, listed and served on the gateway.

:func:`list_upstream` reads every list of the upstream, bounded: at most
``max_items`` items and ``max_listing_bytes`` bytes of JSON per kind, and
at most :data:`MAX_PAGES` pages (an upstream that pages forever, or lists a
million tools, costs the gateway a bounded amount, and what is left out is
logged).  :class:`Catalogue` puts them in the gateway's registration under
the namespace (:mod:`.names`) as proxies whose bodies call the upstream,
replacing what the previous listing registered; an item whose name is
refused (not valid once prefixed, or taken by the gateway's own) is left
out and logged, and the rest is served.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

import attrs

from .._client.errors import McpError
from .._protocol.content import ToolResult
from .._protocol.context import Context
from .._protocol.prompts import Prompt, PromptMessage
from .._protocol.registration import Registration
from .._protocol.resources import Resource, ResourceData, ResourceTemplate
from .._protocol.tools import make_tool
from .._wire.names import METHOD_NOT_FOUND
from ..client import McpClient
from .names import prefixed_name, prefixed_uri, upstream_uri

__all__ = ["Catalogue", "Listing", "Proxied", "decode_contents", "list_upstream"]

logger = logging.getLogger("trio_mcp_cancel.gateway")

MAX_PAGES: Final = 100
_KINDS: Final = (
    ("tools", "tools/list", "tools"),
    ("resources", "resources/list", "resources"),
    ("templates", "resources/templates/list", "resourceTemplates"),
    ("prompts", "prompts/list", "prompts"),
)


@attrs.define
class Listing:
    """What an upstream offers, as it listed it (bounded)."""

    tools: list[dict[str, Any]] = attrs.field(factory=list)
    resources: list[dict[str, Any]] = attrs.field(factory=list)
    templates: list[dict[str, Any]] = attrs.field(factory=list)
    prompts: list[dict[str, Any]] = attrs.field(factory=list)


async def list_upstream(client: McpClient, label: str, max_items: int, max_bytes: int) -> Listing:
    """Every list of the upstream, each bounded; a list it does not offer is empty."""
    listing = Listing()
    for attribute, method, key in _KINDS:
        items: list[dict[str, Any]] = getattr(listing, attribute)
        size, cursor, pages, full = 0, None, 0, False
        while pages < MAX_PAGES and not full:
            pages += 1
            try:
                result = await client.request(method, {} if cursor is None else {"cursor": cursor})
            except McpError as exc:
                if exc.code != METHOD_NOT_FOUND:
                    raise
                break
            page = result.get(key)
            for item in page if isinstance(page, list) else []:
                size += len(json.dumps(item, default=str))
                if len(items) >= max_items or size > max_bytes:
                    logger.warning(
                        "%s: %s lists more than %d items or %d bytes; the rest is left out",
                        label,
                        method,
                        max_items,
                        max_bytes,
                    )
                    full = True
                    break
                if isinstance(item, dict):
                    items.append(item)
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
    return listing


class Proxied(Protocol):
    """What a proxy's body calls: the upstream (:class:`~.upstream.Upstream`)."""

    label: str

    async def call_tool(self, ctx: Context, name: str, arguments: dict[str, Any]) -> ToolResult: ...
    async def read(self, ctx: Context, uri: str) -> list[ResourceData]: ...
    async def get_prompt(
        self, ctx: Context, name: str, arguments: dict[str, Any]
    ) -> list[PromptMessage]: ...


@attrs.frozen
class _ProxyResource(Resource):
    """A resource read from the upstream (no reader signature to read)."""

    def prepare(self) -> None:
        object.__setattr__(self, "call", self.reader)


@attrs.frozen
class _ProxyTemplate(ResourceTemplate):
    """A template read from the upstream: the URI itself goes there, un-prefixed."""

    def prepare(self) -> None:
        object.__setattr__(self, "call", self.reader)

    def match(self, uri: str) -> dict[str, Any] | None:
        return None if super().match(uri) is None else {"uri": uri}


@attrs.define(eq=False)
class Catalogue:
    """The proxies one mount put in the gateway's registration; see the module docstring."""

    registration: Registration
    namespace: str | None
    upstream: Proxied
    tools: set[str] = attrs.field(factory=set)
    resources: dict[str, str] = attrs.field(factory=dict)
    """The gateway's URI of each proxied resource -> the upstream's."""
    templates: set[str] = attrs.field(factory=set)
    prompts: set[str] = attrs.field(factory=set)
    refused: int = 0
    """Upstream items left out (a refused name, a malformed description), in total."""
    _last: Listing = attrs.field(factory=Listing)

    def apply(self, listing: Listing) -> None:
        """Serve *listing* instead of what was served; tell the gateway's listeners of
        each list that changed (a reconnect that finds the same offer changes nothing)."""
        last, self._last = self._last, listing
        if listing.tools != last.tools:
            self._replace_tools(listing.tools)
        if (listing.resources, listing.templates) != (last.resources, last.templates):
            self._replace_resources(listing.resources, listing.templates)
        if listing.prompts != last.prompts:
            self._replace_prompts(listing.prompts)

    def clear(self) -> None:
        self.apply(Listing())

    def _refuse(self, what: str, name: object, why: str) -> None:
        self.refused += 1
        logger.warning("%s: %s %r refused: %s", self.upstream.label, what, str(name)[:200], why)

    def _replace_tools(self, tools: list[dict[str, Any]]) -> None:
        registration = self.registration
        for owned_name in self.tools:
            registration.tools.pop(owned_name, None)
        before, self.tools = self.tools, set()
        for described in tools:
            upstream_name = described.get("name")
            name = prefixed_name(self.namespace, upstream_name)
            if name is None or name in registration.tools:
                self._refuse("tool", upstream_name, "not a valid name here, or taken")
                continue
            try:
                tool = make_tool(
                    _tool_body(self.upstream, str(upstream_name)),
                    name,
                    _text(described.get("description")),
                    True,
                    task_support="optional",
                    input_schema=_mapping(described.get("inputSchema")) or {"type": "object"},
                    output_schema=_mapping(described.get("outputSchema")),
                    annotations=_mapping(described.get("annotations")),
                    title=_text(described.get("title")),
                )
            except (TypeError, ValueError) as exc:
                self._refuse("tool", upstream_name, str(exc))
                continue
            registration.tools[name] = tool
            self.tools.add(name)
        if before or self.tools:
            registration.changed("notifications/tools/list_changed")

    def _replace_resources(
        self, resources: list[dict[str, Any]], templates: list[dict[str, Any]]
    ) -> None:
        owned = self.registration.resources
        for owned_uri in self.resources:
            owned.resources.pop(owned_uri, None)
        for owned_uri in self.templates:
            owned.templates.pop(owned_uri, None)
        before = set(self.resources) | self.templates
        self.resources, self.templates = {}, set()
        for described in resources:
            uri = prefixed_uri(self.namespace, described.get("uri"))
            if uri is None or uri in owned.resources:
                self._refuse("resource", described.get("uri"), "not a URI, or taken")
                continue
            reader = _reader(self.upstream, str(described["uri"]))
            owned.add(_ProxyResource(uri, *_resource_fields(described, reader)))
            self.resources[uri] = str(described["uri"])
        for described in templates:
            uri = prefixed_uri(self.namespace, described.get("uriTemplate"))
            if uri is None or uri in owned.templates:
                self._refuse("template", described.get("uriTemplate"), "not a URI, or taken")
                continue
            try:
                template = _ProxyTemplate(
                    uri, *_template_fields(described, self.upstream, self.namespace)
                )
            except ValueError as exc:
                self._refuse("template", described.get("uriTemplate"), str(exc))
                continue
            owned.add_template(template)
            self.templates.add(uri)
        if before or self.resources or self.templates:
            self.registration.changed("notifications/resources/list_changed")

    def _replace_prompts(self, prompts: list[dict[str, Any]]) -> None:
        owned = self.registration.prompts.prompts
        for owned_name in self.prompts:
            owned.pop(owned_name, None)
        before, self.prompts = self.prompts, set()
        for described in prompts:
            upstream_name = described.get("name")
            name = prefixed_name(self.namespace, upstream_name)
            arguments = described.get("arguments") or []
            if name is None or name in owned:
                self._refuse("prompt", upstream_name, "not a valid name here, or taken")
                continue
            if not isinstance(arguments, list) or not all(
                isinstance(a, dict) and isinstance(a.get("name"), str) for a in arguments
            ):
                self._refuse("prompt", upstream_name, "malformed arguments")
                continue
            owned[name] = Prompt(
                name,
                _prompt_body(self.upstream, str(upstream_name)),
                _text(described.get("description")) or f"The {name} prompt.",
                tuple(dict(a) for a in arguments),
                _text(described.get("title")),
            )
            self.prompts.add(name)
        if before or self.prompts:
            self.registration.changed("notifications/prompts/list_changed")


def _text(value: object) -> str | None:
    return value[:10_000] if isinstance(value, str) else None


def _mapping(value: object) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, Mapping) else None


def _tool_body(upstream: Proxied, name: str) -> Callable[..., Awaitable[ToolResult]]:
    async def call(ctx: Context, **arguments: Any) -> ToolResult:
        return await upstream.call_tool(ctx, name, arguments)

    return call


def _reader(upstream: Proxied, uri: str) -> Callable[..., Awaitable[list[ResourceData]]]:
    async def read(ctx: Context) -> list[ResourceData]:
        return await upstream.read(ctx, uri)

    return read


def _prompt_body(upstream: Proxied, name: str) -> Callable[..., Awaitable[list[PromptMessage]]]:
    async def get(ctx: Context, **arguments: Any) -> list[PromptMessage]:
        return await upstream.get_prompt(ctx, name, arguments)

    return get


def _resource_fields(described: dict[str, Any], reader: Any) -> tuple[Any, ...]:
    size = described.get("size")
    return (
        _text(described.get("name")) or str(described["uri"])[:200],
        reader,
        _text(described.get("description")),
        _text(described.get("mimeType")),
        _text(described.get("title")),
        size if isinstance(size, int) and not isinstance(size, bool) else None,
        _mapping(described.get("annotations")),
    )


def _template_fields(
    described: dict[str, Any], upstream: Proxied, namespace: str | None
) -> tuple[Any, ...]:
    async def read(ctx: Context, uri: str) -> list[ResourceData]:
        original = upstream_uri(namespace, uri)
        assert original is not None  # the template matched: it has our prefix
        return await upstream.read(ctx, original)

    return (
        _text(described.get("name")) or str(described["uriTemplate"])[:200],
        read,
        _text(described.get("description")),
        _text(described.get("mimeType")),
        _text(described.get("title")),
        _mapping(described.get("annotations")),
    )


def decode_contents(contents: object, namespace: str | None, label: str) -> list[ResourceData]:
    """A ``ReadResourceResult``'s contents as the gateway serves them (URIs prefixed)."""
    data: list[ResourceData] = []
    for item in contents if isinstance(contents, list) else []:
        if not isinstance(item, dict):
            continue
        uri = prefixed_uri(namespace, item.get("uri")) or ""
        mime = _text(item.get("mimeType"))
        if isinstance(item.get("text"), str):
            data.append(ResourceData(uri, item["text"], mime))
        elif isinstance(item.get("blob"), str):
            try:
                data.append(ResourceData(uri, base64.b64decode(item["blob"], validate=True), mime))
            except (binascii.Error, ValueError):
                continue
    if not data:
        raise McpError(0, f"{label}: the upstream's resource had no readable contents")
    return data
