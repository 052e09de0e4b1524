"""Give exported names the module a user imports them from (trio's ``fixup_module_metadata``).

Every public module ends with ``fixup_module_metadata(__name__, __all__,
globals())``, so ``repr(Registry)`` reads ``<class 'trio_mcp_cancel.Registry'>``
and tracebacks, docs and error messages name the import a user can type,
not the private module the class happens to live in today.

A name exported by several public modules keeps the first one that claimed
it: the root package is imported before any submodule, so
``trio_mcp_cancel.run_process`` wins over ``trio_mcp_cancel.process``.
Internal means any module of the package not in :data:`PUBLIC_MODULES`
(``trio_mcp_cancel.backends.memory.MemoryBackend`` becomes
``trio_mcp_cancel.backends.MemoryBackend``).  Only classes and functions
are renamed; type aliases and constants have no module of their own.

:func:`missing_extra` is the other thing every public surface shares: the
one message for a feature whose optional dependencies are not installed.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["PUBLIC_MODULES", "fixup_module_metadata", "missing_extra"]

#: The modules users import from; every other module of the package is internal.
PUBLIC_MODULES: Final = frozenset(
    {
        "trio_mcp_cancel",
        "trio_mcp_cancel.backends",
        "trio_mcp_cancel.backends.redis",
        "trio_mcp_cancel.client",
        "trio_mcp_cancel.http",
        "trio_mcp_cancel.lowlevel",
        "trio_mcp_cancel.lowlevel.extensions",
        "trio_mcp_cancel.lowlevel.wire",
        "trio_mcp_cancel.middleware",
        "trio_mcp_cancel.oauth",
        "trio_mcp_cancel.process",
        "trio_mcp_cancel.pytest_plugin",
        "trio_mcp_cancel.server",
        "trio_mcp_cancel.stdio",
        "trio_mcp_cancel.testing",
        "trio_mcp_cancel.websocket",
    }
)


def _is_internal(module: str | None) -> bool:
    """A module of this package that users do not import from."""
    if module is None or not (module == "trio_mcp_cancel" or module.startswith("trio_mcp_cancel.")):
        return False
    return module not in PUBLIC_MODULES


def fixup_module_metadata(module: str, names: Iterable[str], namespace: Mapping[str, Any]) -> None:
    """Set ``__module__`` (and nested classes' ``__qualname__``) of *names* to *module*."""
    seen: set[int] = set()

    def fix(obj: Any, name: str, qualname: str) -> None:
        if id(obj) in seen or not _is_internal(getattr(obj, "__module__", None)):
            return
        seen.add(id(obj))
        if isinstance(obj, (types.FunctionType, type)):
            obj.__module__ = module
            obj.__name__ = name
            obj.__qualname__ = qualname
        if isinstance(obj, type):
            for attr_name, attr in list(vars(obj).items()):
                if isinstance(attr, type) and attr.__qualname__.endswith(f".{attr_name}"):
                    fix(attr, attr_name, f"{qualname}.{attr_name}")

    for name in names:
        fix(namespace[name], name, name)


def missing_extra(feature: str, extra: str, exc: ImportError) -> ImportError:
    """An :class:`ImportError` saying *feature* needs the *extra* (raise it ``from exc``).

    Every optional path (the Redis backend, the HTTP client, OAuth from the
    environment) says it the same way, naming what is missing and the
    ``pip install`` line that adds it, so the fix is in the message wherever
    it surfaces (the command line prints it as its one line of error).
    *exc* is the failed import: the module it names (``coredis``,
    ``httpx2``, ``jwt``) is what is missing.
    """
    missing = exc.name or "its optional dependencies"
    return ImportError(f"{feature} needs {missing}: pip install 'trio-mcp-cancel[{extra}]'")
