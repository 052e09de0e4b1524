"""Import ``MODULE:ATTR`` and turn what it names into what a transport serves.

ATTR may be an :class:`~trio_mcp_cancel.server.McpServer` (served as it is
on stdio; over HTTP through :func:`~trio_mcp_cancel.http.app_from_env`, so
the ``MCP_*`` variables apply) or an ASGI app such as the one
``app_from_env`` built (over HTTP as it is; on stdio its ``server``).
Every mistake is a :class:`TargetError` with a message for the command
line, never a traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import cast

from .._core.registry import RegistryConfig
from .._protocol.mcp_server import McpServerBase
from ..transports.http.app import McpHttpApp
from ..transports.http.deploy import app_from_env
from ..transports.http.serving import AsgiApp

__all__ = ["TargetError", "http_app", "load", "stdio_server"]


class TargetError(Exception):
    """``MODULE:ATTR`` does not name something this command can serve."""


def load(spec: str) -> object:
    """The object *spec* (``package.module:attr``) names, importing its module.

    The working directory is importable, as with ``python -m`` (a console
    script would not otherwise see ``examples.slow_server`` there).
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise TargetError(f"expected MODULE:ATTR (e.g. examples.slow_server:app), not {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # a missing dependency of the module: its own traceback says more
        raise TargetError(f"no module named {module_name!r}") from None
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise TargetError(f"{module_name!r} has no attribute {attr!r}") from None
    return found


def http_app(found: object, registry_config: RegistryConfig | None = None) -> AsgiApp:
    """An ASGI app: *found* itself, or ``app_from_env`` of an ``McpServer``.

    *registry_config* (the runner's grace period) applies to an
    ``McpServer`` only: an app built already has its registry settings.
    """
    if isinstance(found, McpServerBase):
        if registry_config is None:
            return app_from_env(found)
        return app_from_env(found, registry_config=registry_config)
    if callable(found):
        return cast(AsgiApp, found)
    raise TargetError(f"expected an McpServer or an ASGI app, not {type(found).__name__}")


def stdio_server(found: object) -> McpServerBase:
    """The ``McpServer`` to serve on stdio: *found*, or the server of an ``McpHttpApp``."""
    if isinstance(found, McpServerBase):
        return found
    if isinstance(found, McpHttpApp):
        return found.server
    raise TargetError(
        f"stdio serves an McpServer (or an McpHttpApp's server), not {type(found).__name__}"
    )
