"""How an upstream's names appear on the gateway: ``up_NAME`` and ``file://up/...``.

FastMCP's conventions, so a client moving between the two frameworks sees
the same names: a tool or prompt ``search`` of the upstream mounted as
``up`` is ``up_search``; a resource URI gets the namespace as the first
path segment after the scheme (FastMCP's ``path`` prefix format:
``file:///x`` becomes ``file://up//x``, ``docs://readme`` becomes
``docs://up/readme``), and so does a URI template.

**No collisions by construction.**  A namespace may not contain the
separator ``_`` (nor ``/``), so the first ``_`` of a gateway name always ends
the namespace: upstream ``up`` with a tool ``a_b`` and a second mount can
never both give ``up_a_b``.  What can still collide is an upstream name with
one the gateway registered itself, or a name that is not a valid MCP name
once prefixed (too long, a character outside ``A-Za-z0-9_.-``): those
upstream items are refused, logged, and the rest of the upstream is served.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["NAMESPACE", "check_namespace", "prefixed_name", "prefixed_uri", "upstream_uri"]

NAMESPACE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,63}")
"""A namespace: a plain token without the separator ``_`` (see the module docstring)."""
_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_URI: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)(.*)", re.DOTALL)
MAX_URI: Final = 4096
"""The longest URI (or template) taken from an upstream, in characters."""


def check_namespace(namespace: str | None) -> None:
    """``ValueError`` for a namespace that could collide or not fit in a name."""
    if namespace is None:
        return
    if not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace):
        raise ValueError(
            f"namespace {namespace!r}: use 1-64 of A-Z a-z 0-9 . - (no '_', the separator)"
        )


def prefixed_name(namespace: str | None, name: object) -> str | None:
    """The gateway's name for an upstream tool or prompt *name*; ``None``: refused."""
    if not isinstance(name, str):
        return None
    full = name if namespace is None else f"{namespace}_{name}"
    return full if _NAME.fullmatch(full) else None


def prefixed_uri(namespace: str | None, uri: object) -> str | None:
    """The gateway's URI (or template) for an upstream one; ``None``: refused."""
    if not isinstance(uri, str) or len(uri) > MAX_URI or not uri.isprintable():
        return None
    if namespace is None:
        return uri
    match = _URI.fullmatch(uri)
    if match is None:
        return None
    scheme, rest = match.groups()
    return f"{scheme}{namespace}/{rest}"


def upstream_uri(namespace: str | None, uri: str) -> str | None:
    """The upstream's URI for a gateway *uri* of this namespace; ``None``: not ours."""
    if namespace is None:
        return uri
    match = _URI.fullmatch(uri)
    if match is None:
        return None
    scheme, rest = match.groups()
    head, slash, tail = rest.partition("/")
    if head != namespace or not slash:
        return None
    return f"{scheme}{tail}"
