"""The one message for a feature whose optional dependencies are not installed.

Every optional path (the Redis backend, the HTTP client, OAuth) raises the
same :class:`ImportError`, naming what is missing and the ``pip install``
line that adds it, so the fix is in the message wherever it surfaces (the
command line prints it as its one line of error).
"""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(feature: str, extra: str, exc: ImportError) -> ImportError:
    """An :class:`ImportError` saying *feature* needs the *extra* (raise it ``from exc``).

    *exc* is the failed import: the module it names (``coredis``,
    ``httpx2``, ``jwt``) is what is missing.
    """
    missing = exc.name or "its optional dependencies"
    return ImportError(f"{feature} needs {missing}: pip install 'trio-mcp-cancel[{extra}]'")
