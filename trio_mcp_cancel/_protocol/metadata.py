"""Display metadata of the 2026-07-28 (and 2025-11-25) schema: titles, icons, links.

The server's ``Implementation`` (``serverInfo``) carries ``title``,
``description``, ``websiteUrl`` and ``icons`` besides its name and version;
tools, resources, resource templates and prompts carry ``title`` and
``icons``.  All of it is shown to people by the client, so it is checked
once, at registration, where a mistake is the author's and can be
reported plainly: an icon's ``src`` is ``https:`` (no credentials in it) or
an image ``data:`` URI of valid base64, its ``mimeType`` an ``image/``
type, its ``sizes`` ``WxH`` or ``any``, its ``theme`` ``light`` or
``dark``; the count and the bytes are bounded, because every list result
repeats them and a client renders them.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = [
    "MAX_ICONS",
    "MAX_ICONS_BYTES",
    "MAX_ICON_SRC_BYTES",
    "check_icons",
    "check_text",
    "check_website_url",
    "implementation",
]

#: Icons one item (the server, a tool, ...) may carry.
MAX_ICONS: Final = 8
#: One icon's ``src``, in bytes: room for a small ``data:`` image inline.
MAX_ICON_SRC_BYTES: Final = 48 * 1024
#: All the icons of one item together, in bytes (every list page repeats them).
MAX_ICONS_BYTES: Final = 96 * 1024
_MAX_URL_BYTES: Final = 2048
_MAX_SIZES: Final = 16
_MIME: Final = re.compile(r"image/[A-Za-z0-9][A-Za-z0-9.+-]{0,99}")
_SIZE: Final = re.compile(r"[1-9][0-9]{0,4}x[1-9][0-9]{0,4}|any")
_DATA: Final = re.compile(r"data:(image/[A-Za-z0-9][A-Za-z0-9.+-]{0,99});base64,([A-Za-z0-9+/=]*)")
_ICON_KEYS: Final = frozenset({"src", "mimeType", "sizes", "theme"})


def check_icons(icons: Iterable[Mapping[str, Any]] | None, what: str) -> tuple[dict[str, Any], ...]:
    """*icons* checked and copied (``()`` for ``None``); a ``ValueError`` naming *what*.

    Each is a mapping with the schema's keys: ``src`` (required),
    ``mimeType``, ``sizes`` (a list of ``"48x48"`` or ``"any"``) and
    ``theme`` (``"light"``/``"dark"``); no other key.
    """
    if icons is None:
        return ()
    if isinstance(icons, str | bytes | Mapping):
        raise TypeError(f"{what}: icons must be a list of icon mappings")
    checked: list[dict[str, Any]] = []
    total = 0
    for icon in icons:
        if len(checked) == MAX_ICONS:
            raise ValueError(f"{what}: at most {MAX_ICONS} icons")
        checked.append(_check_icon(icon, what))
        total += len(checked[-1]["src"].encode()) + 200  # the other fields, bounded
        if total > MAX_ICONS_BYTES:
            raise ValueError(f"{what}: the icons take more than {MAX_ICONS_BYTES} bytes")
    return tuple(checked)


def _check_icon(icon: object, what: str) -> dict[str, Any]:
    if not isinstance(icon, Mapping):
        raise TypeError(f"{what}: an icon is a mapping with 'src', not {type(icon).__name__}")
    unknown = sorted(str(key)[:40] for key in set(icon) - _ICON_KEYS)
    if unknown:
        raise ValueError(f"{what}: unknown icon field {unknown[0]!r} (src, mimeType, sizes, theme)")
    src = icon.get("src")
    if not isinstance(src, str) or not src:
        raise ValueError(f"{what}: an icon needs 'src', a https: URL or a data: URI")
    if len(src.encode()) > MAX_ICON_SRC_BYTES:
        raise ValueError(f"{what}: an icon's src takes more than {MAX_ICON_SRC_BYTES} bytes")
    mime_type = icon.get("mimeType")
    if mime_type is not None and not (isinstance(mime_type, str) and _MIME.fullmatch(mime_type)):
        raise ValueError(
            f"{what}: an icon's mimeType must be an image/ type, not {mime_type!r:.60}"
        )
    if src.startswith("data:"):
        _check_data(src, mime_type, what)
    else:
        _check_url(src, ("https",), f"{what}: an icon's src")
    result: dict[str, Any] = {"src": src}
    if mime_type is not None:
        result["mimeType"] = mime_type
    sizes = icon.get("sizes")
    if sizes is not None:
        if isinstance(sizes, str) or not isinstance(sizes, list | tuple):
            raise ValueError(f"{what}: an icon's sizes is a list such as ['48x48']")
        if len(sizes) > _MAX_SIZES or not all(
            isinstance(size, str) and _SIZE.fullmatch(size) for size in sizes
        ):
            raise ValueError(
                f"{what}: an icon's sizes are at most {_MAX_SIZES} of 'WxH' (pixels) or 'any'"
            )
        result["sizes"] = list(sizes)
    theme = icon.get("theme")
    if theme is not None:
        if theme not in ("light", "dark"):
            raise ValueError(f"{what}: an icon's theme is 'light' or 'dark', not {theme!r:.40}")
        result["theme"] = theme
    return result


def _check_data(src: str, mime_type: str | None, what: str) -> None:
    """A ``data:image/...;base64,`` URI whose payload decodes (and agrees with *mime_type*)."""
    match = _DATA.fullmatch(src)
    if match is None:
        raise ValueError(f"{what}: an icon's data: URI must be data:image/<type>;base64,<data>")
    try:
        base64.b64decode(match[2], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what}: an icon's data: URI holds invalid base64") from None
    if mime_type is not None and mime_type != match[1]:
        raise ValueError(f"{what}: an icon's mimeType {mime_type!r} differs from its data: URI's")


def _check_url(url: str, schemes: tuple[str, ...], what: str) -> None:
    if len(url.encode()) > _MAX_URL_BYTES:
        raise ValueError(f"{what} takes more than {_MAX_URL_BYTES} bytes")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise ValueError(f"{what} holds whitespace or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (a malformed port raises here)
    except ValueError:
        raise ValueError(f"{what} is not a valid URL") from None
    if parts.scheme not in schemes or not parts.hostname:
        shown = " or ".join(f"{scheme}:" for scheme in schemes)
        raise ValueError(
            f"{what} must be a {shown} URL with a host (or a data: URI), not {url!r:.80}"
        )
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{what} must not carry credentials (user:password@)")


def check_website_url(url: object) -> str | None:
    """The server's ``websiteUrl``: ``None``, or an ``https:``/``http:`` URL with a host."""
    if url is None:
        return None
    if not isinstance(url, str):
        raise TypeError("website_url must be a string URL or None")
    _check_url(url, ("https", "http"), "website_url")
    return url


def implementation(
    name: str,
    version: str,
    *,
    title: str | None,
    description: str | None,
    website_url: str | None,
    icons: tuple[dict[str, Any], ...],
) -> dict[str, Any]:
    """The server's ``Implementation`` (``serverInfo``), with the optional fields that are set."""
    info: dict[str, Any] = {"name": name, "version": version}
    if title is not None:
        info["title"] = title
    if description is not None:
        info["description"] = description
    if website_url is not None:
        info["websiteUrl"] = website_url
    if icons:
        info["icons"] = [dict(icon) for icon in icons]
    return info


def check_text(value: object, field: str, limit: int) -> str | None:
    """An optional display string (``title``, ``description``): a ``str`` of bounded length."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a string or None")
    if len(value) > limit:
        raise ValueError(f"{field} is longer than {limit} characters")
    return value
