"""MCP content blocks and tool results, built from plain Python values.

A tool, a prompt or a resource returns Python values; this module turns them
into the wire shapes (``ContentBlock``, ``CallToolResult``,
``ResourceContents``) in one place, so every feature encodes content the
same way.  Binary data is given as ``bytes`` and base64-encoded here; a
``str`` is taken as base64 already.  Pure code, no I/O.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._core.errors import CancellationError
from .._wire import jsonrpc

__all__ = [
    "Audio",
    "Content",
    "EmbeddedResource",
    "Image",
    "ResourceLink",
    "Text",
    "ToolError",
    "ToolResult",
    "described",
    "encode_blob",
    "is_content",
    "json_text",
    "resource_contents",
    "to_content",
    "to_content_list",
]


def encode_blob(data: bytes | str) -> str:
    """Base64 of *data*; a ``str`` must be base64 already (checked, so a bad one fails here)."""
    if isinstance(data, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(data)).decode("ascii")
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("binary content given as str must be base64") from exc
    return data


def _with_extras(
    block: dict[str, Any], annotations: Mapping[str, Any] | None, meta: Mapping[str, Any] | None
) -> dict[str, Any]:
    if annotations:
        block["annotations"] = dict(annotations)
    if meta:
        block["_meta"] = dict(meta)
    return block


def described(
    fields: dict[str, Any],
    *,
    title: str | None,
    description: str | None,
    mime_type: str | None,
    size: int | None = None,
    annotations: Mapping[str, Any] | None = None,
    icons: tuple[Mapping[str, Any], ...] = (),
) -> dict[str, Any]:
    """*fields* with a resource's optional descriptive fields, those that are set.

    The spec's ``ResourceLink`` is a ``Resource`` with a ``type``, and a
    ``ResourceTemplate`` describes itself the same way: one rule for all three.
    """
    for key, value in (
        ("title", title),
        ("description", description),
        ("mimeType", mime_type),
        ("size", size),
    ):
        if value is not None:
            fields[key] = value
    if icons:
        fields["icons"] = [dict(icon) for icon in icons]
    return _with_extras(fields, annotations, None)


@attrs.frozen
class Text:
    """A text content block."""

    text: str
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        return _with_extras({"type": "text", "text": self.text}, self.annotations, self.meta)


@attrs.frozen
class Image:
    """An image content block: *data* as ``bytes`` (or base64 text) and its MIME type."""

    data: bytes | str
    mime_type: str = "image/png"
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        block = {"type": "image", "data": encode_blob(self.data), "mimeType": self.mime_type}
        return _with_extras(block, self.annotations, self.meta)


@attrs.frozen
class Audio:
    """An audio content block: *data* as ``bytes`` (or base64 text) and its MIME type."""

    data: bytes | str
    mime_type: str = "audio/wav"
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        block = {"type": "audio", "data": encode_blob(self.data), "mimeType": self.mime_type}
        return _with_extras(block, self.annotations, self.meta)


@attrs.frozen
class EmbeddedResource:
    """A resource's contents inlined in a result: text, or ``bytes`` (sent as a blob)."""

    uri: str
    content: str | bytes
    mime_type: str | None = None
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        resource = resource_contents(self.uri, self.content, self.mime_type)
        return _with_extras({"type": "resource", "resource": resource}, self.annotations, self.meta)


@attrs.frozen
class ResourceLink:
    """A link to a resource the client may read (``resources/read``) rather than its contents."""

    uri: str
    name: str
    description: str | None = None
    mime_type: str | None = None
    title: str | None = None
    size: int | None = None
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        block = described(
            {"type": "resource_link", "uri": self.uri, "name": self.name},
            title=self.title,
            description=self.description,
            mime_type=self.mime_type,
            size=self.size,
            annotations=self.annotations,
        )
        return _with_extras(block, None, self.meta)


Content = Text | Image | Audio | EmbeddedResource | ResourceLink
_CONTENT_TYPES = (Text, Image, Audio, EmbeddedResource, ResourceLink)


def is_content(value: object) -> bool:
    """Whether *value* is one of the content classes of this module."""
    return isinstance(value, _CONTENT_TYPES)


def resource_contents(uri: str, content: str | bytes, mime_type: str | None) -> dict[str, Any]:
    """``TextResourceContents`` for a ``str``, ``BlobResourceContents`` for ``bytes``."""
    contents: dict[str, Any] = {"uri": uri}
    if mime_type is not None:
        contents["mimeType"] = mime_type
    if isinstance(content, str):
        contents["text"] = content
    elif isinstance(content, bytes | bytearray | memoryview):
        contents["blob"] = encode_blob(bytes(content))
    else:
        raise TypeError(f"resource content must be str or bytes, not {type(content).__name__}")
    return contents


def to_content(value: object) -> dict[str, Any]:
    """One content block: a :data:`Content` object, a ``str`` (text), or a wire dict as is."""
    if isinstance(value, _CONTENT_TYPES):
        return value.to_wire()
    if isinstance(value, str):
        return {"type": "text", "text": value}
    if isinstance(value, Mapping) and isinstance(value.get("type"), str):
        return dict(value)
    raise TypeError(f"not a content block: {type(value).__name__}")


def to_content_list(value: object) -> list[dict[str, Any]]:
    """A content list from one block or a sequence of them."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [to_content(item) for item in value]
    return [to_content(value)]


class ToolError(CancellationError):
    """Raise in a tool to report a failure to the model: a result with ``isError: true``.

    Its message is the result's text, verbatim (any other exception's is
    prefixed with its type name).  Unlike a JSON-RPC error, the model sees it
    and can try again.
    """


@attrs.frozen
class ToolResult:
    """A tool result spelled out: content blocks, structured content, ``isError``, ``_meta``.

    Return one from a tool when a plain value is not enough (structured
    output next to its text rendering, an error result with images, ...).
    """

    content: Sequence[object] = ()
    structured: Mapping[str, Any] | None = None
    is_error: bool = False
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "content": [to_content(item) for item in self.content],
            "isError": self.is_error,
        }
        if self.structured is not None:
            result["structuredContent"] = dict(self.structured)
        if self.meta:
            result["_meta"] = dict(self.meta)
        return result


def json_text(value: object) -> str:
    """*value* as strict JSON text (raises for values JSON cannot carry)."""
    return jsonrpc.encode(value).decode("utf-8")
